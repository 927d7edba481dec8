"""Optional dependencies: ``derain[onnx]`` (onnx, onnxscript, onnxruntime) and ``derain[video]`` (PyAV).

Photos, training, the web page and evaluation need neither. The modules that use one import it through
:func:`require` when they need it, so a missing extra is one line that names it, e.g.
``the onnxruntime backend needs derain[onnx]: pip install 'derain[onnx]'``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "available", "missing", "require"]

EXTRAS = {"onnx": ("onnx", "onnxscript", "onnxruntime"), "video": ("av",)}
"""Each extra of the package and the modules it installs (``pyproject.toml``'s optional dependencies)."""


class MissingExtraError(ImportError):
    """An optional dependency that is not installed; the message names the extra that installs it."""


def missing(module: str, what: str) -> str:
    """The one line that says ``what`` needs the extra that installs ``module``."""
    extra = next(name for name, modules in EXTRAS.items() if module in modules)
    return f"{what} needs derain[{extra}]: pip install 'derain[{extra}]'"


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or a ``MissingExtraError`` saying that ``what`` needs its extra.

    Args:
        module: one of the modules of :data:`EXTRAS` (``"onnxruntime"``, ``"av"``, ...).
        what: what needs it, as the message's subject (``"reading videos"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(missing(module, what)) from None


def available(module: str) -> bool:
    """Whether an optional ``module`` can be imported (it is imported to find out)."""
    try:
        require(module, module)
    except MissingExtraError:
        return False
    return True

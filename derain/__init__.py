"""derain: image deraining with top-k sparse (TKSA) and agent attention.

Heavy modules load lazily: ``import derain`` stays cheap, ``derain.restore`` pulls in the inference code.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "DerainNet": "derain.models",
    "load_model": "derain.inference.backends",
    "restore": "derain.inference.image",
}

__all__ = ["DerainNet", "load_model", "restore", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'derain' has no attribute {name!r}")

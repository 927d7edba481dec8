"""Precision that fits the machine: ``--trainer.precision auto`` (``precision: auto`` in a config).

``auto`` is ``bf16-mixed`` where bf16 runs in hardware: a CPU with AVX512-BF16 or AMX (its ``/proc/cpuinfo``
flags) when the run trains on the CPU, or a CUDA device that supports bf16; elsewhere ``32-true``. Without bf16 in
hardware oneDNN emulates it, and a CPU step in ``bf16-mixed`` is several times slower than in float32
(``benchmarks/train.py`` prints both, and what ``auto`` picks). A run that asks for bf16 on such a CPU by name is
warned. Lightning's ``Trainer`` does not take ``auto``: :class:`DerainTrainer` does, and settles it before
Lightning sees it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal, get_type_hints

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.accelerators import Accelerator, CUDAAccelerator, MPSAccelerator, XLAAccelerator
from lightning.pytorch.utilities import rank_zero_only

__all__ = [
    "BF16_FLAGS",
    "DerainTrainer",
    "Precision",
    "auto_precision",
    "cpu_bf16_is_native",
    "cpu_flags",
    "settle_precision",
    "training_device",
]

CPUINFO = Path("/proc/cpuinfo")

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""The ``/proc/cpuinfo`` flags of a CPU that computes bf16 in hardware (AVX512-BF16, AMX)."""

Precision = get_type_hints(Trainer.__init__)["precision"] | Literal["auto"]
"""What ``--trainer.precision`` takes: Lightning's precisions, and ``auto``."""


def cpu_flags(cpuinfo: str | Path = CPUINFO) -> set[str] | None:
    """The CPU's feature flags (the ``flags`` lines of Linux's ``/proc/cpuinfo``); None where that cannot be read."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    flags = (line.partition(":")[2] for line in text.splitlines() if line.startswith("flags"))
    return set(" ".join(flags).split())


def cpu_bf16_is_native(cpuinfo: str | Path = CPUINFO) -> bool | None:
    """Whether this CPU computes bf16 in hardware (:data:`BF16_FLAGS`); None where ``cpuinfo`` cannot be read."""
    flags = cpu_flags(cpuinfo)
    return None if flags is None else bool(flags & set(BF16_FLAGS))


def training_device(accelerator: Any = "auto") -> str:
    """The kind of device a ``Trainer(accelerator=...)`` trains on, before it is built: ``"cpu"``, ``"cuda"``, or
    another accelerator's name (``"mps"``, ``"tpu"``). ``auto`` and ``gpu`` choose as Lightning does."""
    if isinstance(accelerator, Accelerator):  # CPUAccelerator(), CUDAAccelerator(), ...
        accelerator = type(accelerator).__name__
    # a name, or a config's class path (lightning.pytorch.accelerators.CPUAccelerator)
    name = str(getattr(accelerator, "class_path", accelerator) or "auto").rsplit(".", 1)[-1].lower()
    name = name.removesuffix("accelerator") or name
    if name == "auto" and XLAAccelerator.is_available():
        return "tpu"
    if name in ("auto", "gpu") and MPSAccelerator.is_available():
        return "mps"
    if name in ("auto", "gpu"):
        return "cuda" if CUDAAccelerator.is_available() or name == "gpu" else "cpu"
    return name


def auto_precision(accelerator: str | Accelerator | None = "auto") -> tuple[str, str]:
    """What ``precision: auto`` runs in on this machine with this accelerator, and why (a clause for the log line).

    Returns:
        ``("bf16-mixed", why)`` on a CPU with :data:`BF16_FLAGS` or a CUDA device that supports bf16, else
        ``("32-true", why)``.
    """
    device = training_device(accelerator)
    if device == "cpu":
        flags = cpu_flags()
        if flags is None:
            return "32-true", f"the CPU's flags cannot be read ({CPUINFO}), so bf16 may be emulated"
        native = [flag for flag in BF16_FLAGS if flag in flags]
        if native:
            return "bf16-mixed", f"this CPU computes bf16 in hardware ({', '.join(native)})"
        return "32-true", "this CPU has no AVX512-BF16 or AMX: bf16 would be emulated, several times slower"
    if device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported():
            return "bf16-mixed", f"the CUDA device ({name}) supports bf16"
        return "32-true", f"the CUDA device ({name}) does not support bf16"
    return "32-true", f"bf16 is chosen only on CPUs and CUDA devices that compute it, not on {device}"


def settle_precision(precision: Any, accelerator: str | Accelerator | None = "auto") -> Any:
    """``precision`` as Lightning takes it: ``auto`` resolved (:func:`auto_precision`) and the choice said in one
    line; a bf16 precision asked for on a CPU that would emulate it warned of. Other values pass unchanged.

    Args:
        precision: ``--trainer.precision``: ``auto``, or any precision Lightning takes.
        accelerator: ``--trainer.accelerator``.
    """
    if precision == "auto":
        precision, why = auto_precision(accelerator)
        _say(f"precision auto -> {precision}: {why}")
    elif "bf16" in str(precision) and training_device(accelerator) == "cpu" and cpu_bf16_is_native() is False:
        _say(
            f"warning: --trainer.precision {precision} on a CPU without AVX512-BF16 or AMX: bf16 is emulated here and "
            "a step is several times slower than in float32 (--trainer.precision auto or 32)",
            file=sys.stderr,
        )
    return precision


@rank_zero_only
def _say(line: str, file=None) -> None:
    print(line, file=file or sys.stdout, flush=True)


class DerainTrainer(Trainer):
    """Lightning's ``Trainer``, whose ``precision`` may also be ``"auto"`` (:func:`settle_precision`); every other
    argument is the ``Trainer``'s own."""

    def __init__(self, *, precision: Precision | None = None, **kwargs: Any) -> None:
        super().__init__(precision=settle_precision(precision, kwargs.get("accelerator", "auto")), **kwargs)

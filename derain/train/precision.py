"""bf16 on a CPU: whether it runs in hardware, and one warning when a CPU run asks for bf16 its CPU would emulate."""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch.accelerators import CPUAccelerator

__all__ = ["cpu_bf16_is_native", "warn_slow_bf16"]


def cpu_bf16_is_native(cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), from Linux's ``/proc/cpuinfo``; None
    where that cannot be read. Without it, oneDNN emulates bf16 and a ``bf16-mixed`` step is several times
    slower than a float32 one (``benchmarks/train.py`` prints both)."""
    try:
        flags = set(Path(cpuinfo).read_text().split())
    except OSError:
        return None
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def warn_slow_bf16(trainer) -> None:
    """One warning line when a CPU run asks for bf16 that this CPU would emulate."""
    if "bf16" in str(trainer.precision) and isinstance(trainer.accelerator, CPUAccelerator):
        if cpu_bf16_is_native() is False and trainer.is_global_zero:
            print(
                f"warning: --trainer.precision {trainer.precision} on a CPU without AVX512-BF16 or AMX: bf16 is "
                "emulated here and a step is several times slower than in float32 (--trainer.precision 32)",
                file=sys.stderr,
                flush=True,
            )

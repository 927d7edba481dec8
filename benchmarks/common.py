"""Helpers shared by the benchmark scripts: peak-memory measurement and the printed report."""

from __future__ import annotations

import json
from collections.abc import Callable

import torch


def status_kb(field: str) -> int:
    """A ``/proc/self/status`` field in kB (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> int:
    """Reset Linux's resident-set high-water mark to the current RSS; returns that RSS in kB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kb("VmRSS")


def peak_mb(fn: Callable[[], object]) -> float:
    """Peak growth of the resident set (MB) while ``fn`` runs: every intermediate tensor counts."""
    base = reset_peak()
    fn()
    return (status_kb("VmHWM") - base) / 1024


def report(rows: list[tuple[str, str]], result: dict) -> None:
    """Print the table (name, value) and one ``RESULT {...}`` JSON line."""
    width = max(len(r[0]) for r in rows)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    values = {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in result.items()}
    print("RESULT " + json.dumps(values))

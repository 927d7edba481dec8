"""Helpers shared by the benchmark scripts: peak-memory measurement, the printed report, and for the scripts that
compare weights side by side: loading them, the recipe's seeded hold-out, paired differences."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from derain import load_model
from derain.data.split import seeded_share
from derain.evaluate import spread
from derain.pairing import Pair, find_pairs
from derain.weights import WeightsError

VAL_FRACTION, DATA_SEED = 0.2, 0
"""The shipped recipe's validation hold-out (``val_fraction``, data ``seed``: configs/derain-small/stage1.yaml)."""


def yardstick(repeats: int = 3) -> float:
    """Seconds of the machine's unit of speed: 10 convolutions 48→48 3×3 on a 321×481 map, forward, at the
    current thread count (median of ``repeats``). Speeds reported in yardsticks compare across machines."""
    conv = torch.nn.Conv2d(48, 48, 3, padding=1)
    x = torch.rand(1, 48, 321, 481)
    times = []
    with torch.inference_mode():
        conv(x)  # warm-up
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(10):
                conv(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


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


def load_weights(paths: Sequence[str]) -> list[torch.nn.Module]:
    """Each weights file as a network on the CPU; one that does not load exits with a line naming it."""
    models = []
    for path in paths:
        try:
            models.append(load_model(path, device="cpu"))
        except (WeightsError, OSError, RuntimeError) as err:
            raise SystemExit(f"error: weights {path} do not load: {err}") from None
    return models


def held_out(folder: Path) -> list[Pair]:
    """The pairs of ``folder`` that the recipe's seeded hold-out keeps for validation (``val_from``)."""
    pairs = find_pairs(folder)
    return [pairs[i] for i in seeded_share(len(pairs), VAL_FRACTION, DATA_SEED)]


def paired_difference(values: Sequence[float], base: Sequence[float]) -> dict:
    """Per-item ``values − base``: mean, standard deviation, 95 % bootstrap interval, and how many are above 0."""
    diffs = [{"d": a - b} for a, b in zip(values, base, strict=True)]
    stats = spread(diffs, "d")
    return {
        "mean": float(np.mean([d["d"] for d in diffs])),
        "std": stats["std"],
        "ci95": stats["ci95"],
        "wins": int(sum(d["d"] > 0 for d in diffs)),
    }

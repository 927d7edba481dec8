"""What the speed benchmarks share: peak-memory measurement, the test photos, the printed report, and the
yardstick (``derain.inference.timing.yardstick``).

The scripts import it as ``common``: a script's own folder is the first entry of ``sys.path`` (``python
benchmarks/page.py`` from any folder), so no script imports another one, and nothing depends on the working folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch

from derain.inference.timing import yardstick  # noqa: F401  (the scripts' unit of speed, from here)

EXAMPLES = Path(__file__).resolve().parents[1] / "datasets" / "examples"
"""The shipped rainy example photos the benchmarks time."""


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


def photos(count: int, size: tuple[int, int]) -> list[np.ndarray]:
    """``count`` RGB photos of ``size`` (h, w) from the shipped rainy examples, resized and flipped."""
    sources = [cv2.imread(str(p))[:, :, ::-1] for p in sorted(EXAMPLES.glob("*.jpg"))]
    if not sources:
        rng = np.random.default_rng(0)
        sources = [cv2.GaussianBlur((rng.random((*size, 3)) * 255).astype(np.uint8), (0, 0), 2)]
    out = []
    for i in range(count):
        img = cv2.resize(sources[i % len(sources)], (size[1], size[0]), interpolation=cv2.INTER_AREA)
        out.append(np.ascontiguousarray(img[:, ::-1] if (i // len(sources)) % 2 else img))
    return out

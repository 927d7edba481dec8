"""A tiny paired folder and the quiet trainer options, shared by the training tests (importable: pytest puts tests/ on
sys.path)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

QUIET = [
    "--trainer.enable_progress_bar=false",
    "--trainer.logger=false",
    "--trainer.enable_model_summary=false",
]
"""``derain.fit`` arguments that keep a test run's output to what the test reads."""


def make_folder(root: Path, n: int = 4, size: int = 32, seed: int = 0) -> Path:
    """A tiny paired folder: smooth clean images; rain is a bright veil (haze) plus diagonal streaks."""
    rng = np.random.default_rng(seed)
    for sub in ("rain", "norain"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[0:size, 0:size]
    for i in range(n):
        base = rng.uniform(0.2, 0.6, 3)
        clean = (base[None, None] + 0.2 * np.sin((xx + yy * (i + 1))[..., None] / 7.0)) * 255
        streak = (((xx + 2 * yy + i) % 7) == 0)[..., None] * 90.0
        rain = np.clip(0.7 * clean + 0.3 * 255 + streak, 0, 255)
        cv2.imwrite(str(root / "rain" / f"{i:03d}.png"), rain.astype(np.uint8))
        cv2.imwrite(str(root / "norain" / f"{i:03d}.png"), clean.astype(np.uint8))
    return root

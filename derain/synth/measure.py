"""A rain layer in numbers: its floor, coverage, streak brightness, fall angle and its spread, and the streaks'
length and width, the statistics ``tools/streaks.py`` compares between Rain100H's real layers and ours, and
``tests/test_batch_rain.py`` between the two procedural renderers.

A layer is a grey (H, W) float array in [0, 1] (``recover_layer(rainy, clean).mean(2)``, or a rendered layer).
"""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["STATS", "layer_stats"]

BLOCK = 32
"""Side of the blocks whose orientations give the angle spread."""

STATS = (
    "floor",
    "coverage",
    "bright_p50",
    "bright_p90",
    "angle",
    "angle_spread",
    "coherence",
    "length",
    "width",
)
"""What :func:`layer_stats` measures."""


def orientation(gx: np.ndarray, gy: np.ndarray) -> tuple[float, float]:
    """Streak direction (degrees from vertical, in (−90, 90]) and coherence from summed gradient products."""
    jxx, jyy, jxy = float((gx * gx).sum()), float((gy * gy).sum()), float((gx * gy).sum())
    grad = 0.5 * np.arctan2(2 * jxy, jxx - jyy)  # dominant gradient direction, radians from the x axis
    streak = grad + np.pi / 2  # streaks run across their gradient
    # from vertical (image y points down): a streak along (cos s, sin s)
    angle = np.degrees(np.arctan2(np.cos(streak), np.sin(streak)))
    angle = (angle + 90) % 180 - 90
    coherence = np.hypot(jxx - jyy, 2 * jxy) / max(jxx + jyy, 1e-12)
    return float(angle), float(coherence)


def half_distance(acf: np.ndarray, angle: float, limit: int = 80) -> float:
    """Distance from the centre of ``acf`` (peak 1) along ``angle`` (degrees from vertical) where it falls to 0.5."""
    cy, cx = acf.shape[0] // 2, acf.shape[1] // 2
    r = np.arange(0, limit, 0.25, dtype=np.float32)
    t = np.radians(angle)
    xs = (cx + r * np.sin(t)).astype(np.float32)
    ys = (cy + r * np.cos(t)).astype(np.float32)
    values = cv2.remap(acf, xs[None], ys[None], cv2.INTER_LINEAR)[0]
    below = np.nonzero(values < 0.5)[0]
    return float(r[below[0]]) if below.size else float(limit)


def layer_stats(layer: np.ndarray) -> dict[str, float]:
    """The :data:`STATS` of one grey layer.

    ``floor``: its 10th percentile (a veil or haze lifts it); ``coverage``: the share of pixels above 0.1;
    ``bright_p50``, ``bright_p90``: the median and 90th percentile of the pixels above 0.05; ``angle``: the fall
    angle from vertical (the structure tensor's orientation), ``angle_spread``: the circular spread of the doubled
    angles of 32-pixel blocks, weighted by their coherence; ``coherence``: the whole layer's; ``length`` and
    ``width``: twice the distance at which the layer's autocorrelation falls to one half, along and across the
    dominant direction (a streak of length l gives l).
    """
    layer = layer.astype(np.float32)
    streak = layer[layer > 0.05]
    gx, gy = cv2.Sobel(layer, cv2.CV_32F, 1, 0), cv2.Sobel(layer, cv2.CV_32F, 0, 1)
    angle, coherence = orientation(gx, gy)
    doubled, weights = [], []
    for y in range(0, layer.shape[0] - BLOCK + 1, BLOCK):
        for x in range(0, layer.shape[1] - BLOCK + 1, BLOCK):
            a, c = orientation(gx[y : y + BLOCK, x : x + BLOCK], gy[y : y + BLOCK, x : x + BLOCK])
            doubled.append(np.exp(2j * np.radians(a)))
            weights.append(c)
    w = np.asarray(weights)
    resultant = abs((w * np.asarray(doubled)).sum()) / max(w.sum(), 1e-12)
    spread = np.degrees(0.5 * np.sqrt(-2 * np.log(max(resultant, 1e-12))))
    centred = layer - layer.mean()
    power = np.abs(np.fft.fft2(centred)) ** 2
    acf = np.fft.fftshift(np.fft.ifft2(power).real).astype(np.float32)
    acf /= max(float(acf.max()), 1e-12)
    return {
        "floor": float(np.quantile(layer, 0.1)),
        "coverage": float((layer > 0.1).mean()),
        "bright_p50": float(np.median(streak)) if streak.size else 0.0,
        "bright_p90": float(np.quantile(streak, 0.9)) if streak.size else 0.0,
        "angle": angle,
        "angle_spread": float(spread),
        "coherence": coherence,
        "length": 2 * half_distance(acf, angle),
        "width": 2 * half_distance(acf, angle + 90),
    }

"""Rain100H's rain composite: how a rain layer is put on a photo, and how a pair's layer is taken back off.

``rainy = clip(clean + layer · (1 − β · clean), 0, 1)``: β = 0 is plain addition (``O = B + S``), 1 a screen blend;
Rain100H's rain lies between, at the fitted :data:`COMPOSITE_BETA`, the one default of β in derain. Images are
float32 arrays (H, W, 3) in [0, 1] (uint8 is accepted and scaled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

Array = TypeVar("Array", np.ndarray, "torch.Tensor")

__all__ = [
    "COMPOSITE_BETA",
    "SATURATED",
    "as_float",
    "background_correlation",
    "composite",
    "fit_composite_beta",
    "rain_residual",
    "recover_layer",
]

COMPOSITE_BETA = 0.62
"""The fitted β of Rain100H's rain composite ``rainy = clean + layer · (1 − β · clean)`` (``benchmarks/
composite.py`` fits it on the 18 development pairs: the β for which the recovered layer no longer correlates with
the background in unsaturated streak pixels; 0 is plain addition, 1 a screen blend). The one default of β
wherever it is taken: ``composite``, ``add_rain``, ``transplant``, ``BatchRain``, the synthetic dataset and
``Synthesis.composite_beta``."""


def check_image(image: np.ndarray, what: str) -> None:
    """A ValueError naming ``what`` unless ``image`` is (H, W, 3)."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{what}: expected an (H, W, 3) image, got shape {tuple(image.shape)}")


def as_float(image: np.ndarray) -> np.ndarray:
    """uint8 or float image -> float32 in [0, 1] (uint8 is divided by 255, float is only cast)."""
    if image.dtype == np.uint8:
        return image.astype(np.float32) / 255.0
    return image.astype(np.float32, copy=False)


def rain_residual(rainy: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """The rain layer of a pair: ``clip(rainy − clean, 0, 1)`` as float32 (inputs uint8 or float)."""
    if rainy.shape != clean.shape:
        raise ValueError(f"rain_residual: rainy shape {rainy.shape} differs from clean shape {clean.shape}")
    return np.clip(as_float(rainy) - as_float(clean), 0.0, 1.0)


SATURATED = 254 / 255
"""Rainy pixels at or above this value are saturated: the layer there is only known to be at least a bound."""


def composite(clean: Array, layer: Array, beta: float = COMPOSITE_BETA) -> Array:
    """Put a rain layer on a clean image: ``clip(clean + layer · (1 − β · clean), 0, 1)``.

    ``beta = 0`` is plain addition, 1 a screen blend; Rain100H's rain lies between (``COMPOSITE_BETA``). A layer
    of shape (H, W, 1) is added to every channel alike. numpy arrays (uint8 or float) give float32; torch
    tensors (float, any shape that broadcasts, e.g. ``BatchRain``'s (B, 3, H, W)) give a tensor of their dtype.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"composite beta must be in [0, 1], got {beta}")
    if not isinstance(clean, np.ndarray):  # a torch tensor: this module imports no torch
        return (clean + layer * (1.0 - beta * clean)).clamp(0.0, 1.0)
    base = as_float(clean)
    return np.clip(base + as_float(layer) * (1.0 - beta * base), 0.0, 1.0).astype(np.float32)


def recover_layer(rainy: np.ndarray, clean: np.ndarray, beta: float = COMPOSITE_BETA) -> np.ndarray:
    """The rain layer of a pair under ``composite``'s model, free of its background, float32 in [0, 1].

    Where the rainy pixel is below saturation the layer is ``(rainy − clean) / (1 − β · clean)``. Where it is
    saturated the composite only bounds it from below; there the layer is the larger of that bound and the
    90th percentile of the image's unsaturated streak pixels (a typical bright streak), rather than the bound
    alone, which would be low wherever the background is bright and leave dark ghosts of its edges.
    """
    if rainy.shape != clean.shape:
        raise ValueError(f"recover_layer: rainy shape {rainy.shape} differs from clean shape {clean.shape}")
    r, b = as_float(rainy), as_float(clean)
    layer = np.clip((r - b) / np.maximum(1.0 - beta * b, 1e-6), 0.0, 1.0)
    saturated = r >= SATURATED
    streak = (layer > 8 / 255) & ~saturated
    if saturated.any():
        typical = float(np.percentile(layer[streak], 90)) if streak.any() else 1.0
        layer = np.where(saturated, np.maximum(layer, typical), layer)
    return layer.astype(np.float32)


def background_correlation(rainy: np.ndarray, clean: np.ndarray, beta: float) -> float:
    """Correlation between the recovered layer and the background in the pair's unsaturated streak pixels
    (rain at least 8 levels), over all channels: 0 when the layer does not depend on what is behind it."""
    r, b = as_float(rainy), as_float(clean)
    layer = (r - b) / np.maximum(1.0 - beta * b, 1e-6)
    streak = (r - b > 8 / 255) & (r < SATURATED)
    if streak.sum() < 2:
        return float("nan")
    return float(np.corrcoef(layer[streak], b[streak])[0, 1])


def fit_composite_beta(rainy: np.ndarray, clean: np.ndarray, *, steps: int = 101) -> float:
    """The β in [0, 1] whose recovered layer has the smallest absolute correlation with the background."""
    betas = np.linspace(0.0, 1.0, steps)
    corr = np.array([background_correlation(rainy, clean, b) for b in betas])
    return float(betas[int(np.nanargmin(np.abs(corr)))])

"""A large held-out heavy-rain validation set: held-out real rain layers on held-out clean photos.

A handful of real pairs ranks weights badly (seven heavy pairs read stages 4-8 in reverse test order). This
module builds many pairs from the same few held-out rain layers instead: each held-out photo carries several of
the layers, flipped and shifted, so paired differences between two weights average over hundreds of images.

The photos are whole, unscaled clean images (turned by 90° when the layer's orientation needs it). Listed as a
validation folder, they leave the training photo pool by content (``derain.data``), as any validation clean
image does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .composite import composite

__all__ = ["HeldOutPair", "heldout_pairs"]


@dataclass(frozen=True)
class HeldOutPair:
    """One built pair and where it came from: photo and layer indices, the flip and the shift (pixels)."""

    rainy: np.ndarray
    clean: np.ndarray
    photo: int
    layer: int
    flip: bool
    shift: int


def _orient(photo: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``photo`` turned by 90° when its orientation differs from ``shape``'s (H, W)."""
    if (photo.shape[0] > photo.shape[1]) != (shape[0] > shape[1]):
        return np.ascontiguousarray(np.rot90(photo))
    return photo


def _fit(layer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``layer`` tiled and cropped to (H, W) of ``shape`` (layers and photos of one data set share a size)."""
    reps = (-(-shape[0] // layer.shape[0]), -(-shape[1] // layer.shape[1]), 1)
    return np.tile(layer, reps)[: shape[0], : shape[1]]


def heldout_pairs(
    layers: Sequence[np.ndarray],
    photos: Sequence[np.ndarray],
    *,
    beta: float,
    per_photo: int = 4,
    seed: int = 0,
) -> list[HeldOutPair]:
    """Pairs of ``per_photo`` distinct rain layers on each photo, seeded.

    Each pair takes a layer not yet used on its photo, flips it left-right at random, shifts it sideways by a
    random amount (wrapping round), turns the photo to the layer's orientation if they differ, and puts the
    rain on with ``composite`` under ``beta`` (0: plain addition, how the shipped recipe's layers are made and
    put on; there is no default, so the caller says which composite its layers belong to).

    Args:
        layers: rain layers, uint8 or float (H, W, 3), e.g. ``clip(rainy − clean)`` of held-out pairs.
        photos: clean uint8 RGB photos, none of them trained on.
        per_photo: layers on each photo (at most ``len(layers)``).
        seed: the random stream; the same inputs and seed give the same pairs.
        beta: the composite's β (``derain.synth.COMPOSITE_BETA`` or the recipe's).

    Returns:
        ``len(photos) * per_photo`` pairs, uint8 (H, W, 3) rainy and clean images, photo by photo.

    Raises:
        ValueError: no layers or photos, or more layers a photo than there are layers.
    """
    if not layers or not photos:
        raise ValueError(f"heldout_pairs needs rain layers and photos, got {len(layers)} and {len(photos)}")
    if not 1 <= per_photo <= len(layers):
        raise ValueError(f"per_photo must be in [1, {len(layers)}] (the number of layers), got {per_photo}")
    rng = np.random.default_rng(seed)
    pairs: list[HeldOutPair] = []
    for p, photo in enumerate(photos):
        for k in rng.choice(len(layers), per_photo, replace=False).tolist():
            layer = layers[k]
            clean = _orient(photo, layer.shape)
            flip, shift = bool(rng.integers(2)), int(rng.integers(layer.shape[1]))
            placed = np.roll(layer[:, ::-1] if flip else layer, shift, axis=1)
            rainy = composite(clean, _fit(placed, clean.shape), beta)
            pairs.append(HeldOutPair(np.round(rainy * 255).astype(np.uint8), clean, p, int(k), flip, shift))
    return pairs

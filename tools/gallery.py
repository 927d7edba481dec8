"""What a model does to photos without a clean image: how much it changes them, and a gallery to look at.

Real rain has no ground truth. ``change_levels`` measures how much a model removes (mean absolute change, in
8-bit levels), which is only half a measure: a model that blurs everything changes a lot too, so rain-free photos
are scored apart (PSNR-Y of the output against the photo itself). ``gallery`` lays images side by side, a row a
photo (rainy | weights A | weights B ...), every row scaled to one height, for a person to judge.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

__all__ = ["change_levels", "change_parts", "gallery"]

FINE_SIGMA = 8.0
"""The Gaussian blur (pixels) that takes a change's streak-sized detail out and leaves its brightness and veil."""


def change_levels(before: np.ndarray, after: np.ndarray) -> float:
    """Mean ``|after − before|`` over pixels and channels, in 8-bit levels (uint8 images of one shape).

    Example:
        >>> change_levels(np.zeros((2, 2, 3), np.uint8), np.full((2, 2, 3), 3, np.uint8))
        3.0
    """
    if before.shape != after.shape:
        raise ValueError(f"change_levels: shapes differ, {before.shape} and {after.shape}")
    return float(np.abs(before.astype(np.int16) - after.astype(np.int16)).mean())


def change_parts(before: np.ndarray, after: np.ndarray, sigma: float = FINE_SIGMA) -> dict[str, float]:
    """Beside ``change_levels`` (8-bit levels): ``darkened``, the signed mean of ``before − after`` (bright streaks
    taken count in it; a model that lowers every pixel by k reads k, and ``change_levels`` k too); ``fine``, the mean absolute change left once the
    change is Gaussian-blurred by ``sigma`` and taken off: streak-sized detail removed or added, not light.

    Example:
        >>> flat = np.full((32, 32, 3), 100, np.uint8)
        >>> {k: round(v, 3) for k, v in change_parts(flat, flat - np.uint8(4)).items()}
        {'darkened': 4.0, 'fine': 0.0}
    """
    if before.shape != after.shape:
        raise ValueError(f"change_parts: shapes differ, {before.shape} and {after.shape}")
    change = after.astype(np.float32) - before.astype(np.float32)
    fine = change - cv2.GaussianBlur(change, (0, 0), sigma, borderType=cv2.BORDER_REFLECT)
    return {"darkened": float(-change.mean()), "fine": float(np.abs(fine).mean())}


def _label(width: int, text: str, height: int = 22) -> np.ndarray:
    """A white strip of ``width`` with ``text`` in black, cut to fit."""
    strip = np.full((height, width, 3), 255, np.uint8)
    scale = 0.45
    while len(text) > 1 and cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0] > width - 6:
        text = text[:-1]
    cv2.putText(strip, text, (3, height - 7), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 1, cv2.LINE_AA)
    return strip


def gallery(
    rows: Sequence[Sequence[np.ndarray]],
    *,
    height: int = 240,
    headers: Sequence[str] = (),
    captions: Sequence[str] = (),
    gap: int = 4,
) -> np.ndarray:
    """Rows of uint8 RGB images side by side, each image scaled (aspect kept) to ``height``, on white.

    Args:
        rows: one list a photo (e.g. rainy, then each weights' output); rows may differ in width.
        height: every image's height in the gallery.
        headers: one label a column, written over the first row.
        captions: one label a row, written over its first image.
        gap: white pixels between images and rows.

    Returns:
        One uint8 (H, W, 3) image, as wide as the widest row.
    """
    if not rows:
        raise ValueError("gallery needs at least one row")
    lines = []
    for r, images in enumerate(rows):
        scaled = [
            cv2.resize(
                im, (max(1, round(im.shape[1] * height / im.shape[0])), height), interpolation=cv2.INTER_AREA
            )
            for im in images
        ]
        cells = []
        for c, im in enumerate(scaled):
            text = " | ".join(
                t
                for t in (
                    headers[c] if r == 0 and c < len(headers) else "",
                    captions[r] if c == 0 and r < len(captions) else "",
                )
                if t
            )
            cells.append(np.concatenate([_label(im.shape[1], text), im]) if text or r == 0 else im)
        tall = max(cell.shape[0] for cell in cells)
        cells = [np.pad(c, ((tall - c.shape[0], 0), (0, gap), (0, 0)), constant_values=255) for c in cells]
        lines.append(np.pad(np.concatenate(cells, axis=1), ((0, gap), (0, 0), (0, 0)), constant_values=255))
    width = max(line.shape[1] for line in lines)
    return np.concatenate(
        [np.pad(line, ((0, 0), (0, width - line.shape[1]), (0, 0)), constant_values=255) for line in lines]
    )

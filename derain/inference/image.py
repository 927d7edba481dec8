"""Derain images of any size: one ``restore()`` for the batch command, the evaluator and the web page.

``restore`` owns everything between an image array and the network: dtype scaling (8/16 bit), grayscale and
alpha, device and dtype of the model, tiling with smooth blending for large images, the strength of the result
and the final clamp.

Example:
    >>> from derain import load_model, restore
    >>> from derain.inference import read_image
    >>> model = load_model("derain-small.safetensors")        # doctest: +SKIP
    >>> clean = restore(model, read_image("rainy.jpg"))        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = [
    "DEFAULT_TILE",
    "ENSEMBLE_FLIPS",
    "MAX_PIXELS_UNTILED",
    "MAX_STRENGTH",
    "RestoreOptions",
    "blend_window",
    "ensemble_flips",
    "restore",
    "tile_starts",
]

DEFAULT_TILE = 512
"""Tile size that ``restore`` uses when it decides to tile by itself."""

MAX_PIXELS_UNTILED = 1024 * 1024
"""Images with more pixels than this are tiled when ``tile=None`` (bounds memory: about 1 GB at this size)."""

MAX_STRENGTH = 2.0
"""``restore(strength=...)`` runs from 0 (the input unchanged) to this (twice the rain taken away)."""


# ------------------------------------------------------------------------------------------------ tiling


def tile_starts(length: int, tile: int, overlap: int) -> list[int]:
    """Start offsets of ``tile``-sized tiles covering ``[0, length)``, sharing at least ``overlap`` pixels.

    The last tile is shifted back to end at ``length``, so all tiles have one size, ``min(tile, length)``.

    Example:
        >>> tile_starts(1000, 400, 32)
        [0, 368, 600]
    """
    if length <= tile:
        return [0]
    stride = tile - overlap
    starts = list(range(0, length - tile, stride))
    starts.append(length - tile)
    return starts


def blend_window(size: int, overlap: int) -> np.ndarray:
    """1-D blending weight of a tile: flat 1 in the middle, raised-cosine ramps of ``overlap`` pixels.

    ``w[i] = (1 - cos(π (i + 1) / (overlap + 1))) / 2`` on the ramp, so it is strictly positive everywhere (no
    division by zero where only one tile covers a pixel) and tiles cross-fade smoothly in their overlap.

    Example:
        >>> blend_window(6, 2).round(2).tolist()
        [0.25, 0.75, 1.0, 1.0, 0.75, 0.25]
    """
    w = np.ones(size, dtype=np.float32)
    ramp_len = min(overlap, size // 2)
    if ramp_len > 0:
        ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(1, ramp_len + 1) / (ramp_len + 1))
        w[:ramp_len] = ramp
        w[size - ramp_len :] = ramp[::-1]
    return w


# ------------------------------------------------------------------------------------------------ restore


def _split_channels(image: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(H, W[, C]) -> RGB (H, W, 3), alpha or None, and the kind to give back (gray, gray1, rgb, rgba)."""
    if image.ndim == 2:
        return np.repeat(image[:, :, None], 3, axis=2), None, "gray"
    if image.ndim == 3 and image.shape[2] == 1:
        return np.repeat(image, 3, axis=2), None, "gray1"
    if image.ndim == 3 and image.shape[2] == 3:
        return image, None, "rgb"
    if image.ndim == 3 and image.shape[2] == 4:
        return image[:, :, :3], image[:, :, 3:], "rgba"
    raise ValueError(
        f"restore expects an image of shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4); got {image.shape}"
    )


def _full_scale(image: np.ndarray) -> float:
    """The value of a full-scale pixel of ``image``: 255 for ``uint8``, 65535 for ``uint16``."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"restore expects a numpy array, got {type(image).__name__}")
    if image.dtype == np.uint8:
        return 255.0
    if image.dtype == np.uint16:
        return 65535.0
    raise ValueError(f"restore expects uint8 or uint16 pixels, got {image.dtype}")


ENSEMBLE_FLIPS: dict[int, tuple[tuple[int, ...], ...]] = {
    1: ((),),
    2: ((), (3,)),
    4: ((), (3,), (2,), (2, 3)),
}
"""``restore(ensemble=n)``: the tensor dimensions flipped for each of the n passes (3 = width, 2 = height)."""


def ensemble_flips(ensemble: int) -> tuple[tuple[int, ...], ...]:
    """The flips of ``restore(ensemble=...)``; a ValueError naming the allowed values for any other number."""
    if ensemble not in ENSEMBLE_FLIPS:
        raise ValueError(f"ensemble should be one of {sorted(ENSEMBLE_FLIPS)}, got {ensemble!r}")
    return ENSEMBLE_FLIPS[ensemble]


@dataclass(frozen=True)
class RestoreOptions:
    """How :func:`restore` runs the network: tiling, self-ensemble and strength, checked once when made.

    What the commands build from ``--tile --overlap --ensemble --strength`` and pass down to ``restore`` (and,
    through it, to every frame of a video). A ``ValueError`` names the value that cannot work.

    Args:
        tile: tile size in pixels; ``None`` tiles only images over ``max_pixels_untiled`` (with ``DEFAULT_TILE``);
            ``0`` never tiles.
        overlap: pixels shared by neighbouring tiles: ``0 <= overlap < tile`` (``DEFAULT_TILE`` for ``None``).
        ensemble: average over this many upright flips (1, 2 or 4; ``ENSEMBLE_FLIPS``).
        strength: how much of the rain the network finds is taken away, from 0 (none: the input) through 1 (the
            network's output) to ``MAX_STRENGTH`` (twice as much).

    Example:
        >>> RestoreOptions(tile=256, overlap=32, ensemble=2).ensemble
        2
        >>> RestoreOptions(tile=64, overlap=64)
        Traceback (most recent call last):
        ...
        ValueError: need tile >= 0 and 0 <= overlap < tile, got tile=64, overlap=64
        >>> RestoreOptions(strength=2.5)
        Traceback (most recent call last):
        ...
        ValueError: strength should be between 0 and 2, got 2.5
    """

    tile: int | None = None
    overlap: int = 32
    ensemble: int = 1
    strength: float = 1.0

    def __post_init__(self) -> None:
        tile = DEFAULT_TILE if self.tile is None else self.tile  # what restore uses on a large image
        if tile < 0 or self.overlap < 0 or (tile and self.overlap >= tile):
            raise ValueError(
                f"need tile >= 0 and 0 <= overlap < tile, got tile={self.tile}, overlap={self.overlap}"
            )
        ensemble_flips(self.ensemble)
        if not 0 <= self.strength <= MAX_STRENGTH:  # NaN too
            raise ValueError(f"strength should be between 0 and {MAX_STRENGTH:g}, got {self.strength!r}")

    def tile_for(self, pixels: int, max_pixels_untiled: int = MAX_PIXELS_UNTILED) -> int:
        """The tile size for an image of ``pixels`` (0: the whole image at once)."""
        if self.tile is None:
            return DEFAULT_TILE if pixels > max_pixels_untiled else 0
        return self.tile


def _model_device_dtype(
    model: nn.Module, device: str | torch.device | None
) -> tuple[torch.device, torch.dtype]:
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    if device is not None:
        device = torch.device(device)
        if param is not None and param.device != device:
            model.to(device)
        return device, dtype
    return (param.device if param is not None else torch.device("cpu")), dtype


def restore(
    model: nn.Module,
    image: np.ndarray,
    *,
    tile: int | None = None,
    overlap: int = 32,
    device: str | torch.device | None = None,
    max_pixels_untiled: int = MAX_PIXELS_UNTILED,
    batch_size: int = 1,
    ensemble: int = 1,
    strength: float = 1.0,
    options: RestoreOptions | None = None,
) -> np.ndarray:
    """Derain one image array; the result has the input's shape and dtype.

    The image is scaled to [0, 1] in float32 (then cast to the model's dtype: half precision works for 16-bit
    images too), run through ``model`` (in ``torch.inference_mode``, on the model's device), clamped, and
    scaled back with rounding. Grayscale is run as three equal channels and
    averaged back; an alpha channel is passed through unchanged; ``uint16`` keeps its 16-bit precision.

    The network predicts the rain, so ``strength`` s scales what it takes away:
    ``clamp(rainy + s · (derained − rainy), 0, 1)``, applied once to the whole derained image (each pass's output
    clamped, the flips averaged and the tiles blended as at s = 1), in float before the rounding. s = 1 is the
    network's output bit for bit, s = 0 the input.

    With tiling, the image is cut into ``tile``×``tile`` tiles that overlap by ``overlap`` pixels, each
    tile is derained on its own, and the tiles are cross-faded with a flat-topped raised-cosine window
    (:func:`blend_window`), accumulated in float32 arrays, so memory is bounded by the tile size (plus two
    float32 copies of the image) whatever the image size. Tiling changes the output slightly because the
    network's attention is global; see ``docs/usage.md`` for measured differences.

    Args:
        model: a ``DerainNet`` (or any module mapping (B, 3, H, W) in [0, 1] to the same shape).
        image: ``uint8`` or ``uint16`` array, (H, W), (H, W, 1), (H, W, 3) RGB or (H, W, 4) RGBA.
        tile: tile size in pixels; ``None`` runs the whole image at once unless it has more than
            ``max_pixels_untiled`` pixels, in which case 512-pixel tiles are used; ``0`` never tiles.
        overlap: pixels shared by neighbouring tiles (must be smaller than ``tile``).
        device: run on this device (the model is moved there); ``None`` uses the model's device.
        max_pixels_untiled: pixel budget for a single untiled pass when ``tile`` is ``None``.
        batch_size: tiles per forward pass.
        ensemble: self-ensemble: average the outputs for this many upright flips of the input, each flipped
            back (1: none; 2: also the mirror image; 4: also upside down and both). Costs that many forward
            passes. Flips only, no 90° turns: those would make falling streaks horizontal, which the shipped
            weights never saw in training.
        strength: how much of the predicted rain is taken away, 0 to ``MAX_STRENGTH`` (1: all of it, 0: none).
        options: ``tile``, ``overlap``, ``ensemble`` and ``strength`` at once, as the commands pass them down
            (:class:`RestoreOptions`); given, those four keep their defaults.

    Returns:
        The derained image, same shape and dtype as ``image``.

    Raises:
        ValueError: on an unsupported shape or dtype, or ``overlap``/``tile``/``ensemble``/``strength`` values
            that cannot work.
    """
    scale = _full_scale(image)
    rgb, alpha, kind = _split_channels(image)
    h, w = rgb.shape[:2]
    if h == 0 or w == 0:
        raise ValueError(f"restore got an empty image of shape {image.shape}")
    if options is None:
        options = RestoreOptions(tile=tile, overlap=overlap, ensemble=ensemble, strength=strength)
    elif (tile, overlap, ensemble, strength) != (None, 32, 1, 1.0):
        raise TypeError(
            "restore: pass tile, overlap, ensemble and strength either in options or on their own, not both"
        )
    tile, overlap = options.tile_for(h * w, max_pixels_untiled), options.overlap
    if batch_size < 1:
        raise ValueError(f"batch_size should be >= 1, got {batch_size}")
    flips = ENSEMBLE_FLIPS[options.ensemble]
    device, dtype = _model_device_dtype(model, device)
    was_training = model.training
    model.eval()

    def run(batch: list[np.ndarray]) -> np.ndarray:
        # scaled to [0, 1] in float32 before the cast: 65535 is past float16's largest value (65504)
        x = torch.from_numpy(np.stack(batch)).to(device).permute(0, 3, 1, 2).float().div_(scale).to(dtype)
        total = None
        for dims in flips:
            # out of place: a model may hand back x itself, which the later passes still read
            y = model(x.flip(dims) if dims else x).float().clamp(0.0, 1.0)
            y = y.flip(dims) if dims else y
            total = y if total is None else total.add_(y)
        return total.div_(len(flips)).permute(0, 2, 3, 1).cpu().numpy()

    try:
        with torch.inference_mode():
            if not tile or (h <= tile and w <= tile):
                out = run([rgb])[0]
            else:
                out = _restore_tiled(run, rgb, tile, overlap, batch_size)
    finally:
        model.train(was_training)
    if options.strength != 1.0:  # 1: the derained image as it is, not recomputed
        out = _with_strength(out, rgb, scale, options.strength)
    if kind in ("gray", "gray1"):
        out = out.mean(axis=2, keepdims=kind == "gray1")
    result = np.rint(out * scale).astype(image.dtype)
    if alpha is not None:
        result = np.concatenate([result, alpha], axis=2)
    return result


def _with_strength(derained: np.ndarray, rgb: np.ndarray, scale: float, strength: float) -> np.ndarray:
    """``clamp(rainy + strength · (derained − rainy), 0, 1)`` in float32, in place on ``derained`` (H, W, 3) in
    [0, 1]; ``rainy`` is ``rgb`` scaled to [0, 1] as the network saw it."""
    rainy = rgb.astype(np.float32) / np.float32(scale)
    derained -= rainy
    derained *= np.float32(strength)
    derained += rainy
    return np.clip(derained, 0.0, 1.0, out=derained)


def _restore_tiled(
    run: Callable[[list[np.ndarray]], np.ndarray], rgb: np.ndarray, tile: int, overlap: int, batch_size: int
) -> np.ndarray:
    h, w = rgb.shape[:2]
    th, tw = min(tile, h), min(tile, w)
    weight = blend_window(th, overlap)[:, None] * blend_window(tw, overlap)[None, :]
    acc = np.zeros((h, w, 3), dtype=np.float32)
    norm = np.zeros((h, w, 1), dtype=np.float32)
    boxes = [(y, x) for y in tile_starts(h, tile, overlap) for x in tile_starts(w, tile, overlap)]
    for i in range(0, len(boxes), batch_size):
        chunk = boxes[i : i + batch_size]
        outs = run([rgb[y : y + th, x : x + tw] for y, x in chunk])
        for (y, x), o in zip(chunk, outs, strict=True):
            acc[y : y + th, x : x + tw] += o * weight[:, :, None]
            norm[y : y + th, x : x + tw] += weight[:, :, None]
    acc /= norm
    return acc

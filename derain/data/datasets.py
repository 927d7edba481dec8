"""The two datasets: real rainy/clean pairs, and rain rendered on the fly onto clean photos.

Items are ``{"rain": float32 (3, h, w), "clean": float32 (3, h, w), "name": str, "render": bool, "set": str,
"real_rain": bool}`` in [0, 1]; ``render`` marks synthetic items whose procedural rain the training device still
has to draw (``Synthesis.render_on_device``), ``set`` the data set a validation pair comes from, ``real_rain`` the
synthetic items that carry a real photo's rain (``Synthesis.real_layer_dirs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from derain.io import ImageReadError, read_rgb, to_tensor
from derain.pairing import DataError, Pair, pair_name
from derain.synth import add_rain, transplant_layers
from derain.synth.transplant import seed_steps

from .options import Synthesis
from .transforms import Seeded, crop_transform

__all__ = ["PairedDataset", "SyntheticRainDataset"]


class PairedDataset(Seeded, Dataset):
    """Rainy/clean image pairs as tensors, optionally cropped and augmented identically.

    Items are ``{"rain": float32 (3, h, w), "clean": float32 (3, h, w), "name": str}`` in [0, 1]. With
    ``patch_size`` each item is a ``patch_size``² crop (images smaller than that are reflect-padded);
    without it, the full image.

    Args:
        pairs: (rainy path, clean path) tuples, e.g. from ``find_pairs``.
        patch_size: crop size, or None for full images.
        augment: random crops and flips (horizontal, vertical); otherwise a centre crop (if ``patch_size``).
        rotate90: with ``augment``, 90° turns instead of vertical flips (they turn rain streaks horizontal).
        seed: seed of the augmentation stream (each DataLoader worker derives its own from it).
        cache: keep decoded images in memory (worth it for small data sets).
        sets: a name per pair (its data set; validation reports each set apart), in items as ``"set"``;
            default ``""``.
    """

    def __init__(
        self,
        pairs: Sequence[Pair],
        *,
        patch_size: int | None = None,
        augment: bool = False,
        rotate90: bool = False,
        seed: int = 0,
        cache: bool = True,
        sets: Sequence[str] | None = None,
    ) -> None:
        if patch_size is not None and patch_size < 1:
            raise ValueError(f"patch_size must be a positive int or None, got {patch_size}")
        self.pairs = [(Path(r), Path(c)) for r, c in pairs]
        self.sets = list(sets) if sets is not None else [""] * len(self.pairs)
        if len(self.sets) != len(self.pairs):
            raise ValueError(f"sets names {len(self.sets)} sets for {len(self.pairs)} pairs; give one a pair")
        self.cache = cache
        self._images: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.seed = seed
        self.transform = crop_transform(
            patch_size, random=augment, turns="rotate90" if rotate90 else "upright"
        )
        self.reseed(0)

    def __len__(self) -> int:
        return len(self.pairs)

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The decoded uint8 (H, W, 3) rainy and clean images of pair ``index`` (cached if ``cache``)."""
        if index in self._images:
            return self._images[index]
        rain_path, clean_path = self.pairs[index]
        try:
            rain, clean = read_rgb(rain_path), read_rgb(clean_path)
        except ImageReadError as err:
            raise DataError(str(err)) from None
        if rain.shape != clean.shape:
            raise DataError(
                f"{rain_path} has shape {rain.shape} but its clean partner {clean_path} has {clean.shape}; "
                "a pair must have one size"
            )
        if self.cache:
            self._images[index] = (rain, clean)
        return rain, clean

    def __getitem__(self, index: int) -> dict[str, Any]:
        rain, clean = self.load(index)
        if self.transform is not None:
            out = self.transform(image=rain, clean=clean)
            rain, clean = out["image"], out["clean"]
        name = pair_name(self.pairs[index][1])
        item = {"rain": to_tensor(rain), "clean": to_tensor(clean), "name": name, "render": False}
        return item | {"set": self.sets[index], "real_rain": False}


def _layer_weights(name: str, weights: Sequence[float] | None, layers: list[np.ndarray]) -> np.ndarray | None:
    """``weights`` as an array, checked to give one chance a layer of ``layers``, summing to 1 (None stays)."""
    if weights is None:
        return None
    chances = np.asarray(weights, float)
    if len(chances) != len(layers) or abs(chances.sum() - 1) > 1e-6:
        raise ValueError(
            f"{name}: {len(chances)} weights summing to {chances.sum():g} for "
            f"{len(layers)} layers; give one a layer, summing to 1"
        )
    return chances


class SyntheticRainDataset(Seeded, Dataset):
    """Rain rendered on the fly onto random crops of clean photos: procedural streaks or transplanted layers.

    Each item takes a random clean image, a random ``patch_size``² crop in any of the 8 flips/turns, then
    either puts a rain layer on it (a pair's layer from ``pair_layers`` or a rendered one from
    ``rendered_layers``, with probability ``synthesis.transplant_prob``) or procedural streaks
    (``derain.synth.add_rain`` in ``synthesis.procedural_styles``); or, with probability
    ``synthesis.rain_free_prob``, no rain at all. How the rain looks is ``synthesis``' to say, checked there once:
    ``composite_beta``, ``layer_share``, ``layer_augment``, ``render_on_device`` (the procedural items' ``rain`` is
    then the clean crop and ``render`` is True: ``DerainDataModule`` renders them with ``BatchRain``).

    Args:
        clean_images: uint8 (H, W, 3) RGB photos.
        length: items per epoch.
        patch_size: crop size.
        synthesis: the rain's options (``Synthesis``; its folders and lengths are the data module's business).
        pair_layers: rain layers of real pairs (``derain.synth.recover_layer``), uint8 or float (H, W, 3); may be
            empty.
        pair_layer_weights: the chance of each of ``pair_layers`` being drawn (summing to 1); default equal.
        rendered_layers: rendered rain layers (``synthesis.layer_dirs``), uint8 (H, W, 1) grey or (H, W, 3),
            transplanted like ``pair_layers``.
        rendered_layer_weights: the chance of each of ``rendered_layers``, as ``pair_layer_weights``.
        rendered_layer_real: whether each of ``rendered_layers`` is a real photo's rain: an item that carries one
            is ``real_rain``; default none is.
        seed: seed of the random stream.
        fixed: item ``i`` is always the same (seeded by ``seed`` and ``i``), for validation sets; otherwise
            each DataLoader worker draws its own stream, new every epoch.
        rotate90: let transplanted rain layers turn by 90° (see ``derain.synth.transplant``).
    """

    SALT = 1

    def __init__(
        self,
        clean_images: Sequence[np.ndarray],
        *,
        length: int,
        patch_size: int,
        synthesis: Synthesis = Synthesis(),
        pair_layers: Sequence[np.ndarray] = (),
        pair_layer_weights: Sequence[float] | None = None,
        rendered_layers: Sequence[np.ndarray] = (),
        rendered_layer_weights: Sequence[float] | None = None,
        rendered_layer_real: Sequence[bool] = (),
        seed: int = 0,
        fixed: bool = False,
        rotate90: bool = False,
    ) -> None:
        if not clean_images:
            raise ValueError("SyntheticRainDataset needs at least one clean image, got none")
        for i, im in enumerate(clean_images):
            if im.ndim != 3 or im.shape[2] != 3 or im.dtype != np.uint8:
                raise ValueError(
                    f"clean image {i}: expected uint8 (H, W, 3), got {im.dtype} {tuple(im.shape)}"
                )
        if length < 1 or patch_size < 1:
            raise ValueError(f"length and patch_size must be positive, got {length} and {patch_size}")
        self.clean_images = list(clean_images)
        self.synthesis = synthesis
        self.pair_layers = list(pair_layers)
        self.pair_layer_weights = _layer_weights("pair_layer_weights", pair_layer_weights, self.pair_layers)
        self.rendered_layers = list(rendered_layers)
        self.rendered_layer_weights = _layer_weights(
            "rendered_layer_weights", rendered_layer_weights, self.rendered_layers
        )
        self.rendered_layer_real = list(rendered_layer_real) or [False] * len(self.rendered_layers)
        if len(self.rendered_layer_real) != len(self.rendered_layers):
            raise ValueError(
                f"rendered_layer_real: {len(self.rendered_layer_real)} flags for {len(self.rendered_layers)} "
                "layers; give one a layer"
            )
        self.length = length
        layers = self.pair_layers or self.rendered_layers
        self.transplant_prob = (
            synthesis.transplant_prob if layers else 0.0
        )  # what items get, with no layers 0
        self.seed = seed
        self.fixed = fixed
        self.rotate90 = rotate90
        self.transform = crop_transform(patch_size, random=True, turns="any")
        self.reseed(0)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for a synthetic set of {self.length}")
        if self.fixed:
            self.rng = np.random.default_rng([self.seed, index])
            seed_steps(self.transform, self.rng)
        rng, syn = self.rng, self.synthesis
        image = self.clean_images[int(rng.integers(len(self.clean_images)))]
        clean = self.transform(image=image)["image"].astype(np.float32) / 255.0
        render = real = False
        # Drawn only when used: without rain-free items, the random stream is that of a set without the option.
        if syn.rain_free_prob > 0 and rng.random() < syn.rain_free_prob:
            rainy = clean
        elif rng.random() < self.transplant_prob:
            layers, weights = self.pair_layers, self.pair_layer_weights
            # drawn only with both kinds of layer: with one kind, the stream is that of a set with only that kind
            if self.rendered_layers and (not layers or rng.random() < syn.layer_share):
                layers, weights = self.rendered_layers, self.rendered_layer_weights
            picks: list[int] = []
            rainy = transplant_layers(
                clean,
                layers,
                rng,
                rotate90=self.rotate90,
                augment=syn.layer_augment,
                beta=syn.composite_beta,
                weights=weights,
                picks=picks,
            )
            real = layers is self.rendered_layers and any(self.rendered_layer_real[i] for i in picks)
        elif syn.render_on_device:
            rainy, render = clean, True
        else:
            rainy = add_rain(clean, rng, syn.procedural_styles, beta=syn.composite_beta)
        # Quantise to 8 bits, like a stored pair: the network never sees rain finer than a PNG holds.
        rain_t, clean_t = (to_tensor(np.round(im * 255.0).astype(np.uint8)) for im in (rainy, clean))
        return {
            "rain": rain_t,
            "clean": clean_t,
            "name": f"synthetic-{index:05d}",
            "render": render,
            "set": "",
            "real_rain": real,
        }

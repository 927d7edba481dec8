"""The synthetic pool: the clean photos synthetic rain is rendered on and the rain layers it transplants.

One function of the options builds it, :func:`synthetic_pool`: the photos of ``synthesis.clean_dirs`` and the
built-in ones, minus any that shows a held-out image (a photo pool can hold the very backgrounds of validation or
test pairs: BSDS500 and Rain100H's); the rain layers of the donor training pairs; the rendered layers of
``synthesis.layer_dirs``. Nothing is kept between calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from derain.io import IMAGE_SUFFIXES, ImageReadError, list_images, read_image, read_rgb, to_8bit
from derain.pairing import DataError
from derain.synth import LayerAugment, builtin_clean_images, recover_layer

from .datasets import PairedDataset
from .options import Synthesis
from .overlap import content_signature, leave_out_shown
from .split import indices_from

__all__ = ["SyntheticPool", "synthetic_pool"]

log = logging.getLogger(__name__)


@dataclass
class SyntheticPool:
    """What synthetic rain is made of; empty when there are no clean photos (no synthetic samples)."""

    photos: list[np.ndarray] = field(default_factory=list)
    """uint8 (H, W, 3) RGB clean photos, none of which shows a held-out image."""
    dropped_photos: int = 0
    """Photos left out because they show a held-out image."""
    pair_layers: list[np.ndarray] = field(default_factory=list)
    """The donor training pairs' rain layers (float32 (H, W, 3) or uint8 with β = 0)."""
    pair_layer_weights: np.ndarray | None = None
    """Each pair layer's chance (``synthesis.transplant_shares``), or None for equal chances."""
    rendered_layers: list[np.ndarray] = field(default_factory=list)
    """The rendered layers of ``synthesis.layer_dirs``, uint8 (H, W, 1) grey or (H, W, 3)."""
    rendered_layer_weights: np.ndarray | None = None
    """Each rendered layer's chance (``synthesis.layer_shares``), or None for equal chances."""
    rendered_layer_real: list[bool] = field(default_factory=list)
    """Whether each rendered layer is a real photo's rain (its folder one of ``synthesis.real_layer_dirs``)."""


def synthetic_pool(
    synthesis: Synthesis, *, donors: PairedDataset | None, held: Sequence[np.ndarray]
) -> SyntheticPool:
    """The photos and rain layers of ``synthesis`` (see the module docstring).

    Args:
        synthesis: the synthetic rain's options.
        donors: the real training pairs, whose rain layers are transplanted (``transplant_prob`` > 0); None
            without real training pairs.
        held: signature arrays (``derain.data.overlap.signatures``) of the held-out clean images, one per
            held-out set (validation, test); a photo showing one of them is left out.

    Raises:
        DataError: a folder that holds no images, or an image that cannot be read (named).
    """
    photos = _clean_photos(synthesis)
    if photos:
        signed = np.stack([content_signature(im).ravel() for im in photos])
        kept, shown = leave_out_shown(photos, signed, held)
        if shown:
            log.warning(
                "dropped %d of %d clean photos that show a validation or test image (by content)",
                len(shown),
                len(photos),
            )
        photos = kept
    else:
        shown = []
    if not photos:
        return SyntheticPool(dropped_photos=len(shown))
    layers, weights = _pair_layers(synthesis, donors)
    rendered, rendered_weights, rendered_real = _rendered_layers(synthesis)
    return SyntheticPool(
        photos=photos,
        dropped_photos=len(shown),
        pair_layers=layers,
        pair_layer_weights=weights,
        rendered_layers=rendered,
        rendered_layer_weights=rendered_weights,
        rendered_layer_real=rendered_real,
    )


def _chances(shares: tuple[float, ...], sizes: list[int]) -> np.ndarray | None:
    """Each item's chance when folder ``k`` of ``sizes[k]`` items gives ``shares[k]`` of the draws; None (equal
    chances) without shares."""
    if not shares:
        return None
    chances = [share / size for share, size in zip(shares, sizes, strict=True) for _ in range(size)]
    return np.asarray(chances) / np.sum(chances)


def _read_folder(folder: str, what: tuple[str, str], read: Callable[[Path], np.ndarray]) -> list[np.ndarray]:
    """The images of ``folder`` (recursively), each read by ``read``; a DataError naming ``what`` (the folder's
    kind and option) if there are none."""
    files = list_images(folder, recursive=True)
    if not files:
        kind, option = what
        raise DataError(f"{kind} folder {folder} ({option}) holds no images ({IMAGE_SUFFIXES})")
    try:
        return [read(path) for path in files]
    except ImageReadError as err:
        raise DataError(str(err)) from None


def _clean_photos(synthesis: Synthesis) -> list[np.ndarray]:
    """The clean photos of ``clean_dirs``, then the built-in ones."""
    what = ("clean photo", "clean_dirs")
    photos = [im for folder in synthesis.clean_dirs for im in _read_folder(folder, what, read_rgb)]
    return photos + (builtin_clean_images() if synthesis.builtin_photos else [])


def _pair_layers(
    synthesis: Synthesis, donors: PairedDataset | None
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The rain layers of the donor pairs: ``recover_layer`` under the composite's β, or ``clip(rainy − clean)``
    with β = 0; and each layer's chance (``transplant_shares``)."""
    syn = synthesis
    layers: list[np.ndarray] = []
    weights = None
    if donors is not None and syn.transplant_prob > 0:
        groups = [range(len(donors))]
        if syn.transplant_from:
            groups = [indices_from(donors.pairs, (f,), "transplant_from") for f in syn.transplant_from]
        beta = syn.composite_beta  # decoding also fills the pairs' cache before forks
        layers = [
            recover_layer(*donors.load(i), beta) if beta > 0 else cv2.subtract(*donors.load(i))
            for group in groups
            for i in group
        ]
        weights = _chances(syn.transplant_shares, [len(g) for g in groups])
    if not layers and not syn.layer_dirs and syn.layer_augment != LayerAugment():
        log.warning("synthesis.layer_augment has no effect: no rain layers are transplanted")
    return layers, weights


def _rendered_layer(path: Path) -> np.ndarray:
    image = to_8bit(read_image(path))
    return image[:, :, None] if image.ndim == 2 else image[:, :, :3]


def _rendered_layers(synthesis: Synthesis) -> tuple[list[np.ndarray], np.ndarray | None, list[bool]]:
    """The rendered rain layers of ``layer_dirs`` (none when nothing is transplanted), each one's chance
    (``layer_shares``), and whether each is real rain (``real_layer_dirs``)."""
    if synthesis.transplant_prob == 0:
        return [], None, []
    what = ("rain layer", "layer_dirs")
    groups = [_read_folder(folder, what, _rendered_layer) for folder in synthesis.layer_dirs]
    layers = [im for group in groups for im in group]
    if layers:
        log.info("%d rendered rain layers from %s", len(layers), ", ".join(synthesis.layer_dirs))
    folder_real = [synthesis.holds_real_rain(folder) for folder in synthesis.layer_dirs]
    real = [flag for flag, group in zip(folder_real, groups, strict=True) for _ in group]
    return layers, _chances(synthesis.layer_shares, [len(g) for g in groups]), real

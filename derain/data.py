"""Training, validation and test data: real pairs, content-checked against the test split, plus synthetic rain.

Pairing rules and folder layouts live in :mod:`derain.pairing`. Folder options may use the one documented
variable ``$DERAIN_DATA`` (e.g. ``$DERAIN_DATA/rain100h-train-mini``): it is expanded when the data module is
built, and an unset variable is an error that names it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import albumentations as A
import cv2
import lightning as L
import numpy as np
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, get_worker_info

from derain.io import (
    IMAGE_SUFFIXES,
    ImageReadError,
    list_images,
    natural_key,
    pair_name,
    read_image,
    read_rgb,
    to_tensor,
)
from derain.pairing import LAYOUTS, DataError, check_pairs, find_pairs, pair_set
from derain.synth import (
    ANY_STYLES,
    COMPOSITE_BETA,
    RAIN_STYLES,
    BatchRain,
    LayerAugment,
    add_rain,
    builtin_clean_images,
    recover_layer,
    transplant_layers,
)

__all__ = [
    "DataError",
    "LAYOUTS",
    "pair_name",
    "find_pairs",
    "check_pairs",
    "content_signature",
    "find_overlap",
    "read_name_list",
    "list_images",
    "crop_transform",
    "PairedDataset",
    "SyntheticRainDataset",
    "PairSources",
    "Synthesis",
    "DerainDataModule",
]

log = logging.getLogger(__name__)

Pair = tuple[Path, Path]

DATA_VARIABLE = "DERAIN_DATA"
"""The one environment variable folder options may use: where the data sets are (``$DERAIN_DATA/...``)."""


def check_probability(name: str, value: float) -> None:
    """A ``DataError`` naming the option unless ``value`` is a probability."""
    if not 0.0 <= value <= 1.0:
        raise DataError(f"{name} must be in [0, 1], got {value}")


def check_styles(name: str, styles: Sequence[str]) -> tuple[str, ...]:
    """``styles`` as a tuple; a ``DataError`` naming the option unless it lists known rain styles."""
    styles = (styles,) if isinstance(styles, str) else tuple(styles)
    unknown = [s for s in styles if s not in RAIN_STYLES]
    if not styles or unknown:
        raise DataError(
            f"{name} must name one or more of {', '.join(RAIN_STYLES)}; got {list(styles)}"
            + (f" ({', '.join(map(repr, unknown))} unknown)" if unknown else "")
        )
    return styles


def _expand(name: str, folder: str) -> str:
    """``folder`` with ``$DERAIN_DATA`` (or ``${DERAIN_DATA}``) expanded; an unset variable names itself."""
    expanded = os.path.expandvars(str(folder))
    left = re.search(r"\$\{?(\w+)", expanded)
    if left:
        raise DataError(
            f"{name}: {folder} uses ${left.group(1)}, which is not set; set it to the folder that holds the data "
            f"sets, e.g. {DATA_VARIABLE}=../shared/data python -m derain.fit ..."
        )
    return expanded


def _expand_all(options: Any, names: Iterable[str]) -> None:
    for name in names:
        value = getattr(options, name)
        if isinstance(value, str):
            raise DataError(f"{name} must be a list of folders, got the string {value!r}")
        object.__setattr__(options, name, tuple(_expand(name, v) for v in value))


# ------------------------------------------------------------------------------------------------ options


@dataclass(frozen=True)
class PairSources:
    """Real rainy/clean pairs: where they are, what is left out of training, and how validation is split.

    Attributes:
        root: a folder with ``train/`` and ``test/`` pair folders, e.g. ``datasets/Rain100H``.
        train_dirs: more pair folders for training.
        val_dirs: explicit validation pair folders (their pairs are not trained on unless also in training).
        test_dirs: more test pair folders.
        val_fraction: share of the real training pairs held out for validation (at least 1): without
            ``val_dirs``, or with ``val_dirs`` when ``val_from`` is set (then validation is both).
        val_from: folders (among the training folders) the ``val_fraction`` hold-out draws from, each its own
            seeded share (18 and 200 pairs at 0.2: 4 and 40); default one share of all training pairs. A folder
            that is not a training folder gives its share to validation only (the same pairs as if it trained). Set
            together with ``val_dirs``, validation is the ``val_dirs`` pairs plus this hold-out. Training pairs
            whose clean image shows a validation clean image are dropped (by content) and logged.
        exclude_list: text file of pairs dropped from training: ``FOLDER/NAME`` a line (``FOLDER`` the training
            folder's name, or as many trailing parts of its path as tell it apart); a bare ``NAME`` only when
            there is one training folder. ``#`` starts a comment.
        drop_test_overlap: when there is a test split (``root/test`` or ``test_dirs``), drop the training pairs
            whose clean image shows a test clean image (compared by content, also flipped or turned by 90°),
            and log how many. ``false`` keeps them.
        repeat: how many times the real training pairs appear per epoch (so synthetic samples do not drown them).
    """

    root: str | None = None
    train_dirs: tuple[str, ...] = ()
    val_dirs: tuple[str, ...] = ()
    test_dirs: tuple[str, ...] = ()
    val_fraction: float = 0.1
    val_from: tuple[str, ...] = ()
    exclude_list: str | None = None
    drop_test_overlap: bool = True
    repeat: int = 1

    def __post_init__(self) -> None:
        _expand_all(self, ("train_dirs", "val_dirs", "test_dirs", "val_from"))
        for name in ("root", "exclude_list"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _expand(name, getattr(self, name)))
        if self.root is not None and not (Path(self.root) / "train").is_dir():
            what = "does not exist" if not Path(self.root).exists() else "has no train/ folder"
            raise DataError(
                f"data root {self.root} {what}; expected ROOT/train/{{rain,norain}}/ and ROOT/test/{{rain,norain}}/ "
                "(see datasets/README.md for Rain100H), or train with no data on disk: "
                "python -m derain.fit --config configs/synthetic.yaml"
            )
        if self.exclude_list is not None and not Path(self.exclude_list).is_file():
            raise DataError(
                f"exclude_list {self.exclude_list} does not exist; expected a text file of pair names"
            )
        if not 0.0 <= self.val_fraction < 1.0:
            raise DataError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.repeat < 1:
            raise DataError(f"repeat must be at least 1, got {self.repeat}")

    def train_folders(self) -> list[Path]:
        return ([Path(self.root) / "train"] if self.root is not None else []) + [
            Path(d) for d in self.train_dirs
        ]

    def test_folders(self) -> list[Path]:
        root_test = Path(self.root) / "test" if self.root is not None else None
        own = [root_test] if root_test is not None and root_test.is_dir() else []
        return own + [Path(d) for d in self.test_dirs]


@dataclass(frozen=True)
class Synthesis:
    """Synthetic rain rendered on clean photos: procedural streaks, or real rain layers transplanted.

    Attributes:
        builtin_photos: also use the photos that ship with scikit-image (no data on disk needed).
        clean_dirs: folders of clean photos (searched recursively).
        length: synthetic pairs per epoch; 0 means 1000.
        transplant_prob: share of synthetic samples that get a real rain layer from a training pair.
        transplant_from: folders (among the training folders) whose pairs give their rain layers; default all.
            Held-out validation pairs never give theirs.
        transplant_shares: with ``transplant_from``, the share of the pairs' transplanted layers each of its
            folders gives (one a folder, summing to 1; e.g. ``[0.75, 0.25]`` for heavy and light donors whatever
            their counts); default: every donor layer equally likely.
        layer_dirs: folders of rendered rain layers (bright streaks on black, grey or RGB images, e.g. Garg &
            Nayar's streak database), transplanted like the pairs' layers.
        layer_share: share of the transplanted samples whose layer comes from ``layer_dirs`` when the pairs
            give layers too (the rest take a pair's layer).
        layer_augment: random gain, resizing and turn of each transplanted layer, and the chance of a second
            one on top (``derain.synth.LayerAugment``; the default changes nothing).
        composite_beta: how rain is put on a photo, ``clean + layer · (1 − β · clean)`` (``derain.synth.
            composite``), for transplanted and procedural rain alike; the pairs' layers are recovered under
            the same model (``derain.synth.recover_layer``). Default ``COMPOSITE_BETA`` (0.62), fitted to
            Rain100H; 0 is plain addition with ``clip(rainy − clean)`` layers, as before it was fitted.
        rain_free_prob: share of synthetic samples left without rain (input = target), so the network learns to
            leave rain-free content, its brightness included, as it is.
        procedural_styles: the procedural rain's styles (``derain.synth.RAIN_STYLES``), one drawn per sample:
            ``light``, ``medium``, ``heavy`` (the default, all three) or ``rain100h``, the style fitted to
            Rain100H's streaks (``benchmarks/streaks.py``).
        val_length: size of the fixed synthetic validation set when there are no validation pairs (procedural
            rain as training renders it: ``composite_beta``, ``procedural_styles``).
        render_on_device: render the procedural rain on the training device, a batch at a time
            (``derain.synth.BatchRain``, kornia), instead of in the loader workers: for GPUs, whose steps
            outrun CPU workers. Off by default: on a CPU the workers' numpy path is the faster one
            (``benchmarks/train.py``).
    """

    builtin_photos: bool = False
    clean_dirs: tuple[str, ...] = ()
    length: int = 0
    transplant_prob: float = 0.5
    transplant_from: tuple[str, ...] = ()
    transplant_shares: tuple[float, ...] = ()
    layer_dirs: tuple[str, ...] = ()
    layer_share: float = 0.5
    layer_augment: LayerAugment = field(default_factory=LayerAugment)
    composite_beta: float = COMPOSITE_BETA
    rain_free_prob: float = 0.0
    procedural_styles: tuple[str, ...] = ANY_STYLES
    val_length: int = 8
    render_on_device: bool = False

    AUTO_LENGTH = 1000

    def __post_init__(self) -> None:
        _expand_all(self, ("clean_dirs", "transplant_from", "layer_dirs"))
        for option, what in (("clean_dirs", "clean photo"), ("layer_dirs", "rain layer")):
            for folder in getattr(self, option):
                if not Path(folder).is_dir():
                    raise DataError(f"{what} folder {folder} ({option}) does not exist")
        check_probability("transplant_prob", self.transplant_prob)
        if self.transplant_shares:
            shares = tuple(float(x) for x in self.transplant_shares)
            object.__setattr__(self, "transplant_shares", shares)
            if len(shares) != len(self.transplant_from) or any(not 0 <= x <= 1 for x in shares):
                raise DataError(
                    f"transplant_shares {list(shares)} must give one share in [0, 1] for each of the "
                    f"{len(self.transplant_from)} transplant_from folders"
                )
            if abs(sum(shares) - 1.0) > 1e-6:
                raise DataError(f"transplant_shares {list(shares)} must sum to 1, got {sum(shares):g}")
        check_probability("layer_share", self.layer_share)
        check_probability("composite_beta", self.composite_beta)
        check_probability("rain_free_prob", self.rain_free_prob)
        object.__setattr__(
            self, "procedural_styles", check_styles("procedural_styles", self.procedural_styles)
        )
        if self.length < 0 or self.val_length < 0:
            raise DataError(f"length and val_length must be >= 0, got {self.length} and {self.val_length}")

    @property
    def used(self) -> bool:
        return self.builtin_photos or bool(self.clean_dirs)


# ------------------------------------------------------------------------------------ train/test overlap

SIGNATURE_SIDE = 32
"""Content signatures are grey thumbnails of this side (any aspect ratio is squeezed to a square)."""

OVERLAP_RMS = 6.0
"""Two clean images show the same photo when their signatures differ by less than this RMS, in 8-bit levels."""


def content_signature(image: np.ndarray) -> np.ndarray:
    """A grey ``SIGNATURE_SIDE``² thumbnail (float32, 0–255) of a uint8 RGB image: equal for re-encodings.

    A flip or 90° turn of the image flips or turns its signature the same way, so one signature per image and
    the 8 turned versions of the other side's find the same photo in any orientation.
    """
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, (SIGNATURE_SIDE, SIGNATURE_SIDE), interpolation=cv2.INTER_AREA).astype(np.float32)


def _signatures(paths: Sequence[Path]) -> np.ndarray:
    try:
        return np.stack([content_signature(read_rgb(p)).ravel() for p in paths])
    except ImageReadError as err:
        raise DataError(str(err)) from None


def shows_any(candidates: np.ndarray, references: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """Which candidate signatures show one of the reference signatures, flipped or turned or not.

    Args:
        candidates: (n, SIGNATURE_SIDE²) signatures (``content_signature``, flattened).
        references: (m, SIGNATURE_SIDE²) signatures.
        chunk: candidates compared per matrix product (bounds memory on large sets).

    Returns:
        bool (n,): RMS difference below ``OVERLAP_RMS`` to some orientation of some reference.
    """
    if len(candidates) == 0 or len(references) == 0:
        return np.zeros(len(candidates), bool)
    side = SIGNATURE_SIDE
    square = references.reshape(-1, side, side)
    turned = np.stack([np.rot90(r if k < 4 else r[:, ::-1], k % 4).ravel() for r in square for k in range(8)])
    turned = turned.astype(np.float32)
    ref_sq = (turned**2).sum(1)[None, :]
    hits = []
    for start in range(0, len(candidates), chunk):
        block = candidates[start : start + chunk].astype(np.float32)
        sq = (block**2).sum(1)[:, None] + ref_sq - 2.0 * block @ turned.T
        hits.append(np.sqrt(np.maximum(sq, 0.0) / block.shape[1]).min(axis=1) < OVERLAP_RMS)
    return np.concatenate(hits)


def overlapping(train_cleans: Sequence[Path], test_cleans: Sequence[Path]) -> list[int]:
    """Indices of ``train_cleans`` whose image is one of ``test_cleans``, flipped or turned or not.

    Matrix products compare every training signature with the 8 orientations of every test signature
    (1800 × 100 images: about 15 s on 2 cores, most of it reading the files; ``benchmarks/overlap.py``).
    """
    if not train_cleans or not test_cleans:
        return []
    return np.flatnonzero(shows_any(_signatures(train_cleans), _signatures(test_cleans))).tolist()


def find_overlap(train_dir: str | os.PathLike, test_dir: str | os.PathLike) -> list[str]:
    """Names of the training pairs whose clean image shows a test pair's clean image (by content).

    ``DerainDataModule`` drops these by itself (``pairs.drop_test_overlap``); this lists them, e.g. for Rain100H
    (546 RainTrainH pairs share a background with the test set).
    """
    train = find_pairs(train_dir)
    hits = overlapping([c for _, c in train], [c for _, c in find_pairs(test_dir)])
    return sorted((pair_name(train[i][1]) for i in hits), key=natural_key)


# ------------------------------------------------------------------------------------------ name lists


def _canonical(name: str) -> str:
    """A pair name as lists compare it: no suffix, no prefix, lower case, no leading zeros."""
    name = pair_name(name.strip()).lower()
    return str(int(name)) if name.isdigit() else name


def read_name_list(path: str | os.PathLike) -> list[tuple[tuple[str, ...], str]]:
    """Entries of a pair list: ``FOLDER/NAME`` (or a bare ``NAME``) a line, ``#`` comments.

    Returns:
        (folder path parts, canonical name) per entry; the parts are empty for a bare name. ``norain-7.png``,
        ``rain-007``, ``0007.png`` and ``7`` all name pair 7.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"name list {path} does not exist; expected a text file with one pair name a line")
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            folder, _, name = text.replace("\\", "/").rpartition("/")
            entries.append((tuple(p for p in folder.split("/") if p), _canonical(name)))
    return entries


def _listed(
    entries: list[tuple[tuple[str, ...], str]], folders: Sequence[Path], list_path: str
) -> list[set[str]]:
    """Per training folder, the canonical names the list scopes to it."""
    if any(not parts for parts, _ in entries) and len(folders) > 1:
        raise DataError(
            f"exclude_list {list_path} has bare pair names but there are {len(folders)} training folders "
            f"({', '.join(map(str, folders))}); write FOLDER/NAME so each name reaches only its own folder"
        )
    resolved = [f.resolve().parts for f in folders]
    names: list[set[str]] = [set() for _ in folders]
    for parts, name in entries:
        hits = [i for i, f in enumerate(resolved) if not parts or f[-len(parts) :] == parts]
        if not hits:
            raise DataError(f"exclude_list {list_path}: {'/'.join(parts)}/{name} names no training folder")
        if len(hits) > 1:
            raise DataError(
                f"exclude_list {list_path}: {'/'.join(parts)} fits several training folders; give more of its path"
            )
        names[hits[0]].add(name)
    return names


# -------------------------------------------------------------------------------------------- datasets


def crop_transform(patch_size: int | None, *, random: bool, turns: str) -> A.Compose | None:
    """The one crop path: reflect-pad to ``patch_size``, crop (random or centred), then flips.

    Args:
        patch_size: crop side, or None for whole images.
        random: random crops and flips; otherwise a centre crop and nothing else.
        turns: ``"upright"``: horizontal and vertical flips (rain stays near vertical); ``"rotate90"``:
            horizontal flips and 90° turns; ``"any"``: all 8 flips and turns (clean photos before rain).
    """
    steps: list[A.BasicTransform] = []
    if patch_size is not None:
        steps.append(A.PadIfNeeded(patch_size, patch_size, border_mode=cv2.BORDER_REFLECT_101))
        steps.append(A.RandomCrop(patch_size, patch_size) if random else A.CenterCrop(patch_size, patch_size))
    if random:
        flips = {
            "upright": [A.HorizontalFlip(p=0.5), A.VerticalFlip(p=0.5)],
            "rotate90": [A.HorizontalFlip(p=0.5), A.RandomRotate90(p=1.0)],
            "any": [A.SquareSymmetry(p=1.0)],
        }
        steps += flips[turns]
    return A.Compose(steps, additional_targets={"clean": "image"}, seed=0) if steps else None


class _Seeded:
    """A dataset's random stream: a numpy generator and its albumentations transform, reseeded per worker.

    The stream is seeded by the dataset's ``seed``, its ``SALT`` (so two kinds of dataset never draw the same
    sequence), the worker's torch seed and the process's rank (so DDP ranks, which share a global seed, differ).
    """

    SALT = 0
    seed: int
    transform: A.Compose | None

    def reseed(self, worker_seed: int, rank: int = 0) -> None:
        """Start this process's stream (``DerainDataModule``'s ``worker_init_fn`` calls it in every worker)."""
        self.rng = np.random.default_rng([self.seed, self.SALT, worker_seed, rank])
        if self.transform is not None:
            self.transform.set_random_seed(int(self.rng.integers(2**31)))


def seed_worker(worker_id: int, rank: int = 0) -> None:
    """``worker_init_fn``: give every dataset in this worker its own stream, from the worker's torch seed and the
    process's rank (bind ``rank`` with ``functools.partial``)."""
    info = get_worker_info()
    if info is None:
        return
    stack = [info.dataset]
    while stack:
        dataset = stack.pop()
        if isinstance(dataset, ConcatDataset):
            stack.extend(dataset.datasets)
        elif isinstance(dataset, _Seeded):
            dataset.reseed(info.seed, rank)


class PairedDataset(_Seeded, Dataset):
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
        return item | {"set": self.sets[index]}


class SyntheticRainDataset(_Seeded, Dataset):
    """Rain rendered on the fly onto random crops of clean photos: procedural streaks or transplanted layers.

    Each item takes a random clean image, a random ``patch_size``² crop in any of the 8 flips/turns, then
    either adds a real rain layer (a residual ``clip(rainy − clean)`` from ``rain_residuals``, with probability
    ``transplant_prob``) or procedural streaks (``derain.synth.add_rain``, light to heavy); or, with probability
    ``rain_free_prob``, no rain at all.

    Args:
        clean_images: uint8 (H, W, 3) RGB photos.
        length: items per epoch.
        patch_size: crop size.
        rain_residuals: real rain layers, uint8 or float (H, W, 3); may be empty.
        residual_weights: the chance of each of ``rain_residuals`` being drawn (summing to 1); default equal.
        transplant_prob: share of items using a real rain layer (when ``rain_residuals`` is not empty).
        seed: seed of the random stream.
        fixed: item ``i`` is always the same (seeded by ``seed`` and ``i``), for validation sets; otherwise
            each DataLoader worker draws its own stream, new every epoch.
        rotate90: let transplanted rain layers turn by 90° (see ``derain.synth.transplant``).
        layer_augment: random gain, resizing, small turns of the transplanted layers, and the chance of a
            second layer on top (``derain.synth.LayerAugment``); None: layers as they are.
        rain_free_prob: share of items left without rain (input = target), drawn before the rain type.
        streak_layers: rendered rain layers, uint8 (H, W, 1) grey or (H, W, 3), transplanted like
            ``rain_residuals``.
        streak_share: share of the transplanted items that take a layer from ``streak_layers`` when both kinds
            exist.
        beta: the composite's β for transplanted and procedural rain (``derain.synth.composite``; default
            ``COMPOSITE_BETA``; 0: added).
        defer_procedural: leave the procedural items' rain to the training device: their ``rain`` is the clean
            crop and ``render`` is True (``DerainDataModule`` renders them with ``BatchRain``).
        styles: names in ``derain.synth.RAIN_STYLES`` the procedural rain picks from, one at random per item
            (default ``ANY_STYLES``, light to heavy, as ``add_rain``'s ``"any"``).
    """

    SALT = 1

    def __init__(
        self,
        clean_images: Sequence[np.ndarray],
        *,
        length: int,
        patch_size: int,
        rain_residuals: Sequence[np.ndarray] = (),
        residual_weights: Sequence[float] | None = None,
        transplant_prob: float = 0.5,
        seed: int = 0,
        fixed: bool = False,
        rotate90: bool = False,
        layer_augment: LayerAugment | None = None,
        rain_free_prob: float = 0.0,
        defer_procedural: bool = False,
        streak_layers: Sequence[np.ndarray] = (),
        streak_share: float = 0.5,
        beta: float = COMPOSITE_BETA,
        styles: Sequence[str] = ANY_STYLES,
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
        check_probability("transplant_prob", transplant_prob)
        check_probability("rain_free_prob", rain_free_prob)
        check_probability("streak_share", streak_share)
        self.clean_images = list(clean_images)
        self.rain_residuals = list(rain_residuals)
        self.residual_weights = None if residual_weights is None else np.asarray(residual_weights, float)
        if self.residual_weights is not None and (
            len(self.residual_weights) != len(self.rain_residuals)
            or abs(self.residual_weights.sum() - 1) > 1e-6
        ):
            raise ValueError(
                f"residual_weights: {len(self.residual_weights)} weights summing to {self.residual_weights.sum():g}"
                f" for {len(self.rain_residuals)} layers; give one a layer, summing to 1"
            )
        self.streak_layers = list(streak_layers)
        self.streak_share = streak_share
        check_probability("beta", beta)
        self.beta = beta
        self.length = length
        self.transplant_prob = transplant_prob if self.rain_residuals or self.streak_layers else 0.0
        self.seed = seed
        self.fixed = fixed
        self.rotate90 = rotate90
        self.layer_augment = layer_augment
        self.rain_free_prob = rain_free_prob
        self.defer_procedural = defer_procedural
        self.styles = check_styles("styles", styles)
        self.transform = crop_transform(patch_size, random=True, turns="any")
        self.reseed(0)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for a synthetic set of {self.length}")
        if self.fixed:
            self.rng = np.random.default_rng([self.seed, index])
            self.transform.set_random_seed(int(self.rng.integers(2**31)))
        rng = self.rng
        image = self.clean_images[int(rng.integers(len(self.clean_images)))]
        clean = self.transform(image=image)["image"].astype(np.float32) / 255.0
        render = False
        # Drawn only when used, so that without rain-free items the random stream is the same as before.
        if self.rain_free_prob > 0 and rng.random() < self.rain_free_prob:
            rainy = clean
        elif rng.random() < self.transplant_prob:
            layers, weights = self.rain_residuals, self.residual_weights
            # drawn only with both kinds of layer, so that the random stream is otherwise as before
            if self.streak_layers and (not layers or rng.random() < self.streak_share):
                layers, weights = self.streak_layers, None
            rainy = transplant_layers(
                clean,
                layers,
                rng,
                rotate90=self.rotate90,
                augment=self.layer_augment,
                beta=self.beta,
                weights=weights,
            )
        elif self.defer_procedural:
            rainy, render = clean, True
        else:
            rainy = add_rain(clean, rng, self.styles, beta=self.beta)
        # Quantise to 8 bits, like a stored pair: the network never sees rain finer than a PNG holds.
        rain_t, clean_t = (to_tensor(np.round(im * 255.0).astype(np.uint8)) for im in (rainy, clean))
        return {"rain": rain_t, "clean": clean_t, "name": f"synthetic-{index:05d}", "render": render, "set": ""}


# ------------------------------------------------------------------------------------------ data module


def _seeded_share(n: int, fraction: float, seed: int) -> list[int]:
    """The indices (of ``n``) a hold-out of ``fraction`` (at least 1) takes with ``seed``."""
    if n == 0:
        return []
    return np.random.default_rng(seed).permutation(n)[: max(1, round(fraction * n))].tolist()


def _indices_from(pairs: Sequence[Pair], folders: Sequence[str], option: str) -> list[int]:
    """Indices of the ``pairs`` that ``find_pairs`` finds in ``folders``; a ``DataError`` if none are."""
    wanted = {rain.resolve() for folder in folders for rain, _ in find_pairs(folder)}
    found = [i for i, (rain, _) in enumerate(pairs) if rain.resolve() in wanted]
    if not found:
        raise DataError(
            f"{option} {list(folders)}: none of these folders' pairs are among the training pairs: list folders "
            "that are also in root/train or train_dirs, whose pairs were not all excluded, dropped as test "
            "overlap or held out"
        )
    return found


class DerainDataModule(L.LightningDataModule):
    """Training, validation and test data for deraining: real pairs, synthetic rain, or both.

    Training: the real pairs of ``pairs`` (minus the listed and the test-overlapping ones, minus the validation
    hold-out), repeated ``pairs.repeat`` times, plus ``synthesis.length`` synthetic pairs per epoch when
    ``synthesis`` has photos. Validation: ``pairs.val_dirs`` (full images), plus a seeded ``pairs.val_fraction``
    of the ``pairs.val_from`` training pairs when that is set; without ``val_dirs``, that seeded share of the
    real training pairs (full images); else, with only synthetic data, ``synthesis.val_length`` fixed
    synthetic 256×256 crops. Test: ``root/test`` and ``pairs.test_dirs`` (full images). Validation and test
    loaders use batch size 1: image sizes differ.

    Batches are dicts: ``{"rain": (B, 3, H, W), "clean": (B, 3, H, W), "name": list[str]}``.

    Args:
        pairs: real pairs (:class:`PairSources`).
        synthesis: synthetic rain (:class:`Synthesis`).
        rotate90: augment with 90° turns too (they turn rain streaks horizontal, which photographed rain is
            not; off by default: flips and 180° turns only).
        patch_size: training crop size.
        batch_size: training batch size.
        num_workers: DataLoader worker processes.
        seed: seed of hold-out splits, augmentation and synthetic rain.
    """

    VAL_PATCH = 256

    def __init__(
        self,
        *,
        pairs: PairSources = PairSources(),
        synthesis: Synthesis = Synthesis(),
        rotate90: bool = False,
        patch_size: int = 128,
        batch_size: int = 8,
        num_workers: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(
            {"pairs": dataclasses.asdict(pairs), "synthesis": dataclasses.asdict(synthesis)}
            | {"rotate90": rotate90, "patch_size": patch_size, "batch_size": batch_size, "seed": seed}
        )
        if pairs.root is None and not pairs.train_dirs and not synthesis.used:
            raise DataError(
                "no training data: set pairs.root (ROOT/train/{rain,norain}/), pairs.train_dirs, "
                "synthesis.clean_dirs or synthesis.builtin_photos (configs/synthetic.yaml trains with no data on "
                "disk)"
            )
        for name, value in (("patch_size", patch_size), ("batch_size", batch_size)):
            if value < 1:
                raise DataError(f"{name} must be at least 1, got {value}")
        if num_workers < 0:
            raise DataError(f"num_workers must be >= 0, got {num_workers}")
        self.pairs = pairs
        self.synthesis = synthesis
        self.rotate90 = rotate90
        self.patch_size = patch_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

        self.train_pairs: list[Pair] = []
        self.val_pairs: list[Pair] = []
        self.test_pairs: list[Pair] = []
        self.excluded_pairs: list[Pair] = []
        self.overlap_pairs: list[Pair] = []
        self.val_background_pairs: list[Pair] = []
        self.dropped_photos = 0
        self.clean_images: list[np.ndarray] = []
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self._batch_rain: BatchRain | None = None
        self._layer_weights: np.ndarray | None = None  # each pair layer's chance (synthesis.transplant_shares)

    # -- set-up steps --------------------------------------------------------------------------------------

    def _training_pairs(self) -> list[list[Pair]]:
        """Step 1: the pairs of every training folder (found and checked), one list per folder."""
        per_folder = [find_pairs(folder) for folder in self.pairs.train_folders()]
        check_pairs([p for ps in per_folder for p in ps])
        return per_folder

    def _drop_listed(self, per_folder: list[list[Pair]]) -> list[Pair]:
        """Step 2: drop the pairs ``exclude_list`` names, each name only in its own folder."""
        if self.pairs.exclude_list is None:
            return [p for ps in per_folder for p in ps]
        entries = read_name_list(self.pairs.exclude_list)
        listed = _listed(entries, self.pairs.train_folders(), self.pairs.exclude_list)
        kept: list[Pair] = []
        for folder, names, pairs in zip(self.pairs.train_folders(), listed, per_folder, strict=True):
            for pair in pairs:
                (self.excluded_pairs if _canonical(pair_name(pair[1])) in names else kept).append(pair)
            unmatched = names - {_canonical(pair_name(c)) for _, c in pairs}
            if unmatched:
                log.warning("exclude_list: no pair named %s in %s", ", ".join(sorted(unmatched)), folder)
        log.info("excluded %d training pairs listed in %s", len(self.excluded_pairs), self.pairs.exclude_list)
        return kept

    def _drop_test_overlap(self, pairs: list[Pair]) -> list[Pair]:
        """Step 3: drop the training pairs whose clean image is a test clean image (by content)."""
        if not self.pairs.drop_test_overlap or not self.has_test_split() or not pairs:
            return pairs
        hits = set(
            np.flatnonzero(shows_any(_signatures([c for _, c in pairs]), self._test_signatures)).tolist()
        )
        self.overlap_pairs = [p for i, p in enumerate(pairs) if i in hits]
        message = (
            f"dropped {len(hits)} of {len(pairs)} training pairs whose clean image shows a test image "
            f"(compared by content, flips and 90° turns included); pairs.drop_test_overlap false keeps them"
        )
        (log.warning if hits else log.info)(message)
        return [p for i, p in enumerate(pairs) if i not in hits]

    def _hold_out(self, pairs: list[Pair]) -> list[Pair]:
        """Step 4: the validation pairs (``val_dirs``, a seeded share of ``pairs``, or both when ``val_from`` is
        set beside ``val_dirs``); returns the rest, minus the training pairs whose clean image shows a
        validation clean image (another rain on the same background would leak it into training)."""
        explicit = [p for folder in self.pairs.val_dirs for p in find_pairs(folder)]
        check_pairs(explicit)
        self.val_pairs = explicit
        if (explicit and not self.pairs.val_from) or not pairs or self.pairs.val_fraction == 0:
            return self._drop_val_backgrounds(pairs)
        # one pool of all training pairs, or each val_from folder its own seeded share; a val_from folder that
        # does not train gives its share to validation and nothing else (the same pairs as when it trains)
        training = {folder.resolve() for folder in self.pairs.train_folders()}
        pools = [list(range(len(pairs)))]
        if self.pairs.val_from:
            pools = []
            for folder in self.pairs.val_from:
                if Path(folder).resolve() in training:
                    pools.append(_indices_from(pairs, (folder,), "val_from"))
                else:
                    own = find_pairs(folder)
                    explicit += [own[j] for j in _seeded_share(len(own), self.pairs.val_fraction, self.seed)]
        held = {pool[j] for pool in pools for j in _seeded_share(len(pool), self.pairs.val_fraction, self.seed)}
        if len(held) >= len(pairs) and not self.synthesis.used:
            raise DataError(
                f"only {len(pairs)} training pair(s): holding out {len(held)} for validation leaves none to "
                "train on; add pairs, set val_dirs, or val_fraction: 0"
            )
        self.val_pairs = explicit + [p for i, p in enumerate(pairs) if i in held]
        return self._drop_val_backgrounds([p for i, p in enumerate(pairs) if i not in held])

    def _drop_val_backgrounds(self, pairs: list[Pair]) -> list[Pair]:
        if not self.val_pairs or not pairs:
            return pairs
        shown = shows_any(_signatures([c for _, c in pairs]), _signatures([c for _, c in self.val_pairs]))
        self.val_background_pairs = [p for p, hit in zip(pairs, shown, strict=True) if hit]
        if self.val_background_pairs:
            log.warning(
                "dropped %d of %d training pairs whose clean image shows a validation image (by content): %s",
                len(self.val_background_pairs),
                len(pairs),
                ", ".join(str(r) for r, _ in self.val_background_pairs),
            )
        return [p for p, hit in zip(pairs, shown, strict=True) if not hit]

    def _clean_photos(self) -> list[np.ndarray]:
        """Step 5: the clean photos synthetic rain is rendered on, minus any that shows a validation or test
        image (a photo pool can hold the very backgrounds of held-out pairs: BSDS500 and Rain100H's)."""
        images: list[np.ndarray] = []
        for folder in self.synthesis.clean_dirs:
            files = list_images(folder, recursive=True)
            if not files:
                raise DataError(
                    f"clean photo folder {folder} (clean_dirs) holds no images ({IMAGE_SUFFIXES})"
                )
            try:
                images += [read_rgb(path) for path in files]
            except ImageReadError as err:
                raise DataError(str(err)) from None
        if self.synthesis.builtin_photos:
            images += builtin_clean_images()
        held = [_signatures([c for _, c in self.val_pairs])] if self.val_pairs else []
        if self.pairs.drop_test_overlap and self.has_test_split():
            held.append(self._test_signatures)
        if images and held:
            shown = shows_any(
                np.stack([content_signature(im).ravel() for im in images]), np.concatenate(held)
            )
            if shown.any():
                log.warning(
                    "dropped %d of %d clean photos that show a validation or test image (by content)",
                    int(shown.sum()),
                    len(images),
                )
            self.dropped_photos = int(shown.sum())
            images = [im for im, hit in zip(images, shown, strict=True) if not hit]
        return images

    def _rain_layers(self, real: PairedDataset | None) -> list[np.ndarray]:
        """Step 6: the rain layers of the donor training pairs, for transplant: ``recover_layer`` under the
        composite's β, or ``clip(rainy − clean)`` with β = 0."""
        syn = self.synthesis
        layers: list[np.ndarray] = []
        self._layer_weights = None
        if real is not None and syn.transplant_prob > 0:
            groups = [range(len(real))]
            if syn.transplant_from:
                groups = [_indices_from(real.pairs, (f,), "transplant_from") for f in syn.transplant_from]
            beta = syn.composite_beta  # decoding also fills the pairs' cache before forks
            donors = [i for group in groups for i in group]
            layers = [
                recover_layer(*real.load(i), beta) if beta > 0 else cv2.subtract(*real.load(i))
                for i in donors
            ]
            if syn.transplant_shares:
                weights = [share / len(g) for share, g in zip(syn.transplant_shares, groups, strict=True) for _ in g]
                self._layer_weights = np.asarray(weights) / np.sum(weights)
        if not layers and not syn.layer_dirs and syn.layer_augment != LayerAugment():
            log.warning("synthesis.layer_augment has no effect: no rain layers are transplanted")
        return layers

    def _streak_layers(self) -> list[np.ndarray]:
        """Step 7: the rendered rain layers of ``synthesis.layer_dirs``, uint8 (H, W, 1) grey or (H, W, 3)."""
        layers: list[np.ndarray] = []
        if self.synthesis.transplant_prob == 0:
            return layers
        for folder in self.synthesis.layer_dirs:
            files = list_images(folder, recursive=True)
            if not files:
                raise DataError(f"rain layer folder {folder} (layer_dirs) holds no images ({IMAGE_SUFFIXES})")
            for path in files:
                try:
                    image = read_image(path)
                except ImageReadError as err:
                    raise DataError(str(err)) from None
                if image.dtype != np.uint8:
                    image = np.rint(image / 257.0).astype(np.uint8)
                layers.append(image[:, :, None] if image.ndim == 2 else image[:, :, :3])
        if layers:
            log.info("%d rendered rain layers from %s", len(layers), ", ".join(self.synthesis.layer_dirs))
        return layers

    def _setup_fit(self) -> None:
        pairs = self._drop_test_overlap(self._drop_listed(self._training_pairs()))
        self.train_pairs = pairs = self._hold_out(pairs)
        self.clean_images = self._clean_photos()
        parts: list[Dataset] = []
        real = None
        if pairs:
            real = PairedDataset(
                pairs, patch_size=self.patch_size, augment=True, rotate90=self.rotate90, seed=self.seed
            )
            parts += [real] * self.pairs.repeat
        syn = self.synthesis
        if self.clean_images:
            residuals = self._rain_layers(real)
            parts.append(
                SyntheticRainDataset(
                    self.clean_images,
                    length=syn.length or syn.AUTO_LENGTH,
                    patch_size=self.patch_size,
                    rain_residuals=residuals,
                    residual_weights=self._layer_weights,
                    transplant_prob=syn.transplant_prob,
                    seed=self.seed,
                    rotate90=self.rotate90,
                    layer_augment=syn.layer_augment,
                    rain_free_prob=syn.rain_free_prob,
                    defer_procedural=syn.render_on_device,
                    streak_layers=self._streak_layers(),
                    streak_share=syn.layer_share,
                    beta=syn.composite_beta,
                    styles=syn.procedural_styles,
                )
            )
        elif syn.rain_free_prob > 0:
            log.warning(
                "synthesis.rain_free_prob has no effect: there are no synthetic samples (no clean photos)"
            )
        if not parts:
            raise DataError("no training samples: the training folders hold no pairs after exclusion")
        self.train_set = parts[0] if len(parts) == 1 else ConcatDataset(parts)
        if len(self.train_set) < self.batch_size:
            raise DataError(
                f"only {len(self.train_set)} training samples for batch_size {self.batch_size} (the last "
                "incomplete batch is dropped); lower batch_size, raise pairs.repeat or synthesis.length"
            )
        if self.val_pairs:
            self.val_set = PairedDataset(
                self.val_pairs, patch_size=None, augment=False, sets=[pair_set(p) for p in self.val_pairs]
            )
        elif self.clean_images and syn.val_length > 0:
            self.val_set = SyntheticRainDataset(
                self.clean_images,
                length=syn.val_length,
                patch_size=self.VAL_PATCH,
                transplant_prob=0.0,
                seed=self.seed + 1_000_003,
                fixed=True,
                beta=syn.composite_beta,  # the procedural rain training renders: its composite and styles
                styles=syn.procedural_styles,
            )

    @functools.cached_property
    def _test_signatures(self) -> np.ndarray:
        """Content signatures of the test split's clean images, read once for both content checks."""
        return _signatures([c for folder in self.pairs.test_folders() for _, c in find_pairs(folder)])

    def has_test_split(self) -> bool:
        """Whether there are test pairs to score (``root/test`` or ``pairs.test_dirs``)."""
        return bool(self.pairs.test_folders())

    def _setup_test(self) -> None:
        folders = self.pairs.test_folders()
        if not folders:
            raise DataError("no test data: set pairs.root (with ROOT/test/{rain,norain}/) or pairs.test_dirs")
        self.test_pairs = [p for folder in folders for p in find_pairs(folder)]
        check_pairs(self.test_pairs)
        self.test_set = PairedDataset(self.test_pairs, patch_size=None, augment=False)

    def setup(self, stage: str | None = None) -> None:
        """Find, check and split the pairs; build the datasets. Idempotent: repeated calls do nothing."""
        if stage in (None, "fit", "validate") and self.train_set is None:
            self._setup_fit()
        if stage in (None, "test") and self.test_set is None and (stage is not None or self.has_test_split()):
            self._setup_test()

    # -- on the device -------------------------------------------------------------------------------------

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Render the deferred procedural rain of a training batch where the batch is (``render_on_device``)."""
        render = batch.get("render") if isinstance(batch, dict) else None
        if render is None or not bool(render.any()):
            return batch
        if self._batch_rain is None:
            styles = tuple(RAIN_STYLES[name] for name in self.synthesis.procedural_styles)
            self._batch_rain = BatchRain(styles, beta=self.synthesis.composite_beta)
        rainy = self._batch_rain(batch["clean"][render])
        batch["rain"][render] = torch.round(rainy * 255) / 255  # 8 bits, as the workers' samples are
        return batch

    # -- loaders -------------------------------------------------------------------------------------------

    def _loader(self, dataset: Dataset, *, batch_size: int, train: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=train,
            drop_last=train,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            worker_init_fn=functools.partial(
                seed_worker, rank=self.trainer.global_rank if self.trainer else 0
            ),
        )

    def train_dataloader(self) -> DataLoader:
        if self.train_set is None:
            self.setup("fit")
        assert self.train_set is not None
        return self._loader(self.train_set, batch_size=self.batch_size, train=True)

    def val_dataloader(self) -> DataLoader | list:
        if self.train_set is None:
            self.setup("validate")
        if self.val_set is None:
            return []
        return self._loader(self.val_set, batch_size=1, train=False)

    def test_dataloader(self) -> DataLoader:
        if self.test_set is None:
            self.setup("test")
        assert self.test_set is not None
        return self._loader(self.test_set, batch_size=1, train=False)

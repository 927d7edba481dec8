"""Paired rain/clean data: finding and checking pairs, datasets with paired crops, synthetic rain, DataModule.

Layouts of a pair folder ``DIR`` (pairs are matched by name):

- ``DIR/rain/NAME`` + ``DIR/norain/NAME`` (also RCDNet's ``rain/norain-1.png`` + ``norain/norain-1.png``,
  PReNet's names in sub-folders, ``rain/rain-1.png`` + ``norain/norain-1.png``, and JORDER's original release,
  ``rain/X2/norain-1x2.png`` + ``norain/norain-1.png``);
- ``DIR/input/NAME`` + ``DIR/target/NAME`` (Rain13K / MPRNet);
- JORDER/PReNet flat: ``DIR/rain-001.png`` + ``DIR/norain-001.png``.

A pair's name is its file stem without a ``rain-``/``norain-`` prefix and without JORDER's ``x2`` suffix
(``norain-1.png`` -> ``1``, ``norain-1x2.png`` -> ``1``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import albumentations as A
import cv2
import lightning as L
import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from derain.io import IMAGE_SUFFIXES, ImageReadError, list_images, natural_key, pair_name, read_rgb, to_tensor
from derain.synth import LayerAugment, add_rain, builtin_clean_images, dihedral, transplant_layers

__all__ = [
    "DataError",
    "LAYOUTS",
    "pair_name",
    "find_pairs",
    "check_pairs",
    "find_overlap",
    "read_name_list",
    "list_images",
    "PairedDataset",
    "SyntheticRainDataset",
    "DerainDataModule",
]

log = logging.getLogger(__name__)

Pair = tuple[Path, Path]

LAYOUTS = (
    "DIR/rain/NAME + DIR/norain/NAME (also rain/rain-1.png + norain/norain-1.png, rain/X2/NAMEx2.png)",
    "DIR/input/NAME + DIR/target/NAME",
    "DIR/rain-NAME + DIR/norain-NAME (JORDER/PReNet flat)",
)
_SUBFOLDER_LAYOUTS = (("rain", "norain"), ("input", "target"))
_MAX_LISTED = 20


class DataError(ValueError):
    """Data on disk that does not fit: missing folders, unmatched files, unreadable images, size mismatches."""


def _expected_layouts() -> str:
    return "expected one of the layouts: " + "; ".join(LAYOUTS)


def _listing(items: Sequence[Any]) -> str:
    shown = "\n  ".join(str(x) for x in items[:_MAX_LISTED])
    more = f"\n  ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return f"\n  {shown}{more}"


def _canonical(name: str) -> str:
    """Name used to compare pair names from lists: no suffix, no prefix, lower case, no leading zeros."""
    name = pair_name(name.strip()).lower()
    return str(int(name)) if name.isdigit() else name


def _by_name(files: Iterable[Path], folder: Path) -> dict[str, Path]:
    named: dict[str, list[Path]] = {}
    for f in files:
        named.setdefault(pair_name(f), []).append(f)
    clashes = [f"{' and '.join(str(p) for p in ps)}" for ps in named.values() if len(ps) > 1]
    if clashes:
        raise DataError(f"several files in {folder} have the same pair name:{_listing(clashes)}")
    return {k: ps[0] for k, ps in named.items()}


def _match(rain: dict[str, Path], clean: dict[str, Path], folder: Path) -> list[Pair]:
    unmatched = [f"{rain[k]} (no clean partner)" for k in sorted(rain.keys() - clean.keys(), key=natural_key)]
    unmatched += [
        f"{clean[k]} (no rainy partner)" for k in sorted(clean.keys() - rain.keys(), key=natural_key)
    ]
    if unmatched:
        raise DataError(
            f"{len(unmatched)} unmatched file(s) in {folder}; every rainy image needs a clean image of the same "
            f"name:{_listing(unmatched)}"
        )
    return [(rain[k], clean[k]) for k in sorted(rain, key=natural_key)]


def find_pairs(folder: str | os.PathLike) -> list[Pair]:
    """Find the (rainy, clean) image pairs in a folder of one of the ``LAYOUTS``.

    Args:
        folder: the pair folder ``DIR``.

    Returns:
        (rainy path, clean path) tuples, naturally sorted by pair name.

    Raises:
        DataError: the folder is missing or holds no pairs (the message lists the expected layouts), or some
            images have no partner (all of them are named).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"pair folder {folder} does not exist; {_expected_layouts()}")
    for rain_dir, clean_dir in _SUBFOLDER_LAYOUTS:
        if (folder / rain_dir).is_dir() and (folder / clean_dir).is_dir():
            rain_folder = folder / rain_dir
            if (rain_folder / "X2").is_dir() and not list_images(rain_folder):
                rain_folder = rain_folder / "X2"  # JORDER's Rain100H/Rain100L release
            rain = _by_name(list_images(rain_folder), rain_folder)
            clean = _by_name(list_images(folder / clean_dir), folder / clean_dir)
            if not rain and not clean:
                raise DataError(
                    f"{rain_folder} and {folder / clean_dir} hold no images; {_expected_layouts()}"
                )
            return _match(rain, clean, folder)
    images = list_images(folder)
    if not images:
        hint = ""
        if (folder / "train").is_dir() or (folder / "test").is_dir():
            hint = (
                f" ({folder} has train/ or test/ sub-folders: pass {folder / 'train'} or {folder / 'test'})"
            )
        raise DataError(f"no image pairs in {folder}{hint}; {_expected_layouts()}")
    rain_files = [p for p in images if p.name.lower().startswith(("rain-", "rain_"))]
    clean_files = [p for p in images if p.name.lower().startswith(("norain-", "norain_"))]
    paired = {*rain_files, *clean_files}
    stray = [p for p in images if p not in paired]
    if stray:
        raise DataError(
            f"{folder} has images outside the flat rain-NAME/norain-NAME naming; {_expected_layouts()}. "
            f"Files that fit no pair:{_listing(stray)}"
        )
    return _match(_by_name(rain_files, folder), _by_name(clean_files, folder), folder)


def _image_size(path: Path) -> tuple[int, int]:
    """(H, W) from the file header, as ``read_rgb`` would decode it (EXIF rotations swap H and W)."""
    with Image.open(path) as im:
        w, h = im.size
        if im.format in {"JPEG", "TIFF", "WEBP", "PNG"} and im.getexif().get(0x0112, 1) in (5, 6, 7, 8):
            w, h = h, w
    return h, w


def check_pairs(pairs: Sequence[Pair]) -> list[tuple[int, int]]:
    """Check that every pair's two images are readable and of the same size (headers only: fast).

    Returns:
        (H, W) of each pair.

    Raises:
        DataError: naming every unreadable file and every pair whose sizes differ.
    """
    problems: list[str] = []
    sizes: list[tuple[int, int]] = []
    for rain, clean in pairs:
        got = []
        for path in (rain, clean):
            try:
                got.append(_image_size(path))
            except (OSError, UnidentifiedImageError, ValueError) as err:
                problems.append(f"{path}: unreadable image ({err.__class__.__name__}: {err})")
        if len(got) == 2:
            if got[0] != got[1]:
                problems.append(
                    f"{rain} is {got[0][1]}x{got[0][0]} but its clean partner {clean} is {got[1][1]}x{got[1][0]}"
                    " (W x H); a pair must have one size"
                )
            sizes.append(got[0])
    if problems:
        raise DataError(f"{len(problems)} problem(s) in {len(pairs)} image pairs:{_listing(problems)}")
    return sizes


def _pixel_hash(path: Path) -> str:
    image = read_rgb(path)
    return hashlib.sha1(np.ascontiguousarray(image).tobytes() + str(image.shape).encode()).hexdigest()


def find_overlap(train_dir: str | os.PathLike, test_dir: str | os.PathLike) -> list[str]:
    """Names of training pairs whose clean image is pixel-identical to a test pair's clean image.

    This is how a Rain100H exclusion list is made: 546 RainTrainH pairs share a background with the
    Rain100H test set. Write the result, one name a line, to a file for ``DerainDataModule(exclude_list=...)``.

    Args:
        train_dir: training pair folder.
        test_dir: test pair folder.

    Returns:
        training pair names, naturally sorted.
    """
    test_hashes = {_pixel_hash(clean) for _, clean in find_pairs(test_dir)}
    hits = [pair_name(clean) for _, clean in find_pairs(train_dir) if _pixel_hash(clean) in test_hashes]
    return sorted(hits, key=natural_key)


def read_name_list(path: str | os.PathLike) -> set[str]:
    """Pair names from a text file: one a line, ``#`` starts a comment; compared without prefix/zeros.

    ``norain-7.png``, ``rain-007``, ``0007.png`` and ``7`` all name pair 7.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"name list {path} does not exist; expected a text file with one pair name a line")
    names = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {_canonical(n) for n in names if n}


def _indices_from(pairs: Sequence[Pair], folders: Sequence[str], option: str) -> list[int]:
    """Indices of the ``pairs`` that ``find_pairs`` finds in ``folders``; a ``DataError`` if none are."""
    wanted = {rain.resolve() for folder in folders for rain, _ in find_pairs(folder)}
    found = [i for i, (rain, _) in enumerate(pairs) if rain.resolve() in wanted]
    if not found:
        raise DataError(
            f"{option} {list(folders)}: none of these folders' pairs are among the training pairs; list "
            "folders that are also in root/train or train_dirs"
        )
    return found


def _worker_seed(seed: int) -> list[int]:
    """Seed material for this process: ``seed`` plus torch's per-process seed (distinct in every worker)."""
    return [int(seed), torch.initial_seed() % 2**63]


class _ProcessRng:
    """A numpy Generator that is re-created in each DataLoader worker (and each epoch's fresh workers)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._key: int | None = None
        self._rng: np.random.Generator | None = None

    def get(self) -> tuple[np.random.Generator, bool]:
        """The generator, and whether it was just (re)created for this process."""
        key = torch.initial_seed()
        fresh = self._rng is None or key != self._key
        if fresh:
            self._key, self._rng = key, np.random.default_rng(_worker_seed(self.seed))
        assert self._rng is not None
        return self._rng, fresh

    def __getstate__(self) -> dict[str, Any]:  # a spawned worker starts a fresh stream
        return {"seed": self.seed, "_key": None, "_rng": None}


class PairedDataset(Dataset):
    """Rainy/clean image pairs as tensors, optionally cropped and augmented identically.

    Items are ``{"rain": float32 (3, h, w), "clean": float32 (3, h, w), "name": str}`` in [0, 1]. With
    ``patch_size`` each item is a ``patch_size``² crop (images smaller than that are reflect-padded);
    without it, the full image.

    Args:
        pairs: (rainy path, clean path) tuples, e.g. from ``find_pairs``.
        patch_size: crop size, or None for full images.
        augment: random crops and flips (horizontal, vertical); otherwise a centre crop (if ``patch_size``).
        rotate90: with ``augment``, also random 90° rotations (they turn rain streaks horizontal; off by
            default).
        seed: seed of the augmentation stream (combined with each worker's torch seed).
        cache: keep decoded images in memory (worth it for small data sets).
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
    ) -> None:
        if patch_size is not None and patch_size < 1:
            raise ValueError(f"patch_size must be a positive int or None, got {patch_size}")
        self.pairs = [(Path(r), Path(c)) for r, c in pairs]
        self.patch_size = patch_size
        self.augment = augment
        self.cache = cache
        self._images: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._rng = _ProcessRng(seed)
        steps: list[A.BasicTransform] = []
        if patch_size is not None:
            pad = A.PadIfNeeded(patch_size, patch_size, border_mode=cv2.BORDER_REFLECT_101)
            crop = A.RandomCrop(patch_size, patch_size) if augment else A.CenterCrop(patch_size, patch_size)
            steps += [pad, crop]
        if augment:
            steps += [A.HorizontalFlip(p=0.5)]
            steps += [A.RandomRotate90(p=1.0)] if rotate90 else [A.VerticalFlip(p=0.5)]
        self.transform = A.Compose(steps, additional_targets={"clean": "image"}, seed=seed) if steps else None

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
            rng, fresh = self._rng.get()
            if fresh:
                self.transform.set_random_seed(int(rng.integers(2**31)))
            out = self.transform(image=rain, clean=clean)
            rain, clean = out["image"], out["clean"]
        return {"rain": to_tensor(rain), "clean": to_tensor(clean), "name": pair_name(self.pairs[index][1])}


def _random_patch(image: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random ``size``² crop with a random flip/rotation; smaller images are reflect-padded first."""
    h, w = image.shape[:2]
    if h < size or w < size:
        ph, pw = max(size - h, 0), max(size - w, 0)
        image = cv2.copyMakeBorder(
            image, ph // 2, ph - ph // 2, pw // 2, pw - pw // 2, cv2.BORDER_REFLECT_101
        )
        h, w = image.shape[:2]
    y, x = int(rng.integers(h - size + 1)), int(rng.integers(w - size + 1))
    return np.ascontiguousarray(dihedral(image[y : y + size, x : x + size], int(rng.integers(8))))


class SyntheticRainDataset(Dataset):
    """Rain rendered on the fly onto random crops of clean photos: procedural streaks or transplanted layers.

    Each item takes a random clean image, a random ``patch_size``² crop with a random flip/rotation, then
    either adds a real rain layer (a residual ``clip(rainy − clean)`` from ``rain_residuals``, with probability
    ``transplant_prob``) or procedural streaks (``derain.synth.add_rain``, light to heavy); or, with probability
    ``rain_free_prob``, no rain at all.

    Args:
        clean_images: uint8 (H, W, 3) RGB photos.
        length: items per epoch.
        patch_size: crop size.
        rain_residuals: real rain layers, uint8 or float (H, W, 3); may be empty.
        transplant_prob: share of items using a real rain layer (when ``rain_residuals`` is not empty).
        seed: seed of the random stream.
        fixed: item ``i`` is always the same (seeded by ``seed`` and ``i``), for validation sets; otherwise
            each DataLoader worker draws its own stream (seeded by its torch seed), new every epoch.
        rotate90: let transplanted rain layers turn by 90° (see ``derain.synth.transplant``).
        layer_augment: random gain, resizing, small turns of the transplanted layers, and the chance of a
            second layer on top (``derain.synth.LayerAugment``); None: layers as they are.
        rain_free_prob: share of items left without rain (input = target), drawn before the rain type, so
            the network learns to leave rain-free content (its brightness included) as it is.
    """

    def __init__(
        self,
        clean_images: Sequence[np.ndarray],
        *,
        length: int,
        patch_size: int,
        rain_residuals: Sequence[np.ndarray] = (),
        transplant_prob: float = 0.5,
        seed: int = 0,
        fixed: bool = False,
        rotate90: bool = False,
        layer_augment: LayerAugment | None = None,
        rain_free_prob: float = 0.0,
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
        if not 0.0 <= transplant_prob <= 1.0:
            raise ValueError(f"transplant_prob must be in [0, 1], got {transplant_prob}")
        if not 0.0 <= rain_free_prob <= 1.0:
            raise ValueError(f"rain_free_prob must be in [0, 1], got {rain_free_prob}")
        self.clean_images = list(clean_images)
        self.rain_residuals = list(rain_residuals)
        self.length = length
        self.patch_size = patch_size
        self.transplant_prob = transplant_prob if self.rain_residuals else 0.0
        self.seed = seed
        self.fixed = fixed
        self.rotate90 = rotate90
        self.layer_augment = layer_augment
        self.rain_free_prob = rain_free_prob
        self._rng = _ProcessRng(seed)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for a synthetic set of {self.length}")
        rng = np.random.default_rng([self.seed, index]) if self.fixed else self._rng.get()[0]
        image = self.clean_images[int(rng.integers(len(self.clean_images)))]
        clean = _random_patch(image, self.patch_size, rng).astype(np.float32) / 255.0
        # Drawn only when used, so that without rain-free items the random stream is the same as before.
        if self.rain_free_prob > 0 and rng.random() < self.rain_free_prob:
            rainy = clean
        elif rng.random() < self.transplant_prob:
            rainy = transplant_layers(
                clean, self.rain_residuals, rng, rotate90=self.rotate90, augment=self.layer_augment
            )
        else:
            rainy = add_rain(clean, rng)
        # Quantise to 8 bits, like a stored pair: the network never sees rain finer than a PNG holds.
        rain_t, clean_t = (to_tensor(np.round(im * 255.0).astype(np.uint8)) for im in (rainy, clean))
        return {"rain": rain_t, "clean": clean_t, "name": f"synthetic-{index:05d}"}


class DerainDataModule(L.LightningDataModule):
    """Training, validation and test data for deraining: real pairs, synthetic rain, or both.

    Sources of training pairs: ``root/train`` and ``train_dirs`` (minus ``exclude_list``), plus
    ``synthetic_length`` synthetic pairs per epoch rendered on clean photos from ``clean_dirs`` (or, with
    ``synthetic``, on photos that ship with scikit-image/gradio: no data on disk). Synthetic samples use the
    real training pairs' rain layers (transplant) with probability ``transplant_prob``, procedural streaks
    otherwise; a share ``rain_free_prob`` of them carries no rain.

    Validation: ``val_dirs`` (full images); else a seeded ``val_fraction`` of the real training pairs (full
    images); else, with only synthetic data, ``val_synthetic`` fixed synthetic 256×256 crops. Test: ``root/test``
    and ``test_dirs`` (full images). Validation and test loaders use batch size 1: image sizes differ.

    Batches are dicts: ``{"rain": (B, 3, H, W), "clean": (B, 3, H, W), "name": list[str]}``.

    Args:
        root: a folder with ``train/`` and ``test/`` pair folders, e.g. ``datasets/Rain100H``.
        train_dirs: extra paired folders added to training.
        val_dirs: explicit validation pair folders.
        test_dirs: extra test pair folders.
        val_fraction: without ``val_dirs``: share of real training pairs held out for validation (at least 1).
        val_from: folders (among the training folders) the ``val_fraction`` hold-out draws from; default all.
            E.g. train on several sets but validate on held-out Rain100H pairs only.
        exclude_list: text file of pair names (one a line, ``#`` comments) dropped from training.
        synthetic: train on synthetic rain over built-in photos (no data on disk needed).
        clean_dirs: folders of clean photos (searched recursively) for synthetic rain and transplant.
        synthetic_length: synthetic pairs per epoch; 0 means 1000 when clean photos are used.
        transplant_prob: share of synthetic samples that use real rain layers from the training pairs.
        transplant_from: folders (among the training folders) whose training pairs give their rain layers to
            transplant; default all training pairs. E.g. only the Rain100H pairs, to train for Rain100H rain.
            Held-out validation pairs never give theirs.
        transplant_gain: transplanted layers are multiplied by a factor drawn from this range (low, high).
        transplant_scale: transplanted layers are resized by a factor drawn (log-uniformly) from this range.
        transplant_angle: transplanted layers are turned by at most this many degrees either way.
        transplant_mix: probability of adding a second transplanted layer on top (denser rain). The four
            ``transplant_*`` augmentations default to none (``derain.synth.LayerAugment``).
        rain_free_prob: share of synthetic samples left without rain (input = target): teaches the network to
            leave rain-free content as it is (e.g. not to darken an overcast scene). Default 0.
        rotate90: augment with 90° rotations too (they turn rain streaks horizontal, which photographed rain
            is not; off by default: flips and 180° turns only).
        val_synthetic: size of the fixed synthetic validation set (synthetic-only training).
        real_repeat: how many times the real training pairs are repeated per epoch (so that many synthetic
            samples do not drown them).
        patch_size: training crop size.
        batch_size: training batch size.
        num_workers: DataLoader worker processes.
        seed: seed of hold-out splits, augmentation and synthetic rain.
    """

    VAL_PATCH = 256
    AUTO_SYNTHETIC_LENGTH = 1000

    def __init__(
        self,
        *,
        root: str | None = None,
        train_dirs: tuple[str, ...] = (),
        val_dirs: tuple[str, ...] = (),
        test_dirs: tuple[str, ...] = (),
        val_fraction: float = 0.1,
        val_from: tuple[str, ...] = (),
        exclude_list: str | None = None,
        synthetic: bool = False,
        clean_dirs: tuple[str, ...] = (),
        synthetic_length: int = 0,
        transplant_prob: float = 0.5,
        transplant_from: tuple[str, ...] = (),
        transplant_gain: tuple[float, float] = (1.0, 1.0),
        transplant_scale: tuple[float, float] = (1.0, 1.0),
        transplant_angle: float = 0.0,
        transplant_mix: float = 0.0,
        rain_free_prob: float = 0.0,
        rotate90: bool = False,
        val_synthetic: int = 8,
        real_repeat: int = 1,
        patch_size: int = 128,
        batch_size: int = 8,
        num_workers: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if root is not None:
            r = Path(root)
            if not (r / "train").is_dir():
                what = "does not exist" if not r.exists() else "has no train/ folder"
                raise DataError(
                    f"data root {r} {what}; expected ROOT/train/{{rain,norain}}/ and ROOT/test/{{rain,norain}}/ "
                    "(see datasets/README.md for Rain100H), or train with no data on disk: "
                    "python -m derain.fit --config configs/synthetic.yaml"
                )
        if root is None and not train_dirs and not clean_dirs and not synthetic:
            raise DataError(
                "no training data: set root (ROOT/train/{rain,norain}/), train_dirs, clean_dirs or synthetic=true "
                "(configs/synthetic.yaml trains with no data on disk)"
            )
        for name, folders in (
            ("train_dirs", train_dirs),
            ("val_dirs", val_dirs),
            ("test_dirs", test_dirs),
            ("val_from", val_from),
            ("transplant_from", transplant_from),
        ):
            if isinstance(folders, str):
                raise DataError(f"{name} must be a list of folders, got the string {folders!r}")
        for folder in clean_dirs:
            if not Path(folder).is_dir():
                raise DataError(f"clean photo folder {folder} (clean_dirs) does not exist")
        if exclude_list is not None and not Path(exclude_list).is_file():
            raise DataError(f"exclude_list {exclude_list} does not exist; expected a text file of pair names")
        if not 0.0 <= val_fraction < 1.0:
            raise DataError(f"val_fraction must be in [0, 1), got {val_fraction}")
        for name, value in (("transplant_prob", transplant_prob), ("rain_free_prob", rain_free_prob)):
            if not 0.0 <= value <= 1.0:
                raise DataError(f"{name} must be in [0, 1], got {value}")
        try:
            layer_augment = LayerAugment(
                gain=transplant_gain, scale=transplant_scale, angle=transplant_angle, mix=transplant_mix
            )
        except ValueError as err:
            raise DataError(f"transplant_{err}") from None
        for name, value in (
            ("patch_size", patch_size),
            ("batch_size", batch_size),
            ("real_repeat", real_repeat),
        ):
            if value < 1:
                raise DataError(f"{name} must be at least 1, got {value}")
        if synthetic_length < 0 or val_synthetic < 0 or num_workers < 0:
            raise DataError(
                f"synthetic_length, val_synthetic and num_workers must be >= 0, got "
                f"{synthetic_length}, {val_synthetic} and {num_workers}"
            )
        self.root = Path(root) if root is not None else None
        self.train_dirs = tuple(train_dirs)
        self.val_dirs = tuple(val_dirs)
        self.test_dirs = tuple(test_dirs)
        self.val_fraction = val_fraction
        self.val_from = tuple(val_from)
        self.exclude_list = exclude_list
        self.synthetic = synthetic
        self.clean_dirs = tuple(clean_dirs)
        self.synthetic_length = synthetic_length
        self.transplant_prob = transplant_prob
        self.transplant_from = tuple(transplant_from)
        self.layer_augment = layer_augment
        self.rain_free_prob = rain_free_prob
        self.rotate90 = rotate90
        self.val_synthetic = val_synthetic
        self.real_repeat = real_repeat
        self.patch_size = patch_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

        self.train_pairs: list[Pair] = []
        self.val_pairs: list[Pair] = []
        self.test_pairs: list[Pair] = []
        self.excluded_pairs: list[Pair] = []
        self.clean_images: list[np.ndarray] = []
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    # -- discovery -----------------------------------------------------------------------------------------

    def _pairs(self, folders: Iterable[str | Path]) -> list[Pair]:
        pairs = [p for folder in folders for p in find_pairs(folder)]
        check_pairs(pairs)
        return pairs

    def _load_clean_images(self) -> list[np.ndarray]:
        images: list[np.ndarray] = []
        for folder in self.clean_dirs:
            files = list_images(folder, recursive=True)
            if not files:
                raise DataError(
                    f"clean photo folder {folder} (clean_dirs) holds no images ({IMAGE_SUFFIXES})"
                )
            for path in files:
                try:
                    images.append(read_rgb(path))
                except ImageReadError as err:
                    raise DataError(str(err)) from None
        if self.synthetic:
            images += builtin_clean_images()
        return images

    def _setup_fit(self) -> None:
        train_folders: list[str | Path] = [self.root / "train"] if self.root is not None else []
        pairs = self._pairs([*train_folders, *self.train_dirs])
        if self.exclude_list is not None:
            names = read_name_list(self.exclude_list)
            self.excluded_pairs = [p for p in pairs if _canonical(pair_name(p[1])) in names]
            pairs = [p for p in pairs if _canonical(pair_name(p[1])) not in names]
            log.info("excluded %d training pairs listed in %s", len(self.excluded_pairs), self.exclude_list)
        self.clean_images = self._load_clean_images()
        use_synthetic = bool(self.clean_images)

        if self.val_dirs:
            self.val_pairs = self._pairs(self.val_dirs)
        elif pairs and self.val_fraction > 0:
            candidates = list(range(len(pairs)))
            if self.val_from:
                candidates = _indices_from(pairs, self.val_from, "val_from")
            n_val = max(1, round(self.val_fraction * len(candidates)))
            if n_val >= len(pairs) and not use_synthetic:
                raise DataError(
                    f"only {len(pairs)} training pair(s): holding out {n_val} for validation leaves none to "
                    "train on; add pairs, set val_dirs, or val_fraction: 0"
                )
            order = np.random.default_rng(self.seed).permutation(len(candidates))
            held = {candidates[j] for j in order[:n_val].tolist()}
            self.val_pairs = [p for i, p in enumerate(pairs) if i in held]
            pairs = [p for i, p in enumerate(pairs) if i not in held]
        self.train_pairs = pairs

        parts: list[Dataset] = []
        real = (
            PairedDataset(
                pairs, patch_size=self.patch_size, augment=True, rotate90=self.rotate90, seed=self.seed
            )
            if pairs
            else None
        )
        if real is not None:
            parts += [real] * self.real_repeat
        if use_synthetic:
            residuals: list[np.ndarray] = []
            if real is not None and self.transplant_prob > 0:
                # Decoding every pair here also fills the cache before workers fork.
                decoded = [real.load(i) for i in range(len(real))]
                donors = range(len(real))
                if self.transplant_from:
                    donors = _indices_from(pairs, self.transplant_from, "transplant_from")
                residuals = [cv2.subtract(*decoded[i]) for i in donors]
            if not residuals and self.layer_augment != LayerAugment():
                log.warning("transplant_gain/scale/angle/mix have no effect: no rain layers are transplanted")
            length = self.synthetic_length or self.AUTO_SYNTHETIC_LENGTH
            parts.append(
                SyntheticRainDataset(
                    self.clean_images,
                    length=length,
                    patch_size=self.patch_size,
                    rain_residuals=residuals,
                    transplant_prob=self.transplant_prob,
                    seed=self.seed,
                    rotate90=self.rotate90,
                    layer_augment=self.layer_augment,
                    rain_free_prob=self.rain_free_prob,
                )
            )
        elif self.rain_free_prob > 0:
            log.warning("rain_free_prob has no effect: there are no synthetic samples (no clean photos)")
        if not parts:
            raise DataError("no training samples: the training folders hold no pairs after exclusion")
        self.train_set = parts[0] if len(parts) == 1 else ConcatDataset(parts)
        if len(self.train_set) < self.batch_size:
            raise DataError(
                f"only {len(self.train_set)} training samples for batch_size {self.batch_size} (the last "
                "incomplete batch is dropped); lower batch_size, raise real_repeat or add synthetic_length"
            )

        if self.val_pairs:
            self.val_set = PairedDataset(self.val_pairs, patch_size=None, augment=False)
        elif use_synthetic and self.val_synthetic > 0:
            self.val_set = SyntheticRainDataset(
                self.clean_images,
                length=self.val_synthetic,
                patch_size=self.VAL_PATCH,
                transplant_prob=0.0,
                seed=self.seed + 1_000_003,
                fixed=True,
            )

    def _setup_test(self) -> None:
        folders: list[str | Path] = [self.root / "test"] if self.root is not None else []
        folders += list(self.test_dirs)
        if not folders:
            raise DataError("no test data: set root (with ROOT/test/{rain,norain}/) or test_dirs")
        self.test_pairs = self._pairs(folders)
        self.test_set = PairedDataset(self.test_pairs, patch_size=None, augment=False)

    def setup(self, stage: str | None = None) -> None:
        """Find, check and split the pairs; build the datasets. Idempotent: repeated calls do nothing."""
        if stage in (None, "fit", "validate") and self.train_set is None:
            self._setup_fit()
        if stage in (None, "test") and self.test_set is None:
            if stage is not None or self.root is not None or self.test_dirs:
                self._setup_test()

    # -- loaders -------------------------------------------------------------------------------------------

    def _loader(self, dataset: Dataset, *, batch_size: int, train: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=train,
            drop_last=train,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
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

"""Pair folders, photos and data-module options written on the fly for the data tests (importable: pytest puts
tests/ on sys.path)."""

from __future__ import annotations

import zlib
from pathlib import Path

import cv2
import numpy as np

from derain.data import PairSources, Synthesis


def write(path: Path, image: np.ndarray) -> Path:
    """Write ``image`` (BGR or grey uint8) to ``path``, making its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), image)
    return path


def noise(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    """A uint8 (h, w, 3) image of uniform noise."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def photo(seed: int, h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth random picture (photo-like: content at coarse scales, unlike white noise)."""
    small = np.random.default_rng(seed).integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def make_pairs(
    folder: Path,
    rain_names: list[str],
    clean_names: list[str],
    *,
    sub=("rain", "norain"),
    seed: int | None = None,
) -> Path:
    """Pairs of noise images, rainy = clean + 40; each folder's backgrounds differ from another's (seeded by its
    name) unless ``seed`` is given."""
    first = zlib.crc32(folder.name.encode()) % 10_000 * 100 if seed is None else seed
    for i, (r, c) in enumerate(zip(rain_names, clean_names, strict=True)):
        clean = noise(seed=first + i)
        write(folder / sub[1] / c if sub else folder / c, clean)
        write(folder / sub[0] / r if sub else folder / r, cv2.add(clean, 40))
    return folder


def numbered(n: int, start: int = 0) -> list[str]:
    """``n`` file names ``{start}.png``, ``{start + 1}.png``, ..."""
    return [f"{i}.png" for i in range(start, start + n)]


def small_synthetic_data(tmp_path: Path, *train_dirs: Path, synthesis: dict | None = None, **pairs) -> dict:
    """DerainDataModule options: pairs from ``train_dirs`` plus 4 synthetic 16² samples per epoch on one clean
    photo (written under ``tmp_path/clean``), batch 2, no worker processes; more ``PairSources``/``Synthesis``
    options in ``pairs``/``synthesis``."""
    write(tmp_path / "clean" / "photo.png", noise(48, 48, seed=9))
    return dict(
        pairs=PairSources(train_dirs=tuple(str(d) for d in train_dirs), **pairs),
        synthesis=Synthesis(clean_dirs=(str(tmp_path / "clean"),), length=4, **(synthesis or {})),
        patch_size=16,
        batch_size=2,
        num_workers=0,
    )

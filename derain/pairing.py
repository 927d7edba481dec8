"""Which rainy image goes with which clean image: the one pairing rule, for training folders, name lists and the
evaluator.

A pair's name is its file stem without a ``rain-``/``norain-`` prefix and without JORDER's ``x2`` suffix
(``norain-1.png`` -> ``1``, ``norain-1x2.png`` -> ``1``, ``photo.jpg`` -> ``photo``); a rainy and a clean file pair
when their names are equal. Layouts of a pair folder ``DIR``:

- ``DIR/rain/NAME`` + ``DIR/norain/NAME`` (also RCDNet's ``rain/norain-1.png`` + ``norain/norain-1.png``,
  PReNet's names in sub-folders, ``rain/rain-1.png`` + ``norain/norain-1.png``, and JORDER's original release,
  ``rain/X2/norain-1x2.png`` + ``norain/norain-1.png``);
- ``DIR/input/NAME`` + ``DIR/target/NAME`` (Rain13K / MPRNet);
- JORDER/PReNet flat: ``DIR/rain-001.png`` + ``DIR/norain-001.png``.

Name lists (``exclude_list``: ``FOLDER/NAME`` a line) compare names in :func:`canonical_name` form, so
``norain-7.png``, ``rain-007``, ``0007.png`` and ``7`` all name pair 7.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derain.io import ImageReadError, image_size, list_images, natural_key

__all__ = [
    "DataError",
    "LAYOUTS",
    "Matching",
    "Pair",
    "canonical_name",
    "check_pairs",
    "find_pairs",
    "match_by_name",
    "pair_name",
    "pair_set",
    "read_name_list",
]

Pair = tuple[Path, Path]
"""(rainy image, clean image)."""

LAYOUTS = (
    "DIR/rain/NAME + DIR/norain/NAME (also rain/rain-1.png + norain/norain-1.png, rain/X2/NAMEx2.png)",
    "DIR/input/NAME + DIR/target/NAME",
    "DIR/rain-NAME + DIR/norain-NAME (JORDER/PReNet flat)",
)
_SUBFOLDER_LAYOUTS = (("rain", "norain"), ("input", "target"))
_MAX_LISTED = 20
_PREFIX = re.compile(r"^(no)?rain(y)?[-_]", re.IGNORECASE)
_JORDER_SUFFIX = re.compile(r"(?<=\d)x2$", re.IGNORECASE)  # rain/X2/norain-12x2.png pairs with norain-12.png


class DataError(ValueError):
    """Data on disk that does not fit: missing folders, unmatched files, unreadable images, size mismatches."""


def pair_name(path: str | os.PathLike) -> str:
    """The name that pairs a file with its partner: the stem without ``rain-``/``rainy-``/``norain-`` and
    JORDER's ``x2``."""
    return _JORDER_SUFFIX.sub("", _PREFIX.sub("", Path(path).stem))


def canonical_name(name: str) -> str:
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
            entries.append((tuple(p for p in folder.split("/") if p), canonical_name(name)))
    return entries


def expected_layouts() -> str:
    return "expected one of the layouts: " + "; ".join(LAYOUTS)


def listing(items: Sequence[Any]) -> str:
    """Items one per line (the first 20, then a count), for error messages."""
    shown = "\n  ".join(str(x) for x in items[:_MAX_LISTED])
    more = f"\n  ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return f"\n  {shown}{more}"


@dataclass
class Matching:
    """Pairs matched by name, and the files left without a partner on either side."""

    pairs: list[Pair]
    rain_only: list[Path]
    clean_only: list[Path]


def _by_name(files: Iterable[Path]) -> dict[str, Path]:
    named: dict[str, list[Path]] = {}
    for f in files:
        named.setdefault(pair_name(f), []).append(f)
    clashes = [" and ".join(str(p) for p in ps) for ps in named.values() if len(ps) > 1]
    if clashes:
        raise DataError(f"several files have the same pair name:{listing(clashes)}")
    return {k: ps[0] for k, ps in named.items()}


def match_by_name(rain_files: Iterable[Path], clean_files: Iterable[Path]) -> Matching:
    """Pair rainy and clean files whose pair names are equal (see the module docstring).

    Raises:
        DataError: two files on one side have the same pair name (both are named).
    """
    rain, clean = _by_name(rain_files), _by_name(clean_files)
    return Matching(
        pairs=[(rain[k], clean[k]) for k in sorted(rain.keys() & clean.keys(), key=natural_key)],
        rain_only=[rain[k] for k in sorted(rain.keys() - clean.keys(), key=natural_key)],
        clean_only=[clean[k] for k in sorted(clean.keys() - rain.keys(), key=natural_key)],
    )


def _match_all(rain: list[Path], clean: list[Path], folder: Path) -> list[Pair]:
    try:
        matching = match_by_name(rain, clean)
    except DataError as err:
        raise DataError(f"{folder}: {err}") from None
    unmatched = [f"{p} (no clean partner)" for p in matching.rain_only]
    unmatched += [f"{p} (no rainy partner)" for p in matching.clean_only]
    if unmatched:
        raise DataError(
            f"{len(unmatched)} unmatched file(s) in {folder}; every rainy image needs a clean image of the same "
            f"name:{listing(unmatched)}"
        )
    return matching.pairs


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
        raise DataError(f"pair folder {folder} does not exist; {expected_layouts()}")
    for rain_dir, clean_dir in _SUBFOLDER_LAYOUTS:
        if (folder / rain_dir).is_dir() and (folder / clean_dir).is_dir():
            rain_folder = folder / rain_dir
            if (rain_folder / "X2").is_dir() and not list_images(rain_folder):
                rain_folder = rain_folder / "X2"  # JORDER's Rain100H/Rain100L release
            rain, clean = list_images(rain_folder), list_images(folder / clean_dir)
            if not rain and not clean:
                raise DataError(
                    f"{rain_folder} and {folder / clean_dir} hold no images; {expected_layouts()}"
                )
            return _match_all(rain, clean, folder)
    images = list_images(folder)
    if not images:
        hint = ""
        if (folder / "train").is_dir() or (folder / "test").is_dir():
            hint = (
                f" ({folder} has train/ or test/ sub-folders: pass {folder / 'train'} or {folder / 'test'})"
            )
        raise DataError(f"no image pairs in {folder}{hint}; {expected_layouts()}")
    rain_files = [p for p in images if p.name.lower().startswith(("rain-", "rain_"))]
    clean_files = [p for p in images if p.name.lower().startswith(("norain-", "norain_"))]
    paired = {*rain_files, *clean_files}
    stray = [p for p in images if p not in paired]
    if stray:
        raise DataError(
            f"{folder} has images outside the flat rain-NAME/norain-NAME naming; {expected_layouts()}. "
            f"Files that fit no pair:{listing(stray)}"
        )
    return _match_all(rain_files, clean_files, folder)


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
                got.append(image_size(path))
            except ImageReadError as err:
                problems.append(str(err))
        if len(got) == 2:
            if got[0] != got[1]:
                problems.append(
                    f"{rain} is {got[0][1]}x{got[0][0]} but its clean partner {clean} is {got[1][1]}x{got[1][0]}"
                    " (W x H); a pair must have one size"
                )
            sizes.append(got[0])
    if problems:
        raise DataError(f"{len(problems)} problem(s) in {len(pairs)} image pairs:{listing(problems)}")
    return sizes


def pair_set(pair: Pair) -> str:
    """The data set a pair belongs to, as validation names it: the folder above ``rain/``/``norain/`` (or the
    pair's own folder for flat layouts), e.g. ``rain100h-train-mini``."""
    rain = Path(pair[0])
    for folder in rain.parents:
        if folder.name.lower() in {rainy for rainy, _ in _SUBFOLDER_LAYOUTS}:
            return folder.parent.name
    return rain.parent.name

"""Pairs from a teacher on real rain: a seeded half of ``real-rainy/``'s photos and what stage 9 makes of them.

    DERAIN_DATA=../shared/data python tools/teacher_pairs.py runs/teacher-real        # under a minute on 2 cores
    DERAIN_DATA=../shared/data python tools/teacher_pairs.py runs/teacher-layers --layers

Real rainy photos have no clean image; derain-small (stage 9) removes most of their rain, long bright heavy
streaks included, where the derain-base legs trained on synthetic pairs leave them (docs/history.md, "derain-base,
leg 6"). This writes a pair folder that distils that skill: the rainy photo, and as its target the teacher's output
where it takes something away, ``min(rainy, teacher)`` per pixel and channel (rain only adds light, so a teacher
that brightens a pixel is not removing rain there, and the target keeps the photo). Each photo is cut into
``--tile``² tiles covering it (the last ones shifted back to its edge, as ``restore`` tiles), so a photo weighs in
training by its area and crops stay inside the teacher's view.

Only a seeded half of each source's photos (the name before the first ``-``: ``sirr_real147``, ``moss_real48``, …;
a source of one photo gives none) becomes pairs; ``manifest.csv`` names each tile's photo and ``held-out.txt`` the
photos left out, on which ``tools/real_rain.py`` readings stay clean of the distillation (its ``--held-out``).
The folder is a pair folder (``rain/``, ``norain/``), for ``pairs.train_dirs``, built beside ``OUT`` and renamed
when whole (an ``OUT`` that exists is refused: old tiles would train on photos a new split holds out); an unreadable
photo is named and skipped; the same arguments give the same files.

``--layers`` writes the rain the teacher takes away instead of pairs: ``layers/NAME.png``, ``rainy − target`` per
tile (uint8, zero where the teacher adds nothing), for ``synthesis.layer_dirs``. Transplanted on the clean photos,
real streaks are learnt on backgrounds that change every sample, not on the 61 photos' own (whose pairs leg 7
matched and did not generalise from; docs/history.md, "derain-base, leg 8").
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from research import add_data_argument, load_weights

from derain.data.split import seeded_share
from derain.inference import restore
from derain.inference.image import tile_starts
from derain.io import ImageReadError, list_images, read_rgb, write_image_atomic

REAL = "real-rainy/rain"


def source_of(name: str) -> str:
    """The source a ``real-rainy`` photo comes from: its name before the first ``-``."""
    return name.split("-", 1)[0]


def split_photos(files: list[Path], fraction: float, seed: int) -> tuple[list[Path], list[Path]]:
    """(distilled, held out): a seeded ``fraction`` of each source's photos, rounded down, and the rest.

    Example:
        >>> a, b = split_photos([Path(f"s-{i}.png") for i in range(4)] + [Path("t-0.png")], 0.5, 0)
        >>> len(a), len(b), Path("t-0.png") in b
        (2, 3, True)
    """
    by_source: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        by_source[source_of(f.name)].append(f)
    taken: set[Path] = set()
    for group in by_source.values():
        count = int(fraction * len(group))
        if count:
            taken.update(group[i] for i in seeded_share(len(group), count / len(group), seed))
    return [f for f in files if f in taken], [f for f in files if f not in taken]


def teacher_target(rainy: np.ndarray, derained: np.ndarray) -> np.ndarray:
    """The teacher's output where it darkens the photo, the photo where it brightens it (uint8, per channel)."""
    return np.minimum(rainy, derained)


def tiles(height: int, width: int, tile: int) -> list[tuple[int, int, int, int]]:
    """(top, left, tile height, tile width) of tiles covering the image, at most ``tile`` a side, overlap 0+."""
    th, tw = min(tile, height), min(tile, width)
    return [(y, x, th, tw) for y in tile_starts(height, tile, 0) for x in tile_starts(width, tile, 0)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write (rain/, norain/, manifest.csv, held-out.txt)")
    add_data_argument(parser)
    parser.add_argument(
        "--teacher", default="derain-small", help="weights of the teacher (default derain-small)"
    )
    parser.add_argument("--fraction", type=float, default=0.5, help="share of each source distilled")
    parser.add_argument("--tile", type=int, default=512, help="tile side in pixels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--layers", action="store_true", help="write the rain layers the teacher removes (layers/), not pairs"
    )
    args = parser.parse_args(argv)
    if not 0 < args.fraction < 1:
        parser.error(f"--fraction must be between 0 and 1, got {args.fraction}")
    if args.tile < 64:
        parser.error(f"--tile must be at least 64, got {args.tile}")
    folder = args.data / REAL
    files = list_images(folder, recursive=True) if folder.is_dir() else []
    if not files:
        print(
            f"error: {folder} holds no images; --data (or $DERAIN_DATA) should hold {REAL}", file=sys.stderr
        )
        return 2
    if args.out.exists():
        print(f"error: {args.out} exists; remove it to build it again", file=sys.stderr)
        return 2
    stems = [f.stem for f in files]
    if len(set(stems)) < len(stems):
        twice = sorted({s for s in stems if stems.count(s) > 1})
        print(
            f"error: photos of {folder} share a name but for its suffix: {', '.join(twice)}", file=sys.stderr
        )
        return 2
    (teacher,) = load_weights([args.teacher])
    distilled, held = split_photos(files, args.fraction, args.seed)
    partial = args.out.parent / f".{args.out.name}.partial"  # renamed when whole: a folder there is complete
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    rows, skipped = [], []
    for path in distilled:
        try:
            rainy = read_rgb(path)
        except ImageReadError as err:
            skipped.append(path)
            print(f"skipped {path}: {err}", file=sys.stderr)
            continue
        target = teacher_target(rainy, restore(teacher, rainy))
        # what is written a tile: the rain the teacher takes away (target <= rainy: no wrap-around), or the pair
        images = {"layers": rainy - target} if args.layers else {"rain": rainy, "norain": target}
        for k, (y, x, h, w) in enumerate(tiles(*rainy.shape[:2], args.tile)):
            name = f"{path.stem}-t{k}.png"
            for folder, image in images.items():
                write_image_atomic(partial / folder / name, image[y : y + h, x : x + w])
            rows.append([name, path.name, y, x])
    with (partial / "manifest.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["name", "photo", "top", "left"], *rows])
    (partial / "held-out.txt").write_text("".join(f"{f.name}\n" for f in held))
    partial.rename(args.out)
    used = len(distilled) - len(skipped)
    kind = "layer tiles" if args.layers else "tiles"
    print(f"{len(rows)} {kind} of {used} photos in {args.out}; {len(held)} photos held out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

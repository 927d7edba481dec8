"""Build the held-out heavy validation set: held-out Rain100H-family rain layers on held-out BSDS500 photos.

    DERAIN_DATA=../shared/data python tools/heavy_val.py runs/heavy-val      # 200 pairs, a few seconds

The layers are the rain of the seven heavy pairs no stage-9 run trains on: the four Rain100H training pairs
that the recipe's seeded hold-out keeps for validation (``val_from``, ``val_fraction`` 0.2, data seed 0: the
same four in every stage) and the three Rain200H samples (validation since stage 7). The photos: a seeded 50 of
``clean/bsds500-leakfree`` (Rain100H's own background collection), none of them a background of the 18 Rain100H
training pairs nor of any pair the recipe trains on (RainTrainL's backgrounds are BSDS photos too: a
held-out photo that is one would drop that pair from training); each carries 4 of the 7 layers (``derain.synth.heldout``). The folder is a pair folder
(``rain/``, ``norain/``, ``manifest.csv``); listed in ``val_dirs`` it validates, and its photos leave the
training pool by content. Writing is atomic per file and the same arguments give the same files.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import cv2
import numpy as np
from research import add_data_argument, held_out

from derain.data.overlap import content_signature, shows_any, signatures
from derain.io import atomic_output, list_images, read_rgb, write_image_atomic
from derain.pairing import find_pairs
from derain.synth.heldout import heldout_pairs

HEAVY = "rain100h-train-mini"
RAIN200H = "rain200h-test-samples"
PHOTOS = "clean/bsds500-leakfree"
PAIR_FOLDERS = (HEAVY, RAIN200H, "raintrainl", "didmdn-train-samples", "sirr-test-subset", "ddn-samples")
"""Pair folders whose backgrounds the held-out photos avoid (stage 9's training and validation pairs)."""
BETA = 0.0  # the recipe's composite: clip(rainy − clean) layers, put on by plain addition


def heldout_heavy_pairs(data: Path) -> list[tuple[Path, Path]]:
    """The seven heavy pairs no stage-9 run trains on: the recipe's four Rain100H hold-outs and Rain200H's 3."""
    return held_out(data / HEAVY) + find_pairs(data / RAIN200H)


def pick_photos(data: Path, count: int, seed: int) -> list[Path]:
    """``count`` seeded BSDS photos, none showing the background of a pair in ``PAIR_FOLDERS``."""
    files = list_images(data / PHOTOS)
    backgrounds = signatures([clean for folder in PAIR_FOLDERS for _, clean in find_pairs(data / folder)])
    shown = shows_any(np.stack([content_signature(read_rgb(f)).ravel() for f in files]), backgrounds)
    free = [f for f, hit in zip(files, shown, strict=True) if not hit]
    if len(free) < count:
        raise SystemExit(f"only {len(free)} photos of {data / PHOTOS} are free to hold out; {count} wanted")
    return [free[i] for i in np.random.default_rng(seed).permutation(len(free))[:count]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write (rain/, norain/, manifest.csv)")
    add_data_argument(parser)
    parser.add_argument("--photos", type=int, default=50)
    parser.add_argument("--per-photo", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not (args.data / HEAVY).is_dir():
        print(
            f"error: {args.data / HEAVY} does not exist; --data (or $DERAIN_DATA) should hold it",
            file=sys.stderr,
        )
        return 2
    donors = heldout_heavy_pairs(args.data)
    layers = [cv2.subtract(read_rgb(rain), read_rgb(clean)) for rain, clean in donors]
    photos = pick_photos(args.data, args.photos, args.seed)
    pairs = heldout_pairs(
        layers, [read_rgb(p) for p in photos], beta=BETA, per_photo=args.per_photo, seed=args.seed
    )
    rows = []
    for i, pair in enumerate(pairs, 1):
        name = f"{i:04d}.png"
        write_image_atomic(args.out / "rain" / name, pair.rainy)
        write_image_atomic(args.out / "norain" / name, pair.clean)
        rain_donor = donors[pair.layer][0]
        rows.append(
            [
                name,
                photos[pair.photo].name,
                f"{rain_donor.parent.parent.name}/{rain_donor.name}",
                int(pair.flip),
                pair.shift,
            ]
        )
    with atomic_output(args.out / "manifest.csv") as tmp, tmp.open("w", newline="") as f:
        csv.writer(f).writerows([["name", "photo", "layer", "flipped", "shift"], *rows])
    print(
        f"{len(pairs)} pairs ({len(photos)} photos x {args.per_photo} of {len(layers)} layers) in {args.out}"
    )
    print("layers: " + ", ".join(f"{r.parent.parent.name}/{r.name}" for r, _ in donors))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

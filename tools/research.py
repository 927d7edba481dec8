"""What the research tools share: the data folder, loading weights to compare, the recipe's seeded hold-out,
paired differences, the printed report, one training run of an arm through ``derain.fit``, and the photos that
show none of the 21 real heavy pairs' backgrounds.

The tools import it as ``research``: a script's own folder is the first entry of ``sys.path`` (``python
tools/paired.py`` from any folder), so no tool imports another one, and nothing depends on the working folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import yaml

from derain import load_model
from derain.data.options import DATA_VARIABLE
from derain.data.overlap import leave_out_shown, signatures
from derain.data.split import seeded_share
from derain.evaluate import spread
from derain.io import atomic_output, list_images
from derain.pairing import Pair, find_pairs
from derain.weights import WeightsError

VAL_FRACTION, DATA_SEED = 0.2, 0
"""The shipped recipe's validation hold-out (``val_fraction``, data ``seed``: configs/derain-small/stage1.yaml)."""
HEAVY = ("rain100h-train-mini", "rain200h-test-samples")
"""The folders of the 21 real heavy pairs, under ``$DERAIN_DATA``."""
PHOTOS = "clean/bsds500-leakfree"
"""The BSDS500 photo pool, under ``$DERAIN_DATA``."""


def add_data_argument(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--data DIR``, the folder that holds the data sets; default ``$DERAIN_DATA``. With ``required``, a command
    line without either is a usage error that names both."""
    default = os.environ.get(DATA_VARIABLE)
    parser.add_argument(
        "--data",
        type=Path,
        default=default,
        required=required and default is None,
        help=f"the folder that holds the data sets (default: ${DATA_VARIABLE}"
        + (", which is not set)" if default is None else f" = {default})"),
    )


def under_data(parser: argparse.ArgumentParser, data: Path | None, given: Path | None, relative: str) -> Path:
    """``given`` when a folder option was given, else ``relative`` under ``--data``; neither is a usage error."""
    if given is not None:
        return given
    if data is None:
        parser.error(
            f"name the folder, or set --data or ${DATA_VARIABLE} to the folder that holds {relative}"
        )
    return data / relative


def add_weights_arguments(parser: argparse.ArgumentParser) -> None:
    """``--weights`` (files, or names of shipped weights; the first is the base the others are paired against)
    and ``--names`` (a label each); :func:`weights_names` reads them."""
    parser.add_argument(
        "--weights", nargs="+", required=True, help="weights files or shipped names (the first is the base)"
    )
    parser.add_argument("--names", nargs="+", help="a label for each weights file (default: the file names)")


def weights_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The labels of ``--weights``: ``--names``, else the file names; a count that differs is a usage error."""
    names = args.names or [Path(w).name for w in args.weights]
    if len(names) != len(args.weights):
        parser.error(f"--names gives {len(names)} labels for {len(args.weights)} weights files")
    return names


def load_weights(paths: Sequence[str]) -> list[torch.nn.Module]:
    """Each weights file as a network on the CPU; one that does not load exits with a line naming it."""
    models = []
    for path in paths:
        try:
            models.append(load_model(path, device="cpu"))
        except (WeightsError, OSError, RuntimeError) as err:
            raise SystemExit(f"error: weights {path} do not load: {err}") from None
    return models


def held_out(folder: Path) -> list[Pair]:
    """The pairs of ``folder`` that the recipe's seeded hold-out keeps for validation (``val_from``)."""
    pairs = find_pairs(folder)
    return [pairs[i] for i in seeded_share(len(pairs), VAL_FRACTION, DATA_SEED)]


def photo_folder(data: Path, out: Path) -> tuple[Path, int, int]:
    """``OUT/photos``: links to the BSDS photos that show none of the 21 pairs' backgrounds (made once)."""
    folder = out / "photos"
    photos = list_images(data / PHOTOS, recursive=True)
    if not folder.is_dir():
        backgrounds = [clean for name in HEAVY for _, clean in find_pairs(data / name)]
        kept, _ = leave_out_shown(photos, signatures(photos), [signatures(backgrounds)])
        tmp = out / ".photos.partial"
        tmp.mkdir(parents=True, exist_ok=True)
        for photo in kept:
            link = tmp / photo.name
            if not link.exists():
                link.symlink_to(photo.resolve())
        tmp.rename(folder)
    kept = len(list_images(folder))
    return folder, kept, len(photos) - kept


def generated_heavy_data(data: Path, photos: Path, styles: Sequence[str]) -> tuple[dict, dict]:
    """The ``pairs`` and ``synthesis`` of a run on generated rain alone: the procedural ``styles`` on ``photos``
    (:func:`photo_folder`), no real pair or layer, validated on the 21 real heavy pairs."""
    pairs = {"val_dirs": [str(data / name) for name in HEAVY]}
    synthesis = {
        "clean_dirs": [str(photos)],
        "length": 1000,
        "val_length": 0,
        "transplant_prob": 0.0,
        "procedural_styles": list(styles),
    }
    return pairs, synthesis


def paired_difference(values: Sequence[float], base: Sequence[float]) -> dict:
    """Per-item ``values − base``: mean, standard deviation, 95 % bootstrap interval, and how many are above 0."""
    diffs = [{"d": a - b} for a, b in zip(values, base, strict=True)]
    stats = spread(diffs, "d")
    return {
        "mean": float(np.mean([d["d"] for d in diffs])),
        "std": stats["std"],
        "ci95": stats["ci95"],
        "wins": int(sum(d["d"] > 0 for d in diffs)),
    }


def mean_row(values: list[float], first: list[float] | None) -> dict:
    """Mean and spread of ``values``; with ``first``, the paired difference against it too."""
    rows = [{"v": v} for v in values]
    out = {
        "mean": float(np.mean(values)),
        **{k: v for k, v in spread(rows, "v").items() if k in ("std", "ci95")},
    }
    if first is not None:
        out["paired"] = paired_difference(values, first)
    return out


def report(rows: list[tuple[str, str]], result: dict) -> None:
    """Print the measurements (name, value), then one ``RESULT {...}`` JSON line for scripts to read."""
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("RESULT " + json.dumps(result))


def train_run(run: Path, config: dict, arm: str) -> Path:
    """Train one arm through ``derain.fit`` from ``config`` (written to ``run/config.yaml``), resuming an
    interrupted run; returns its exported weights. A folder whose config another budget, seed or width wrote is
    refused (its weights are not this run's), and a finished run is not trained again."""
    weights, file = run / "model.safetensors", run / "config.yaml"
    text = yaml.safe_dump(config, sort_keys=False)
    if file.is_file() and file.read_text() != text:
        raise SystemExit(
            f"error: {file} holds another budget, seed or data than this run asks for; use another OUT"
        )
    if weights.is_file():
        return weights
    run.mkdir(parents=True, exist_ok=True)
    with atomic_output(file) as tmp:
        tmp.write_text(text)
    command = [sys.executable, "-m", "derain.fit", "--config", str(file)]
    print(f"[{arm}] training: {' '.join(command)}", flush=True)
    with open(run / "fit.log", "a") as log:
        status = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if status != 0 or not weights.is_file():
        raise SystemExit(f"error: arm {arm} failed (exit {status}); see {run / 'fit.log'}")
    return weights


def write_result(path: Path, result: dict) -> None:
    """A tool's result: ``path`` (JSON, written atomically) and the one ``RESULT {...}`` line."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    print("RESULT " + json.dumps(result))

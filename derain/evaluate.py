"""Score deraining against clean images: ``python -m derain.evaluate``.

    python -m derain.evaluate --rain test/rain --clean test/norain --weights model.safetensors
    python -m derain.evaluate --pred results/ --clean test/norain --csv scores.csv --json

PSNR/SSIM on MATLAB's BT.601 Y channel (the published tables) and on RGB, per image and averaged over images,
and ``bias_y``, all through :class:`derain.metrics.DerainMetrics`. ``bias_y`` is the mean brightness error on
that Y channel in 8-bit levels (negative: darker than the clean image), which shows a model that darkens or
brightens a whole scene, e.g. real rain photos, where PSNR only says that something is off (its mean over images
is signed: errors of opposite sign cancel). Files pair by name as training pairs do (``derain.pairing``): the
same stem (``x.png`` vs ``x.jpg``) without a leading ``rain-``/``norain-`` (JORDER/PReNet naming).
Exit status: 0 when every file paired and scored, 1 when some did not (the scores of the rest are printed),
2 on a usage error.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from derain import arguments
from derain.inference import RestoreOptions, restore
from derain.io import list_images, read_rgb, to_tensor
from derain.metrics import DerainMetrics
from derain.pairing import Matching, match_by_name

__all__ = ["METRICS", "pair_files", "score_pair", "evaluate", "summarize", "spread", "main"]

METRICS = DerainMetrics.NAMES
Row = dict[str, float | str]
"""One scored image: ``name``, ``clean`` and metric columns."""


def pair_files(test_dir: Path, clean_dir: Path) -> Matching:
    """Pair the images of ``test_dir`` with those of ``clean_dir`` by pair name (``derain.pairing``).

    Test files with no match are the ``rain_only`` files (rainy inputs or predictions); clean files nobody
    matched are ``clean_only``, as for training pairs.

    Raises:
        DataError: two files of one folder have the same pair name (``x.png`` and ``x.jpg``).
    """
    return match_by_name(list_images(test_dir), list_images(clean_dir))


def score_pair(pred: np.ndarray, clean: np.ndarray) -> dict[str, float]:
    """PSNR/SSIM (Y and RGB) and ``bias_y`` of one uint8 RGB prediction against its uint8 RGB clean image.

    ``bias_y``: mean of ``Y(pred) − Y(clean)`` on MATLAB's Y channel, in 8-bit levels (negative: darker).
    """
    pred_t, clean_t = to_tensor(pred)[None], to_tensor(clean)[None]
    metrics = DerainMetrics()
    metrics.update(pred_t, clean_t)
    return {k: float(v) for k, v in metrics.compute().items()}


def evaluate(
    test_dir: Path,
    clean_dir: Path,
    *,
    model: torch.nn.Module | None = None,
    names: set[str] | None = None,
    options: RestoreOptions | None = None,
) -> tuple[list[Row], Matching, list[str]]:
    """Score every pair; with ``model``, ``test_dir`` holds rainy inputs that are derained first.

    Args:
        test_dir: predictions (``model=None``) or rainy inputs.
        clean_dir: the clean ground truth.
        model: network to run on the rainy inputs; ``None`` scores ``test_dir`` as it is.
        names: only these pairs (file names or stems of ``test_dir``); ``None`` scores all.
        options: tiling and ensemble, passed to :func:`derain.inference.restore` (default ``RestoreOptions()``).

    Returns:
        One row per scored image (``name``, ``clean``, the ``METRICS`` columns and, with ``model``, ``input_*``
        scores of the rainy input itself), the pairing, and one message per pair that could not be scored.
    """
    pairing = pair_files(test_dir, clean_dir)
    if names is not None:
        unknown = names - {k for test, _ in pairing.pairs for k in (test.name, test.stem)}
        if unknown:
            raise ValueError(f"names not among the pairs of {test_dir}: {', '.join(sorted(unknown))}")
        # a chosen subset: files outside it are not "missing"
        pairing = Matching([(t, c) for t, c in pairing.pairs if t.name in names or t.stem in names], [], [])
    rows: list[Row] = []
    problems: list[str] = []
    for test_path, clean_path in tqdm(pairing.pairs, desc="evaluate", unit="img", file=sys.stderr):
        try:
            test, clean = read_rgb(test_path), read_rgb(clean_path)
            if test.shape != clean.shape:
                raise ValueError(
                    f"size {test.shape[1]}x{test.shape[0]} of {test_path} differs from "
                    f"{clean.shape[1]}x{clean.shape[0]} of {clean_path}"
                )
            row: Row = {"name": test_path.name, "clean": clean_path.name}
            if model is not None:
                row.update(score_pair(restore(model, test, options=options), clean))
                row.update({f"input_{k}": v for k, v in score_pair(test, clean).items()})
            else:
                row.update(score_pair(test, clean))
        except Exception as err:  # report the pair and go on with the others
            problems.append(str(err))
            continue
        rows.append(row)
    return rows, pairing, problems


def summarize(rows: list[Row]) -> dict[str, float | int]:
    """Means over images of every metric column, and the count."""
    summary: dict[str, float | int] = {"count": len(rows)}
    keys = [k for k in rows[0] if k not in ("name", "clean")] if rows else list(METRICS)
    for key in keys:
        values = [float(r[key]) for r in rows]
        summary[key] = sum(values) / len(values) if values else math.nan
    return summary


SPREAD_KEYS = ("psnr_y", "ssim_y")
"""The metrics whose spread over images ``spread`` reports (the published tables' pair)."""


def spread(
    rows: list[Row], key: str, *, resamples: int = 2000, seed: int = 0
) -> dict[str, float | list[float]]:
    """How far one metric's mean over ``rows`` can be trusted: its minimum, maximum and standard deviation
    over images, and a 95 % bootstrap interval of the mean (``resamples`` draws of as many images, with
    replacement, seeded: the same rows give the same interval). A few images give a wide interval."""
    values = np.array([float(r[key]) for r in rows], dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"min": math.nan, "max": math.nan, "std": math.nan, "ci95": [math.nan, math.nan]}
    means = np.random.default_rng(seed).choice(values, (resamples, values.size)).mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return {
        "min": float(values.min()),
        "max": float(values.max()),
        "std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
        "ci95": [float(low), float(high)],
    }


def _write_csv(path: Path, rows: list[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["name", "clean", *METRICS])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.6f}" if isinstance(v, float) else v for k, v in row.items()})


def _print_table(rows: list[Row], summary: dict[str, float | int]) -> None:
    keys = [k for k in summary if k != "count"]
    width = max([len(str(r["name"])) for r in rows] + [4])
    print(f"{'name':<{width}}  " + "  ".join(f"{k:>13}" for k in keys))
    for row in rows:
        print(f"{row['name']!s:<{width}}  " + "  ".join(f"{float(row[k]):>13.4f}" for k in keys))
    print(f"{'mean':<{width}}  " + "  ".join(f"{float(summary[k]):>13.4f}" for k in keys))
    print(f"{summary['count']} image(s)")
    for key in SPREAD_KEYS:
        if key in keys:
            sp = spread(rows, key)
            low, high = sp["ci95"]
            print(
                f"{key}: min {sp['min']:.4f}, max {sp['max']:.4f}, sd {sp['std']:.4f} over images; "
                f"95% bootstrap interval of the mean [{low:.4f}, {high:.4f}]"
            )


def build_parser(prog: str = "python -m derain.evaluate") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="PSNR/SSIM (MATLAB Y channel and RGB) and brightness bias (Y) of derained images "
        "against clean ones.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--rain", type=Path, help="folder of rainy inputs: run the model on them, then score")
    source.add_argument("--pred", type=Path, help="folder of derained outputs to score as they are")
    parser.add_argument("--clean", type=Path, required=True, help="folder of clean ground-truth images")
    arguments.add_model_arguments(parser, when=" (with --rain)")
    parser.add_argument("--csv", type=Path, default=None, help="write per-image scores to this CSV file")
    parser.add_argument("--json", action="store_true", help="print one JSON object (means, count) on stdout")
    parser.add_argument(
        "--names",
        default=None,
        help="score only these pairs: comma-separated file names or stems of the rain/pred "
        "folder (e.g. a held-out split: 0004,0005,0013,0015)",
    )
    return parser


def _folder_error(args: argparse.Namespace) -> str | None:
    """The usage error of ``--rain``/``--pred`` and ``--clean``, ``None`` when both are folders."""
    flag = "--rain" if args.rain else "--pred"
    for name, folder in ((flag, args.rain or args.pred), ("--clean", args.clean)):
        if not folder.is_dir():
            return f"{name} {folder} is not a folder"
    return None


def _report(
    args: argparse.Namespace, test_dir: Path, rows: list[Row], pairing: Matching, problems: list[str]
) -> int:
    """Print what could not be scored (stderr), then the scores (a table, or ``--json``); the exit status."""
    for path in pairing.rain_only:
        print(f"missing: no clean image in {args.clean} for {path.name}", file=sys.stderr)
    for path in pairing.clean_only:
        print(f"missing: no image in {test_dir} for clean {path.name}", file=sys.stderr)
    for message in problems:
        print(f"failed: {message}", file=sys.stderr)
    if not rows:
        return arguments.usage_error(f"no image pairs could be scored between {test_dir} and {args.clean}")
    summary = summarize(rows)
    if args.csv is not None:
        _write_csv(args.csv, rows)
    if args.json:
        extra = {
            "spread": {k: spread(rows, k) for k in SPREAD_KEYS if k in summary},
            "rain_only": [p.name for p in pairing.rain_only],
            "clean_only": [p.name for p in pairing.clean_only],
        }
        finite = {k: v if math.isfinite(v) else None for k, v in summary.items()}  # identical images: inf
        print(json.dumps({**finite, **extra, "failed": len(problems)}))
    else:
        _print_table(rows, summary)
    return 1 if pairing.rain_only or pairing.clean_only or problems else 0


def main(argv: list[str] | None = None, *, prog: str = "python -m derain.evaluate") -> int:
    """Command-line entry; returns the exit status (0 all scored, 1 some files unpaired/unscored, 2 usage)."""
    args = build_parser(prog).parse_args(argv)
    test_dir = args.rain or args.pred
    problem = _folder_error(args)
    if problem is not None:
        return arguments.usage_error(problem)
    model, options = None, None
    if args.rain is not None:
        try:
            options = arguments.restore_options(args)
            model = arguments.model_from_args(args)
        except arguments.UsageError as err:
            return arguments.usage_error(err)
    names = None
    if args.names is not None:
        names = {n.strip() for n in args.names.split(",") if n.strip()}
        if not names:
            return arguments.usage_error(f"--names {args.names!r} names no file")
    try:
        rows, pairing, problems = evaluate(
            test_dir,
            args.clean,
            model=model,
            names=names,
            options=options,
        )
    except ValueError as err:
        return arguments.usage_error(err)
    return _report(args, test_dir, rows, pairing, problems)


if __name__ == "__main__":
    sys.exit(main())

"""How close is a rain generator to real heavy rain? Train on its rain alone, score on every real heavy pair.

    DERAIN_DATA=../shared/data python tools/generators.py runs/generators                 # the default arms
    python tools/generators.py runs/generators --data ../shared/data --arms rain100h layered rain100h+layered real14

Each arm trains ``DerainNet()`` from scratch with one fixed budget (``--steps`` of ``--batch`` × ``--patch``²,
``--seed`` 0, lr 8e-4 after 100 warm-up steps, ``--precision``, ``--dim`` 24) on the same photos: the BSDS500 pool of
``$DERAIN_DATA/clean/bsds500-leakfree`` minus every photo that shows the background of one of the 21 real heavy
pairs (Rain100H's 18 development pairs, Rain200H's 3; by content, ``derain.data.overlap``). An arm is either

- a **generated** arm, named after a procedural style of ``derain.synth.RAIN_STYLES`` (``rain100h``, ``layered``,
  ...), or several joined by ``+`` (one drawn per sample): only that rain, no real pair or layer. Such a network
  never sees a real heavy layer, so all 21 pairs are held out from it;
- the **reference** arm ``real14``: the 14 Rain100H pairs the recipe trains on (its seeded 20 % hold-out left
  out), as pairs and as transplanted rain layers on the same photos. It has seen 14 of the 21 layers.

Every arm is scored on the 21 pairs (full images; MATLAB-Y PSNR/SSIM of 8-bit outputs, ``derain.evaluate``),
per pair. The table gives each arm's mean on all 21, on the 7 pairs no arm trained on (Rain100H's 4 held out,
Rain200H's 3) and on the other 14, and paired differences (arm − first arm) with a 95 % bootstrap interval: on
the 21 for generated arms, on the 7 for every arm. An arm's run folder (``OUT/ARM``) holds its config, its
Lightning run and ``scores.json``; a finished arm is not trained again, an interrupted one resumes. Prints the
table and one ``RESULT {...}`` JSON line; ``OUT/summary.json`` has the same (written atomically).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from research import (
    HEAVY,
    PHOTOS,
    add_data_argument,
    generated_heavy_data,
    held_out,
    load_weights,
    paired_difference,
    photo_folder,
    train_run,
    write_result,
)

from derain.evaluate import evaluate
from derain.io import atomic_output
from derain.pairing import find_pairs
from derain.synth import RAIN_STYLES

REFERENCE = "real14"
VAL_FRACTION = 0.2
"""The recipe's seeded hold-out of Rain100H's pairs (``val_from``, ``val_fraction``, data seed 0): 4 of 18."""
DEFAULT_ARMS = ("rain100h", "rain100h+layered", REFERENCE)


def check_data(parser: argparse.ArgumentParser, data: Path | None) -> Path:
    """``--data``, checked: every folder the arms need is there; a missing one is named."""
    if data is None:
        parser.error(
            "set --data or $DERAIN_DATA to the folder that holds the data sets (e.g. ../shared/data)"
        )
    for name in (*HEAVY, PHOTOS):
        if not (data / name).is_dir():
            parser.error(f"{data / name} is missing (--data {data}): the arms need {name}")
    return data


def honest_names(data: Path) -> dict[str, set[str]]:
    """Rainy file names, per heavy folder, of the pairs no arm trains on."""
    held = {rain.name for rain, _ in held_out(data / HEAVY[0])}
    return {HEAVY[0]: held, HEAVY[1]: {rain.name for rain, _ in find_pairs(data / HEAVY[1])}}


def arm_config(arm: str, data: Path, photos: Path, run: Path, args: argparse.Namespace) -> dict:
    """The LightningCLI config of one arm (see the module docstring)."""
    pairs, synthesis = generated_heavy_data(data, photos, arm.split("+"))
    if arm == REFERENCE:
        mini = str(data / HEAVY[0])
        pairs = {"train_dirs": [mini], "val_from": [mini], "val_fraction": VAL_FRACTION, "repeat": 4}
        pairs["val_dirs"] = [str(data / HEAVY[1])]
        synthesis |= {"transplant_prob": 1.0, "transplant_from": [mini], "procedural_styles": ["heavy"]}
    return {
        "seed_everything": args.seed,
        "trainer": {
            "default_root_dir": str(run),
            "devices": 1,
            "max_steps": args.steps,
            "val_check_interval": args.steps,
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 50,
            "gradient_clip_val": 0.5,
            "precision": args.precision,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
        "model": {
            "net": {"class_path": "derain.models.DerainNet", "init_args": {"dim": args.dim}},
            "loss": "charbonnier",
            "lr": 0.0008,
            "warmup_steps": 100,
        },
        "data": {
            "pairs": pairs,
            "synthesis": synthesis,
            "patch_size": args.patch,
            "batch_size": args.batch,
            "num_workers": 2,
            "seed": 0 if arm == REFERENCE else args.seed,  # the reference keeps the recipe's hold-out
        },
    }


def train(arm: str, data: Path, photos: Path, out: Path, args: argparse.Namespace) -> Path:
    """Train one arm (resuming an interrupted run); returns its exported weights."""
    return train_run(out / arm, arm_config(arm, data, photos, out / arm, args), arm)


def score(arm: str, weights: Path, data: Path) -> list[dict]:
    """Per-pair PSNR-Y/SSIM-Y of one arm on the 21 pairs (cached in ``scores.json``)."""
    cached = weights.parent / "scores.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    (model,) = load_weights([str(weights)])
    honest = honest_names(data)
    rows = []
    for name in HEAVY:
        folder = data / name
        found, _, problems = evaluate(folder / "rain", folder / "norain", model=model)
        if problems:
            raise SystemExit(f"error: {folder}: {'; '.join(problems)}")
        rows += [
            {
                "pair": f"{name}/{r['name']}",
                "psnr_y": r["psnr_y"],
                "ssim_y": r["ssim_y"],
                "honest": r["name"] in honest[name],
            }
            for r in found
        ]
    with atomic_output(cached) as tmp:
        tmp.write_text(json.dumps(rows, indent=1))
    print(f"[{arm}] scored {len(rows)} pairs", flush=True)
    return rows


def paired(rows: list[dict], base: list[dict], keep) -> dict:
    """``rows − base`` in PSNR-Y over the pairs ``keep`` selects: mean, spread, 95 % interval, wins, count."""
    kept = [(r, b) for r, b in zip(rows, base, strict=True) if keep(r)]
    if any(r["pair"] != b["pair"] for r, b in kept):
        raise SystemExit("error: the arms' scores list different pairs; delete OUT/*/scores.json and rerun")
    diff = paired_difference([r["psnr_y"] for r, _ in kept], [b["psnr_y"] for _, b in kept])
    return diff | {"n": len(kept)}


def summarise(scores: dict[str, list[dict]]) -> dict:
    first = next(iter(scores))
    out = {}
    for arm, rows in scores.items():

        def mean(keep, key="psnr_y", rows=rows):
            return float(np.mean([r[key] for r in rows if keep(r)]))

        entry = {
            "all21": mean(lambda r: True),
            "ssim21": mean(lambda r: True, "ssim_y"),
            "honest7": mean(lambda r: r["honest"]),
            "other14": mean(lambda r: not r["honest"]),
        }
        if arm != first:
            entry["d7"] = paired(rows, scores[first], lambda r: r["honest"])
            if arm != REFERENCE and first != REFERENCE:
                entry["d21"] = paired(rows, scores[first], lambda r: True)
        out[arm] = entry
    return out


def print_table(summary: dict, first: str) -> None:
    print(f"{'arm':<12} {'21 pairs':>9} {'SSIM-Y':>7} {'7 held':>7} {'14':>7}   paired vs {first}")
    for arm, s in summary.items():
        parts = []
        for key, label in (("d21", "21"), ("d7", "7")):
            if key in s:
                d = s[key]
                parts.append(
                    f"{label}: {d['mean']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] {d['wins']}/{d['n']}"
                )
        print(
            f"{arm:<12} {s['all21']:9.2f} {s['ssim21']:7.3f} {s['honest7']:7.2f} {s['other14']:7.2f}   "
            + "; ".join(parts)
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the arms' runs and the summary")
    add_data_argument(parser, required=False)
    parser.add_argument(
        "--arms", nargs="+", default=list(DEFAULT_ARMS), help="procedural styles (several: a+b), or real14"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the run's seed (initial weights, batches) and a generated arm's data seed (its rain); the reference "
        "arm's data seed stays 0, the recipe's hold-out",
    )
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument(
        "--dim",
        type=int,
        default=24,
        help="DerainNet's width (24, the shipped one; equal-CPU-time width arms)",
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--patch", type=int, default=128)
    parser.add_argument(
        "--precision", default="32", help="the trainer's precision: 32, or bf16-mixed where the CPU has bf16"
    )
    args = parser.parse_args(argv)
    unknown = [a for a in args.arms if a != REFERENCE and not set(a.split("+")) <= set(RAIN_STYLES)]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}: expected {REFERENCE} or styles {sorted(RAIN_STYLES)}")
    if args.steps < 1 or args.batch < 1 or args.patch < 32 or args.dim < 8:
        parser.error(
            f"--steps, --batch must be >= 1, --patch >= 32 and --dim >= 8, got {args.steps}, {args.batch}, "
            f"{args.patch}, {args.dim}"
        )
    args.data = check_data(parser, args.data)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = args.data
    photos, kept, left = photo_folder(data, args.out)
    print(f"photos: {kept} of the BSDS pool ({left} show a heavy pair's background and are left out)")
    scores = {arm: score(arm, train(arm, data, photos, args.out, args), data) for arm in args.arms}
    summary = summarise(scores)
    print_table(summary, args.arms[0])
    result = {k: getattr(args, k) for k in ("steps", "batch", "patch", "precision", "dim", "seed")}
    result["arms"] = summary
    write_result(args.out / "summary.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Weights side by side on held-out pairs: mean PSNR-Y/SSIM-Y a set, and paired differences against the first.

    DERAIN_DATA=../shared/data python tools/heavy_val.py runs/heavy-val     # once: the 200 heavy pairs
    DERAIN_DATA=../shared/data python tools/paired.py --weights A.safetensors B.safetensors --names A B

The sets (MATLAB-Y PSNR/SSIM of 8-bit outputs, ``derain.evaluate``; none trained on by stage 9):
- ``heavy200``: the held-out heavy set of ``tools/heavy_val.py`` (``--heavy-val``);
- ``heavy7``: the 7 real heavy pairs whose layers it uses (Rain100H's 4 seeded hold-outs, Rain200H's 3);
- ``light40``: RainTrainL's seeded 40 (``val_from``, 20 %, data seed 0);
- ``rain200l``: Rain200L's 3;
- ``webcam``: the webcam's 35 real rainy frames against their scene's clean frame (taken at another moment: its
  light and noise differ, so a frame's PSNR is low whatever removes the rain; the paired difference between
  weights is what reads), and ``spa``: SPA's 2 real pairs. Real rain with a clean image, beside
  ``tools/real_rain.py``'s change-only reading; no weights train on them.

A mean over a set says little when two weights differ by a fraction of a dB and the images by several; the paired
difference per image (weights − first weights) and its 95 % bootstrap interval say whether the difference is
larger than the images' noise. The heavy 200 are also reported by the folder of their rain layer (Rain100H's 4,
Rain200H's 3): weights that trained on one family's layers read high on it. ``--sets`` picks some. Prints the table and one ``RESULT {...}`` JSON line;
``--json FILE`` writes per-image values (atomically).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
import torch
from research import (
    add_data_argument,
    add_weights_arguments,
    held_out,
    load_weights,
    paired_difference,
    weights_names,
)

from derain.evaluate import evaluate, spread
from derain.io import atomic_output

SETS = ("heavy200", "heavy7", "light40", "rain200l", "webcam", "spa")
"""The sets, in ``set_parts``'s order (the default runs them all)."""


def held_names(folder: Path) -> list[str]:
    """The rainy file names of ``folder``'s seeded hold-out (the recipe's ``val_from`` share)."""
    return [rain.name for rain, _ in held_out(folder)]


def set_parts(data: Path, heavy_val: Path) -> dict[str, list[tuple[Path, list[str] | None]]]:
    """Each set as (pair folder, rainy names or all) parts."""
    return {
        "heavy200": [(heavy_val, None)],
        "heavy7": [
            (data / "rain100h-train-mini", held_names(data / "rain100h-train-mini")),
            (data / "rain200h-test-samples", None),
        ],
        "light40": [(data / "raintrainl", held_names(data / "raintrainl"))],
        "rain200l": [(data / "rain200l-samples", None)],
        "webcam": [(data / "gtrain-webcam-pairs", None)],
        "spa": [(data / "spa-samples", None)],
    }


def score(model: torch.nn.Module, parts: list[tuple[Path, list[str] | None]]) -> list[dict]:
    rows = []
    for folder, names in parts:
        if not (folder / "rain").is_dir():
            raise SystemExit(
                f"error: {folder} has no rain/ folder (build runs/heavy-val with tools/heavy_val.py)"
            )
        found, _, problems = evaluate(
            folder / "rain", folder / "norain", model=model, names=set(names) if names else None
        )
        for message in problems:
            print(f"skipped: {message}", file=sys.stderr)
        rows += [
            {
                "name": f"{folder.name}/{r['name']}",
                "psnr_y": r["psnr_y"],
                "ssim_y": r["ssim_y"],
                "bias_y": r["bias_y"],
                "psnr_y_debiased": debiased_psnr(r["psnr_y"], r["bias_y"]),
            }
            for r in found
        ]
    return rows


def debiased_psnr(psnr_y: float, bias_y: float) -> float:
    """PSNR-Y with the image's mean brightness error taken out: the squared error less ``bias_y``² (a mean
    error is part of the squared error). What the weights' restoration reads apart from a brightness shift.

    Example:
        >>> round(debiased_psnr(20.0, 0.0), 6), debiased_psnr(20.0, 5.0) > 20.0
        (20.0, True)
    """
    mse = 255.0**2 * 10 ** (-psnr_y / 10) - bias_y**2
    return float(10 * np.log10(255.0**2 / max(mse, 1e-10)))


def summary(rows: list[dict], base: list[dict] | None) -> dict:
    """A set's means (PSNR-Y, SSIM-Y, ``bias_y`` in 8-bit levels, PSNR-Y at zero bias), PSNR-Y's interval and,
    against ``base``, the paired differences of PSNR-Y (``paired``) and of PSNR-Y at zero bias."""
    out = {
        "count": len(rows),
        **{
            key: float(np.mean([r[key] for r in rows]))
            for key in ("psnr_y", "ssim_y", "bias_y", "psnr_y_debiased")
        },
        "ci95": spread(rows, "psnr_y")["ci95"],
    }
    if base is not None:
        if [r["name"] for r in rows] != [r["name"] for r in base]:
            raise SystemExit(
                "error: the weights were scored on different images; a paired difference needs the same"
            )
        for key, label in (("psnr_y", "paired"), ("psnr_y_debiased", "paired_debiased")):
            out[label] = paired_difference([r[key] for r in rows], [r[key] for r in base])
    return out


def by_layer_family(per_weights: list[list[dict]], manifest: Path) -> dict[str, list[list[dict]]]:
    """The heavy 200's rows split by the folder their rain layer came from (``manifest.csv`` of the build):
    a family some weights trained on reads high for them, whatever they learnt."""
    with manifest.open(newline="") as f:
        family = {row["name"]: row["layer"].split("/")[0] for row in csv.DictReader(f)}
    groups: dict[str, list[list[dict]]] = {}
    for name in sorted(set(family.values())):
        groups[f"heavy200, {name} layers"] = [
            [r for r in rows if family.get(r["name"].split("/")[-1]) == name] for rows in per_weights
        ]
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_weights_arguments(parser)
    add_data_argument(parser)
    parser.add_argument("--heavy-val", type=Path, default=Path("runs/heavy-val"))
    parser.add_argument("--sets", nargs="+", choices=SETS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = weights_names(parser, args)
    parts = set_parts(args.data, args.heavy_val)
    sets = args.sets or list(parts)
    per_image: dict[str, list[list[dict]]] = {s: [] for s in sets}
    for path, model in zip(args.weights, load_weights(args.weights), strict=True):
        for s in sets:  # evaluate's restore() runs in inference mode: autograd is left as it is
            per_image[s].append(score(model, parts[s]))
        print(f"scored {path}", file=sys.stderr)
    if "heavy200" in sets and (args.heavy_val / "manifest.csv").is_file():
        per_image.update(by_layer_family(per_image["heavy200"], args.heavy_val / "manifest.csv"))
        sets = [*sets[:1], *(k for k in per_image if k.startswith("heavy200, ")), *sets[1:]]
    width = max(len(n) for n in names)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; PSNR-Y dB / SSIM-Y [95 % CI], "
        "bias (mean Y error, levels), PSNR-Y at zero bias; paired: minus first"
    )
    result: dict = {"weights": names}
    for s in sets:
        stats = [summary(rows, per_image[s][0] if i else None) for i, rows in enumerate(per_image[s])]
        result[s] = stats
        print(f"  {s} ({stats[0]['count']} pairs)")
        for name, st in zip(names, stats, strict=True):
            p, q = st.get("paired"), st.get("paired_debiased")
            paired = (
                (
                    f"  paired {p['mean']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}] sd {p['std']:.2f}, "
                    f"better on {p['wins']}/{st['count']}; at zero bias {q['mean']:+.3f} "
                    f"[{q['ci95'][0]:+.3f}, {q['ci95'][1]:+.3f}]"
                )
                if p
                else ""
            )
            print(
                f"    {name:<{width}}  {st['psnr_y']:6.2f} / {st['ssim_y']:.4f} "
                f"[{st['ci95'][0]:.2f}, {st['ci95'][1]:.2f}] bias {st['bias_y']:+.2f}, "
                f"{st['psnr_y_debiased']:.2f}{paired}"
            )
    if args.json:
        with atomic_output(args.json) as tmp:
            tmp.write_text(json.dumps({**result, "per_image": per_image}))
    print(
        "RESULT "
        + json.dumps({f"{s}_{i}": round(st["psnr_y"], 3) for s in sets for i, st in enumerate(result[s])})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

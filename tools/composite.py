"""Fit Rain100H's rain composite and show what the recovered layers lose: ``python tools/composite.py``.

Model: ``rainy = clean + layer · (1 − β · clean)`` (β = 0: addition; β = 1: a screen blend). For each of the
Rain100H development pairs, β is fitted so that the recovered layer ``(rainy − clean) / (1 − β · clean)`` no
longer correlates with the background in unsaturated streak pixels (``derain.synth.fit_composite_beta``). Prints
per pair and in the median: the correlation of the additive residual and of the screen-inverse layer with the
background, the fitted β, the correlation at the median β, and the ghost-edge measure: the correlation of the
layer with the background's edge strength (Sobel magnitude) over all pixels, for ``clip(rainy − clean)`` (the
old transplant layer) and for ``derain.synth.recover_layer`` (saturated pixels filled, not clipped).
Ends with one ``RESULT {...}`` JSON line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
from research import add_data_argument, report, under_data

from derain.io import read_rgb
from derain.pairing import find_pairs
from derain.synth import (
    COMPOSITE_BETA,
    SATURATED,
    as_float,
    background_correlation,
    fit_composite_beta,
    rain_residual,
    recover_layer,
)


def edge_correlation(layer: np.ndarray, clean: np.ndarray) -> float:
    grey = cv2.cvtColor(as_float(clean), cv2.COLOR_RGB2GRAY)
    edges = np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
    return float(np.corrcoef(layer.mean(2).ravel(), edges.ravel())[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser, required=False)
    parser.add_argument(
        "--pairs", type=Path, help="a folder of rain/norain pairs (default: rain100h-train-mini in --data)"
    )
    args = parser.parse_args()
    pairs = under_data(parser, args.data, args.pairs, "rain100h-train-mini")
    rows, stats = (
        [],
        {k: [] for k in ("add", "screen", "beta", "fitted", "ghost_old", "ghost_new", "saturated")},
    )
    for rain_path, clean_path in find_pairs(pairs):
        rainy, clean = read_rgb(rain_path), read_rgb(clean_path)
        values = {
            "add": background_correlation(rainy, clean, 0.0),
            "screen": background_correlation(rainy, clean, 1.0),
            "beta": fit_composite_beta(rainy, clean),
            "fitted": background_correlation(rainy, clean, COMPOSITE_BETA),
            "ghost_old": edge_correlation(rain_residual(rainy, clean), clean),
            "ghost_new": edge_correlation(recover_layer(rainy, clean), clean),
            "saturated": float((as_float(rainy) >= SATURATED).all(2).mean()),
        }
        for key, value in values.items():
            stats[key].append(value)
        rows.append(
            (
                rain_path.stem,
                f"corr add {values['add']:+.3f}, screen {values['screen']:+.3f}, β {values['beta']:.2f}, "
                f"at β={COMPOSITE_BETA}: {values['fitted']:+.3f}; edges old {values['ghost_old']:+.3f} "
                f"new {values['ghost_new']:+.3f}; saturated {100 * values['saturated']:.1f} %",
            )
        )
    med = {k: float(np.median(v)) for k, v in stats.items()}
    q1, q3 = np.percentile(stats["beta"], [25, 75])
    rows.append(
        (
            f"median of {len(stats['beta'])}",
            f"corr add {med['add']:+.3f}, screen {med['screen']:+.3f}, β {med['beta']:.2f} (quartiles {q1:.2f}–"
            f"{q3:.2f}), at β={COMPOSITE_BETA}: {med['fitted']:+.3f}; edges old {med['ghost_old']:+.3f} new "
            f"{med['ghost_new']:+.3f}; saturated {100 * med['saturated']:.1f} %",
        )
    )
    report(rows, {**{f"median_{k}": v for k, v in med.items()}, "beta_q1": float(q1), "beta_q3": float(q3)})


if __name__ == "__main__":
    main()

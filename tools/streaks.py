"""How Rain100H's streaks differ from ours: ``python tools/streaks.py [--pairs DIR] [--garg DIR]``.

Measures rain layers, grey (H, W) in [0, 1], from three sources:

- the Rain100H development pairs: ``derain.synth.recover_layer`` under the fitted composite;
- procedural rain (``derain.synth.add_rain``), "heavy" and "rain100h" (the style fitted with this script),
  rendered twice on each of the same clean images, recovered the same way;
- the rendered streak layers of ``rain-streaks-garg06`` (bright streaks on black, used as they are).

Per layer (``derain.synth.measure.layer_stats``): floor (10th percentile: a veil or haze lifts it), coverage (share of pixels above 0.1), streak brightness (median and 90th percentile of pixels above
0.05), fall angle from vertical and its spread (the structure tensor's orientation in 32-pixel blocks: the circular
spread of the doubled angles, weighted by block coherence), direction coherence of the whole layer, and the
streaks' length and width read off the layer's autocorrelation (twice the distance at which it falls to one half,
along and across the dominant direction; a streak of length l gives l). Prints the median and quartiles per source
and one ``RESULT {...}`` JSON line: the numbers a renderer fitted to Rain100H has to reproduce.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from research import add_data_argument, report, under_data

from derain.io import read_rgb
from derain.pairing import find_pairs
from derain.synth import COMPOSITE_BETA, add_rain, recover_layer
from derain.synth.measure import STATS, layer_stats


def summary(values: list[dict[str, float]]) -> dict[str, list[float]]:
    return {k: [float(np.quantile([v[k] for v in values], q)) for q in (0.25, 0.5, 0.75)] for k in STATS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser, required=False)
    parser.add_argument(
        "--pairs", type=Path, help="rain/norain pairs (default: rain100h-train-mini in --data)"
    )
    parser.add_argument(
        "--garg", type=Path, help="rendered streak layers (default: rain-streaks-garg06/layers in --data)"
    )
    parser.add_argument(
        "--garg-count", type=int, default=60, help="rendered layers to measure (evenly spaced)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pairs = under_data(parser, args.data, args.pairs, "rain100h-train-mini")
    garg_dir = under_data(parser, args.data, args.garg, "rain-streaks-garg06/layers")
    rng = np.random.default_rng(args.seed)
    styles = ("heavy", "rain100h")
    sources: dict[str, list[dict[str, float]]] = {"rain100h": []} | {f"procedural {s}": [] for s in styles}
    sources["garg"] = []
    for rain_path, clean_path in find_pairs(pairs):
        rainy, clean = read_rgb(rain_path), read_rgb(clean_path)
        sources["rain100h"].append(layer_stats(recover_layer(rainy, clean).mean(2)))
        for style in styles:
            for _ in range(2):
                synthetic = (add_rain(clean, rng, style, beta=COMPOSITE_BETA) * 255).round().astype(np.uint8)
                sources[f"procedural {style}"].append(layer_stats(recover_layer(synthetic, clean).mean(2)))
    garg = sorted(garg_dir.glob("*.png"))
    for path in garg[:: max(1, len(garg) // args.garg_count)]:
        sources["garg"].append(layer_stats(read_rgb(path).astype(np.float32).mean(2) / 255))
    result = {name: summary(values) | {"count": len(values)} for name, values in sources.items() if values}
    rows = [("statistic: median [quartiles]", " | ".join(f"{n} ({r['count']})" for n, r in result.items()))]
    for key in STATS:
        rows.append(
            (key, " | ".join(f"{r[key][1]:.3g} [{r[key][0]:.3g}, {r[key][2]:.3g}]" for r in result.values()))
        )
    report(rows, result)


if __name__ == "__main__":
    main()

"""Where weights change real rainy frames that have a clean frame: on the rain, or elsewhere.

    DERAIN_DATA=../shared/data python tools/rain_change.py --weights derain-small B.safetensors \
        --names stage9 B

``real_rain.py`` reads removal as change (mean |derained − rainy|, in 8-bit levels), which cannot tell rain
taken from anything else changed. Where a clean frame exists (the webcam's 35 frames, SPA's 2 pairs) the rain
can be located: rain adds thin bright features, so the rain is what the rainy frame has above the clean one
once both are high-passed (minus a Gaussian blur, sigma 3: the webcam's clean frame was taken at another
moment, and its light differs smoothly). On each frame, in grey (the mean of the channels), with ``r`` that
high-passed excess and ``d`` the darkening ``rainy − derained`` high-passed alike (so that a shift of the
whole frame's light is not read as rain taken):

- ``taken``: the share of the rain's excess the weights take away, ``sum(clip(min(d, r), 0)) / sum(r)`` over
  the rain pixels (``r > 8`` levels); 1 removes exactly the rain, 0 none of it;
- ``on rain``: the mean darkening ``d`` on the rain pixels;
- ``elsewhere``: the mean |derained − rainy| (grey, not high-passed) where the frame has no rain
  (``|r| < 1.5``): change that is not rain taken;
- ``change``: ``real_rain.py``'s reading, the mean |derained − rainy| over every pixel and channel.

Each reading per set, with paired 95 % intervals against the first weights (two frames give no interval worth
the name: SPA's are read frame by frame); ``RESULT {...}``; ``--json FILE`` writes per-frame values
(atomically).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np
from gallery import change_levels
from research import add_data_argument, add_weights_arguments, load_weights, mean_row, weights_names

from derain.inference import restore
from derain.io import atomic_output, read_rgb
from derain.pairing import find_pairs

SETS = {"webcam": "gtrain-webcam-pairs", "spa": "spa-samples"}
"""The real-rain sets with clean frames, by the folder under ``--data``."""
SIGMA = 3.0
"""The high-pass's Gaussian sigma, in pixels: wider than a streak, narrower than a change of light."""
RAIN, NO_RAIN = 8.0, 1.5
"""Levels of high-passed excess above which a pixel is rain, and below which (in magnitude) it has none."""
READINGS = ("taken", "on rain", "elsewhere", "change")


def high_pass(grey: np.ndarray) -> np.ndarray:
    return grey - cv2.GaussianBlur(grey, (0, 0), SIGMA)


def readings(rainy: np.ndarray, clean: np.ndarray, derained: np.ndarray) -> dict[str, float]:
    """The four readings of one frame (uint8 RGB images of one shape; see the module docstring)."""
    if not rainy.shape == clean.shape == derained.shape:
        raise ValueError(
            f"shapes differ: rainy {rainy.shape}, clean {clean.shape}, derained {derained.shape}"
        )
    grey = [image.astype(np.float32).mean(axis=2) for image in (rainy, clean, derained)]
    r = high_pass(grey[0] - grey[1])
    darkened = grey[0] - grey[2]
    d = high_pass(darkened)
    rain, none = r > RAIN, np.abs(r) < NO_RAIN
    excess = float(r[rain].sum())
    return {
        "taken": float(np.clip(np.minimum(d, r), 0, None)[rain].sum() / excess) if excess > 0 else 0.0,
        "on rain": float(d[rain].mean()) if rain.any() else 0.0,
        "elsewhere": float(np.abs(darkened[none]).mean()) if none.any() else 0.0,
        "change": change_levels(rainy, derained),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_weights_arguments(parser)
    add_data_argument(parser)
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = weights_names(parser, args)
    models = load_weights(args.weights)
    per_frame: dict[str, list[list[dict]]] = {}
    for s in args.sets:
        folder = args.data / SETS[s]
        if not (folder / "rain").is_dir():
            raise SystemExit(f"error: {folder} has no rain/ folder")
        pairs = find_pairs(folder)
        per_frame[s] = [[] for _ in models]
        for rain_path, clean_path in pairs:
            rainy, clean = read_rgb(rain_path), read_rgb(clean_path)
            for rows, model in zip(per_frame[s], models, strict=True):
                rows.append({"name": rain_path.name, **readings(rainy, clean, restore(model, rainy))})
        print(f"measured {s}: {len(pairs)} frames", file=sys.stderr)
    width = max(len(n) for n in names)
    print("levels (taken: a share); paired: minus first, 95 % interval")
    result: dict = {"weights": names}
    for s, columns in per_frame.items():
        print(f"  {s} ({len(columns[0])} frames)")
        result[s] = []
        for i, (name, rows) in enumerate(zip(names, columns, strict=True)):
            entry = {
                key: mean_row([row[key] for row in rows], [row[key] for row in columns[0]] if i else None)
                for key in READINGS
            }
            result[s].append(entry)
            cells = []
            for key in READINGS:
                p = entry[key].get("paired")
                shown = f"{key} {entry[key]['mean']:.3f}"
                cells.append(
                    shown + (f" ({p['mean']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}])" if p else "")
                )
            print(f"    {name:<{width}}  " + "; ".join(cells))
    if args.json:
        with atomic_output(args.json) as tmp:
            tmp.write_text(json.dumps({**result, "per_frame": per_frame}))
    print(
        "RESULT "
        + json.dumps(
            {
                f"{s}_{key.replace(' ', '_')}_{i}": round(e[key]["mean"], 4)
                for s in result
                if s != "weights"
                for i, e in enumerate(result[s])
                for key in READINGS
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

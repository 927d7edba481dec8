"""The web page's two qualities at 1 megapixel: what *Fast* (one pass) and *Best* (flip ensemble) take, and what
the page's start-up estimate said they would take.

    python benchmarks/page.py [--weights FILE] [--device cpu] [--rounds 3] [--ensemble 4]

Times ``restore`` on a 1-megapixel photo (the examples resized to 1155×866) with ``ensemble`` 1 and
``--ensemble``, interleaved rounds after a warm-up, the median of each and their ratio; then the page's
``SpeedEstimate`` (``derain.inference.timing``: its start-up reading) for the same photo and which quality
``--quality auto`` would make the page's default (``derain.page.auto_quality``, ``BEST_DEFAULT_MAX_S``). Prints a table, then one ``RESULT``
JSON line. Imports no gradio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import photos, report

from derain.inference import load_model, restore
from derain.inference.timing import SpeedEstimate
from derain.page import BEST_DEFAULT_MAX_S, auto_quality

SIZE = (866, 1155)  # 1.0 megapixel, the examples' 4:3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", type=Path, default=None, help="weights file (default: packaged)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ensemble", type=int, choices=(2, 4), default=4)
    args = parser.parse_args()
    model = load_model(args.weights, device=args.device)
    photo = photos(1, SIZE)[0]
    estimate = SpeedEstimate.measure(model)  # what the page measures at start-up (its default tiling)
    restore(model, photo)  # warm-up at this size
    times: dict[str, list[float]] = {"fast": [], "best": []}
    for _ in range(args.rounds):
        for name, n in (("fast", 1), ("best", args.ensemble)):
            start = time.perf_counter()
            restore(model, photo, ensemble=n)
            times[name].append(time.perf_counter() - start)
    med = {name: float(np.median(t)) for name, t in times.items()}
    pixels = SIZE[0] * SIZE[1]
    predicted = {"fast": estimate.seconds(pixels), "best": estimate.seconds(pixels, args.ensemble)}
    one_mp_best = estimate.seconds(10**6, args.ensemble)
    default = auto_quality(estimate, args.ensemble)
    rows = [
        ("photo", f"{SIZE[1]}×{SIZE[0]} ({pixels / 1e6:.2f} MP), device {args.device}"),
        ("Fast (1 pass), measured", f"{med['fast']:.2f} s"),
        (
            f"Best ({args.ensemble} passes), measured",
            f"{med['best']:.2f} s ({med['best'] / med['fast']:.2f}× Fast)",
        ),
        ("page's estimate, Fast / Best", f"{predicted['fast']:.2f} s / {predicted['best']:.2f} s"),
        (
            "auto default",
            f"{default} (Best at 1 MP {one_mp_best:.2f} s vs limit {BEST_DEFAULT_MAX_S:g} s)",
        ),
    ]
    report(
        rows,
        {
            "fast_s": med["fast"],
            "best_s": med["best"],
            "estimated_fast_s": predicted["fast"],
            "estimated_best_s": predicted["best"],
            "auto_default": default,
        },
    )


if __name__ == "__main__":
    main()

"""Time the train/test overlap check at Rain100H's size: 1800 training and 100 test clean images (481×321).

    python benchmarks/overlap.py [--train 1800] [--test 100]

The images are smooth random pictures written as PNG to a temporary folder (no data set needed); 546 training
images are copies of test images, flipped, turned by 90° or re-encoded as JPEG, as RainTrainH's are of the test
set. Prints the time to read and compare, against the time to only read the files, and whether exactly the 546
were found.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from common import report

from derain.data import find_overlap
from derain.io import read_rgb


def picture(rng: np.random.Generator, h: int = 321, w: int = 481) -> np.ndarray:
    small = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def variant(image: np.ndarray, k: int) -> np.ndarray:
    if k == 0:
        return image[:, ::-1]
    if k == 1:
        return np.rot90(image)
    if k == 2:
        return cv2.imdecode(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])[1], cv2.IMREAD_COLOR)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", type=int, default=1800)
    parser.add_argument("--test", type=int, default=100)
    parser.add_argument("--overlap", type=int, default=546)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tests = [picture(rng) for _ in range(args.test)]
        for i, image in enumerate(tests):
            for sub in ("rain", "norain"):
                (root / "test" / sub).mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(root / "test" / sub / f"{i}.png"), image)
        for i in range(args.train):
            image = variant(tests[i % args.test], i % 4) if i < args.overlap else picture(rng)
            for sub in ("rain", "norain"):
                (root / "train" / sub).mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(root / "train" / sub / f"{i}.png"), np.ascontiguousarray(image))
        start = time.perf_counter()
        found = find_overlap(root / "train", root / "test")
        total_s = time.perf_counter() - start
        start = time.perf_counter()
        for sub in ("train", "test"):
            for path in (root / sub / "norain").iterdir():
                read_rgb(path)
        read_s = time.perf_counter() - start
    expected = [str(i) for i in range(args.overlap)]
    report(
        [
            (f"find_overlap, {args.train} x {args.test} images", f"{total_s:.1f} s"),
            ("of which reading the clean images", f"{read_s:.1f} s ({read_s / total_s:.0%})"),
            (
                "overlapping pairs found",
                f"{len(found)} of {args.overlap} (exact: {sorted(found, key=int) == expected})",
            ),
        ],
        {
            "overlap_s": total_s,
            "read_s": read_s,
            "found": len(found),
            "exact": sorted(found, key=int) == expected,
        },
    )


if __name__ == "__main__":
    main()

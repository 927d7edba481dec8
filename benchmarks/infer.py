"""Inference benchmark: folder throughput, memory of a tiled 12 MP photo, and how much tiling changes the output.

    python benchmarks/infer.py [--weights FILE] [--images 8] [--large 4000x3000] [--tile 512] [--rounds 3]

Measures, on this machine's CPU (or ``--device``):

1. images/s of ``python -m derain.infer`` over a temporary folder of 321×481 photos (Rain100H size; the
   examples in ``datasets/examples`` resized and flipped), model loading excluded;
2. wall time and peak RSS of ``restore`` on a ``--large`` photo with ``--tile`` tiles, in a fresh child process
   (so the number is that photo's peak, not this process's history); target: under 2 GB for a 24 MP photo
   (``--large 6000x4000``) with the default network and derain-base's;
3. max / mean absolute difference (8-bit levels) between tiled (128 px tiles, 32 overlap) and whole-image
   output on a 256×384 photo;
4. seconds per 321×481 photo of ``restore`` with ``ensemble`` 1, 2 and 4 (self-ensemble of flips), interleaved
   rounds after a warm-up, median per setting and the ratio to ``ensemble=1``; and ``ensemble=1`` in yardsticks
   (``common.yardstick``, timed in the same rounds: the network's budget is 1.4);
5. the two backends side by side: seconds per photo of ``restore`` with torch eager and with onnxruntime (the
   ONNX graph of the same weights, ``--onnx FILE`` or exported once into the cache) at 321×481 and 854×480,
   interleaved rounds, median and the ratio; and the largest difference between their outputs (8-bit levels)
   on the example photos at three sizes. ``--no-onnx`` skips it.

Without ``--weights`` it uses the packaged weights, or, when none ship yet, a default ``DerainNet()`` with
random init (seed 0): speed and memory are the same as trained weights, the tiling difference is not.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import torch
from common import photos, yardstick

from derain.infer import main as infer_main
from derain.inference import WeightsNotFoundError, load_model, packaged_weights, restore
from derain.inference.onnx import OnnxNet, cached_onnx
from derain.models import DerainNet
from derain.weights import save_net


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def resolve_weights(weights: Path | None, workdir: Path) -> tuple[Path, str]:
    """A weights file to benchmark and a note on what it is."""
    if weights is not None:
        return weights, str(weights)
    try:
        return packaged_weights(), "packaged derain-small"
    except WeightsNotFoundError:
        torch.manual_seed(0)
        return save_net(
            DerainNet(), workdir / "random.safetensors"
        ), "DerainNet() random init (no shipped weights)"


def child_large(weights: Path, size: str, tile: int, device: str) -> None:
    """Child-process mode: restore one large photo, print a JSON line with seconds and peak RSS."""
    w, h = (int(v) for v in size.split("x"))
    model = load_model(weights, device=device)
    base = peak_rss_mb()
    image = cv2.resize(photos(1, (321, 481))[0], (w, h), interpolation=cv2.INTER_CUBIC)
    start = time.perf_counter()
    out = restore(model, image, tile=tile, overlap=32)
    seconds = time.perf_counter() - start
    assert out.shape == image.shape
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "model_rss_mb": base}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", type=Path, default=None)
    parser.add_argument("--images", type=int, default=8, help="photos in the folder benchmark")
    parser.add_argument("--large", default="4000x3000", help="WxH of the large photo")
    parser.add_argument("--tile", type=int, default=512, help="tile size for the large photo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds per ensemble setting")
    parser.add_argument(
        "--onnx", type=Path, default=None, help="ONNX file of --weights (default: cached export)"
    )
    parser.add_argument("--no-onnx", action="store_true", help="skip the backend comparison")
    parser.add_argument("--child-large", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds should be at least 1, got {args.rounds}")
    if args.child_large:
        child_large(args.weights, args.large, args.tile, args.device)
        return

    results: dict[str, object] = {"device": args.device, "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        weights, note = resolve_weights(args.weights, tmp_path)
        results["weights"] = note

        # 1. folder throughput through the CLI entry point
        in_dir = tmp_path / "rainy"
        in_dir.mkdir()
        for i, img in enumerate(photos(args.images, (321, 481))):
            cv2.imwrite(str(in_dir / f"{i:03d}.png"), img[:, :, ::-1])
        argv = [str(in_dir), str(tmp_path / "out"), "--weights", str(weights), "--device", args.device]
        with contextlib.redirect_stdout(io.StringIO()) as captured:
            status = infer_main(argv)
        assert status == 0, captured.getvalue()
        summary = captured.getvalue().strip().splitlines()[-1]  # "ok N, skipped N, failed N, X.XX images/s"
        results["infer_images_per_s"] = float(summary.split(", ")[-1].split()[0])

        # 2. large photo, tiled, in a fresh process
        cmd = [
            sys.executable,
            __file__,
            "--child-large",
            "--weights",
            str(weights),
            "--large",
            args.large,
            "--tile",
            str(args.tile),
            "--device",
            args.device,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        large = json.loads(proc.stdout.strip().splitlines()[-1])
        results.update({f"large_{k}": v for k, v in large.items()})

        # 3. tiled vs whole image
        model = load_model(weights, device=args.device)
        image = photos(1, (256, 384))[0]
        whole = restore(model, image, tile=0).astype(int)
        tiled = restore(model, image, tile=128, overlap=32).astype(int)
        diff = np.abs(whole - tiled)
        results["tiled_vs_whole_max"] = int(diff.max())
        results["tiled_vs_whole_mean"] = float(diff.mean())

        # 4. self-ensemble cost, the three settings interleaved so that machine noise hits them alike
        photo = photos(1, (321, 481))[0]
        restore(model, photo)  # warm-up
        times: dict[int, list[float]] = {1: [], 2: [], 4: []}
        units = []
        for _ in range(args.rounds):
            units.append(yardstick(repeats=1))
            for n, record in times.items():
                start = time.perf_counter()
                restore(model, photo, tile=0, ensemble=n)
                record.append(time.perf_counter() - start)
        ensemble_s = {n: float(np.median(t)) for n, t in times.items()}
        results["ensemble_seconds"] = ensemble_s
        results["yardstick_s"] = float(np.median(units))
        results["restore_321x481_yardsticks"] = ensemble_s[1] / results["yardstick_s"]

        # 5. torch eager against onnxruntime, interleaved
        backend_rows = []
        if not args.no_onnx:
            onnx_net = OnnxNet(args.onnx or cached_onnx(weights))
            torch_net = load_model(weights, device="cpu")
            parity = 0
            for size in ((321, 481), (333, 517), (480, 854)):
                for img in photos(3, size):
                    a = restore(torch_net, img).astype(int)
                    b = restore(onnx_net, img).astype(int)
                    parity = max(parity, int(np.abs(a - b).max()))
            results["onnx_vs_torch_max_levels"] = parity
            backend_rows.append(("onnxruntime vs torch, 9 photos, 3 sizes", f"max {parity} levels"))
            for size in ((321, 481), (480, 854)):
                photo = photos(1, size)[0]
                per: dict[str, list[float]] = {"torch": [], "onnxruntime": []}
                for _ in range(args.rounds + 1):  # the first round warms both up and is dropped
                    for name, net in (("torch", torch_net), ("onnxruntime", onnx_net)):
                        start = time.perf_counter()
                        restore(net, photo, tile=0)
                        per[name].append(time.perf_counter() - start)
                med = {name: float(np.median(t[1:])) for name, t in per.items()}
                key = f"{size[1]}x{size[0]}"
                results[f"backend_seconds_{key}"] = med
                backend_rows.append(
                    (
                        f"restore {key}: torch / onnxruntime",
                        f"{med['torch']:.3f} s / {med['onnxruntime']:.3f} s "
                        f"(onnxruntime {med['torch'] / med['onnxruntime']:.2f}× torch's speed)",
                    )
                )

    rows = [
        ("weights", note),
        ("device / threads", f"{args.device} / {results['threads']}"),
        (f"derain.infer, {args.images} × 321×481", f"{results['infer_images_per_s']:.2f} images/s"),
        (f"restore {args.large}, tile {args.tile}", f"{large['seconds']:.1f} s"),
        (
            f"peak RSS {args.large} (model alone)",
            f"{large['peak_rss_mb']:.0f} MB ({large['model_rss_mb']:.0f} MB)",
        ),
        ("tiled vs whole 256×384 (tile 128/32)", f"max {diff.max()}, mean {diff.mean():.3f} levels"),
        *(
            (f"restore 321×481, ensemble {n}", f"{sec:.3f} s ({sec / ensemble_s[1]:.2f}× ensemble 1)")
            for n, sec in ensemble_s.items()
        ),
        (
            "restore 321×481 in yardsticks (10 convs 48→48 3×3, 321×481; budget 1.4)",
            f"{results['restore_321x481_yardsticks']:.2f} (yardstick {results['yardstick_s']:.3f} s)",
        ),
        *backend_rows,
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 30}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""Video benchmark: frames per second at 480p for both backends, and flicker on static rainy scenes.

    DERAIN_DATA=../shared/data python benchmarks/video.py [--weights FILE] [--onnx FILE] [--frames 12] [--data DIR]

1. Frames per second of ``derain.inference.video.derain_video`` on an 854×480 H.264 clip (an example photo panned by 3
   pixels a frame, procedural heavy rain rendered anew on every frame), torch eager against onnxruntime
   (``--onnx`` or the weights exported once into the cache), decoding and encoding included.
2. Flicker: on the real webcam scenes of ``gtrain-webcam-pairs`` (4–7 rainy frames of one fixed camera each; in
   ``--data``, default ``$DERAIN_DATA``, skipped without either), the mean absolute change of luma (8-bit levels) between consecutive frames, for the rainy input and the
   derained output. Rain that differs from frame to frame is most of the input's flicker; a derained static
   scene should change less.
3. Temporal smoothing, the candidate: an exponential moving average of the derained frames (weight ``a`` on the
   new frame). Its flicker on the webcam scenes, and its ghosting on moving content: on the panned clip, the
   PSNR of plain and smoothed output against the clean panned photo, panned 3 and 12 pixels a frame
   (smoothing that trails moving edges loses PSNR there).

Prints a table, then one ``RESULT {...}`` JSON line.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import av
import cv2
import numpy as np
from common import report

from derain.inference import load_model, packaged_weights, read_image, restore
from derain.inference.onnx import OnnxNet, cached_onnx
from derain.inference.video import derain_video
from derain.synth import add_rain

REPO = Path(__file__).resolve().parents[1]


def luma(image: np.ndarray) -> np.ndarray:
    return image.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)


def flicker(frames: list[np.ndarray]) -> float:
    """Mean absolute luma change between consecutive frames, in 8-bit levels."""
    return float(
        np.mean([np.abs(luma(b) - luma(a)).mean() for a, b in zip(frames, frames[1:], strict=False)])
    )


def smooth(frames: list[np.ndarray], a: float) -> list[np.ndarray]:
    """Exponential moving average over frames: ``s_t = a·x_t + (1 − a)·s_{t−1}``, rounded to uint8."""
    out, state = [], None
    for frame in frames:
        state = frame.astype(np.float32) if state is None else state + a * (frame - state)
        out.append(np.rint(state).astype(np.uint8))
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-10)))


def panned_clip(path: Path, frames: int, step: int, size: tuple[int, int] = (480, 854)) -> list[np.ndarray]:
    """Write a rainy H.264 clip of an example photo panned ``step`` px a frame; return the clean frames."""
    photo = read_image(sorted((REPO / "datasets" / "examples").glob("*.jpg"))[0])
    h, w = size
    canvas = cv2.resize(photo, (w + step * frames, h), interpolation=cv2.INTER_CUBIC)
    rng = np.random.default_rng(0)
    cleans = []
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": "12"}
        for i in range(frames):
            clean = np.ascontiguousarray(canvas[:, step * i : step * i + w])
            cleans.append(clean)
            rainy = np.rint(add_rain(clean, rng, "heavy", beta=0.0) * 255).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rainy, format="rgb24")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return cleans


def decoded(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", type=Path, default=None, help="default: the packaged weights")
    parser.add_argument("--onnx", type=Path, default=None, help="ONNX file of --weights (default: cached)")
    parser.add_argument("--frames", type=int, default=12, help="frames of the 480p clip")
    parser.add_argument(
        "--data",
        type=Path,
        default=os.environ.get("DERAIN_DATA"),
        help="folder with gtrain-webcam-pairs (default: $DERAIN_DATA)",
    )
    parser.add_argument("--alphas", default="0.5,0.7", help="EMA weights of the new frame to try")
    args = parser.parse_args()
    weights = args.weights or packaged_weights()
    nets = {
        "torch": load_model(weights, device="cpu"),
        "onnxruntime": OnnxNet(args.onnx or cached_onnx(weights)),
    }
    alphas = [float(a) for a in args.alphas.split(",")]
    rows, result = [], {}

    with tempfile.TemporaryDirectory() as tmp:
        for step in (3, 12):
            clip = Path(tmp) / f"pan{step}.mp4"
            cleans = panned_clip(clip, args.frames, step)
            outputs = {}
            for name, net in nets.items() if step == 3 else [("torch", nets["torch"])]:
                start = time.perf_counter()
                done = derain_video(net, clip, Path(tmp) / f"{name}{step}.mp4")
                if step == 3:
                    fps = done.frames / (time.perf_counter() - start)
                    result[f"fps_480p_{name}"] = fps
                    rows.append((f"854×480, {done.frames} frames, {name}", f"{fps:.2f} frames/s"))
                outputs[name] = decoded(Path(tmp) / f"{name}{step}.mp4")
            if step == 3:
                ratio = result["fps_480p_onnxruntime"] / result["fps_480p_torch"]
                rows.append(("onnxruntime / torch frame rate", f"{ratio:.2f}×"))
            rainy, plain = decoded(clip), outputs["torch"]
            key = f"pan{step}"
            result[f"{key}_psnr_input"] = float(
                np.mean([psnr(r, c) for r, c in zip(rainy, cleans, strict=True)])
            )
            result[f"{key}_psnr_plain"] = float(
                np.mean([psnr(o, c) for o, c in zip(plain, cleans, strict=True)])
            )
            rows.append(
                (
                    f"pan {step} px/frame: PSNR input / derained",
                    f"{result[f'{key}_psnr_input']:.2f} / {result[f'{key}_psnr_plain']:.2f} dB",
                )
            )
            for a in alphas:
                value = float(np.mean([psnr(o, c) for o, c in zip(smooth(plain, a), cleans, strict=True)]))
                result[f"{key}_psnr_ema{a}"] = value
                gain = value - result[f"{key}_psnr_plain"]
                rows.append((f"pan {step} px/frame: PSNR with EMA a={a}", f"{value:.2f} dB ({gain:+.2f})"))

    scenes: dict[str, list[Path]] = defaultdict(list)
    webcam = None if args.data is None else Path(args.data) / "gtrain-webcam-pairs"
    for path in sorted((webcam / "rain").glob("*-R-*.png")) if webcam else []:
        scenes[re.sub(r"-R-\d+$", "", path.stem)].append(path)
    if scenes:
        per = defaultdict(list)
        for paths in scenes.values():
            frames = [read_image(p) for p in paths]
            derained = [restore(nets["torch"], f) for f in frames]
            per["input"].append(flicker(frames))
            per["derained"].append(flicker(derained))
            for a in alphas:
                per[f"ema{a}"].append(flicker(smooth(derained, a)))
        for key, values in per.items():
            result[f"flicker_{key}"] = float(np.mean(values))
        rows.append(
            (
                f"flicker, {len(scenes)} webcam scenes: input / derained",
                f"{result['flicker_input']:.2f} / {result['flicker_derained']:.2f} levels "
                f"({result['flicker_derained'] / result['flicker_input']:.2f}×)",
            )
        )
        for a in alphas:
            rows.append((f"flicker with EMA a={a}", f"{result[f'flicker_ema{a}']:.2f} levels"))
    else:
        where = "no --data and no $DERAIN_DATA" if webcam is None else f"no scenes in {webcam / 'rain'}"
        rows.append(("flicker", f"skipped: {where}"))
    report(rows, result)


if __name__ == "__main__":
    main()

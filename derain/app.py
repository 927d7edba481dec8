"""Derain one photo in the browser: ``derain app`` (or ``python -m derain.app``, ``derain-app``, or the
repository's ``python app.py``) then open http://127.0.0.1:7860.

Upload a rainy photo (or click an example), choose *Fast* (one pass) or *Best* (a flip self-ensemble, several
times slower; the page shows what each is expected to take for the photo), press *Derain*, compare before/after
with the slider and download the full-resolution PNG. Large photos are tiled; photos over ``--max-megapixels`` are refused with a message.
Requests wait in a queue (``--concurrency`` photos derained at once); when ``--max-queue`` requests are already
waiting, a new one is turned away with Gradio's "queue is full, try again" message instead of piling up.
The click is also an API endpoint: ``gradio_client.Client(url).predict(handle_file(path), api_name="/derain")``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import cv2
import gradio as gr
import numpy as np
import torch
from PIL import Image
from torch import nn

from derain import arguments
from derain.extras import MissingExtraError
from derain.inference import ensemble_flips, read_image, restore
from derain.inference.video import VideoError, derain_video, probe
from derain.io import ImageReadError, image_size, to_rgb8, write_image_atomic
from derain.models import DerainNet
from derain.resources import shipped_folder

EXAMPLES_DIR = shipped_folder("examples", "datasets/examples")
"""The example photos: ``derain/examples`` once installed, else ``datasets/examples`` of the source tree."""
MAX_MEGAPIXELS = 40.0
MAX_VIDEO_SECONDS = 10.0  # longer clips are refused with a message: python -m derain.infer has no limit
MAX_QUEUE = 32  # requests allowed to wait; more are turned away with "queue is full, try again"
DISPLAY_SIDE = 2048  # the slider shows a preview at most this long; the download keeps full resolution
KEEP_OUTPUTS_S = 3600  # result PNGs older than this are removed from the app's temporary folder
BEST_DEFAULT_MAX_S = 3.0
"""*Best* is the page's default quality when it is expected to take at most this long for a 1-megapixel photo
(a GPU); otherwise *Fast* is (on the 2-core development CPU *Best* takes about 4× a one-pass 1 MP photo's few
seconds, see the README's benchmark)."""
QUALITIES = ("auto", "fast", "best")
UNTRAINED_WARNING = (
    "**Untrained network (random weights): the output is not derained.** For demos and tests only."
)

__all__ = ["build_app", "main", "SpeedEstimate"]


class SpeedEstimate:
    """Seconds one network pass takes per megapixel on this server: measured once at start-up on a small
    photo, then updated from every photo derained, so the page can say what *Fast* and *Best* will take."""

    CALIBRATION = (256, 256)

    def __init__(self, model: nn.Module, *, tile: int | None, overlap: int) -> None:
        image = np.random.default_rng(0).integers(0, 256, (*self.CALIBRATION, 3), dtype=np.uint8)
        restore(model, image, tile=tile, overlap=overlap)  # warm-up: first-call set-up is not per pixel
        start = time.perf_counter()
        restore(model, image, tile=tile, overlap=overlap)
        self.per_megapixel = (time.perf_counter() - start) / (image.shape[0] * image.shape[1] / 1e6)

    def seconds(self, pixels: int, passes: int = 1) -> float:
        """Expected seconds for a photo of ``pixels`` derained with ``passes`` network passes."""
        return self.per_megapixel * pixels / 1e6 * passes

    def auto_quality(self, ensemble: int) -> str:
        """``--quality auto``: ``"best"`` when *Best* (``ensemble`` passes) is expected to take at most
        ``BEST_DEFAULT_MAX_S`` for a 1-megapixel photo, else ``"fast"``."""
        return "best" if self.seconds(10**6, ensemble) <= BEST_DEFAULT_MAX_S else "fast"

    def update(self, pixels: int, passes: int, seconds: float) -> None:
        """Fold in a measured photo (half the weight on the newest measurement)."""
        if pixels > 0 and passes > 0:
            self.per_megapixel = 0.5 * self.per_megapixel + 0.5 * seconds / (pixels / 1e6 * passes)


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _preview(image: np.ndarray) -> np.ndarray:
    """Any array ``restore`` handles -> 8-bit RGB no longer than ``DISPLAY_SIDE`` pixels, for the slider."""
    image = to_rgb8(image)
    scale = DISPLAY_SIDE / max(image.shape[:2])
    if scale < 1:
        size = (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale)))
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(image)


def _pixel_count(path: Path) -> int | None:
    """Pixels of the image at ``path`` read from its header alone; ``None`` when PIL cannot tell.

    Raises:
        gr.Error: the header is over PIL's decompression-bomb limit: refused before anything is decoded.
    """
    try:
        h, w = image_size(path)
    except ImageReadError as err:
        if isinstance(err.__cause__, Image.DecompressionBombError):
            raise gr.Error(
                f"This photo has over {2 * (Image.MAX_IMAGE_PIXELS or 0) / 1e6:.3g} megapixels, more than "
                "this page decodes."
            ) from None
        return None  # a format PIL does not know: read_image decides
    return h * w


def _prune(folder: Path, max_age_s: float) -> None:
    """Remove result folders (one per request) under ``folder`` older than ``max_age_s`` seconds."""
    cutoff = time.time() - max_age_s
    for sub in folder.iterdir():
        if sub.is_dir() and sub.stat().st_mtime < cutoff:
            for path in sub.iterdir():
                path.unlink(missing_ok=True)
            sub.rmdir()


def build_app(
    model: nn.Module,
    *,
    tile: int | None = None,
    overlap: int = 32,
    max_megapixels: float = MAX_MEGAPIXELS,
    concurrency: int = 1,
    max_queue: int = MAX_QUEUE,
    warning: str | None = None,
    ensemble: int = 4,
    quality: str = "auto",
    max_video_seconds: float = MAX_VIDEO_SECONDS,
) -> gr.Blocks:
    """The Gradio page around ``model``, queued; ``.launch()`` it.

    Args:
        model: the deraining network (see :func:`derain.inference.load_model`).
        tile: tile size for :func:`derain.inference.restore`; ``None`` tiles only large photos.
        overlap: tile overlap in pixels.
        max_megapixels: photos with more pixels than this are refused with a message.
        concurrency: how many photos are derained at once (1 suits a CPU; more can help on a GPU).
        max_queue: how many requests may wait for their turn; further ones get Gradio's "queue is full"
            message at once (``gradio_client`` raises ``QueueError``). With ``max_megapixels`` and
            ``concurrency`` it bounds the server's memory: only ``concurrency`` photos are decoded at a time.
        warning: Markdown shown at the top of the page (e.g. that the weights are untrained).
        ensemble: *Best* quality averages over this many upright flips per photo (2 or 4; see ``restore``),
            that many times slower than *Fast* (one pass). Videos are derained in the chosen quality too.
        quality: the page's default choice, ``"fast"``, ``"best"`` or ``"auto"``: *Best* when it is expected to
            take at most ``BEST_DEFAULT_MAX_S`` for a 1-megapixel photo on this server (measured at start-up),
            else *Fast*.
        max_video_seconds: longest clip the video tab accepts; longer ones get a message.

    Returns:
        The ``gr.Blocks`` app; its click events are exposed to API clients as ``/derain`` (photo) and
        ``/derain_video``.
    """
    ensemble_flips(ensemble)  # refuse a bad value at start-up, not at the first photo
    if ensemble < 2:
        raise ValueError(f"ensemble is Best quality's number of passes: 2 or 4, got {ensemble}")
    if quality not in QUALITIES:
        raise ValueError(f"quality should be one of {', '.join(QUALITIES)}, got {quality!r}")
    speed = SpeedEstimate(model, tile=tile, overlap=overlap)
    if quality == "auto":
        quality = speed.auto_quality(ensemble)
    passes = {"fast": 1, "best": ensemble}

    def passes_for(choice: str) -> int:
        """Network passes of a quality choice; a message for anything but fast or best (API callers)."""
        if choice not in passes:
            raise gr.Error(f"Quality should be fast or best, got {choice!r}.")
        return passes[choice]

    if max_queue < 1 or concurrency < 1:
        raise ValueError(f"max_queue and concurrency should be >= 1, got {max_queue} and {concurrency}")
    out_root = Path(tempfile.mkdtemp(prefix="derain-app-"))
    max_pixels = int(max_megapixels * 1e6)

    def expected(photo: str | dict | None) -> str:
        """What *Fast* and *Best* are expected to take for the photo just chosen (read from its header)."""
        path = photo.get("path") if isinstance(photo, dict) else photo
        pixels = _pixel_count(Path(path)) if path else None
        if not pixels:
            return ""
        fast, best = (speed.seconds(pixels, passes[q]) for q in ("fast", "best"))
        return (
            f"{pixels / 1e6:.2g} megapixels: expected about **{_duration(fast)}** with Fast, "
            f"**{_duration(best)}** with Best."
        )

    def derain(photo: dict | None, choice: str = quality) -> tuple[tuple[np.ndarray, np.ndarray], str, str]:
        """Derain the uploaded photo: (before, after) previews, the full-size PNG, and a status line.

        The upload arrives as Gradio's file payload (``preprocess=False``), not decoded by Gradio, so that
        files that are not images get a readable message from ``read_image`` rather than a PIL traceback.
        """
        if not photo or not photo.get("path"):
            raise gr.Error("Upload a rainy photo first, or click one of the examples.")
        source = Path(photo["path"])
        name = photo.get("orig_name") or source.name
        pixels = _pixel_count(source)
        if pixels is not None and pixels > max_pixels:
            raise gr.Error(
                f"This photo has {pixels / 1e6:.1f} megapixels; the limit here is {max_megapixels:g}. "
                "Use `python -m derain.infer` for very large photos."
            )
        try:
            image = read_image(source)
        except ValueError as err:  # ImageReadError: "cannot read image <cache path>: <reason>"
            reason = str(err).rsplit(": ", 1)[-1]
            raise gr.Error(f"{name} is not an image this page can read ({reason}).") from None
        h, w = image.shape[:2]
        if h * w > max_pixels:
            raise gr.Error(
                f"This photo has {h * w / 1e6:.1f} megapixels; the limit here is {max_megapixels:g}."
            )
        n = passes_for(choice)
        start = time.perf_counter()
        result = restore(model, image, tile=tile, overlap=overlap, ensemble=n)
        seconds = time.perf_counter() - start
        speed.update(h * w, n, seconds)
        _prune(out_root, KEEP_OUTPUTS_S)
        out_path = Path(tempfile.mkdtemp(dir=out_root)) / f"{Path(name).stem}-derained.png"
        write_image_atomic(out_path, result)
        status = f"Derained {w}×{h} pixels in **{seconds:.2f} s**"
        status += f" (Best: self-ensemble of {n} passes)." if n > 1 else " (Fast: one pass)."
        return (_preview(image), _preview(result)), str(out_path), status

    def derain_clip(
        clip: str | None, choice: str = quality, progress: gr.Progress = gr.Progress()
    ) -> tuple[str, str]:
        """Derain every frame of the uploaded clip: the derained MP4 (H.264, audio kept) and a status line."""
        if not clip:
            raise gr.Error("Upload a short rainy video first.")
        n = passes_for(choice)
        source = Path(clip)
        try:
            info = probe(source)
        except VideoError:
            raise gr.Error(f"{source.name} is not a video this page can read.") from None
        except MissingExtraError as err:  # PyAV is derain[video]'s
            raise gr.Error(f"{err}.") from None
        if info.seconds > max_video_seconds:
            raise gr.Error(
                f"This clip is {info.seconds:.1f} s long; the limit here is {max_video_seconds:g} s. "
                "Use `python -m derain.infer clip.mp4 out.mp4` for longer videos."
            )
        if info.width * info.height > max_pixels:
            raise gr.Error(
                f"This clip's frames have {info.width * info.height / 1e6:.1f} megapixels; the limit here is "
                f"{max_megapixels:g}."
            )
        total = max(info.frames, 1)
        start = time.perf_counter()
        _prune(out_root, KEEP_OUTPUTS_S)
        out_path = Path(tempfile.mkdtemp(dir=out_root)) / f"{source.stem}-derained.mp4"
        try:
            result = derain_video(
                model,
                source,
                out_path,
                tile=tile,
                overlap=overlap,
                ensemble=n,
                max_frames=int(max_video_seconds * info.fps) + 1,
                on_frame=lambda done: progress(min(done / total, 1.0), desc=f"frame {done} of {total}"),
            )
        except VideoError as err:
            reason = str(err).split(": ", 1)[-1]
            raise gr.Error(f"{source.name}: {reason}") from None
        seconds = time.perf_counter() - start
        status = (
            f"Derained {result.frames} frames of {result.width}×{result.height} in **{seconds:.1f} s** "
            f"({result.frames / seconds:.2f} frames/s); audio {result.audio}."
        )
        return str(out_path), status

    with gr.Blocks(title="derain", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            "# derain\nRemove rain streaks from a photo or a short video. Upload one or click an example, "
            "then *Derain*."
        )
        if warning:
            gr.Markdown(warning, elem_id="warning")
        with gr.Tab("Photo"), gr.Row():
            with gr.Column():
                photo = gr.Image(
                    type="filepath",
                    image_mode=None,
                    sources=["upload", "clipboard"],
                    label="Rainy photo",
                    elem_id="photo",
                )
                one_mp = speed.seconds(10**6)
                choice = gr.Radio(
                    [
                        (f"Fast: one pass (about {_duration(one_mp)} a megapixel here)", "fast"),
                        (
                            f"Best: flip ensemble of {ensemble} (about {_duration(one_mp * ensemble)} a "
                            "megapixel here)",
                            "best",
                        ),
                    ],
                    value=quality,
                    label="Quality",
                    elem_id="quality",
                )
                button = gr.Button("Derain", variant="primary", elem_id="derain-button")
                examples = sorted(EXAMPLES_DIR.glob("*.jpg"))
                if examples:
                    gr.Examples([[str(p)] for p in examples], inputs=[photo], label="Examples")
            with gr.Column():
                slider = gr.ImageSlider(
                    label="Before / after", type="numpy", interactive=False, format="png", elem_id="result"
                )
                download = gr.File(label="Derained PNG (full resolution)", elem_id="download")
                status = gr.Markdown(elem_id="status")
        with gr.Tab("Video"), gr.Row():
            with gr.Column():
                clip = gr.Video(
                    sources=["upload"],
                    label=f"Rainy video (up to {max_video_seconds:g} s)",
                    elem_id="clip",
                )
                clip_button = gr.Button("Derain video", variant="primary", elem_id="derain-video-button")
            with gr.Column():
                clip_result = gr.Video(
                    label="Derained video (H.264)", interactive=False, elem_id="clip-result"
                )
                clip_status = gr.Markdown(elem_id="clip-status")
        photo.change(expected, inputs=[photo], outputs=[status], api_name="expected", preprocess=False)
        button.click(
            derain,
            inputs=[photo, choice],
            outputs=[slider, download, status],
            api_name="derain",
            preprocess=False,
        )
        clip_button.click(
            derain_clip, inputs=[clip, choice], outputs=[clip_result, clip_status], api_name="derain_video"
        )
    return demo.queue(default_concurrency_limit=concurrency, max_size=max_queue)


def build_parser(prog: str = "python -m derain.app") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Derain photos in the browser.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    arguments.add_model_arguments(parser, scope="photo", ensemble=False)
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="use an untrained network (page layout demos and tests only)",
    )
    parser.add_argument(
        "--ensemble",
        type=int,
        choices=(2, 4),
        default=4,
        help="Best quality's passes: the average over this many upright flips (default 4)",
    )
    parser.add_argument(
        "--quality",
        choices=QUALITIES,
        default="auto",
        help=f"the page's default quality (default auto: Best when it takes at most {BEST_DEFAULT_MAX_S:g} s for "
        "1 megapixel here, else Fast)",
    )
    parser.add_argument("--max-megapixels", type=float, default=MAX_MEGAPIXELS, help="largest photo accepted")
    parser.add_argument(
        "--max-video-seconds",
        type=float,
        default=MAX_VIDEO_SECONDS,
        help=f"longest clip the video tab accepts (default {MAX_VIDEO_SECONDS:g})",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="photos derained at once (default 1)")
    parser.add_argument(
        "--max-queue",
        type=int,
        default=MAX_QUEUE,
        help=f"requests allowed to wait; more are told the queue is full (default {MAX_QUEUE})",
    )
    return parser


def main(argv: list[str] | None = None, *, prog: str = "python -m derain.app") -> int:
    """Start the server; returns 2 with a message when no weights can be loaded."""
    args = build_parser(prog).parse_args(argv)
    warning = None
    if args.random_weights:
        print(
            "WARNING: --random-weights: the network is UNTRAINED; its output is not derained.",
            file=sys.stderr,
        )
        torch.manual_seed(0)
        model = DerainNet().to(args.device or "cpu").eval()
        warning = UNTRAINED_WARNING
    else:
        try:
            model = arguments.model_from_args(args)
        except arguments.UsageError as err:
            hint = "(or start with --random-weights to see the page with an untrained network)"
            return arguments.usage_error(err, hint)
    demo = build_app(
        model,
        tile=args.tile,
        overlap=args.overlap,
        max_megapixels=args.max_megapixels,
        concurrency=args.concurrency,
        max_queue=args.max_queue,
        warning=warning,
        ensemble=args.ensemble,
        quality=args.quality,
        max_video_seconds=args.max_video_seconds,
    )
    demo.launch(server_name=args.host, server_port=args.port, allowed_paths=[str(EXAMPLES_DIR)])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Derain one photo in the browser: ``derain app`` (or ``python -m derain.app``, ``derain-app``, or the
repository's ``python app.py``) then open http://127.0.0.1:7860.

Upload a rainy photo (or click an example), choose *Fast* (one pass) or *Best* (a flip self-ensemble, several
times slower; the page shows what each is expected to take for the photo) and the *Strength* (how much of the rain
found is taken away, 0 to 2; the PNG's name says it when not 1), press *Derain*, compare before/after with the
slider and download the full-resolution PNG. Large photos are tiled; photos over ``--max-megapixels`` are refused
with a message. Requests wait in a queue (``--concurrency`` photos derained at once); when
``--max-queue`` requests are already waiting, a new one is turned away with Gradio's "queue is full, try again"
message instead of piling up. The click is also an API endpoint:
``gradio_client.Client(url).predict(handle_file(path), api_name="/derain")`` (then, optionally, the quality and the
strength: ``predict(handle_file(path), "fast", 1.5, api_name="/derain")``).

The page has three parts: ``derain.page``'s :class:`~derain.page.PageSettings` (the options, checked once) and
:class:`~derain.page.PageHandlers` (the requests as plain methods that raise ``RequestError``; no gradio, no server
needed to call them), and here the layout (:func:`build_app`), which turns a ``RequestError`` into the page's
message in one place.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

import gradio as gr
import torch
from torch import nn

from derain import arguments
from derain.inference import MAX_STRENGTH
from derain.inference.timing import SpeedEstimate
from derain.models import DerainNet
from derain.page import PageHandlers, PageSettings, RequestError
from derain.resources import shipped_folder

EXAMPLES_DIR = shipped_folder("examples", "datasets/examples")
"""The example photos: ``derain/examples`` once installed, else ``datasets/examples`` of the source tree."""
UNTRAINED_WARNING = (
    "**Untrained network (random weights): the output is not derained.** For demos and tests only."
)

__all__ = ["EXAMPLES_DIR", "PageSettings", "UNTRAINED_WARNING", "build_app", "main"]


def _shown(handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler`` for Gradio: a :class:`RequestError` becomes ``gr.Error``, the page's message (the one place)."""

    @functools.wraps(handler)  # Gradio reads the handler's parameters (and gr.Progress defaults) through this
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except RequestError as err:
            raise gr.Error(str(err)) from None

    return call


def _photo_tab(handlers: PageHandlers) -> tuple[gr.Radio, gr.Slider]:
    """The Photo tab: upload, quality, strength, *Derain*; the before/after slider, the PNG and the status line.
    Gives the quality choice and the strength (the Video tab reads them too)."""
    with gr.Tab("Photo"), gr.Row():
        with gr.Column():
            photo = gr.Image(
                type="filepath",
                image_mode=None,
                sources=["upload", "clipboard"],
                label="Rainy photo",
                elem_id="photo",
            )
            choice = gr.Radio(
                handlers.quality_choices(),
                value=handlers.default_quality,
                label="Quality",
                elem_id="quality",
            )
            strength = gr.Slider(
                0.0,
                MAX_STRENGTH,
                value=1.0,
                step=0.05,
                label="Strength",
                info="How much of the rain found is taken away: 0 none, 1 the network's output, 2 twice as much",
                elem_id="strength",
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
    photo.change(
        _shown(handlers.expected), inputs=[photo], outputs=[status], api_name="expected", preprocess=False
    )
    derained = button.click(
        _shown(handlers.derain),
        inputs=[photo, choice, strength],
        outputs=[slider, download, status],
        api_name="derain",
        preprocess=False,
    )

    def relabel() -> gr.Radio:
        """The quality labels again: their times follow the photos derained (API clients see no extra output)."""
        return gr.Radio(choices=handlers.quality_choices())

    derained.success(relabel, outputs=[choice], api_visibility="private", queue=False)
    return choice, strength


def _video_tab(handlers: PageHandlers, choice: gr.Radio, strength: gr.Slider) -> None:
    """The Video tab: upload, *Derain video*; the derained clip and its status line (quality and strength from the
    Photo tab's)."""
    limit = handlers.settings.max_video_seconds
    with gr.Tab("Video"), gr.Row():
        with gr.Column():
            clip = gr.Video(sources=["upload"], label=f"Rainy video (up to {limit:g} s)", elem_id="clip")
            clip_button = gr.Button("Derain video", variant="primary", elem_id="derain-video-button")
        with gr.Column():
            clip_result = gr.Video(label="Derained video (H.264)", interactive=False, elem_id="clip-result")
            clip_status = gr.Markdown(elem_id="clip-status")

    def derain_clip(
        clip: str | None,
        choice: str | None = None,
        strength: float | None = 1.0,
        progress: gr.Progress = gr.Progress(),
    ) -> tuple[str, str]:
        def on_frame(done: int, total: int) -> None:
            progress(min(done / total, 1.0), desc=f"frame {done} of {total}")

        return handlers.derain_clip(clip, choice, on_frame, strength)

    clip_button.click(
        _shown(derain_clip),
        inputs=[clip, choice, strength],
        outputs=[clip_result, clip_status],
        api_name="derain_video",
    )


def build_app(
    model: nn.Module, settings: PageSettings | None = None, *, speed: SpeedEstimate | None = None
) -> gr.Blocks:
    """The Gradio page around ``model``, queued; ``.launch()`` it.

    Args:
        model: the deraining network (see :func:`derain.inference.load_model`).
        settings: the page's options (default: ``PageSettings()``).
        speed: where the expected times start; ``None``: the page measures ``model`` now (:class:`PageHandlers`).

    Returns:
        The ``gr.Blocks`` app; its click events are exposed to API clients as ``/derain`` (photo),
        ``/expected`` and ``/derain_video``.
    """
    settings = settings or PageSettings()
    handlers = PageHandlers(model, settings, speed)
    with gr.Blocks(title="derain", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            "# derain\nRemove rain streaks from a photo or a short video. Upload one or click an example, "
            "then *Derain*."
        )
        if settings.warning:
            gr.Markdown(settings.warning, elem_id="warning")
        choice, strength = _photo_tab(handlers)
        _video_tab(handlers, choice, strength)
    return demo.queue(default_concurrency_limit=settings.concurrency, max_size=settings.max_queue)


def build_parser(prog: str = "python -m derain.app") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Derain photos in the browser.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    arguments.add_model_arguments(parser, scope="photo", ensemble=False)
    random_help = "use an untrained network (page layout demos and tests only)"
    parser.add_argument("--random-weights", action="store_true", help=random_help)
    arguments.add_settings_arguments(parser, PageSettings)
    return parser


def main(argv: list[str] | None = None, *, prog: str = "python -m derain.app") -> int:
    """Start the server; returns 2 with a message when no weights can be loaded."""
    args = build_parser(prog).parse_args(argv)
    try:  # the options first: a bad one is reported before any weights load
        settings = arguments.settings_from_args(
            PageSettings, args, warning=UNTRAINED_WARNING if args.random_weights else None
        )
    except arguments.UsageError as err:
        return arguments.usage_error(err)
    if args.random_weights:
        print(
            "WARNING: --random-weights: the network is UNTRAINED; its output is not derained.",
            file=sys.stderr,
        )
        torch.manual_seed(0)
        model = DerainNet().to(args.device or "cpu").eval()
    else:
        try:
            model = arguments.model_from_args(args)
        except arguments.UsageError as err:
            hint = "(or start with --random-weights to see the page with an untrained network)"
            return arguments.usage_error(err, hint)
    demo = build_app(model, settings)
    demo.launch(server_name=args.host, server_port=args.port, allowed_paths=[str(EXAMPLES_DIR)])
    return 0


if __name__ == "__main__":
    sys.exit(main())

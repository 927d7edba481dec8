"""The web page's settings and requests, without gradio: :class:`PageSettings` (the options, checked once) and
:class:`PageHandlers` (each request as a plain method that raises :class:`RequestError` with the visitor's message).

``derain.app`` lays the page out around them and turns a ``RequestError`` into the page's message in one place;
tests and scripts call the handlers directly, no server needed.

Example:
    >>> from derain.inference.timing import SpeedEstimate
    >>> handlers = PageHandlers(load_model(), PageSettings(ensemble=2), SpeedEstimate(1.0))  # doctest: +SKIP
    >>> handlers.expected("rainy.jpg")                                                         # doctest: +SKIP
    '0.48 megapixels: expected about **0.5 s** with Fast, **1.0 s** with Best.'
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image
from torch import nn

from derain.extras import MissingExtraError
from derain.inference import RestoreOptions, read_image, restore
from derain.inference.timing import SpeedEstimate
from derain.inference.video import VideoError, VideoInfo, derain_video, probe
from derain.io import ImageReadError, image_size, to_rgb8, write_image_atomic

__all__ = [
    "BEST_DEFAULT_MAX_S",
    "MAX_MEGAPIXELS",
    "MAX_QUEUE",
    "MAX_VIDEO_SECONDS",
    "QUALITIES",
    "PageHandlers",
    "PageSettings",
    "RequestError",
    "auto_quality",
]

MAX_MEGAPIXELS = 40.0
MAX_VIDEO_SECONDS = 10.0  # longer clips are refused with a message: derain infer has no limit
MAX_QUEUE = 32  # requests allowed to wait; more are turned away with "queue is full, try again"
DISPLAY_SIDE = 2048  # the slider shows a preview at most this long; the download keeps full resolution
KEEP_OUTPUTS_S = 3600  # result PNGs older than this are removed from the app's temporary folder
QUALITIES = ("auto", "fast", "best")
BEST_DEFAULT_MAX_S = 3.0
"""Under ``quality="auto"`` the page picks *Best* when it is expected to take at most this many seconds for a
1-megapixel photo (:func:`auto_quality`), else *Fast* (one pass)."""


def _option(default: Any, help: str, **more: Any) -> Any:
    """A :class:`PageSettings` field that is also an option of ``derain app`` (``--NAME``, with this help)."""
    return field(default=default, metadata={"help": help, **more})


@dataclass(frozen=True)
class PageSettings:
    """The page's options, declared once: ``derain app`` derives its options from these fields
    (:func:`derain.arguments.add_settings_arguments`; ``--tile`` and ``--overlap`` are the shared model options).
    Checked once when made (a ``ValueError`` names the bad one).

    Args:
        tile: tile size for :func:`derain.inference.restore`; ``None`` tiles only large photos.
        overlap: tile overlap in pixels.
        max_megapixels: photos (and video frames) with more pixels than this are refused with a message.
        concurrency: how many photos are derained at once (1 suits a CPU; more can help on a GPU).
        max_queue: how many requests may wait for their turn; further ones get Gradio's "queue is full"
            message at once (``gradio_client`` raises ``QueueError``). With ``max_megapixels`` and
            ``concurrency`` it bounds the server's memory: only ``concurrency`` photos are decoded at a time.
        ensemble: *Best* quality averages over this many upright flips per photo (2 or 4; see ``restore``),
            that many times slower than *Fast* (one pass). Videos are derained in the chosen quality too.
        quality: the page's default choice, ``"fast"``, ``"best"`` or ``"auto"``: *Best* when it is expected to
            take at most ``BEST_DEFAULT_MAX_S`` for a 1-megapixel photo on this server (:func:`auto_quality`),
            else *Fast*.
        max_video_seconds: longest clip the video tab accepts; longer ones get a message.
        warning: Markdown shown at the top of the page (e.g. that the weights are untrained).
    """

    tile: int | None = None
    overlap: int = 32
    max_megapixels: float = _option(MAX_MEGAPIXELS, "largest photo accepted (default %(default)g)")
    concurrency: int = _option(1, "photos derained at once (default %(default)s)")
    max_queue: int = _option(
        MAX_QUEUE, "requests allowed to wait; more are told the queue is full (default %(default)s)"
    )
    ensemble: int = _option(
        4,
        "Best quality's passes: the average over this many upright flips (default %(default)s)",
        choices=(2, 4),
    )
    quality: str = _option(
        "auto",
        f"the page's default quality (default %(default)s: Best when it takes at most {BEST_DEFAULT_MAX_S:g} s "
        "for 1 megapixel here, else Fast)",
        choices=QUALITIES,
    )
    max_video_seconds: float = _option(
        MAX_VIDEO_SECONDS, "longest clip the video tab accepts (default %(default)g)"
    )
    warning: str | None = None

    def __post_init__(self) -> None:
        self.restore_options(self.ensemble)  # tiling and ensemble as restore checks them
        if self.ensemble < 2:
            raise ValueError(f"ensemble is Best quality's number of passes: 2 or 4, got {self.ensemble}")
        if self.quality not in QUALITIES:
            raise ValueError(f"quality should be one of {', '.join(QUALITIES)}, got {self.quality!r}")
        if self.max_queue < 1 or self.concurrency < 1:
            raise ValueError(
                f"max_queue and concurrency should be >= 1, got {self.max_queue} and {self.concurrency}"
            )
        if not (self.max_megapixels > 0 and self.max_video_seconds > 0):
            raise ValueError(
                f"max_megapixels and max_video_seconds should be > 0, got {self.max_megapixels} and "
                f"{self.max_video_seconds}"
            )

    @property
    def max_pixels(self) -> int:
        return int(self.max_megapixels * 1e6)

    def restore_options(self, passes: int, strength: float = 1.0) -> RestoreOptions:
        """What ``restore`` gets for a photo (or a video's frames) derained with ``passes`` passes at
        ``strength``."""
        return RestoreOptions(tile=self.tile, overlap=self.overlap, ensemble=passes, strength=strength)


def auto_quality(speed: SpeedEstimate, ensemble: int) -> str:
    """The page's default under ``quality="auto"``: ``"best"`` when *Best* (``ensemble`` passes) is expected to
    take at most ``BEST_DEFAULT_MAX_S`` for a 1-megapixel photo, else ``"fast"``."""
    return "best" if speed.seconds(10**6, ensemble) <= BEST_DEFAULT_MAX_S else "fast"


class RequestError(Exception):
    """A request the page cannot serve; the message is for the visitor (the layout shows it as ``gr.Error``)."""


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
        RequestError: the header is over PIL's decompression-bomb limit: refused before anything is decoded.
    """
    try:
        h, w = image_size(path)
    except ImageReadError as err:
        if isinstance(err.__cause__, Image.DecompressionBombError):
            raise RequestError(
                f"This photo has over {2 * (Image.MAX_IMAGE_PIXELS or 0) / 1e6:.3g} megapixels, more than "
                "this page decodes."
            ) from None
        return None  # a format PIL does not know: read_image decides
    return h * w


def _derained_name(stem: str, strength: float, suffix: str) -> str:
    """``photo-derained.png``, or ``photo-derained-s1.5.png`` at a strength other than 1."""
    tag = "" if strength == 1 else f"-s{strength:g}"
    return f"{stem}-derained{tag}{suffix}"


def _prune(folder: Path, max_age_s: float) -> None:
    """Remove result folders (one per request) under ``folder`` older than ``max_age_s`` seconds."""
    cutoff = time.time() - max_age_s
    for sub in folder.iterdir():
        if sub.is_dir() and sub.stat().st_mtime < cutoff:
            for path in sub.iterdir():
                path.unlink(missing_ok=True)
            sub.rmdir()


class PageHandlers:
    """What the page does for each request, as plain methods: they take what Gradio hands over (file payloads,
    paths, the quality choice), return what the page shows, and raise :class:`RequestError` with the message for
    the visitor. Every photo derained updates ``speed``, so expected times and labels follow the photos.

    Args:
        model: the deraining network (see :func:`derain.inference.load_model`).
        settings: the page's options.
        speed: where the expected times start (then every photo derained updates it); ``None`` measures ``model``
            now (:meth:`SpeedEstimate.measure`, with the page's tiling).
    """

    def __init__(self, model: nn.Module, settings: PageSettings, speed: SpeedEstimate | None = None) -> None:
        if speed is None:
            speed = SpeedEstimate.measure(model, options=settings.restore_options(1))
        self.model, self.settings, self.speed = model, settings, speed
        auto = settings.quality == "auto"
        self.default_quality = auto_quality(speed, settings.ensemble) if auto else settings.quality
        self.out_root = Path(tempfile.mkdtemp(prefix="derain-app-"))

    def passes(self, choice: str | None) -> int:
        """Network passes of a quality choice (``None``: the page's default)."""
        choice = self.default_quality if choice is None else choice
        if choice not in ("fast", "best"):
            raise RequestError(f"Quality should be fast or best, got {choice!r}.")
        return 1 if choice == "fast" else self.settings.ensemble

    def _options(self, passes: int, strength: float | None) -> RestoreOptions:
        """What ``restore`` gets for ``passes`` at the requested ``strength`` (``None``: 1)."""
        try:
            return self.settings.restore_options(passes, 1.0 if strength is None else strength)
        except ValueError as err:  # the settings were checked when made: only the strength can be wrong
            message = str(err)
            raise RequestError(f"{message[0].upper()}{message[1:]}.") from None

    def quality_choices(self) -> list[tuple[str, str]]:
        """The quality radio's (label, value) pairs, with this server's current time per megapixel."""
        one_mp, n = self.speed.seconds(10**6), self.settings.ensemble
        return [
            (f"Fast: one pass (about {_duration(one_mp)} a megapixel here)", "fast"),
            (f"Best: flip ensemble of {n} (about {_duration(one_mp * n)} a megapixel here)", "best"),
        ]

    def expected(self, photo: str | dict | None) -> str:
        """What *Fast* and *Best* are expected to take for the photo just chosen (read from its header)."""
        path = photo.get("path") if isinstance(photo, dict) else photo
        pixels = _pixel_count(Path(path)) if path else None
        if not pixels:
            return ""
        fast, best = (self.speed.seconds(pixels, n) for n in (1, self.settings.ensemble))
        return (
            f"{pixels / 1e6:.2g} megapixels: expected about **{_duration(fast)}** with Fast, "
            f"**{_duration(best)}** with Best."
        )

    def _output(self, name: str) -> Path:
        """A fresh path named ``name`` in a folder of its own, after removing outputs older than an hour."""
        _prune(self.out_root, KEEP_OUTPUTS_S)
        return Path(tempfile.mkdtemp(dir=self.out_root)) / name

    def _read_photo(self, source: Path, name: str) -> np.ndarray:
        """The photo at ``source`` (shown to the visitor as ``name``), within the size limit."""
        limit = self.settings.max_megapixels
        pixels = _pixel_count(source)
        if pixels is not None and pixels > self.settings.max_pixels:
            raise RequestError(
                f"This photo has {pixels / 1e6:.1f} megapixels; the limit here is {limit:g}. "
                "Use `derain infer` for very large photos."
            )
        try:
            image = read_image(source)
        except ImageReadError as err:
            raise RequestError(f"{name} is not an image this page can read ({err.reason}).") from None
        h, w = image.shape[:2]
        if h * w > self.settings.max_pixels:
            raise RequestError(f"This photo has {h * w / 1e6:.1f} megapixels; the limit here is {limit:g}.")
        return image

    def derain(
        self, photo: dict | None, choice: str | None = None, strength: float | None = 1.0
    ) -> tuple[tuple[np.ndarray, np.ndarray], str, str]:
        """Derain the uploaded photo: (before, after) previews, the full-size PNG (its strength in its name when
        not 1), and a status line.

        The upload arrives as Gradio's file payload (``{"path": ..., "orig_name": ...}``, ``preprocess=False``),
        not decoded by Gradio, so that files that are not images get a readable message from ``read_image``
        rather than a PIL traceback.
        """
        if not photo or not photo.get("path"):
            raise RequestError("Upload a rainy photo first, or click one of the examples.")
        source = Path(photo["path"])
        name = photo.get("orig_name") or source.name
        n = self.passes(choice)
        options = self._options(n, strength)
        image = self._read_photo(source, name)
        start = time.perf_counter()
        result = restore(self.model, image, options=options)
        seconds = time.perf_counter() - start
        h, w = image.shape[:2]
        self.speed.update(h * w, n, seconds)
        out_path = self._output(_derained_name(Path(name).stem, options.strength, ".png"))
        write_image_atomic(out_path, result)
        how = f"Best: self-ensemble of {n} passes" if n > 1 else "Fast: one pass"
        how += f", strength {options.strength:g}" if options.strength != 1 else ""
        status = f"Derained {w}×{h} pixels in **{seconds:.2f} s** ({how})."
        return (_preview(image), _preview(result)), str(out_path), status

    def _check_clip(self, source: Path) -> VideoInfo:
        """What ``probe`` says of the clip, once its length and frame size are within the limits."""
        limit_s, limit_mp = self.settings.max_video_seconds, self.settings.max_megapixels
        try:
            info = probe(source)
        except VideoError:
            raise RequestError(f"{source.name} is not a video this page can read.") from None
        except MissingExtraError as err:  # PyAV is derain[video]'s
            raise RequestError(f"{err}.") from None
        if info.seconds > limit_s:
            raise RequestError(
                f"This clip is {info.seconds:.1f} s long; the limit here is {limit_s:g} s. "
                "Use `derain infer clip.mp4 out.mp4` for longer videos."
            )
        if info.width * info.height > self.settings.max_pixels:
            raise RequestError(
                f"This clip's frames have {info.width * info.height / 1e6:.1f} megapixels; the limit here is "
                f"{limit_mp:g}."
            )
        return info

    def derain_clip(
        self,
        clip: str | None,
        choice: str | None = None,
        on_frame: Callable[[int, int], None] | None = None,
        strength: float | None = 1.0,
    ) -> tuple[str, str]:
        """Derain every frame of the uploaded clip: the derained MP4 (H.264, audio kept) and a status line.

        Args:
            clip: the uploaded file's path.
            choice: ``"fast"`` or ``"best"``; ``None``: the page's default.
            on_frame: called with (frames done, frames expected) after each frame.
            strength: how much of the rain found is taken away (0 to 2; ``None``: 1), in the file's name when
                not 1.
        """
        if not clip:
            raise RequestError("Upload a short rainy video first.")
        n = self.passes(choice)
        options = self._options(n, strength)
        source = Path(clip)
        info = self._check_clip(source)
        total = max(info.frames, 1)
        start = time.perf_counter()
        out_path = self._output(_derained_name(source.stem, options.strength, ".mp4"))
        try:
            frames = int(self.settings.max_video_seconds * info.fps) + 1
            report = None if on_frame is None else lambda done: on_frame(done, total)
            result = derain_video(
                self.model,
                source,
                out_path,
                options=options,
                max_frames=frames,
                on_frame=report,
            )
        except VideoError as err:
            raise RequestError(f"{source.name}: {err.reason}") from None
        seconds = time.perf_counter() - start
        status = (
            f"Derained {result.frames} frames of {result.width}×{result.height} in **{seconds:.1f} s** "
            f"({result.frames / seconds:.2f} frames/s); audio {result.audio}."
        )
        return str(out_path), status

"""Derain a video: frames decoded with PyAV, each derained by ``restore``, encoded as H.264, audio kept.

``derain_video`` writes through a temporary file beside the output and renames it at the end, so a killed run
leaves no half-written video under the final name (``derain.infer`` then redoes it). Frames keep their order,
size and rate. Each frame is derained on its own, with no temporal smoothing: ``benchmarks/video.py``
measured an average over frames, which lowers flicker on fixed cameras but leaves ghosts on moving content
(README "Video"). The audio stream is copied unchanged when the output container can hold its codec;
otherwise it is dropped and the result says so. PyAV comes with ``derain[video]``; without it this module
imports (its names, ``VIDEO_SUFFIXES``, ...) and reading or writing a video says which extra to install.

Example:
    >>> from derain import load_model
    >>> from derain.inference.video import derain_video
    >>> derain_video(load_model(), "clip.mp4", "clip-derained.mp4")     # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch import nn

from derain.extras import available, missing, require
from derain.io import atomic_output

from .image import RestoreOptions, restore

if TYPE_CHECKING:
    import av

__all__ = [
    "VIDEO_SUFFIXES",
    "VideoError",
    "VideoInfo",
    "VideoResult",
    "derain_video",
    "probe",
    "video_output_suffix",
    "video_support",
]

VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".avi", ".webm")
"""Files ``derain.infer`` treats as videos (by suffix, any case)."""

_H264_CONTAINERS = (".mp4", ".m4v", ".mov", ".mkv")
"""Output containers that hold H.264; other inputs are written as ``.mp4``."""

_AUDIO_COPYABLE = {
    ".mkv": None,  # Matroska holds any audio codec
    ".mp4": {"aac", "mp3", "ac3", "eac3", "alac", "opus", "flac"},
    ".m4v": {"aac", "mp3", "ac3", "eac3", "alac"},
    ".mov": {"aac", "mp3", "ac3", "eac3", "alac", "pcm_s16le", "pcm_s24le", "pcm_f32le"},
}
"""Audio codecs each output container takes as they are (copied without re-encoding)."""

DEFAULT_CRF = 18
"""x264 constant rate factor of the output: 18 is visually near-lossless."""


class VideoError(ValueError):
    """A video that cannot be read, decoded or written: ``<path>: <reason>``.

    Args:
        path: the file (the input, or the output being written).
        reason: what went wrong, for a message of the caller's own (``holds no video stream``).
    """

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason

    def __reduce__(self) -> tuple[type, tuple[Path, str]]:  # pickles (to worker processes) with both fields
        return type(self), (self.path, self.reason)


@dataclass(frozen=True)
class VideoInfo:
    """What ``probe`` finds: frame count (``0`` when the container does not say), rate, size, audio."""

    frames: int
    fps: float
    width: int
    height: int
    seconds: float
    audio: str | None


@dataclass(frozen=True)
class VideoResult:
    """One derained video: frames written, their rate and size, and what happened to the audio."""

    frames: int
    fps: float
    width: int
    height: int
    audio: str  # "kept (aac)", "none", or "dropped: <why>"


def video_output_suffix(path: str | os.PathLike) -> str:
    """The output suffix for a video: its own when that container holds H.264, else ``.mp4``."""
    suffix = Path(path).suffix.lower()
    return suffix if suffix in _H264_CONTAINERS else ".mp4"


_WHAT = "reading and writing videos"


def _av():
    """PyAV, or the one line that names ``derain[video]``."""
    return require("av", _WHAT)


def video_support() -> str | None:
    """``None`` when videos can be read and written here, else the one line that names ``derain[video]``."""
    return None if available("av") else missing("av", _WHAT)


def _open(path: Path) -> av.container.InputContainer:
    av = _av()
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as err:
        raise VideoError(path, f"cannot open as a video ({err})") from None
    if not container.streams.video:
        container.close()
        raise VideoError(path, "holds no video stream")
    return container


def _rate(stream: av.video.stream.VideoStream) -> Fraction:
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    return Fraction(rate) if rate else Fraction(25)


def probe(path: str | os.PathLike) -> VideoInfo:
    """Frame count, rate, size, length and audio codec of a video, from its headers (nothing decoded)."""
    path = Path(path)
    av = _av()
    with _open(path) as container:
        stream = container.streams.video[0]
        rate = _rate(stream)
        seconds = 0.0
        if stream.duration is not None and stream.time_base is not None:
            seconds = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            seconds = container.duration / av.time_base
        frames = stream.frames or int(round(seconds * float(rate)))
        audio = container.streams.audio[0].codec_context.name if container.streams.audio else None
        return VideoInfo(
            frames=frames,
            fps=float(rate),
            width=stream.codec_context.width,
            height=stream.codec_context.height,
            seconds=seconds or frames / float(rate),
            audio=audio,
        )


def derain_video(
    model: nn.Module,
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    options: RestoreOptions | None = None,
    crf: int = DEFAULT_CRF,
    max_frames: int | None = None,
    on_frame: Callable[[int], None] | None = None,
) -> VideoResult:
    """Derain every frame of ``src`` into ``dst`` (H.264; audio copied where ``dst``'s container allows).

    Args:
        model: the network (``load_model``; either backend).
        src: the input video (anything FFmpeg decodes).
        dst: the output file; its suffix picks the container (``.mp4``, ``.mov``, ``.mkv``, ``.m4v``).
        options: tiling, ensemble and strength, passed to ``restore`` for each frame (default
            ``RestoreOptions()``).
        crf: x264 quality (0 lossless … 51; default 18).
        max_frames: refuse videos with more frames than this (``None``: any length).
        on_frame: called with the number of frames done after each frame (progress).

    Raises:
        VideoError: ``src`` cannot be opened or decoded, is longer than ``max_frames``, or ``dst`` cannot be
            written; ``dst`` is then left as it was.
    """
    src, dst = Path(src), Path(dst)
    if dst.suffix.lower() not in _H264_CONTAINERS:
        raise VideoError(dst, f"the output should end in one of {', '.join(_H264_CONTAINERS)}")
    info = probe(src)
    if max_frames is not None and info.frames > max_frames:
        raise VideoError(
            src, f"{info.frames} frames ({info.seconds:.1f} s) is more than the {max_frames} allowed"
        )
    with atomic_output(dst, suffix=f".partial{dst.suffix}") as tmp:
        result = _transcode(
            model,
            src,
            tmp,
            dst.suffix.lower(),
            options or RestoreOptions(),
            crf,
            max_frames,
            on_frame,
        )
    return result


def _transcode(
    model: nn.Module,
    src: Path,
    tmp: Path,
    container_suffix: str,
    options: RestoreOptions,
    crf: int,
    max_frames: int | None,
    on_frame: Callable[[int], None] | None,
) -> VideoResult:
    av = _av()
    with _open(src) as inp:
        vin = inp.streams.video[0]
        vin.thread_type = "AUTO"
        ain = inp.streams.audio[0] if inp.streams.audio else None
        rate = _rate(vin)
        width, height = vin.codec_context.width, vin.codec_context.height
        try:
            out = av.open(str(tmp), "w", format={".m4v": "mp4", ".mkv": "matroska"}.get(container_suffix))
        except (av.error.FFmpegError, OSError) as err:
            raise VideoError(tmp, f"cannot be written ({err})") from None
        with out:
            vout = out.add_stream("libx264", rate=rate)
            vout.width, vout.height = width, height
            # 4:2:0 needs even sides; odd-sized videos keep their size with full-resolution colour (4:4:4)
            vout.pix_fmt = "yuv420p" if width % 2 == 0 and height % 2 == 0 else "yuv444p"
            frame_time = Fraction(1, 1) / rate  # the muxer may change the stream's time base on writing
            vout.codec_context.time_base = frame_time
            vout.options = {"crf": str(crf)}
            audio, aout = "none", None
            if ain is not None:
                codec = ain.codec_context.name
                allowed = _AUDIO_COPYABLE[container_suffix]
                if allowed is None or codec in allowed:
                    aout = out.add_stream_from_template(ain)
                    audio = f"kept ({codec})"
                else:
                    audio = f"dropped: {container_suffix} cannot hold {codec} audio (use .mkv to keep it)"
            frames = 0
            try:
                for packet in inp.demux(
                    *(s for s in (vin, ain if aout is not None else None) if s is not None)
                ):
                    if packet.stream is ain:
                        if packet.dts is not None:
                            packet.stream = aout
                            out.mux(packet)
                        continue
                    for frame in packet.decode():
                        frames += 1
                        if max_frames is not None and frames > max_frames:
                            raise VideoError(src, f"more than the {max_frames} frames allowed")
                        rgb = frame.to_ndarray(format="rgb24")
                        clean = restore(model, rgb, options=options)
                        encoded = av.VideoFrame.from_ndarray(np.ascontiguousarray(clean), format="rgb24")
                        encoded.pts = frames - 1
                        encoded.time_base = frame_time
                        out.mux(vout.encode(encoded))
                        if on_frame is not None:
                            on_frame(frames)
                out.mux(vout.encode(None))
            except av.error.FFmpegError as err:
                raise VideoError(src, f"failed at frame {frames + 1} ({err})") from None
    if frames == 0:
        raise VideoError(src, "no frame could be decoded")
    return VideoResult(frames=frames, fps=float(rate), width=width, height=height, audio=audio)

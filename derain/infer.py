"""Derain a folder of photos and videos, or one file: ``python -m derain.infer IN OUT``.

``IN`` is a folder (every image and video in it) or one image or video; ``OUT`` is a folder, or for one input
file also the output file (``python -m derain.infer clip.mp4 out.mp4``). Videos are derained frame by frame
into H.264 with their audio (``derain.inference.video``, needs ``derain[video]``); the progress bar counts frames.

Resumable (finished outputs are skipped; each is written atomically, videos too), robust (unreadable files are
reported by path and the rest processed), and shardable (``--shard i/n`` splits one folder over n processes).
Exit status: 0 when every file was derained or already done, 1 when some failed, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from torch import nn
from tqdm import tqdm

from derain import arguments
from derain.extras import MissingExtraError
from derain.inference import MAX_STRENGTH, RestoreOptions, read_image, restore
from derain.inference.video import (
    VIDEO_SUFFIXES,
    VideoError,
    derain_video,
    probe,
    video_output_suffix,
    video_support,
)
from derain.io import IMAGE_SUFFIXES, ImageReadError, list_files, to_8bit, write_image_atomic

__all__ = [
    "Job",
    "Plan",
    "Summary",
    "find_inputs",
    "is_video",
    "output_path",
    "parse_shard",
    "plan_outputs",
    "run",
    "main",
    "check_paths",
    "select_inputs",
]

JPEG_QUALITY = 95
_DEEP_SUFFIXES = (".png", ".tif", ".tiff")  # formats that hold 16-bit samples through OpenCV
_NO_ALPHA_SUFFIXES = (".jpg", ".jpeg")


@dataclass
class Summary:
    """Counts of one run; ``failed_paths`` lists the input files that could not be derained."""

    ok: int = 0
    skipped: int = 0
    failed: int = 0
    ignored: int = 0
    seconds: float = 0.0
    frames: int = 0
    failed_paths: list[Path] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        if self.frames:
            speed = f"{self.frames} video frames, {self.frames / max(self.seconds, 1e-9):.2f} frames/s"
        else:
            speed = f"{self.images_per_second:.2f} images/s"
        return f"ok {self.ok}, skipped {self.skipped}, failed {self.failed}, {speed}"


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n``.

    Raises:
        argparse.ArgumentTypeError: when ``text`` is not of that form.
    """
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard should look like i/n (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard i/n needs 0 <= i < n, got {text!r}")
    return i, n


def is_video(path: Path) -> bool:
    """Whether ``derain.infer`` treats ``path`` as a video (by suffix)."""
    return path.suffix.lower() in VIDEO_SUFFIXES


def find_inputs(in_dir: Path, *, recursive: bool) -> tuple[list[Path], int]:
    """Image and video files under ``in_dir`` (by suffix, hidden files left out), in natural order
    (:func:`derain.io.list_files`), and the count of other files."""
    return list_files(in_dir, IMAGE_SUFFIXES + VIDEO_SUFFIXES, recursive=recursive)


def output_path(path: Path, in_dir: Path, out_dir: Path, fmt: str) -> Path:
    """Where the result for ``path`` goes: the same relative path under ``out_dir``, suffix set by ``fmt``
    (images) or by ``derain.inference.video.video_output_suffix`` (videos)."""
    rel = path.relative_to(in_dir)
    if is_video(path):
        suffix = video_output_suffix(path)
    else:
        suffix = path.suffix if fmt == "same" else f".{fmt}"
    return (out_dir / rel).with_suffix(suffix)


def _fit_to_format(image: np.ndarray, suffix: str) -> np.ndarray:
    """Drop what the output format cannot hold: 16 bits outside PNG/TIFF, alpha in JPEG."""
    suffix = suffix.lower()
    if suffix not in _DEEP_SUFFIXES:
        image = to_8bit(image)
    if image.ndim == 3 and image.shape[2] == 4 and suffix in _NO_ALPHA_SUFFIXES:
        image = image[:, :, :3]
    return image


def _encode_params(suffix: str) -> list[int]:
    return [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if suffix.lower() in _NO_ALPHA_SUFFIXES else []


def _frame_count(path: Path) -> int:
    """Frames the progress bar expects from ``path``: 1 for an image, the header's count for a video."""
    if not is_video(path):
        return 1
    try:
        return max(probe(path).frames, 1)
    except (VideoError, MissingExtraError):
        return 1  # reported when it is derained


@dataclass
class Plan:
    """What a run will do, decided before anything is derained.

    ``todo`` pairs each input to derain with its output; ``skipped`` counts inputs whose output exists already;
    ``clashes`` are inputs refused because their output is another input's (with that input); ``no_video``
    lists the videos left out because video support is missing here, and ``video_reason`` says why.
    """

    todo: list[tuple[Path, Path]] = field(default_factory=list)
    skipped: int = 0
    clashes: list[tuple[Path, Path, Path]] = field(default_factory=list)
    no_video: list[Path] = field(default_factory=list)
    video_reason: str | None = None


def select_inputs(in_dir: Path, *, recursive: bool, shard: tuple[int, int] | None) -> tuple[list[Path], int]:
    """The files a run reads: ``in_dir`` itself when it is a file, else its images and videos (``find_inputs``),
    every n-th from the i-th with ``shard=(i, n)``; and the count of other files."""
    inputs, ignored = ([in_dir], 0) if in_dir.is_file() else find_inputs(in_dir, recursive=recursive)
    if shard is not None:
        i, n = shard
        inputs = inputs[i::n]
    return inputs, ignored


def plan_outputs(
    inputs: list[Path], root: Path, out_dir: Path, *, fmt: str, overwrite: bool, out_file: Path | None = None
) -> Plan:
    """Where each input's result goes (``output_path``, or ``out_file`` for one input file), which outputs exist
    already (skipped unless ``overwrite``), which would clash, and which videos cannot be derained here.

    Args:
        inputs: the files to derain, under ``root`` (a folder), or ``[root]`` when ``root`` is one file.
        root: the input folder, or the one input file.
        out_dir: the output folder.
        fmt: ``--format``: ``png``, ``jpg`` or ``same``.
        overwrite: redo inputs whose output exists.
        out_file: the output file named for one input file; ``None``: under ``out_dir``.
    """
    base = root.parent if root.is_file() else root
    plan, claimed = Plan(), {}
    for path in inputs:
        out = (out_file if root.is_file() else None) or output_path(path, base, out_dir, fmt)
        if out in claimed:
            plan.clashes.append((path, out, claimed[out]))
            continue
        claimed[out] = path
        if out.exists() and not overwrite:
            plan.skipped += 1
        else:
            plan.todo.append((path, out))
    plan.video_reason = video_support() if any(is_video(path) for path, _ in plan.todo) else None
    if plan.video_reason is not None:
        plan.no_video = [path for path, _ in plan.todo if is_video(path)]
        plan.todo = [(path, out) for path, out in plan.todo if not is_video(path)]
    return plan


def _report_plan(plan: Plan, ignored: int) -> Summary:
    """Print what the plan leaves out (one line each) and give the summary it starts with."""
    summary = Summary(ignored=ignored, skipped=plan.skipped)
    if ignored:
        print(
            f"ignoring {ignored} file(s) without an image or video suffix "
            f"({', '.join(IMAGE_SUFFIXES + VIDEO_SUFFIXES)})",
            file=sys.stderr,
        )
    for path, out, other in plan.clashes:
        print(f"failed: {path}: its output {out} would overwrite that of {other}", file=sys.stderr)
    if plan.no_video:  # one line for them all
        print(f"failed: {len(plan.no_video)} video(s): {plan.video_reason}", file=sys.stderr)
    summary.failed_paths = [path for path, _, _ in plan.clashes] + plan.no_video
    summary.failed = len(summary.failed_paths)
    return summary


def _reason(err: Exception, path: Path) -> str:
    """What went wrong, for a line that names ``path`` already: an image or video error's reason alone."""
    if isinstance(err, (ImageReadError, VideoError)) and err.path == path:
        return err.reason
    return str(err)


def _derain_file(model: nn.Module, path: Path, out: Path, options: RestoreOptions, bar: tqdm) -> int:
    """Derain one image or video into ``out``; the number of video frames written (0 for an image)."""
    if is_video(path):
        result = derain_video(model, path, out, options=options, on_frame=lambda _done: bar.update(1))
        if result.audio.startswith("dropped"):
            bar.write(f"{path}: audio {result.audio}", file=sys.stderr)
        return result.frames
    image = _fit_to_format(restore(model, read_image(path), options=options), out.suffix)
    write_image_atomic(out, image, params=_encode_params(out.suffix))
    return 0


def _derain_all(
    model: nn.Module, todo: list[tuple[Path, Path]], options: RestoreOptions, summary: Summary
) -> None:
    """Derain every (input, output) pair of ``todo`` under a progress bar of frames, counting into ``summary``;
    a file that fails is reported by path and the rest go on."""
    expected = {path: _frame_count(path) for path, _ in todo}
    with tqdm(
        total=sum(expected.values()), desc="derain", unit="frame", file=sys.stderr, dynamic_ncols=True
    ) as bar:
        for path, out in todo:
            bar.set_postfix_str(path.name, refresh=False)
            end = bar.n + expected[path]
            try:
                summary.frames += _derain_file(model, path, out, options, bar)
            except Exception as err:  # report and go on: one bad file must not stop a folder of thousands
                summary.failed += 1
                summary.failed_paths.append(path)
                bar.write(f"failed: {path}: {_reason(err, path)}", file=sys.stderr)
            else:
                summary.ok += 1
            if bar.n < end:  # an image, or a video that failed or had fewer frames than its header said
                bar.update(end - bar.n)


@dataclass(frozen=True)
class Job:
    """One run: what to derain, where to, and how (``derain infer``'s command line, once its paths are checked by
    :func:`check_paths`).

    Args:
        source: a folder of images and videos, or one file.
        out_dir: the output folder.
        out_file: the output file named for one input file; ``None``: under ``out_dir``.
        recursive: include subfolders (mirrored under ``out_dir``).
        shard: ``(i, n)``: every n-th input from the i-th; ``None``: all.
        fmt: images' output format: ``png``, ``jpg`` or ``same`` (each input's suffix).
        overwrite: redo inputs whose output exists.
        options: how ``restore`` runs the network (tiling, ensemble, strength).
    """

    source: Path
    out_dir: Path
    out_file: Path | None = None
    recursive: bool = False
    shard: tuple[int, int] | None = None
    fmt: str = "png"
    overwrite: bool = False
    options: RestoreOptions = field(default_factory=RestoreOptions)


def run(job: Job, model: nn.Module) -> Summary:
    """Derain every selected image and video of ``job.source`` (a folder, or one file) into ``job.out_dir``: the
    plan first (:func:`plan_outputs`), then the loop."""
    inputs, ignored = select_inputs(job.source, recursive=job.recursive, shard=job.shard)
    plan = plan_outputs(
        inputs, job.source, job.out_dir, fmt=job.fmt, overwrite=job.overwrite, out_file=job.out_file
    )
    summary = _report_plan(plan, ignored)
    start = time.perf_counter()
    _derain_all(model, plan.todo, job.options, summary)
    summary.seconds = time.perf_counter() - start
    return summary


def check_paths(source: Path, out: Path) -> tuple[Path, Path, Path | None]:
    """``IN`` and ``OUT`` of the command line as (source, output folder, output file or ``None``), resolved.

    Raises:
        arguments.UsageError: naming ``IN`` or ``OUT`` when they cannot work: ``IN`` is neither a folder nor an
            image or video file, ``OUT`` names a file of another kind, is ``IN`` or is inside it, or ``IN`` is a
            video and video support is missing.
    """
    in_path, out_path = source.resolve(), out.resolve()
    if in_path.is_file():
        if not (is_video(in_path) or in_path.suffix.lower() in IMAGE_SUFFIXES):
            raise arguments.UsageError(f"IN {source} is neither an image nor a video (by its suffix)")
        out_file = None
        if out_path.suffix and not out_path.is_dir():  # an output file name
            if is_video(in_path) != is_video(out_path) or (
                not is_video(out_path) and out_path.suffix.lower() not in IMAGE_SUFFIXES
            ):
                kind = "a video" if is_video(in_path) else "an image"
                raise arguments.UsageError(f"OUT {out} should name {kind} file like IN")
            out_file, out_path = out_path, out_path.parent
        if (out_file or out_path) == in_path:
            raise arguments.UsageError(f"OUT {out} would overwrite IN")
        unsupported = video_support() if is_video(in_path) else None
        if unsupported is not None:
            raise arguments.UsageError(unsupported)
        return in_path, out_path, out_file
    if not in_path.is_dir():
        raise arguments.UsageError(f"IN {source} is neither a folder nor a file")
    if out_path == in_path or in_path in out_path.parents:
        raise arguments.UsageError(f"OUT {out} is inside IN {source}; choose a folder outside it")
    return in_path, out_path, None


def build_parser(prog: str = "python -m derain.infer") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Derain every image and video in IN and write the results to OUT (same names), or one "
        "file IN to the file or folder OUT. Videos become H.264 with their audio.",
    )
    parser.add_argument(
        "in_dir", metavar="IN", type=Path, help="folder of rainy images and videos, or one file"
    )
    parser.add_argument(
        "out_dir",
        metavar="OUT",
        type=Path,
        help="output folder (created; not inside IN); for one input file also an output file name",
    )
    arguments.add_model_arguments(parser)
    parser.add_argument(
        "--strength",
        type=float,
        default=1.0,
        metavar="S",
        help=f"how much of the rain found is taken away, 0 (none) to {MAX_STRENGTH:g} (twice as much); "
        "default 1, the network's output",
    )
    parser.add_argument("--overwrite", action="store_true", help="redo images whose output already exists")
    parser.add_argument("--recursive", action="store_true", help="include subfolders, mirrored in OUT_DIR")
    parser.add_argument(
        "--format",
        choices=("png", "jpg", "same"),
        default="png",
        help="output format (default png; 'same' keeps each input's suffix)",
    )
    parser.add_argument(
        "--shard",
        type=parse_shard,
        default=None,
        metavar="i/n",
        help="process only every n-th file of the sorted list, starting at i (0-based)",
    )
    return parser


def main(argv: list[str] | None = None, *, prog: str = "python -m derain.infer") -> int:
    """Command-line entry; returns the exit status (0 ok, 1 some images failed, 2 usage error)."""
    args = build_parser(prog).parse_args(argv)
    try:
        source, out_dir, out_file = check_paths(args.in_dir, args.out_dir)
        options = arguments.restore_options(args, strength=args.strength)
        model = arguments.model_from_args(args)
    except arguments.UsageError as err:
        return arguments.usage_error(err)
    job = Job(
        source=source,
        out_dir=out_dir,
        out_file=out_file,
        recursive=args.recursive,
        shard=args.shard,
        fmt=args.format,
        overwrite=args.overwrite,
        options=options,
    )
    summary = run(job, model)
    print(summary.line())
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``derain`` command: ``derain infer|fit|evaluate|app|export|info|recipe|pin|models|grow ...``, one front
door to the commands.

Each subcommand is the command of the same name (``derain infer --help`` is ``python -m derain.infer --help``;
``derain models`` is ``derain.catalog``, as ``derain.models`` holds the networks), imported only when asked for:
``derain infer`` never imports Lightning or gradio.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys

from derain import __version__

__all__ = ["COMMANDS", "MODULES", "build_parser", "main"]

COMMANDS = {
    "infer": "derain a folder of photos and videos, or one file",
    "fit": "train a network (LightningCLI: --config NAME, --trainer.*, --model.*, --data.*)",
    "evaluate": "score derained images against clean ones (PSNR/SSIM, MATLAB Y and RGB)",
    "app": "derain photos and short videos in the browser",
    "export": "export a checkpoint to a weights file, or weights to an ONNX model",
    "info": "how a weights file was made: its provenance (the packaged weights by default)",
    "recipe": "rebuild shipped weights from their recipe (derain recipe derain-small [--plan])",
    "pin": "append a long run's trained leg to its recipe; its float16 becomes the continuation",
    "models": "the weights that ship, by name (--weights NAME): parameters, speed, validation scores, file",
    "grow": "grow trained weights into a wider or deeper network that computes the same",
}
"""The subcommands, each the module ``derain.<name>`` (or :data:`MODULES`') with a ``main(argv, prog=...)``, and
what it does."""

MODULES = {"models": "catalog"}
"""The subcommands whose module is not ``derain.<name>`` (``derain.models`` is the networks' package)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="derain",
        description="Image deraining: train, evaluate and use the network. "
        "'derain COMMAND --help' lists a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"derain {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, summary in COMMANDS.items():  # listed here; the command's own parser reads the rest
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``derain COMMAND ARGS...``; returns the command's exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:  # --help, --version, or a missing or unknown command
        build_parser().parse_args(argv)  # argparse answers and exits
        return 2
    name, rest = argv[0], argv[1:]
    try:
        status = importlib.import_module(f"derain.{MODULES.get(name, name)}").main(
            rest, prog=f"derain {name}"
        )
        sys.stdout.flush()  # here, not at exit, where a closed pipe is a traceback nothing can catch
    except BrokenPipeError:
        if not _reader_gone(sys.stdout):
            raise  # another pipe broke: that is an error
        # derain info | head -1: the reader has what it wanted; stop quietly, as a Unix tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # what a shell reports for a command stopped by SIGPIPE
    return status


def _reader_gone(stream) -> bool:
    """Whether nothing reads ``stream`` any more (a pipe whose reader closed); True where that cannot be asked."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or not a file
        return True
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


if __name__ == "__main__":
    raise SystemExit(main())

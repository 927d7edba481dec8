"""The command-line options that ``derain infer``, ``derain evaluate`` and ``derain app`` share, written once.

``--weights`` (a name of shipped weights or a file), ``--device``, ``--backend`` say which network runs where;
``--tile``, ``--overlap`` and ``--ensemble`` how ``restore`` runs it. :func:`restore_options` makes the last three the
:class:`~derain.inference.RestoreOptions` the command passes down (checked there, once); :func:`model_from_args`
reads the first three and loads the network (:func:`derain.inference.load_model`). Either raises a
:class:`UsageError` with one line (exit status 2): tiling that cannot work, a weights file that is not one, a device
torch does not know or cannot use, a backend without its extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from derain.extras import MissingExtraError
from derain.inference import BACKENDS, DEFAULT_BACKEND, ENSEMBLE_FLIPS, RestoreOptions, load_model
from derain.weights.shipped import DEFAULT_NAME

__all__ = [
    "UsageError",
    "add_model_arguments",
    "add_settings_arguments",
    "check_device",
    "model_from_args",
    "restore_options",
    "settings_from_args",
    "usage_error",
]


T = TypeVar("T")


class UsageError(Exception):
    """A command line that cannot run as given; the command prints ``error: <message>`` and exits with 2."""


def usage_error(err: BaseException | str, hint: str = "") -> int:
    """Print ``error: <err>`` (and ``hint`` on the next line) to stderr; the exit status of a usage error, 2."""
    print(f"error: {err}" + (f"\n{hint}" if hint else ""), file=sys.stderr)
    return 2


def add_settings_arguments(parser: argparse.ArgumentParser, settings: type) -> None:
    """An option ``--NAME`` for each field of the dataclass ``settings`` whose metadata has a ``help`` (the field
    declares it once: default, type from the default unless ``type`` is given, ``choices``); read them back with
    :func:`settings_from_args`."""
    for f in dataclasses.fields(settings):
        if "help" in f.metadata:
            parser.add_argument(
                "--" + f.name.replace("_", "-"),
                type=f.metadata.get("type", type(f.default)),
                default=f.default,
                choices=f.metadata.get("choices"),
                help=f.metadata["help"],
            )


def settings_from_args(settings: type[T], args: argparse.Namespace, **given: Any) -> T:
    """The dataclass ``settings`` made from the parsed options named like its fields, and ``given``; a
    ``UsageError`` with its ``ValueError``'s message when the values cannot work together."""
    names = {f.name for f in dataclasses.fields(settings) if f.init} - given.keys()
    try:
        return settings(**{name: getattr(args, name) for name in names if name in vars(args)}, **given)
    except ValueError as err:
        raise UsageError(str(err)) from None


def add_model_arguments(
    parser: argparse.ArgumentParser, *, scope: str = "image", when: str = "", ensemble: bool = True
) -> None:
    """Add ``--weights --tile --overlap --ensemble --backend --device`` to ``parser``.

    Args:
        parser: the command's parser.
        scope: what one input is, for the help texts (``"image"``, ``"photo"``).
        when: when the options apply, for the help texts (``" (with --rain)"``).
        ensemble: add ``--ensemble`` (the web page has its own: the passes of its *Best* quality).
    """
    parser.add_argument(
        "--weights",
        type=Path,
        default=None,
        metavar="NAME|FILE",
        help=f"weights{when}: the name of shipped weights (derain models lists them) or a file (.safetensors or "
        f".ckpt; .onnx with --backend onnxruntime); default: {DEFAULT_NAME}",
    )
    parser.add_argument(
        "--tile",
        type=int,
        default=None,
        help=f"tile size in pixels{when}; default: tile only large {scope}s; 0: never",
    )
    parser.add_argument(
        "--overlap", type=int, default=32, help=f"pixels shared by neighbouring tiles{when} (default 32)"
    )
    if ensemble:
        parser.add_argument(
            "--ensemble",
            type=int,
            choices=sorted(ENSEMBLE_FLIPS),
            default=1,
            help=f"average over this many upright flips of each {scope}{when} (self-ensemble: a little better, "
            "N times slower; default 1)",
        )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=DEFAULT_BACKEND,
        help=f"what runs the network (default {DEFAULT_BACKEND}): torch, or onnxruntime on the CPU (an .onnx "
        "file from derain.export, or the weights exported once and cached; needs derain[onnx])",
    )
    parser.add_argument(
        "--device", default=None, help=f"cpu, cuda, cuda:1, ...{when} (default: cuda if available)"
    )


def restore_options(
    args: argparse.Namespace, *, ensemble: int | None = None, strength: float = 1.0
) -> RestoreOptions:
    """``--tile --overlap --ensemble`` as the :class:`~derain.inference.RestoreOptions` a command passes down
    (``ensemble``: instead of ``--ensemble``, for a command without it; ``strength``: a command's ``--strength``);
    a ``UsageError`` when they cannot work."""
    try:
        return RestoreOptions(
            tile=args.tile,
            overlap=args.overlap,
            ensemble=args.ensemble if ensemble is None else ensemble,
            strength=strength,
        )
    except ValueError as err:
        raise UsageError(str(err)) from None


def check_device(device: str | None) -> None:
    """A ``UsageError`` unless torch knows ``--device`` and can put a tensor there (``None``: the default)."""
    if device is None:
        return
    try:
        torch.empty(0, device=torch.device(device))
    except (RuntimeError, AssertionError) as err:  # torch's words for an unknown or unavailable device
        raise UsageError(f"cannot use --device {device!r}: {err}") from None


def model_from_args(args: argparse.Namespace) -> nn.Module:
    """The network ``--weights`` records, on ``--device``, run by ``--backend``, once the device is checked.

    Raises:
        UsageError: a device that cannot be used, a weights file that cannot be loaded, or a backend whose extra
            is not installed (one line each).
    """
    if args.backend == "torch":  # onnxruntime names a device other than the CPU itself
        check_device(args.device)
    try:
        return load_model(args.weights, device=args.device, backend=args.backend)
    except (ValueError, MissingExtraError) as err:  # WeightsError, or a backend that cannot run here
        raise UsageError(str(err)) from None

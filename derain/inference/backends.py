"""What runs the network: ``load_model`` gives a module ``restore`` calls, from torch or from onnxruntime.

Example:
    >>> from derain import load_model
    >>> model = load_model()                                   # doctest: +SKIP  (the packaged weights)
    >>> model = load_model("derain-small")                     # doctest: +SKIP  (shipped weights, by name)
    >>> model = load_model("x.onnx", backend="onnxruntime")    # doctest: +SKIP  (needs derain[onnx])
"""

from __future__ import annotations

import os

import torch
from torch import nn

from derain import weights as weights_file
from derain.extras import require

from .onnx import OnnxNet, cached_onnx

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "default_device", "load_model"]

BACKENDS = ("torch", "onnxruntime")
"""What ``load_model(backend=...)`` and ``--backend`` accept."""

DEFAULT_BACKEND = "torch"
"""The command lines' default ``--backend`` (README "Speed": torch eager against onnxruntime)."""


def default_device() -> torch.device:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(
    weights: str | os.PathLike | None = None,
    device: str | torch.device | None = None,
    *,
    backend: str = "torch",
) -> nn.Module:
    """Build the network a weights file records (``class_path`` + ``init_args``) with its weights, in eval mode.

    Args:
        weights: a ``.safetensors`` file written by ``derain.export`` (metadata ``format`` =
            ``derain-net-v2`` and the network record ``net`` as JSON; ``derain-net-v1`` files load too), or a
            Lightning ``.ckpt`` from ``DerainLitModule`` (``derain.weights.load_net`` reads both), or the name of
            weights that ship in the package (``"derain-small"``: ``derain.weights.shipped``; a file of that name
            wins). ``None`` loads the default, ``derain/weights/derain-small.safetensors``.
        device: where to put the model; ``None`` picks ``cuda`` when available, else ``cpu``.
        backend: ``"torch"``, or ``"onnxruntime"`` for the network's ONNX graph run by onnxruntime on the CPU
            (``derain.inference.onnx.OnnxNet``, needs ``derain[onnx]``): an ``.onnx`` file from
            ``derain.export`` is used as it is, weights files are exported once and cached
            (``derain.inference.onnx.cached_onnx``).

    Returns:
        The network in eval mode on ``device`` (an ``OnnxNet`` with ``backend="onnxruntime"``).

    Raises:
        WeightsNotFoundError: neither a file nor a name of shipped weights (the message lists the names), or
            ``weights=None`` and no trained weights ship yet.
        WeightsError: the file is not a readable derain weights file (the message names it).
        MissingExtraError: ``backend="onnxruntime"`` without ``derain[onnx]`` installed.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend should be one of {BACKENDS}, got {backend!r}")
    path = weights_file.resolve(weights)
    if backend == "onnxruntime":
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"the onnxruntime backend runs on the CPU; got device {str(device)!r}")
        require("onnxruntime", "the onnxruntime backend")  # before any export: one line for the extra
        return OnnxNet(path if path.suffix == ".onnx" else cached_onnx(path)).eval()
    net = weights_file.load_net(path)
    return net.to(device if device is not None else default_device()).eval()

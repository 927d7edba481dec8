"""ONNX export of a derain network and an onnxruntime backend that ``restore`` runs like a torch module.

    python -m derain.export WEIGHTS model.onnx          # .safetensors or .ckpt in, an ONNX file out

Needs ``derain[onnx]`` (onnx and onnxscript to export, onnxruntime to run); without it, this module imports and
every use says which extra to install.

The graph takes ``image``, float32 ``(N, 3, H, W)`` RGB in [0, 1] with dynamic N, H and W, and gives
``restored`` of the same shape, clamped to [0, 1]. Everything the network does is inside it: the reflect
padding to a multiple of the network's stride, pixel-unshuffle, the top-k selections (their k depends on the
channel count only), the agent biases resized to the feature map, and the residual. The graph always pads by
reflection, which needs each side to be longer than its padding; ``OnnxNet`` pads smaller images by
replication first, as the torch network does, so both backends give the same image.

Example:
    >>> from derain.inference.onnx import OnnxNet
    >>> from derain import restore
    >>> net = OnnxNet("derain-small.onnx")                    # doctest: +SKIP
    >>> clean = restore(net, rainy_uint8)                      # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from derain import weights as weights_file
from derain.extras import require
from derain.io import atomic_output
from derain.models import network_record

__all__ = [
    "OPSET",
    "OnnxExportError",
    "OnnxNet",
    "cached_onnx",
    "export_onnx",
]

log = logging.getLogger(__name__)

OPSET = 18
"""The ONNX opset the export writes (17 or newer is accepted)."""

_EXAMPLE_SIZE = (2, 3, 48, 80)
"""The example input the graph is traced with (its sizes are then declared dynamic)."""


class OnnxExportError(ValueError):
    """A network that cannot be written as ONNX; the message names the option or module at fault."""


def _multiple(net: nn.Module) -> int:
    multiple = getattr(net, "multiple", None)
    if not isinstance(multiple, int):
        raise OnnxExportError(
            f"{type(net).__name__} has no integer 'multiple' (the size its input is padded to): "
            "only derain networks export to ONNX"
        )
    return multiple


class _Graph(nn.Module):
    """What the ONNX file holds: the network and the final clamp."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, image: Tensor) -> Tensor:
        return self.net(image).clamp(0.0, 1.0)


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """torch's tracer logs every shape decision at DEBUG: thousands of records a trace; keep it to warnings."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def export_onnx(
    net: nn.Module,
    path: str | os.PathLike,
    *,
    opset: int = OPSET,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write ``net`` (float32, on the CPU, in eval mode) as an ONNX model at ``path``, atomically.

    The file is traced once, checked with ``onnx.checker`` and only then moved into place, so a failed export
    never leaves a half-written ``.onnx`` file. Its metadata holds the network's record (``net``), the size
    inputs are padded to (``multiple``) and ``metadata``.

    Raises:
        OnnxExportError: the network has an option the graph cannot hold, or the export failed (the message
            is one line and names the option or the failing operation).
    """
    onnx = require("onnx", "ONNX export")
    require("onnxscript", "ONNX export")  # torch.onnx's exporter translates the graph with it
    if opset < 17:
        raise OnnxExportError(f"opset should be 17 or newer, got {opset}")
    path = Path(path)
    if path.suffix != ".onnx":
        raise OnnxExportError(f"the ONNX output {path} should end in .onnx")
    multiple = _multiple(net)
    try:
        record = json.dumps(network_record(net))
    except TypeError as err:
        raise OnnxExportError(str(err)) from None
    graph = _Graph(net).to(device="cpu", dtype=torch.float32).eval()
    batch, height, width = (torch.export.Dim(n, min=1, max=1 << 16) for n in ("batch", "height", "width"))
    example = torch.rand(*_EXAMPLE_SIZE)
    try:
        with atomic_output(path) as tmp:
            with warnings.catch_warnings(), torch.no_grad(), _quiet_torch_logs():
                warnings.simplefilter("ignore")
                program = torch.onnx.export(
                    graph,
                    (example,),
                    dynamo=True,
                    opset_version=opset,
                    input_names=["image"],
                    output_names=["restored"],
                    dynamic_shapes={"image": {0: batch, 2: height, 3: width}},
                    verbose=False,
                )
            model = program.model_proto
            for key, value in {"net": record, "multiple": str(multiple), **(metadata or {})}.items():
                entry = model.metadata_props.add()
                entry.key, entry.value = key, value
            onnx.save_model(model, str(tmp))
            onnx.checker.check_model(str(tmp))
    except Exception as err:  # noqa: BLE001 - any tracing or conversion failure: one line, nothing written
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise OnnxExportError(f"ONNX export of {type(net).__name__} failed: {first[:300]}") from None
    return path


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_dir() -> Path:
    """Where ``cached_onnx`` keeps exported graphs: ``$DERAIN_CACHE`` or ``~/.cache/derain`` (XDG), ``/onnx``."""
    root = os.environ.get("DERAIN_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "derain"
    )
    return Path(root) / "onnx"


def cached_onnx(weights: str | os.PathLike | None = None) -> Path:
    """The ONNX graph of a weights file (``None``: the shipped weights), exported on first use and cached.

    The cache key is the weights file's sha256, so a changed file is exported again; only the first use of a
    file exports (the slow part: ``export_onnx`` traces and checks the whole network).
    """
    source = weights_file.resolve(weights)
    digest = file_digest(source)
    target = cache_dir() / f"{source.stem}-{digest[:16]}.onnx"
    if not target.is_file():
        log.warning("exporting %s to ONNX once (about a minute): %s", source, target)
        net = weights_file.load_net(source)
        export_onnx(net, target, metadata={"source": source.name, "source_sha256": digest})
    return target


class OnnxNet(nn.Module):
    """An exported graph run by onnxruntime (CPU provider), called like the torch network.

    It maps a float32 ``(N, 3, H, W)`` tensor in [0, 1] to the restored tensor, so ``restore`` (tiling,
    ensembles, 16-bit, alpha) works with it unchanged. It has no parameters: ``restore`` runs it on the CPU.

    Args:
        path: an ``.onnx`` file written by ``export_onnx``.
        threads: onnxruntime intra-op threads; ``None`` lets onnxruntime choose (all cores).
    """

    def __init__(self, path: str | os.PathLike, *, threads: int | None = None):
        super().__init__()
        ort = require("onnxruntime", "the onnxruntime backend")
        self.path = Path(path)
        if not self.path.is_file():
            raise weights_file.WeightsNotFoundError(f"ONNX file {self.path} does not exist")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own exception types
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise weights_file.WeightsError(
                f"{self.path}: not a loadable ONNX model ({first[:200]})"
            ) from None
        meta = self.session.get_modelmeta().custom_metadata_map
        try:
            self.multiple = int(meta["multiple"])
            self.record = json.loads(meta["net"])
        except (KeyError, ValueError) as err:
            raise weights_file.WeightsError(
                f"{self.path}: no derain metadata ({err}); write ONNX files with python -m derain.export"
            ) from None
        self.input_name = self.session.get_inputs()[0].name

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        m = self.multiple
        inp = x.float().cpu()
        pad_h, pad_w = (-h) % m, (-w) % m
        if (
            pad_h >= h or pad_w >= w
        ):  # too small to reflect: replicate to the multiple, as the torch network does
            inp = F.pad(inp, (0, pad_w, 0, pad_h), mode="replicate")
        out = self.session.run(None, {self.input_name: inp.contiguous().numpy()})[0]
        return torch.from_numpy(out)[..., :h, :w].to(x.device)

    def extra_repr(self) -> str:
        return f"{self.path}"

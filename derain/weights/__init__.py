"""Weights files: the one owner of their formats, keys, errors, the packaged file, saving and loading.

A weights file is a safetensors file that holds the network's state dict as tensors and, in its metadata,
``format = derain-net-v2`` and ``net = {"class_path": ..., "init_args": {...}}`` (JSON), the network's record as
LightningCLI writes it (``derain.models.network_record``): :func:`load_net` builds whatever class it names. Files
of the older ``derain-net-v1`` format (a ``config`` of ``DerainNet`` arguments) still load. A Lightning checkpoint
of ``DerainLitModule`` loads too: it keeps the record under :data:`CHECKPOINT_KEY` and the weights under the
``net.`` prefix (with Lightning's ``WeightAveraging``, its ``state_dict`` holds the average; checkpoints of the
earlier hand-written average hold that under ``ema.``). The weights that ship with derain are files of this
folder, each with a name (``derain.weights.shipped``: ``derain-small``); wherever a weights file is read, its
name does too (:func:`resolve`), and without one the default's file is read (:func:`packaged_weights`).

Example:
    >>> from derain.weights import load_net, save_net
    >>> save_net(net, "model.safetensors")                   # doctest: +SKIP
    >>> net = load_net("model.safetensors")                  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import zipfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from derain.io import atomic_output
from derain.models import build_network, network_record

from .shipped import DEFAULT_NAME, SHIPPED

__all__ = [
    "FORMAT",
    "CHECKPOINT_KEY",
    "CHECKPOINT_PREFIXES",
    "PACKAGED_WEIGHTS",
    "STARTED_KEY",
    "WeightsError",
    "WeightsNotFoundError",
    "export_checkpoint",
    "float16_tensors",
    "legacy_record",
    "load_checkpoint",
    "load_net",
    "packaged_weights",
    "read_checkpoint_net",
    "read_safetensors",
    "resolve",
    "save_net",
    "save_float16",
    "save_tensors",
    "shipped_weights",
    "tensors_sha256",
]

FORMAT = "derain-net-v2"
"""The ``format`` entry of a weights file's metadata."""

CHECKPOINT_KEY = "derain_net"
"""Where a ``DerainLitModule`` checkpoint keeps the network's record."""

STARTED_KEY = "derain_started_from"
"""Where a ``DerainLitModule`` checkpoint keeps what its run started from (``--init_weights``: file, tensors
sha256)."""

CHECKPOINT_PREFIXES = ("ema.", "net.")
"""The state-dict prefixes of a ``DerainLitModule`` checkpoint's networks, in the order they are preferred:
``ema.``, the moving average of checkpoints written with the earlier ``model.ema_decay``, is what such a run
validated; else ``net.`` (with Lightning's ``WeightAveraging``, the average: the callback puts it in the
``state_dict`` and the raw weights under ``current_model_state``)."""

PACKAGED_WEIGHTS = SHIPPED[DEFAULT_NAME].file
"""File name of the default shipped weights (``derain-small.safetensors``), under ``derain/weights/``."""


class WeightsError(ValueError):
    """A weights file that is missing, unreadable, or not a derain network (record + weights)."""


class WeightsNotFoundError(WeightsError, FileNotFoundError):
    """No weights file where one was asked for (or no trained weights ship with the package)."""


def legacy_record(config: dict) -> dict:
    """The record of a ``derain-net-v1`` file or checkpoint, whose ``config`` held ``DerainNet`` arguments."""
    return {"class_path": "derain.models.DerainNet", "init_args": config}


# ------------------------------------------------------------------------------------------------ writing


def save_net(net: nn.Module, path: str | os.PathLike, *, extra: dict[str, str] | None = None) -> Path:
    """Write ``net``'s weights and its record (``network_record``) to ``path`` (safetensors), atomically."""
    try:
        record = network_record(net)
    except TypeError as err:
        raise ValueError(str(err)) from None
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    return _write(tensors, record, path, extra)


def load_checkpoint(ckpt_path: str | os.PathLike, *, mmap: bool = False) -> dict:
    """A Lightning checkpoint, read with the safe loader.

    Args:
        ckpt_path: the checkpoint.
        mmap: map its tensors from the file rather than read them into memory: for a caller that reads only some
            of it (its step, its callbacks' state, the network's tensors), so a peek costs the pickle and the
            tensors touched, not the whole of the weights and optimizer state. The tensors returned stay backed by
            the file: copy those kept. A file torch did not write in its zip format (before 1.6) is read whole.

    Raises:
        WeightsNotFoundError: it does not exist.
        WeightsError: it is not a readable Lightning checkpoint (no ``state_dict``); the message names it.
    """
    ckpt_path = Path(ckpt_path)
    try:
        ckpt = torch.load(
            ckpt_path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(ckpt_path)
        )
    except FileNotFoundError:
        raise WeightsNotFoundError(f"checkpoint not found: {ckpt_path}") from None
    except Exception as err:  # noqa: BLE001 - any unpickling failure means "not a usable checkpoint"
        raise WeightsError(
            f"cannot read checkpoint {ckpt_path}: {type(err).__name__}: {str(err)[:200]}"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise WeightsError(f"{ckpt_path} is not a Lightning checkpoint (no 'state_dict')")
    return ckpt


def read_checkpoint_net(ckpt_path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict]:
    """The network state dict and record (``class_path``, ``init_args``) from a Lightning checkpoint (safe
    loader).

    The weights the run validated: the ``state_dict``'s ``net.*`` (with Lightning's ``WeightAveraging``, the
    average; the raw weights under ``current_model_state`` are not read), or, in a checkpoint written with the
    earlier ``model.ema_decay``, its moving average ``ema.*``. The prefix is removed.

    The checkpoint is mapped (``load_checkpoint(mmap=True)``) and only the network's tensors are read from it, into
    tensors of their own: not the raw weights and optimizer state that make up most of a training checkpoint, and
    nothing returned stays tied to the file (a run may rewrite it while a model read from it serves).
    """
    ckpt_path = Path(ckpt_path)
    ckpt = load_checkpoint(ckpt_path, mmap=True)
    record = ckpt.get(CHECKPOINT_KEY)
    if record is None and "derain_net_config" in ckpt:  # written before the record (derain-net-v1)
        record = legacy_record(ckpt["derain_net_config"])
    if record is None:
        raise ValueError(
            f"{ckpt_path} has no {CHECKPOINT_KEY!r} record: it was not written by DerainLitModule"
        )
    ema, plain = CHECKPOINT_PREFIXES
    prefix = ema if any(k.startswith(ema) for k in ckpt["state_dict"]) else plain
    state = {k.removeprefix(prefix): v.clone() for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    return state, record


def export_checkpoint(
    ckpt_path: str | os.PathLike, out_path: str | os.PathLike, *, extra: dict[str, str] | None = None
) -> Path:
    """Convert a Lightning checkpoint of `DerainLitModule` into a safetensors weights file.

    Args:
        ckpt_path: the checkpoint.
        out_path: the weights file to write (atomically).
        extra: more metadata entries (``derain.weights.provenance.provenance_metadata``: how the weights were made).
    """
    state, record = read_checkpoint_net(ckpt_path)
    return _write(state, record, out_path, {"source": Path(ckpt_path).name, **(extra or {})})


def _write(
    tensors: dict[str, torch.Tensor], record: dict, path: str | os.PathLike, extra: dict | None
) -> Path:
    return save_tensors(tensors, path, {"format": FORMAT, "net": json.dumps(record), **(extra or {})})


def save_tensors(
    tensors: Mapping[str, torch.Tensor], path: str | os.PathLike, metadata: dict[str, str]
) -> Path:
    """Write ``tensors`` with ``metadata`` as they are to a safetensors file, atomically (a file that already holds
    a record and only gains metadata: ``derain.weights.provenance.write_provenance``)."""
    path = Path(path)
    with atomic_output(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    return path


def float16_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with its floating-point tensors in float16: how a file is stored at half the size (the loader
    widens them back to float32)."""
    return {k: v.half() if v.is_floating_point() else v for k, v in state.items()}


def save_float16(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """A weights file stored in float16 (:func:`float16_tensors`), its metadata as it is, written atomically."""
    meta, state = read_safetensors(source)
    return save_tensors(float16_tensors(state), target, meta)


# ------------------------------------------------------------------------------------------------ reading


def tensors_sha256(weights: str | os.PathLike | Mapping[str, torch.Tensor]) -> str:
    """The sha256 of a network's tensors: what names a weights file in the recipe and in ``derain info``.

    It hashes each tensor's name, dtype, shape and bytes, in name order, and nothing of the file's metadata: a file
    re-exported with other metadata (provenance, ``source``) keeps it, and so does the same network read from a
    Lightning checkpoint (its ``ema.``/``net.`` prefix removed, :func:`read_checkpoint_net`).

    Args:
        weights: a ``.safetensors`` or ``.ckpt`` file, or a state dict.

    Raises:
        WeightsError: the file is missing or not a readable weights file (the message names it).
    """
    if isinstance(weights, Mapping):
        state = weights
    else:
        path = resolve(weights)
        if path.suffix == ".ckpt":
            try:
                state = read_checkpoint_net(path)[0]
            except ValueError as err:
                raise WeightsError(str(err).splitlines()[0]) from None
        else:
            state = read_safetensors(path)[1]
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}\0{str(tensor.dtype).removeprefix('torch.')}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """A safetensors file's metadata and tensors (on the CPU), as they are.

    Raises:
        WeightsError: the file is not a readable safetensors file (the message names it).
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            state = {key: f.get_tensor(key) for key in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise WeightsError(f"{path}: not a readable safetensors file ({err})") from None
    return meta, state


def _in_package(file: str) -> Path:
    """The path of ``file`` in ``derain/weights/``; it must exist."""
    path = Path(str(resources.files("derain").joinpath("weights", file)))
    if not path.is_file():
        raise WeightsNotFoundError(
            f"no trained weights ship with this copy of derain yet ({path} does not exist); "
            "pass a weights file explicitly: load_model('model.safetensors') in Python, "
            "or --weights FILE (.safetensors from derain.export, or a Lightning .ckpt) on the command line"
        )
    return path


def packaged_weights() -> Path:
    """Path of the default weights that ship inside the package (``derain/weights/derain-small.safetensors``).

    Raises:
        WeightsNotFoundError: when no trained weights ship with this copy of derain yet.
    """
    return _in_package(PACKAGED_WEIGHTS)


def shipped_weights(name: str) -> Path:
    """Path of the shipped weights called ``name`` (``"derain-small"``; ``derain.weights.shipped.SHIPPED``).

    Raises:
        WeightsNotFoundError: ``name`` is not one of them (the message lists those that are), or its file is not in
            this copy of derain.
    """
    if name not in SHIPPED:
        raise WeightsNotFoundError(
            f"no shipped weights are called {name!r}; their names: {', '.join(SHIPPED)} (derain models lists them)"
        )
    return _in_package(SHIPPED[name].file)


def resolve(weights: str | os.PathLike | None) -> Path:
    """The weights file to read: the file ``weights``, else the shipped weights of that name
    (:func:`shipped_weights`), or the packaged weights for ``None``; it must exist and hold bytes.

    A file wins over a name: ``derain-small`` is the shipped network unless a file of that name is there.

    Raises:
        WeightsNotFoundError: neither a file nor a name of shipped weights (the message lists the names), or, for
            ``None``, no trained weights ship yet.
        WeightsError: the file is empty.
    """
    if weights is None:
        path = packaged_weights()
    elif Path(weights).is_file() or str(weights) not in SHIPPED:
        path = Path(weights)
    else:
        path = shipped_weights(str(weights))
    if not path.is_file():
        raise WeightsNotFoundError(
            f"weights file {path} does not exist, and no shipped weights are called that "
            f"(their names: {', '.join(SHIPPED)})"
        )
    if path.stat().st_size == 0:
        raise WeightsError(f"{path}: the weights file is empty")
    return path


def load_net(weights: str | os.PathLike | None = None) -> nn.Module:
    """The network a weights file records (``class_path`` + ``init_args``), with its weights, on the CPU.

    Args:
        weights: a ``.safetensors`` file (``save_net``, ``export_checkpoint``) or a Lightning ``.ckpt`` from
            ``DerainLitModule``, or the name of shipped weights (``"derain-small"``); ``None`` reads the packaged
            weights.

    Raises:
        WeightsNotFoundError: neither a file nor a name of shipped weights, or ``weights=None`` and no trained
            weights ship yet.
        WeightsError: the file is not a readable derain weights file (the message names it), or an ``.onnx``
            graph (``derain.inference.load_model(backend="onnxruntime")`` runs those).
    """
    path = resolve(weights)
    if path.suffix == ".onnx":
        raise WeightsError(f"{path}: an ONNX file runs with backend onnxruntime (--backend onnxruntime)")
    if path.suffix == ".ckpt":
        return _load_lightning(path)
    if path.suffix == ".safetensors":
        return _load_safetensors(path)
    raise WeightsError(f"{path}: unknown weights suffix {path.suffix!r}; expected .safetensors or .ckpt")


def _build(record: object, state: dict[str, torch.Tensor], path: Path) -> nn.Module:
    """The network a file's record describes, with the file's weights.

    The network is built without memory (on the ``meta`` device) and takes the file's tensors as they are
    (``assign``), so it is built once, and a record with huge sizes is a shape error, not an allocation. A
    network with tensors the file does not hold (non-persistent buffers) is then built for real. Weights stored in
    half precision (a smaller file) are widened to float32: the network computes in float32 whatever the file holds.
    """
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    try:
        with torch.device("meta"):
            net = build_network(record)
    except ValueError as err:
        raise WeightsError(f"{path}: {err}") from None
    try:
        net.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0:2]
        raise WeightsError(f"{path}: the weights do not fit the stored network: {' '.join(first)}") from None
    if any(t.is_meta for t in itertools.chain(net.parameters(), net.buffers())):
        net = build_network(record)
        net.load_state_dict(state, strict=True)
    return net


def _load_safetensors(path: Path) -> nn.Module:
    meta, state = read_safetensors(path)
    fmt = meta.get("format")
    key = {FORMAT: "net", "derain-net-v1": "config"}.get(str(fmt))
    if key is None:
        raise WeightsError(
            f"{path}: metadata 'format' is {fmt!r}, expected {FORMAT!r} (write weights with derain.export)"
        )
    try:
        record = json.loads(meta[key])
    except (KeyError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path}: metadata {key!r} is missing or not JSON ({err})") from None
    if key == "config":
        record = legacy_record(record)
    return _build(record, state, path)


def _load_lightning(path: Path) -> nn.Module:
    try:
        state, record = read_checkpoint_net(path)
    except ValueError as err:
        raise WeightsError(str(err).splitlines()[0]) from None
    if not state:
        raise WeightsError(f"{path}: the checkpoint's state_dict has no 'net.*' entries")
    return _build(record, state, path)

"""Export a training checkpoint to a safetensors file that rebuilds `DerainNet` without Lightning, or a
checkpoint or weights file to an ONNX model (when the output name ends in ``.onnx``, see ``derain.onnx``).

    python -m derain.export runs/synthetic/checkpoints/best.ckpt model.safetensors
    python -m derain.export model.safetensors model.onnx

The file holds the network's state dict as tensors and, in its metadata, ``format = derain-net-v2`` and
``net = {"class_path": ..., "init_args": {...}}`` (JSON), the network's record as LightningCLI writes it:
``derain.load_model`` builds whatever class it names. Files of the older ``derain-net-v1`` format (a ``config``
of ``DerainNet`` arguments) still load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from .io import atomic_output
from .models import network_record

__all__ = [
    "FORMAT",
    "CHECKPOINT_KEY",
    "export_checkpoint",
    "save_net",
    "read_checkpoint_net",
    "legacy_record",
]

FORMAT = "derain-net-v2"
"""The ``format`` entry of a weights file's metadata."""

CHECKPOINT_KEY = "derain_net"
"""Where a ``DerainLitModule`` checkpoint keeps the network's record."""


def legacy_record(config: dict) -> dict:
    """The record of a ``derain-net-v1`` file or checkpoint, whose ``config`` held ``DerainNet`` arguments."""
    return {"class_path": "derain.models.DerainNet", "init_args": config}


def save_net(net: nn.Module, path: str | os.PathLike, *, extra: dict[str, str] | None = None) -> Path:
    """Write ``net``'s weights and its record (``network_record``) to ``path`` (safetensors), atomically."""
    try:
        record = network_record(net)
    except TypeError as err:
        raise ValueError(str(err)) from None
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    return _write(tensors, record, path, extra)


def read_checkpoint_net(ckpt_path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict]:
    """The network state dict and record (``class_path``, ``init_args``) from a Lightning checkpoint (safe
    loader).

    The moving average of the weights (``ema.*``, when trained with ``ema_decay``) is preferred: it is what the
    run validated; otherwise the ``net.*`` weights. The prefix is removed.
    """
    ckpt_path = Path(ckpt_path)
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint not found: {ckpt_path}") from None
    except Exception as err:  # noqa: BLE001 - any unpickling failure means "not a usable checkpoint"
        raise ValueError(
            f"cannot read checkpoint {ckpt_path}: {type(err).__name__}: {str(err)[:200]}"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ValueError(f"{ckpt_path} is not a Lightning checkpoint (no 'state_dict')")
    record = ckpt.get(CHECKPOINT_KEY)
    if record is None and "derain_net_config" in ckpt:  # written before the record (derain-net-v1)
        record = legacy_record(ckpt["derain_net_config"])
    if record is None:
        raise ValueError(
            f"{ckpt_path} has no {CHECKPOINT_KEY!r} record: it was not written by DerainLitModule"
        )
    prefix = "ema." if any(k.startswith("ema.") for k in ckpt["state_dict"]) else "net."
    state = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    return state, record


def export_checkpoint(ckpt_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Convert a Lightning checkpoint of `DerainLitModule` into a safetensors weights file."""
    state, record = read_checkpoint_net(ckpt_path)
    return _write(state, record, out_path, {"source": Path(ckpt_path).name})


def _write(
    tensors: dict[str, torch.Tensor], record: dict, path: str | os.PathLike, extra: dict | None
) -> Path:
    path = Path(path)
    metadata = {"format": FORMAT, "net": json.dumps(record), **(extra or {})}
    with atomic_output(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m derain.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "checkpoint",
        help="Lightning .ckpt written by derain.fit (or, for an .onnx output, a .safetensors file)",
    )
    parser.add_argument("output", help="destination: a .safetensors file, or an .onnx file (ONNX model)")
    parser.add_argument(
        "--opset", type=int, default=None, help="ONNX opset (17 or newer; default derain.onnx.OPSET)"
    )
    args = parser.parse_args(argv)
    try:
        if args.output.endswith(".onnx"):
            from .inference import load_model
            from .onnx import OPSET, export_onnx

            net = load_model(args.checkpoint, device="cpu")
            out = export_onnx(
                net, args.output, opset=args.opset or OPSET, metadata={"source": Path(args.checkpoint).name}
            )
        elif args.opset is not None:
            raise ValueError("--opset applies to .onnx outputs only")
        else:
            out = export_checkpoint(args.checkpoint, args.output)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

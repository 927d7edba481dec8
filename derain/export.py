"""Export a training checkpoint to a safetensors file that rebuilds `DerainNet` without Lightning.

    python -m derain.export runs/synthetic/checkpoints/best.ckpt model.safetensors

The file holds the network's state dict as tensors and, in its metadata, ``format = derain-net-v1`` and
``config = <JSON of DerainNet's constructor arguments>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from .io import default_file_mode

__all__ = ["FORMAT", "export_checkpoint", "save_net", "read_checkpoint_net"]

FORMAT = "derain-net-v1"


def save_net(net: nn.Module, path: str | os.PathLike, *, extra: dict[str, str] | None = None) -> Path:
    """Write ``net``'s weights and ``net.config`` to ``path`` (safetensors), atomically."""
    config = getattr(net, "config", None)
    if config is None:
        raise ValueError(f"{type(net).__name__} has no .config; only DerainNet-like networks can be exported")
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    return _write(tensors, config, path, extra)


def read_checkpoint_net(ckpt_path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict]:
    """The network state dict and config from a Lightning checkpoint (safe loader).

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
    config = ckpt.get("derain_net_config")
    if config is None:
        raise ValueError(f"{ckpt_path} has no 'derain_net_config': it was not written by DerainLitModule")
    prefix = "ema." if any(k.startswith("ema.") for k in ckpt["state_dict"]) else "net."
    state = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    return state, config


def export_checkpoint(ckpt_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Convert a Lightning checkpoint of `DerainLitModule` into a safetensors weights file."""
    state, config = read_checkpoint_net(ckpt_path)
    return _write(state, config, out_path, {"source": Path(ckpt_path).name})


def _write(
    tensors: dict[str, torch.Tensor], config: dict, path: str | os.PathLike, extra: dict | None
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"format": FORMAT, "config": json.dumps(config), **(extra or {})}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m derain.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("checkpoint", help="Lightning .ckpt written by derain.fit")
    parser.add_argument("output", help="destination .safetensors file")
    args = parser.parse_args(argv)
    try:
        out = export_checkpoint(args.checkpoint, args.output)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

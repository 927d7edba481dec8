"""Export a training checkpoint to a safetensors file that rebuilds `DerainNet` without Lightning, or a
checkpoint or weights file to an ONNX model (when the output name ends in ``.onnx``; needs ``derain[onnx]``).

    python -m derain.export runs/synthetic/checkpoints/best.ckpt model.safetensors
    python -m derain.export model.safetensors model.onnx
    python -m derain.export derain-small derain-small.onnx     (shipped weights, by name)

A weights file written from a checkpoint records its provenance (``derain info`` prints it): the checkpoint's step,
what the run started from, its best validation score and the config the run saved beside it (the training commit is
not in a checkpoint: ``derain.fit``'s own export records it). What a weights file holds is ``derain.weights``' to
say; the ONNX graph's, ``derain.inference.onnx``'s.
"""

from __future__ import annotations

import argparse
import sys

from derain.extras import MissingExtraError
from derain.inference.onnx import OPSET, export_onnx
from derain.weights import export_checkpoint, load_net, resolve
from derain.weights.provenance import checkpoint_provenance, provenance_metadata

__all__ = ["build_parser", "main"]


def build_parser(prog: str = "python -m derain.export") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "checkpoint",
        help="Lightning .ckpt written by derain.fit (or, for an .onnx output, a .safetensors file or the name of "
        "shipped weights: derain models lists them)",
    )
    parser.add_argument("output", help="destination: a .safetensors file, or an .onnx file (ONNX model)")
    parser.add_argument("--opset", type=int, default=None, help=f"ONNX opset (17 or newer; default {OPSET})")
    return parser


def main(argv: list[str] | None = None, *, prog: str = "python -m derain.export") -> int:
    """Command-line entry; returns the exit status (0 written, 2 a usage error or a file that cannot be read)."""
    args = build_parser(prog).parse_args(argv)
    try:
        if args.output.endswith(".onnx"):
            source = resolve(args.checkpoint)
            out = export_onnx(
                load_net(source), args.output, opset=args.opset or OPSET, metadata={"source": source.name}
            )
        elif args.opset is not None:
            raise ValueError("--opset applies to .onnx outputs only")
        else:
            prov = checkpoint_provenance(args.checkpoint, exported_by="derain export")
            out = export_checkpoint(args.checkpoint, args.output, extra=provenance_metadata(prov))
            print(f"provenance: config from {prov['config_source']}")
    except (OSError, ValueError, MissingExtraError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

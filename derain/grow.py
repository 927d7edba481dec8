"""Grow trained weights into a bigger network that computes the same, to train on from there:

    derain grow derain-small.safetensors wide.safetensors --dim 48 --blocks 2,4,4,4 --full-res tksa --noise 0.001

``--dim`` widens every level by channel duplication (a multiple of the parent's width), ``--blocks`` appends identity
blocks to each level (their mixers cycle the level's own), ``--full-res`` adds the full-resolution stage
(``derain.models.grow``). The written file records the parent by name and tensors sha256 and the options
(``derain info OUT`` prints them); ``derain fit --init_weights OUT`` trains it on.
"""

from __future__ import annotations

import argparse
import sys

from derain.models import grow
from derain.weights import load_net, save_net
from derain.weights.provenance import growth_provenance, provenance_metadata

__all__ = ["build_parser", "main"]

PROG = "python -m derain.grow"


def _ints(text: str) -> tuple[int, ...]:
    """``2,4,4,4`` → ``(2, 4, 4, 4)``."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers, comma-separated; got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    """``tksa,agent`` → ``("tksa", "agent")``."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("input", help="the parent: a .safetensors weights file (or a Lightning .ckpt)")
    parser.add_argument("output", help="the grown network's .safetensors file")
    parser.add_argument("--dim", type=int, help="the new first-level channels, a multiple of the parent's")
    parser.add_argument("--blocks", type=_ints, help="the new blocks per level, e.g. 2,4,4,4")
    parser.add_argument(
        "--full-res",
        type=_names,
        help="add the full-resolution stage with these mixers: tksa, tksa,agent, ...",
    )
    parser.add_argument("--full-res-dim", type=int, default=16, help="the full-resolution stage's channels")
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="noise on the widened tensors, a multiple of each one's std, so copies learn apart (e.g. 0.001)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the noise and the new parameters")
    return parser


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Command-line entry; returns 0 (written) or 2 (a usage error, or a file or growth that cannot be done)."""
    parser = build_parser(prog)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.dim is None and args.blocks is None and not args.full_res:
        parser.error("nothing to grow: give --dim, --blocks or --full-res")
    # deepening and the full-resolution stage are exact and duplicate nothing: noise would be recorded, unused
    if args.noise and args.dim is None:
        parser.error(f"--noise {args.noise} only breaks the symmetry of widened copies: it needs --dim")
    options = {"dim": args.dim, "blocks": args.blocks, "full_res_mixers": args.full_res}
    options = {k: v for k, v in options.items() if v}
    if args.full_res:
        options["full_res_dim"] = args.full_res_dim
    options.update(noise=args.noise, seed=args.seed)
    try:
        parent = load_net(args.input)
        grown = grow(parent, **options)
        prov = growth_provenance(args.input, options)
        out = save_net(grown, args.output, extra=provenance_metadata(prov))
    except (OSError, ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    record, size = grown.init_args, sum(p.numel() for p in grown.parameters()) / 1e6
    print(f"wrote {out}: dim {record['dim']}, blocks {record['blocks']}, {size:.2f}M parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

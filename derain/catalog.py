"""The weights that ship, by name: ``derain models`` lists each with its parameters, speed, scores and file.

The names and their speed are ``derain.weights.shipped``'s: one pass of ``restore`` on a 321×481 photo in
yardsticks (a unit timed on the same machine, so the figure compares across machines), measured once where the
table says, not at every call. The validation scores are the ones the file's provenance records
(``derain info NAME`` prints all of it). Any of the names works as ``--weights NAME`` and ``load_model(NAME)``.
"""

from __future__ import annotations

import argparse
import sys

from derain.weights import WeightsError, load_net, shipped_weights
from derain.weights.provenance import read_provenance
from derain.weights.shipped import DEFAULT_NAME, SHIPPED, ShippedNet

__all__ = ["describe", "main"]

PROG = "python -m derain.catalog"


def describe(net: ShippedNet) -> str:
    """What ``derain models`` prints about one shipped network.

    Raises:
        WeightsError: its file is not in this copy of derain, or is not a readable weights file.
    """
    path = shipped_weights(net.name)
    count = sum(p.numel() for p in load_net(path).parameters())
    prov = read_provenance(path) or {}
    scores = {k: v for k, v in (prov.get("validation") or {}).items() if k != "recorded"}
    heading = f"(provenance; derain info {net.name} says how)" if scores else "none recorded"
    lines = [
        net.name + (" (the default)" if net.name == DEFAULT_NAME else ""),
        f"  parameters: {count:,} ({count / 1e6:.2f} M)",
        f"  speed: {net.yardsticks:g} yardsticks a 321×481 photo, one pass (measured by {net.measured})",
        f"  validation: {heading}",
        *(f"    {key}: {value}" for key, value in scores.items()),
        f"  file: {path}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Print the shipped weights; returns 0, or 2 when one of their files is missing or unreadable (one line)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.parse_args(sys.argv[1:] if argv is None else argv)
    status = 0
    for net in SHIPPED.values():
        try:
            print(describe(net))
        except WeightsError as err:
            print(f"error: {net.name}: {err}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    raise SystemExit(main())

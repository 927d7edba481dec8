"""How a weights file was made: ``derain info [WEIGHTS]`` (the packaged weights by default).

Prints the file, its network record, the sha256 of its tensors (what the recipe pins) and its provenance: the
commit, the training data's manifest hash, the steps, the weights it started from (file and tensors sha256), the
validation scores and the resolved config (``--config`` prints that in full); a grown network (``derain grow``),
its parent (file and tensors sha256), the growth options and the parent's steps and scores. A file written without
provenance says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from derain.weights import WeightsError, read_safetensors, resolve, tensors_sha256
from derain.weights.provenance import PROVENANCE_KEY, read_provenance

__all__ = ["describe", "main"]

PROG = "python -m derain.info"


def _lines(value: Any, indent: str = "") -> list[str]:
    """Indented ``key: value`` lines of a nested dict; a line per item of a list."""
    if isinstance(value, list):
        return [f"{indent}{json.dumps(v) if isinstance(v, dict) else v}" for v in value]
    if not isinstance(value, dict):
        return [f"{indent}{value}"]
    out = []
    for key, v in value.items():
        if isinstance(v, (dict, list)):
            out += [f"{indent}{key}:", *_lines(v, indent + "  ")]
        else:
            out.append(f"{indent}{key}: {v}")
    return out


def _growth(prov: dict[str, Any]) -> list[str]:
    """The lines of a grown network's provenance (``derain grow``): what it grew from, how, and the parent's own
    commit, steps and validation."""
    grown = prov["grown_from"]
    parent, options = grown.get("provenance"), grown.get("options") or {}
    lines = [
        f"commit: {prov.get('commit') or 'unknown (not grown in a git checkout)'}",
        f"grown from: {grown.get('file')} (tensors sha256 {grown.get('tensors_sha256')})",
        "growth:",
        *(f"  {k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in options.items()),
    ]
    if not parent:
        return [*lines, "parent provenance: none recorded"]
    keep = {k: parent[k] for k in ("commit", "steps", "lineage_steps", "validation") if k in parent}
    if "grown_from" in parent:  # grown in turn: its parent by name and hash
        above = parent["grown_from"]
        keep["grown from"] = f"{above.get('file')} (tensors sha256 {above.get('tensors_sha256')})"
    return [*lines, "parent provenance:", *_lines(keep, "  ")]


def describe(weights: str | None = None, *, full_config: bool = False) -> str:
    """What ``derain info`` prints about ``weights`` (the packaged weights for None).

    Raises:
        WeightsError: the file is missing or not a readable ``.safetensors`` weights file.
    """
    path = resolve(weights)
    if path.suffix != ".safetensors":
        raise WeightsError(
            f"{path}: derain info reads .safetensors weights files (export a checkpoint first)"
        )
    meta = read_safetensors(path)[0]
    lines = [f"weights: {path}", f"tensors sha256: {tensors_sha256(path)}"]
    lines += [f"{k}: {v}" for k, v in meta.items() if k != PROVENANCE_KEY]
    prov = read_provenance(path)
    if prov is None:
        return "\n".join([*lines, "provenance: none recorded (this file was written without it)"])
    if "grown_from" in prov:
        lines += _growth(prov)
        parent_config = (prov["grown_from"].get("provenance") or {}).get("config")
        if full_config and parent_config:
            lines += ["parent config:", yaml.safe_dump(parent_config, sort_keys=False).rstrip()]
        return "\n".join(lines)
    config, data = prov.get("config") or {}, prov.get("data") or {}
    lineage = f" (lineage: {prov['lineage_steps']})" if "lineage_steps" in prov else ""
    lines += [
        f"commit: {prov.get('commit') or _no_commit(prov)}",
        f"steps: {prov.get('steps')}{lineage}",
        f"data: sha256 {data.get('sha256')}, {data.get('files')} files, {data.get('bytes')} bytes in "
        f"{', '.join(data.get('folders', []))}",
    ]
    started = prov.get("started_from")
    if isinstance(started, dict):
        lines.append(f"started from: {started.get('file')} (tensors sha256 {started.get('tensors_sha256')})")
    shown = ("config", "commit", "export_commit", "steps", "lineage_steps", "data", "started_from")
    lines += _lines({k: v for k, v in prov.items() if k not in shown})
    if full_config:
        return "\n".join([*lines, "config:", yaml.safe_dump(config, sort_keys=False).rstrip()])
    trainer, model = config.get("trainer") or {}, config.get("model") or {}
    lines.append(
        f"config: seed {config.get('seed_everything')}, max_steps {trainer.get('max_steps')}, lr {model.get('lr')}, "
        f"init_weights {config.get('init_weights', model.get('init_weights'))} (--config prints it whole)"
    )
    return "\n".join(lines)


def _no_commit(prov: dict) -> str:
    """What ``commit`` says where provenance records none: weights exported from a checkpoint later (``derain
    export``: the checkpoint does not record the commit that trained it), or trained outside a git checkout."""
    if "export_commit" in prov:
        return f"unknown (exported later from a checkpoint, by the code of {prov['export_commit']})"
    return "unknown (not trained in a git checkout)"


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Print how a weights file was made; returns 0, or 2 for a missing or unreadable file (one line)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument(
        "weights",
        nargs="?",
        help="a .safetensors weights file, or the name of shipped weights (default: the packaged weights)",
    )
    parser.add_argument("--config", action="store_true", help="print the resolved training config in full")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(describe(args.weights, full_config=args.config))
    except WeightsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How a weights file was made: ``derain info [WEIGHTS]`` (the packaged weights by default).

Prints the file, its network record, the sha256 of its tensors (what the recipe pins) and its provenance: the
commit, the training data's manifest hash, the steps, the validation scores and the resolved config (``--config``
prints that in full). A file written without provenance says so.
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


def _flat(scores: Any, prefix: str = "") -> list[str]:
    """``key value`` lines of a nested dict of scores."""
    if not isinstance(scores, dict):
        return [f"{prefix} {scores}"]
    return [line for k, v in scores.items() for line in _flat(v, f"{prefix}{'/' if prefix else ''}{k}")]


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
    lines = [f"weights: {path}", f"format: {meta.get('format')}"]
    record = meta.get("net") or meta.get("config")
    if record:
        lines.append(f"network: {record}")
    lines.append(f"tensors sha256: {tensors_sha256(path)}")
    lines += [f"{k}: {v}" for k, v in meta.items() if k not in ("format", "net", "config", PROVENANCE_KEY)]
    prov = read_provenance(path)
    if prov is None:
        lines.append("provenance: none recorded (this file was written without it)")
        return "\n".join(lines)
    config = prov.get("config") or {}
    data = prov.get("data") or {}
    lines += [
        f"commit: {prov.get('commit') or 'unknown (not trained in a git checkout)'}",
        f"steps: {prov.get('steps')}"
        + (f" (lineage: {prov['lineage_steps']})" if "lineage_steps" in prov else ""),
        f"data: sha256 {data.get('sha256')}, {data.get('files')} files, {data.get('bytes')} bytes in "
        f"{', '.join(data.get('folders', []))}",
        "validation:",
        *(f"  {line}" for line in _flat(prov.get("validation", {}))),
    ]
    lines += [
        f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}"
        for k, v in prov.items()
        if k not in ("config", "commit", "steps", "lineage_steps", "data", "validation")
    ]
    if full_config:
        lines += ["config:", yaml.safe_dump(config, sort_keys=False).rstrip()]
    else:
        trainer, model = config.get("trainer", {}), config.get("model", {})
        lines.append(
            f"config: seed {config.get('seed_everything')}, max_steps {trainer.get('max_steps')}, lr "
            f"{model.get('lr')}, init_weights {model.get('init_weights')} (--config prints it whole)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Print how a weights file was made; returns 0, or 2 for a missing or unreadable file (one line)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument(
        "weights", nargs="?", help="a .safetensors weights file (default: the packaged weights)"
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

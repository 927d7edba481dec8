"""``derain pin NAME LEG``: a run in progress grows a leg at a time (see :mod:`derain.recipe`).

Once a leg's config (``LEG.yaml`` beside the recipe) has trained from the continuation file (its output's provenance
says so), its stage is appended to ``recipe.yaml`` as text (the file's comments stay) and the continuation file is
replaced by its output in float16.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from derain.io import atomic_output
from derain.recipe_spec import SOURCE, Recipe, RecipeError, Stage, check_weights, leg_configs, load_recipe
from derain.weights import WeightsError, float16_tensors, read_safetensors, save_float16, tensors_sha256
from derain.weights.provenance import read_provenance

__all__ = ["main", "pin_stage"]

PROG = "python -m derain.pin"


def _pin_edits(text: str, file: Path) -> tuple[tuple[int, int], int, str]:
    """Where ``derain pin`` edits a recipe's text: the span of the continuation's sha256 value, the offset just after
    the last stage's last line, and the indent of that list's items (read from the YAML nodes' marks, so the rest
    of the text and its comments stay as they are)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as err:
        raise RecipeError(f"{file}: not YAML: {err}") from None
    top = {k.value: v for k, v in root.value} if isinstance(root, yaml.MappingNode) else {}
    continuation, stages = top.get("continuation"), top.get("stages")
    sha = (
        {k.value: v for k, v in continuation.value}.get("sha256")
        if isinstance(continuation, yaml.MappingNode)
        else None
    )
    if not isinstance(sha, yaml.ScalarNode):
        raise RecipeError(f"{file}: its continuation records no sha256 to replace")
    if not isinstance(stages, yaml.SequenceNode) or stages.flow_style or not stages.value:
        raise RecipeError(f"{file}: no block list of stages to append to")
    last = node = stages.value[-1]
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.value:
        node = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
    newline = text.find("\n", node.end_mark.index)
    end = len(text) if newline < 0 else newline + 1
    line = text[text.rfind("\n", 0, last.start_mark.index) + 1 : last.start_mark.index]
    return (sha.start_mark.index, sha.end_mark.index), end, line[: len(line) - len(line.lstrip())]


def _leg_output(recipe: Recipe, name: str, needs: tuple[str, ...], note: str) -> tuple[Path, Path]:
    """The config and output of leg ``name``, checked to be a new leg of a run in progress that has trained."""
    if recipe.continuation is None:
        raise RecipeError(f"{recipe.file}: no continuation; only a run in progress is pinned a leg at a time")
    if not re.fullmatch(r"[A-Za-z][\w.-]*", name) or "\n" in note:
        raise RecipeError(
            f"a leg is named by letters, digits, '_', '.', '-' (got {name!r}); a note is one line"
        )
    if recipe.stage(name) is not None:
        raise RecipeError(f"{recipe.file}: stage {name!r} is already pinned")
    unknown = set(needs) - set(recipe.prepare)
    if unknown:
        raise RecipeError(f"{name}: needs {sorted(unknown)}, which the recipe does not prepare")
    config = recipe.file.parent / f"{name}.yaml"
    if not config.is_file():
        raise RecipeError(f"{name}: no config {config}")
    root = ((yaml.safe_load(config.read_text()) or {}).get("trainer") or {}).get("default_root_dir")
    if not root:
        raise RecipeError(f"{config}: sets no trainer.default_root_dir, so its output is not known")
    output = Path(root) / "model.safetensors"
    if not output.is_file():
        raise RecipeError(f"{name}: its output {output} does not exist; train the leg first")
    return config, output


def _check_start(name: str, output: Path, provenance: dict[str, Any], path: str, sha: str) -> None:
    """A leg's output must have started from the continuation (``path``, tensors ``sha``): by the hash its
    provenance records (``started_from``), or, for an output exported before provenance recorded it, by its
    ``init_weights`` path (relative to the repository's root, where the recipe runs)."""
    started = provenance.get("started_from")
    if isinstance(started, dict):
        if started.get("tensors_sha256") != sha:
            raise RecipeError(
                f"{name}: {output} started from {started.get('file')} (tensors sha256 "
                f"{started.get('tensors_sha256')}), not the continuation ({sha})"
            )
        return
    init = (provenance.get("config") or {}).get("init_weights")
    if init is None or (SOURCE / init).resolve() != (SOURCE / path).resolve():
        raise RecipeError(
            f"{name}: {output}'s provenance records no start from the continuation {path} (init_weights: "
            f"{init}); pin the model.safetensors derain.fit exported at the end of the leg"
        )


def _stage_lines(stage: dict[str, Any], note: str) -> list[str]:
    """A pinned stage as recipe.yaml writes one (flow lists, a comment on the name and on the float32 hash)."""
    lines = [
        f"- name: {stage['name']}" + (f"  # {note}" if note else ""),
        f"  config: {stage['config']}",
        f"  over: [{', '.join(stage['over'])}]",
        *([f"  needs: [{', '.join(stage['needs'])}]"] if "needs" in stage else []),
        f"  input:  # the continuation file of its day, {stage['input']['float16_of']}'s output in float16",
        *(f"    {key}: {value}" for key, value in stage["input"].items()),
        "  output:",
        *(f"    {key}: {'null' if value is None else value}" for key, value in stage["output"].items()),
    ]
    lines[-1] += "  # float32, as exported"
    return lines


def pin_stage(recipe: Recipe, name: str, *, needs: tuple[str, ...] = (), note: str = "") -> Stage:
    """Append leg ``name`` of a run in progress to its ``recipe.yaml`` and make its output the continuation.

    The stage's config is ``name.yaml`` beside the recipe, layered over the last stage's configs and that stage's
    own; its input is the committed continuation (the last stage's output in float16, ``float16_of`` it, at
    ``float16.safetensors`` beside that output); its output the ``model.safetensors`` of the config's
    ``trainer.default_root_dir``, with the checkpoint and step its provenance records. The continuation file is
    then that output in float16, and the recipe records its hash. The file's other text and comments stay; the
    new text is read back and checked before anything is written, and the recipe is written before the
    continuation is replaced (an interrupted pin changes neither, or only the recipe's text).

    Raises:
        RecipeError: the recipe has no continuation, the stage exists, its config or output is missing or the
            output is an earlier stage's or did not start from the continuation (its provenance), the committed
            continuation is not the hash the recipe records, a ``needs`` is not one of the recipe's ``prepare``
            steps, or the edited text would not read back.
    """
    config, output = _leg_output(recipe, name, needs, note)
    stored = SOURCE / recipe.continuation.path  # type: ignore[union-attr]
    started = check_weights(stored, recipe.continuation.sha256, "continuation")  # type: ignore[union-attr]
    try:
        provenance = read_provenance(output) or {}
        state = read_safetensors(output)[1]
    except WeightsError as err:
        raise RecipeError(f"{name}: output {output}: {err}") from None
    out_sha, new_sha = tensors_sha256(state), tensors_sha256(float16_tensors(state))
    earlier = [s.name for s in recipe.stages if s.output.sha256 == out_sha]
    if earlier:
        raise RecipeError(f"{name}: {output} is the output of stage {earlier[0]}, not a new leg's")
    _check_start(name, output, provenance, recipe.continuation.path, started)  # type: ignore[union-attr]
    last = recipe.stages[-1]
    step = provenance.get("steps")
    stage = {
        "name": name,
        "config": config.name,
        "over": [c.relative_to(recipe.file.parent).as_posix() for c in leg_configs(recipe, name)[:-1]],
        **({"needs": list(needs)} if needs else {}),
        "input": {
            "path": (Path(last.output.path).parent / "float16.safetensors").as_posix(),
            "sha256": started,
            "float16_of": last.name,
        },
        "output": {
            "path": output.as_posix(),
            "checkpoint": str(provenance.get("checkpoint", "last.ckpt")),
            "step": None if step is None else int(step),
            "sha256": out_sha,
        },
    }
    text = recipe.file.read_text()
    text += "" if text.endswith("\n") else "\n"
    expected = yaml.safe_load(text)  # what the edited text must read back as
    (sha_start, sha_end), end, indent = _pin_edits(text, recipe.file)
    added = "".join(f"{indent}{line}\n" for line in _stage_lines(stage, note))
    for start, stop, replacement in sorted([(sha_start, sha_end, new_sha), (end, end, added)], reverse=True):
        text = text[:start] + replacement + text[stop:]  # the later offset first: the earlier one stays right
    expected["continuation"]["sha256"] = new_sha
    expected["stages"].append(stage)
    try:
        reads_back = yaml.safe_load(text) == expected
    except yaml.YAMLError:
        reads_back = False
    if not reads_back:
        raise RecipeError(
            f"{recipe.file}: the edited text would not read back as stage {name}; nothing written"
        )
    with atomic_output(stored, suffix=".safetensors") as new_continuation:
        save_float16(output, new_continuation)
        with atomic_output(recipe.file) as tmp:
            tmp.write_text(text)
    return load_recipe(str(recipe.file)).stages[-1]


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``derain pin NAME LEG [--needs ...] [--note ...]``; returns 0, or 2 with one line."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="a run in progress: a bundled recipe (derain-base) or a recipe.yaml")
    parser.add_argument("leg", help="the trained leg: LEG.yaml beside the recipe")
    parser.add_argument("--needs", nargs="+", default=[], help="the recipe's prepare steps the leg needs")
    parser.add_argument("--note", default="", help="a comment on the stage's line")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        recipe = load_recipe(args.recipe)
        stage = pin_stage(recipe, args.leg, needs=tuple(args.needs), note=args.note)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"pinned {stage.name}: {stage.output.path} (step {stage.step}, sha256 {stage.output.sha256}); "
        f"{recipe.stored.path} is its float16 now"  # type: ignore[union-attr]
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

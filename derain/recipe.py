"""Rebuild shipped weights from their recipe: ``derain recipe derain-small`` (``--plan`` trains nothing).

A recipe is a ``recipe.yaml`` beside its stage configs (``configs/derain-small/``): stages in order, each one config
for ``derain fit`` (``over``: configs layered under it, as a later leg of a long run layers over the first), its
input weights (given to fit as ``init_weights``) and its output weights, both named by path and by the sha256 of their
tensors (:func:`derain.weights.tensors_sha256`). An input with ``float16_of: STAGE`` is that stage's output stored in
float16, as a long run's legs continue from their committed float16 file; the recipe writes it from that output
(again, when the output changed). Running it trains each stage in turn, skipping a stage whose output exists with
the expected hash; an input whose hash is not the one the recipe names stops it with one line naming both; the
stages before the last one done are not needed and not trained. ``--plan`` prints every stage's config, input and
expected output and where each stands. A stage that trains again gets its own hash (CPU training is not bitwise
repeatable): the recipe stops there and says so, and ``--accept-rebuilt`` goes on from the rebuilt weights.
``--restore`` takes a missing output from the git commit that shipped it, when the recipe names one.

A run in progress (a recipe with a ``continuation``) grows a leg at a time: once a leg's config (``LEG.yaml`` beside
the recipe) has trained from the continuation, ``derain pin NAME LEG`` (:mod:`derain.pin`) appends its stage
(layered over every earlier stage's configs, from the committed continuation as the last stage's output in float16,
its output as the run wrote it: path, checkpoint, step and sha256) and replaces the continuation with that output in
float16, the next leg's start. ``--fit-args LEG`` prints what ``derain fit`` is given for a stage or the
next leg (its configs, layered, and the weights it starts from, one a line) and ``--prepare LEG`` builds what
it needs, so that a leg run by hand (or on a lent GPU, ``tools/gpu_leg.sh``) is the one the recipe would run:

    derain recipe derain-base --prepare leg12 && derain fit $(derain recipe derain-base --fit-args leg12)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from derain.io import atomic_output
from derain.recipe_spec import (
    SOURCE,
    Pinned,
    Recipe,
    RecipeError,
    Stage,
    check_weights,
    leg_fit_args,
    leg_needs,
    load_recipe,
    shown_path,
)
from derain.weights import WeightsError, float16_tensors, read_safetensors, save_float16, tensors_sha256

__all__ = ["main", "plan", "prepare_leg", "run_recipe"]  # what a recipe says: derain.recipe_spec

PROG = "python -m derain.recipe"


def _status(pinned: Pinned) -> str:
    path = Path(pinned.path)
    if not path.is_file():
        return "missing"
    try:
        actual = tensors_sha256(path)
    except WeightsError:
        return "unreadable"
    if pinned.sha256 is None:
        return f"exists, sha256 {actual} (none recorded)"
    return "done" if actual == pinned.sha256 else f"differs: sha256 {actual}"


def plan(recipe: Recipe) -> str:
    """Each stage's config, input and expected output (path, sha256, the checkpoint it was), and where it stands."""
    steps = [s.step for s in recipe.stages]
    total = f"{sum(steps)} steps" if None not in steps else "steps partly unknown"
    lines = [
        f"Recipe {recipe.name} ({shown_path(recipe.file)}): {len(recipe.stages)} stages, {total} to "
        + (recipe.shipped or f"{recipe.stages[-1].output.path} (a run in progress: nothing ships yet)")
    ]
    for key, prep in recipe.prepare.items():
        done = "done" if Path(prep["path"]).exists() else "missing"
        lines.append(f"prepare {key}: {prep['path']} [{done}] <- python {' '.join(prep['command'])}")
    for stage in recipe.stages:
        source = "none (from scratch)"
        if stage.input is not None:
            cast = f" ({stage.float16_of}'s output in float16)" if stage.float16_of else ""
            source = f"{stage.input.path}{cast}\n{'':9}sha256 {stage.input.sha256 or 'not recorded'}"
        shipped = f", shipped in {stage.shipped_in}" if stage.shipped_in else ""
        lines += [
            f"{stage.name}",
            f"  config {' over '.join(shown_path(c) for c in (stage.config, *reversed(stage.over)))}"
            + (f" (needs {', '.join(stage.needs)})" if stage.needs else ""),
            f"  input  {source}",
            f"  output {stage.output.path} ({stage.checkpoint}, step {stage.step}{shipped})",
            f"{'':9}sha256 {stage.output.sha256 or 'not recorded'} [{_status(stage.output)}]",
        ]
    if recipe.shipped and (SOURCE / recipe.shipped).is_file():
        actual, last = tensors_sha256(SOURCE / recipe.shipped), recipe.stages[-1]
        same = "NOT the last stage's output"
        if actual == last.output.sha256:
            same = "the last stage's output"
        elif actual == recipe.shipped_sha256:
            same = "the recipe's shipped_sha256: the last stage's output as stored"
        lines.append(f"shipped {recipe.shipped}: sha256 {actual}, {same}")
    return "\n".join(lines)


def _restore(stage: Stage, shipped: str) -> bool:
    """Write a missing output from the commit that shipped it (``git show``); False when git cannot."""
    proc = subprocess.run(
        ["git", "-C", str(SOURCE), "show", f"{stage.shipped_in}:{shipped}"], capture_output=True
    )
    if proc.returncode != 0:
        return False
    out = Path(stage.output.path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out) as tmp:
        tmp.write_bytes(proc.stdout)
    return True


def prepare_leg(recipe: Recipe, name: str) -> None:
    """Build what ``name`` needs before it trains: the ``prepare`` steps of :func:`leg_needs` whose output is
    missing, by their commands, and a stage's input when it is an earlier output in float16 (``float16_of``).

    Raises:
        RecipeError: a step's script is not here (not run from the repository root) or it failed.
    """
    for key in leg_needs(recipe, name):
        prep = recipe.prepare[key]
        if Path(prep["path"]).exists():
            continue
        script = Path(prep["command"][0])
        if prep["command"][0] != "-m" and not script.is_file():  # ["-m", MODULE, ...]: a module runs
            raise RecipeError(
                f"{name}: {key} is built by {script}, not found here: run from the repository root"
            )
        print(f"{name}: preparing {prep['path']}: python {' '.join(prep['command'])}", flush=True)
        if subprocess.run([sys.executable, *prep["command"]]).returncode != 0:
            raise RecipeError(f"{name}: preparing {key} failed (python {' '.join(prep['command'])})")
    stage = recipe.stage(name)
    if stage is not None and stage.input is not None and stage.float16_of is not None:
        _write_float16_input(recipe, stage)


def _train(recipe: Recipe, stage: Stage) -> int:
    from derain.fit import main as fit_main  # Lightning only when training

    args = leg_fit_args(recipe, stage.name)  # the recipe's input, not the path the config ran with
    print(f"{stage.name}: derain fit {' '.join(args)}", flush=True)
    return fit_main(args, prog="derain fit")


def _done(stage: Stage, accept_rebuilt: bool) -> bool:
    """Whether the stage's output exists as the recipe expects (or, with ``accept_rebuilt``, at all)."""
    out = Path(stage.output.path)
    if not out.is_file():
        return False
    try:
        check_weights(out, stage.output.sha256, f"{stage.name}: output")
    except RecipeError as err:
        if not accept_rebuilt:
            raise RecipeError(
                f"{err} (rebuilt? --accept-rebuilt goes on from it; delete it to retrain)"
            ) from None
        print(f"{err}: accepted (--accept-rebuilt)", flush=True)
    return True


def run_recipe(recipe: Recipe, *, accept_rebuilt: bool = False, restore: bool = False) -> int:
    """Train the stages after the last one whose output is done, in order; returns fit's status (0: all done).

    A stage before a done one is not needed (the weights it would give are not read) and is not trained.
    """
    for stage in recipe.stages:
        out = Path(stage.output.path)
        if not out.is_file() and restore and stage.shipped_in and _restore(stage, recipe.shipped):
            print(f"{stage.name}: {out} restored from commit {stage.shipped_in}", flush=True)
    done = [_done(stage, accept_rebuilt) for stage in recipe.stages]
    start = max((i + 1 for i, d in enumerate(done) if d), default=0)
    for stage, is_done in zip(recipe.stages[:start], done, strict=False):
        why = "is done" if is_done else "is not needed: a later stage's output is done"
        print(f"{stage.name}: {stage.output.path} {why}, skipped", flush=True)
    for stage in recipe.stages[start:]:
        status = _run_stage(recipe, stage, accept_rebuilt)
        if status != 0:
            return status
    _store(recipe, accept_rebuilt)
    return 0


def _store(recipe: Recipe, accept_rebuilt: bool) -> None:
    """Write the recipe's stored file (the last output in float16) where it is missing, else check that it is
    the last output's; a file another (rebuilt) output would give stops the recipe unless ``accept_rebuilt``."""
    stored = recipe.stored
    if stored is None:
        return
    target, output = SOURCE / stored.path, recipe.stages[-1].output.path
    expected = _float16_sha256(output)
    if target.is_file() and tensors_sha256(target) == expected:
        print(f"{shown_path(target)}: the last stage's output in float16, sha256 {expected}", flush=True)
        return
    if target.is_file() and not accept_rebuilt:
        raise RecipeError(
            f"{shown_path(target)} has tensors sha256 {tensors_sha256(target)}, the last stage's output in float16 "
            f"would be {expected} (--accept-rebuilt writes it)"
        )
    save_float16(output, target)
    note = "" if expected == stored.sha256 else f" (the recipe records {stored.sha256})"
    print(
        f"wrote {shown_path(target)}: the last stage's output in float16, sha256 {expected}{note}", flush=True
    )


def _float16_sha256(path: str | Path) -> str:
    """The tensors sha256 that ``path``'s weights have once stored in float16 (:func:`save_float16`)."""
    return tensors_sha256(float16_tensors(read_safetensors(path)[1]))


def _write_float16_input(recipe: Recipe, stage: Stage) -> None:
    """Write a stage's input from the earlier output it is the float16 of, unless it is that already (an output
    trained again gives another input); without that output, the input stays as it is, to be checked."""
    source = Path(recipe.stage(stage.float16_of).output.path)  # type: ignore[arg-type, union-attr]
    target = Path(stage.input.path)  # type: ignore[union-attr]
    if not source.is_file():
        return
    try:
        expected = _float16_sha256(source)
        if target.is_file() and tensors_sha256(target) == expected:
            return
        save_float16(source, target)
    except WeightsError as err:
        raise RecipeError(f"{stage.name}: its input, {stage.float16_of}'s output in float16: {err}") from None
    print(
        f"{stage.name}: wrote {target}, {stage.float16_of}'s output in float16, sha256 {expected}", flush=True
    )


def _run_stage(recipe: Recipe, stage: Stage, accept_rebuilt: bool) -> int:
    """Check the stage's input (write it first when it is an earlier output in float16), train it, check its
    output; returns fit's status."""
    prepare_leg(recipe, stage.name)  # before the input's check: a prepare step may be what builds it
    if stage.input is not None:
        try:
            check_weights(stage.input.path, stage.input.sha256, f"{stage.name}: input")
        except RecipeError as err:
            if not accept_rebuilt or not Path(stage.input.path).is_file():
                raise
            print(f"{err}: accepted (--accept-rebuilt)", flush=True)
    status = _train(recipe, stage)
    if status != 0:
        return status
    out = Path(stage.output.path)
    actual = check_weights(out, None, f"{stage.name}: output")
    if stage.output.sha256 not in (None, actual) and not accept_rebuilt:
        raise RecipeError(
            f"{stage.name}: rebuilt {out} has tensors sha256 {actual}, the recipe records "
            f"{stage.output.sha256} (training is not bitwise repeatable; --accept-rebuilt goes on from it)"
        )
    print(f"{stage.name}: wrote {out}, sha256 {actual}", flush=True)
    return 0


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``derain recipe NAME [--plan] [--accept-rebuilt] [--restore] [--fit-args LEG] [--prepare LEG]``;
    returns 0, fit's status, or 2 (one line)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="a recipe that ships with derain (derain-small) or a recipe.yaml")
    parser.add_argument(
        "--plan", action="store_true", help="print the stages and where each stands; train nothing"
    )
    parser.add_argument(
        "--accept-rebuilt", action="store_true", help="go on from rebuilt weights whose hash differs"
    )
    parser.add_argument(
        "--restore", action="store_true", help="take missing shipped outputs from git history"
    )
    parser.add_argument(
        "--fit-args",
        metavar="LEG",
        help="print what derain fit is given for a stage or the next leg (LEG.yaml beside the recipe): its "
        "configs, layered, and the weights it starts from; train nothing",
    )
    parser.add_argument(
        "--prepare", metavar="LEG", help="build what a stage or the next leg needs; train nothing"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        recipe = load_recipe(args.recipe)
        if args.plan:
            print(plan(recipe))
            return 0
        if args.fit_args or args.prepare:
            if args.prepare:
                prepare_leg(recipe, args.prepare)
            if args.fit_args:  # one a line: a shell splits them, a script reads them whole (mapfile -t)
                print("\n".join(leg_fit_args(recipe, args.fit_args)))
            return 0
        return run_recipe(recipe, accept_rebuilt=args.accept_rebuilt, restore=args.restore)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

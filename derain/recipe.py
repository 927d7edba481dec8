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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from derain.io import atomic_output
from derain.resources import shipped_folder
from derain.weights import WeightsError, float16_tensors, read_safetensors, save_float16, tensors_sha256

__all__ = [
    "Pinned",
    "Recipe",
    "RecipeError",
    "Stage",
    "check_weights",
    "leg_configs",
    "leg_fit_args",
    "leg_needs",
    "load_recipe",
    "main",
    "plan",
    "prepare_leg",
    "run_recipe",
]

PROG = "python -m derain.recipe"

SOURCE = Path(__file__).resolve().parents[1]
"""The folder that holds the package: a recipe's ``shipped`` path is relative to it (the checkout, or
site-packages)."""


class RecipeError(ValueError):
    """A recipe that cannot be read, or weights that are not what it names (the message says which and why)."""


@dataclass(frozen=True)
class Pinned:
    """Weights named by path and by the sha256 of their tensors (None: not recorded)."""

    path: str
    sha256: str | None


@dataclass(frozen=True)
class Stage:
    """One stage: a config for ``derain fit``, the weights it starts from and the weights it writes."""

    name: str
    config: Path
    input: Pinned | None
    """The weights the stage starts from (None: from scratch)."""
    output: Pinned
    checkpoint: str
    """Which checkpoint of the run became the output, as recorded (``last.ckpt``, ``best-885.ckpt``)."""
    step: int | None
    shipped_in: str | None
    """The commit whose packaged weights file is this output, if it was shipped."""
    needs: tuple[str, ...] = ()
    """Names of the recipe's ``prepare`` steps that must have run first."""
    over: tuple[Path, ...] = ()
    """Configs layered under ``config``, in order (``--config`` each, then ``config``)."""
    float16_of: str | None = None
    """The stage whose output, in float16, is this stage's input (written when missing)."""


@dataclass(frozen=True)
class Recipe:
    """A recipe as its ``recipe.yaml`` says: the stages in order, the steps that prepare their data, and the
    shipped file the last stage's output is."""

    name: str
    file: Path
    shipped: str
    prepare: dict[str, dict[str, Any]]
    stages: tuple[Stage, ...]
    shipped_sha256: str | None = None
    """The shipped file's tensors sha256 when it stores the last stage's output otherwise (in float16: a smaller
    file, widened to float32 on loading), so that its hash is not the output's; None: the file is the output."""
    continuation: Pinned | None = None
    """A run in progress: its one committed file, the last stage's output in float16, where the next leg starts."""

    @property
    def stored(self) -> Pinned | None:
        """The committed file that holds the last stage's output in float16 (the shipped file or a run's
        continuation; paths under :data:`SOURCE`), which ``derain recipe`` writes or checks after the stages."""
        if self.continuation is not None:
            return self.continuation
        if self.shipped and self.shipped_sha256:
            return Pinned(self.shipped, self.shipped_sha256)
        return None


def recipe_file(name: str) -> Path:
    """``name``'s ``recipe.yaml``: a path to one, a folder holding one, or a recipe that ships with derain."""
    for candidate in (
        Path(name),
        Path(name) / "recipe.yaml",
        shipped_folder("configs", "configs") / name / "recipe.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise RecipeError(f"no recipe {name!r}: not a recipe.yaml, nor a folder or bundled recipe holding one")


def _pinned(entry: Any, where: str) -> Pinned | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise RecipeError(f"{where}: expected a mapping with 'path' and 'sha256', got {entry!r}")
    sha = entry.get("sha256")
    return Pinned(entry["path"], None if sha is None else str(sha))


def _names(entry: Any, where: str) -> list[str]:
    if not isinstance(entry, list) or not all(isinstance(name, str) for name in entry):
        raise RecipeError(f"{where}: expected a list of config file names, got {entry!r}")
    return entry


def load_recipe(name: str) -> Recipe:
    """The recipe ``name`` (see :func:`recipe_file`).

    Raises:
        RecipeError: the file is missing or malformed, or a stage's config is missing (the message names it).
    """
    file = recipe_file(name)
    raw = yaml.safe_load(file.read_text()) or {}
    stages = []
    for i, entry in enumerate(raw.get("stages") or []):
        where = f"{file}: stages[{i}]"
        try:
            config, output = file.parent / entry["config"], entry["output"]
            stage = Stage(
                name=str(entry["name"]),
                config=config,
                input=_pinned(entry.get("input"), f"{where}.input"),
                output=_pinned(output, f"{where}.output"),  # type: ignore[arg-type]
                checkpoint=str(output.get("checkpoint", "best")),
                step=output.get("step"),
                shipped_in=None if output.get("shipped_in") is None else str(output["shipped_in"]),
                needs=tuple(entry.get("needs", ())),
                over=tuple(file.parent / name for name in _names(entry.get("over", []), f"{where}.over")),
                float16_of=(entry.get("input") or {}).get("float16_of"),
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise RecipeError(f"{where}: missing or malformed entry ({err})") from None
        missing = [str(c) for c in (*stage.over, config) if not c.is_file()]
        if stage.output is None or missing:
            raise RecipeError(
                f"{where}: no output, or a config it names does not exist: {', '.join(missing)}"
            )
        if stage.float16_of is not None and stage.float16_of not in {s.name for s in stages}:
            raise RecipeError(f"{where}: input float16_of {stage.float16_of!r} is not a stage before it")
        unknown = set(stage.needs) - set(raw.get("prepare") or {})
        if unknown:
            raise RecipeError(f"{where}: needs {sorted(unknown)}, which the recipe does not prepare")
        stages.append(stage)
    if not stages:
        raise RecipeError(f"{file}: no stages")
    return Recipe(
        str(raw.get("name", file.parent.name)),
        file,
        str(raw.get("shipped", "")),
        raw.get("prepare") or {},
        tuple(stages),
        None if raw.get("shipped_sha256") is None else str(raw["shipped_sha256"]),
        _pinned(raw.get("continuation"), f"{file}: continuation"),
    )


def check_weights(path: str | Path, expected: str | None, what: str) -> str:
    """The tensors' sha256 of ``path``, which must be ``expected`` (when the recipe records one).

    Raises:
        RecipeError: the file is missing or unreadable, or its hash is not ``expected`` (one line, both hashes).
    """
    try:
        actual = tensors_sha256(path)
    except WeightsError as err:
        raise RecipeError(f"{what}: {err}") from None
    if expected is not None and actual != expected:
        raise RecipeError(f"{what} {path}: tensors sha256 {actual}, the recipe expects {expected}")
    return actual


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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
        f"Recipe {recipe.name} ({_shown(recipe.file)}): {len(recipe.stages)} stages, {total} to "
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
            f"  config {' over '.join(_shown(c) for c in (stage.config, *reversed(stage.over)))}"
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


def leg_configs(recipe: Recipe, name: str) -> tuple[Path, ...]:
    """The configs ``derain fit`` layers for ``name``, in order: a stage's ``over`` and its config; or, for
    the next leg of a run in progress (``name.yaml`` beside the recipe, not yet a stage), the last stage's and
    then its own.

    Raises:
        RecipeError: ``name`` is neither a stage nor a next leg's config (one the stack holds already, or the
            recipe itself, is none); the message lists the stages.
    """
    for stage in recipe.stages:
        if stage.name == name:
            return (*stage.over, stage.config)
    last = recipe.stages[-1]
    under = (*last.over, last.config)
    config = recipe.file.parent / f"{name}.yaml"
    if recipe.continuation is None or not config.is_file() or config in (*under, recipe.file):
        where = f"nor a next leg's config {config}" if recipe.continuation else "(a finished recipe)"
        stages = ", ".join(s.name for s in recipe.stages)
        raise RecipeError(f"{name} is not a stage of {recipe.name} ({stages}) {where}")
    return (*under, config)


def _layered(configs: tuple[Path, ...]) -> dict[str, Any]:
    """The configs read and layered as ``derain fit`` layers them: a later file's keys replace an earlier
    one's (mappings key by key, lists whole)."""

    def merge(into: dict, new: dict) -> None:
        for key, value in new.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    layered: dict[str, Any] = {}
    for config in configs:
        merge(layered, yaml.safe_load(config.read_text()) or {})
    return layered


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def leg_needs(recipe: Recipe, name: str) -> tuple[str, ...]:
    """The ``prepare`` steps ``name`` (a stage or the next leg, :func:`leg_configs`) needs: a stage's own
    ``needs``, then every step whose output (or a path under it) its configs, layered, name. So leg 1's
    validation set stays needed by every later leg, and a source a later leg's config replaced (leg 7's
    teacher pairs) or a start it overrode (leg 1's grown weights) is not."""
    stage = next((s for s in recipe.stages if s.name == name), None)
    own = stage.needs if stage is not None else ()
    named = [Path(s) for s in _strings(_layered(leg_configs(recipe, name)))]

    def used(path: str) -> bool:
        return any(n == Path(path) or Path(path) in n.parents for n in named)

    return (*own, *(key for key, prep in recipe.prepare.items() if key not in own and used(prep["path"])))


def leg_fit_args(recipe: Recipe, name: str) -> list[str]:
    """What ``derain fit`` is given for ``name``: its configs (:func:`leg_configs`) and the weights it starts
    from (a stage's recorded input; the next leg's, the continuation), whatever the configs say."""
    args = [a for config in leg_configs(recipe, name) for a in ("--config", _shown(config))]
    stage = next((s for s in recipe.stages if s.name == name), None)
    if stage is None:  # the next leg: the committed continuation, a path under SOURCE
        continuation = SOURCE / recipe.continuation.path  # type: ignore[union-attr]
        return [*args, "--init_weights", _shown(continuation)]
    return args + (["--init_weights", stage.input.path] if stage.input is not None else [])


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
    stage = next((s for s in recipe.stages if s.name == name), None)
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
        print(f"{_shown(target)}: the last stage's output in float16, sha256 {expected}", flush=True)
        return
    if target.is_file() and not accept_rebuilt:
        raise RecipeError(
            f"{_shown(target)} has tensors sha256 {tensors_sha256(target)}, the last stage's output in float16 "
            f"would be {expected} (--accept-rebuilt writes it)"
        )
    save_float16(output, target)
    note = "" if expected == stored.sha256 else f" (the recipe records {stored.sha256})"
    print(f"wrote {_shown(target)}: the last stage's output in float16, sha256 {expected}{note}", flush=True)


def _float16_sha256(path: str | Path) -> str:
    """The tensors sha256 that ``path``'s weights have once stored in float16 (:func:`save_float16`)."""
    return tensors_sha256(float16_tensors(read_safetensors(path)[1]))


def _write_float16_input(recipe: Recipe, stage: Stage) -> None:
    """Write a stage's input from the earlier output it is the float16 of, unless it is that already (an output
    trained again gives another input); without that output, the input stays as it is, to be checked."""
    source = Path(next(s for s in recipe.stages if s.name == stage.float16_of).output.path)
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

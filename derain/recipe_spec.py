"""What a recipe says (``recipe.yaml``, run by :mod:`derain.recipe`): its stages in order, each one config for
``derain fit`` layered over others (``over``), its input and output weights named by path and tensors sha256,
the steps that prepare its data; and, for one stage or the next leg of a run in progress, the configs ``derain
fit`` layers, the weights it starts from and the prepare steps it needs (:func:`leg_fit_args`,
:func:`leg_needs`). Reading only: nothing here trains or writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from derain.resources import shipped_folder
from derain.weights import WeightsError, tensors_sha256

__all__ = [
    "SOURCE",
    "Pinned",
    "Recipe",
    "RecipeError",
    "Stage",
    "check_weights",
    "leg_configs",
    "leg_fit_args",
    "leg_needs",
    "load_recipe",
    "recipe_file",
    "shown_path",
]

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

    def stage(self, name: str) -> Stage | None:
        """The stage called ``name`` (None: no such stage, e.g. the next leg of a run in progress)."""
        return next((s for s in self.stages if s.name == name), None)

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


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def leg_configs(recipe: Recipe, name: str) -> tuple[Path, ...]:
    """The configs ``derain fit`` layers for ``name``, in order: a stage's ``over`` and its config; or, for
    the next leg of a run in progress (``name.yaml`` beside the recipe, not yet a stage), the last stage's and
    then its own.

    Raises:
        RecipeError: ``name`` is neither a stage nor a next leg's config (one the stack holds already, or the
            recipe itself, is none); the message lists the stages.
    """
    stage = recipe.stage(name)
    if stage is not None:
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
    stage = recipe.stage(name)
    own = stage.needs if stage is not None else ()
    named = [Path(s) for s in _strings(_layered(leg_configs(recipe, name)))]

    def used(path: str) -> bool:
        return any(n == Path(path) or Path(path) in n.parents for n in named)

    return (*own, *(key for key, prep in recipe.prepare.items() if key not in own and used(prep["path"])))


def leg_fit_args(recipe: Recipe, name: str) -> list[str]:
    """What ``derain fit`` is given for ``name``: its configs (:func:`leg_configs`) and the weights it starts
    from (a stage's recorded input; the next leg's, the continuation), whatever the configs say."""
    args = [a for config in leg_configs(recipe, name) for a in ("--config", shown_path(config))]
    stage = recipe.stage(name)
    if stage is None:  # the next leg: the committed continuation, a path under SOURCE
        continuation = SOURCE / recipe.continuation.path  # type: ignore[union-attr]
        return [*args, "--init_weights", shown_path(continuation)]
    return args + (["--init_weights", stage.input.path] if stage.input is not None else [])

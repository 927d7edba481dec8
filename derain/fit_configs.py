"""The configs ``derain fit`` reads: a bare ``--config`` name found among the bundled configs, and options of earlier
versions refused in one line (:data:`MOVED`), both before LightningCLI parses the command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from derain.resources import shipped_folder

__all__ = [
    "MOVED",
    "ConfigNotFoundError",
    "MovedOptionError",
    "bundled_config_dir",
    "check_moved_options",
    "resolve_config_args",
]


class ConfigNotFoundError(FileNotFoundError):
    """A ``--config`` file that is neither a path from the working directory nor a bundled config."""


def bundled_config_dir() -> Path:
    """The configs that ship with derain: ``derain/configs`` in an installed wheel, else ``configs/`` beside the
    package (a source checkout, installed editable or not)."""
    return shipped_folder("configs", "configs")


def resolve_config_args(args: list[str], configs: Path | None = None) -> list[str]:
    """``args`` with each ``--config NAME`` (``--config=NAME``, ``-c NAME``) that is not a file from the working
    directory pointed at the bundled config of that name.

    ``NAME`` may have sub-folders (``derain-small/stage1.yaml``) and may start with ``configs/`` (the README's
    ``configs/rain100h.yaml`` from another folder). An existing path wins; a value that is not a file name
    (jsonargparse also takes inline YAML) is left alone.

    Args:
        args: the command line, without the program name.
        configs: the bundled configs folder; default :func:`bundled_config_dir`.

    Raises:
        ConfigNotFoundError: a ``.yaml``/``.yml``/``.json`` name found neither here nor among the bundled
            configs; the message lists those.
    """
    configs = bundled_config_dir() if configs is None else configs

    def resolve(value: str) -> str:
        path = Path(value)
        if path.is_file() or path.suffix.lower() not in (".yaml", ".yml", ".json"):
            return value
        if not path.is_absolute():
            names = [path] + ([Path(*path.parts[1:])] if path.parts[0] == "configs" else [])
            for name in names:
                if (configs / name).is_file():
                    return str(configs / name)
        bundled = sorted(p.relative_to(configs).as_posix() for p in configs.rglob("*.y*ml"))
        raise ConfigNotFoundError(
            f"--config {value}: no such file in {Path.cwd()}, nor among the configs that ship with derain "
            f"({configs}): {', '.join(bundled) or 'none found'}"
        )

    out = []
    take_next = False
    for arg in args:
        if take_next:
            out.append(resolve(arg))
        elif arg.startswith("--config="):
            out.append("--config=" + resolve(arg.removeprefix("--config=")))
        else:
            out.append(arg)
        take_next = not take_next and arg in ("--config", "-c")
    return out


MOVED = {
    "model.init_weights": "init_weights (top level: --init_weights FILE)",
    "model.ema_decay": "a trainer.callbacks entry, lightning.pytorch.callbacks.EMAWeightAveraging (init_args: decay)",
    "model.compile": "a trainer.callbacks entry, derain.train.CompileTraining",
    "model.sample_images": "samples.count",
    "model.betas": "nothing (AdamW's betas are 0.9, 0.999)",
    "derain.monitor.AttentionMonitor": "derain.train.AttentionMonitor",
}
"""Options and class paths of earlier versions (run folders' ``config.yaml`` name them), and what replaced each."""


class MovedOptionError(ValueError):
    """A config or command line that names an option or class path of :data:`MOVED`."""


def _names(tree: object, prefix: str = "") -> Iterator[str]:
    """The dotted keys and the string values of a parsed YAML tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield f"{prefix}{key}"
            yield from _names(value, f"{prefix}{key}.")
    elif isinstance(tree, list):
        for value in tree:
            yield from _names(value, prefix)
    elif isinstance(tree, str):
        yield tree


def check_moved_options(args: list[str]) -> None:
    """Refuse, in one line, options and class paths that moved (:data:`MOVED`), in ``args`` or in the config
    files they name (after :func:`resolve_config_args`), before LightningCLI's longer parse error.

    Raises:
        MovedOptionError: naming where each moved name is and what replaced it.
    """
    found: dict[str, set[str]] = {}
    for i, arg in enumerate(args):
        config = arg.removeprefix("--config=") if arg.startswith("--config=") else None
        if config is None and i > 0 and args[i - 1] in ("--config", "-c"):
            config = arg
        if config is not None and Path(config).is_file():
            try:
                names = set(_names(yaml.safe_load(Path(config).read_text(encoding="utf-8"))))
            except yaml.YAMLError:
                names = set()  # LightningCLI says what is wrong with it
            found[config] = {n for n in names if n in MOVED}
        for name in arg.removeprefix("--").split("=", 1):
            if name in MOVED:
                found.setdefault("the command line", set()).add(name)
    wrong = [f"{where}: {old} is now {MOVED[old]}" for where, olds in found.items() for old in sorted(olds)]
    if wrong:
        raise MovedOptionError("; ".join(wrong))

"""Train a deraining network: ``derain fit --config rain100h.yaml`` (or ``python -m derain.fit ...``).

A config name that is not a file here is looked up among the configs that ship with derain (``configs/`` of
the source tree, ``derain/configs`` once installed), from any working directory. Every option is configuration
(LightningCLI): ``--trainer.max_steps 1000``, ``--data.pairs.root datasets/Rain100H``,
``--model.net.init_args.dim 32``; ``--print_config`` shows them all. ``--init_weights FILE`` starts from a weights
file. Re-running the same command after an interruption resumes from ``<run>/checkpoints/last.ckpt``
(``--resume never`` starts afresh). At the end the best checkpoint (by ``val/psnr_y``) is tested on the test split
when the data has one (``--data.pairs.root`` with ``test/``, or ``--data.pairs.test_dirs``; ``--test false`` skips
it), the table printed, and the checkpoint exported to ``<run>/model.safetensors``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import ModelCheckpoint, WeightAveraging
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from derain.data.module import DerainDataModule
from derain.pairing import DataError
from derain.resources import shipped_folder
from derain.train import (
    DerainLitModule,
    LastCheckpoint,
    NonFiniteLossError,
    SampleImages,
    last_checkpoint,
    load_init_weights,
)
from derain.weights import WeightsError, WeightsNotFoundError, export_checkpoint
from derain.weights.provenance import provenance, provenance_metadata

__all__ = [
    "ConfigNotFoundError",
    "DerainCLI",
    "MOVED",
    "MovedOptionError",
    "Start",
    "bundled_config_dir",
    "main",
    "resolve_config_args",
    "how_to_start",
    "check_moved_options",
]

PROG = "python -m derain.fit"


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


@dataclass(frozen=True)
class Start:
    """How a run begins: afresh (both None), resuming from a checkpoint, or fine-tuning from weights."""

    resume_from: str | None = None
    """The checkpoint whose weights, optimizer, schedule and step the run continues (``ckpt_path``)."""
    fine_tune_from: str | None = None
    """The weights the network starts from (``--init_weights``)."""
    found_last: bool = False
    """``resume_from`` is the run's own ``last.ckpt``, found by ``--resume auto``."""


def how_to_start(resume: str, init_weights: str | None, last: Path) -> Start:
    """How a run with these options begins (``--resume``, ``--init_weights``).

    A run resumes from ``--resume PATH``, or with ``--resume auto`` from its ``last.ckpt`` when that exists; a run
    that resumes takes its weights from the checkpoint and never reads ``init_weights`` (the file may be gone or
    the path relative to another folder by now). Otherwise it fine-tunes from ``init_weights``, or starts afresh.

    Args:
        resume: ``"auto"``, ``"never"`` or a checkpoint path.
        init_weights: the weights to fine-tune from, or None.
        last: the run's ``last.ckpt`` (``derain.train.last_checkpoint``).
    """
    if resume not in ("auto", "never"):
        return Start(resume_from=resume)
    if resume == "auto" and last.is_file():
        return Start(resume_from=str(last), found_last=True)
    return Start(fine_tune_from=init_weights)


class DerainCLI(LightningCLI):
    """LightningCLI with a best checkpoint callback, ``last.ckpt`` beside it, automatic resume and export.

    The command line it parses is the ``args`` it is given (``run`` reads ``sys.argv`` once, and never writes it).
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "model.net": {"class_path": "derain.models.DerainNet"},
                "checkpoint.monitor": "val/psnr_y",
                "checkpoint.mode": "max",
                "checkpoint.save_last": False,
                "checkpoint.filename": "best-{step}",
                "checkpoint.auto_insert_metric_name": False,
                "checkpoint.save_on_train_epoch_end": False,
            }
        )
        # Lightning's save_last only writes last when a top-k checkpoint was written at the same step, which would
        # make a resumed run lose progress: LastCheckpoint rewrites last.ckpt after every validation
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(SampleImages, "samples")  # validation triplets: --samples.count
        parser.link_arguments(
            ("checkpoint.dirpath", "trainer.default_root_dir"),
            "last_checkpoint.path",
            compute_fn=last_checkpoint,
        )
        parser.add_argument(
            "--resume",
            default="auto",
            help="'auto': continue from <run>/checkpoints/last.ckpt if it exists; 'never'; or a "
            "checkpoint path",
        )
        parser.add_argument(
            "--init_weights",
            type=str | None,
            default=None,
            help="start from these weights (.safetensors from derain.export, a Lightning .ckpt, or 'packaged': "
            "the weights that ship with derain) instead of a random init; not read when the run resumes",
        )
        parser.add_argument(
            "--export",
            default=True,
            type=bool,
            help="export the best checkpoint to <run>/model.safetensors at the end",
        )
        parser.add_argument(
            "--export_from",
            default="best",
            help="the checkpoint --export writes: 'best' (by val/psnr_y), 'last', or a file name in the "
            "checkpoints folder (best-885.ckpt)",
        )
        parser.add_argument(
            "--test",
            default=True,
            type=bool,
            help="after training, score the best checkpoint on the test split (data.pairs.root's test/ or "
            "data.pairs.test_dirs) if there is one, and print the table",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: list[str] | None) -> None:
        """Parse ``args``: the command line, read once by ``run`` (no warning that ``sys.argv`` has arguments)."""
        self.config = parser.parse_args(args)

    def before_instantiate_classes(self) -> None:
        """Decide how the run begins (:func:`how_to_start`), once; a resumed run does not read ``init_weights``."""
        config = self.config
        self.last = last_checkpoint(config.checkpoint.dirpath, config.trainer.default_root_dir)
        init_weights = config.get("init_weights")
        self.start = how_to_start(config.get("resume", "auto"), init_weights, self.last)
        if self.start.resume_from is not None and init_weights is not None:
            print(f"Resuming: --init_weights {init_weights} is not read", flush=True)


def cpu_bf16_is_native(cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), from Linux's ``/proc/cpuinfo``; None
    where that cannot be read. Without it, oneDNN emulates bf16 and a ``bf16-mixed`` step is several times
    slower than a float32 one (``benchmarks/train.py`` prints both)."""
    try:
        flags = set(Path(cpuinfo).read_text().split())
    except OSError:
        return None
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def warn_slow_bf16(trainer) -> None:
    """One warning line when a CPU run asks for bf16 that this CPU would emulate."""
    if "bf16" in str(trainer.precision) and isinstance(trainer.accelerator, CPUAccelerator):
        if cpu_bf16_is_native() is False and trainer.is_global_zero:
            print(
                f"warning: --trainer.precision {trainer.precision} on a CPU without AVX512-BF16 or AMX: bf16 is "
                "emulated here and a step is several times slower than in float32 (--trainer.precision 32)",
                file=sys.stderr,
                flush=True,
            )


def _checkpoint_callback(trainer) -> ModelCheckpoint:
    """The best-by-metric checkpoint callback, its folder settled: ``<default_root_dir>/checkpoints`` by default,
    where ``last.ckpt`` is (``last_checkpoint``)."""
    callback = trainer.checkpoint_callback
    if callback is None:
        raise RuntimeError("no ModelCheckpoint callback configured")
    if callback.dirpath is None:
        callback.dirpath = str(Path(trainer.default_root_dir) / "checkpoints")
    return callback


def _root_cause(err: BaseException) -> BaseException:
    seen = set()
    while id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (DataError, WeightsError, NonFiniteLossError)):
            return err
        nxt = err.__cause__ or err.__context__
        if nxt is None:
            break
        err = nxt
    return err


def format_test_table(
    results: dict[str, float], *, pairs: int | None = None, checkpoint: str | None = None
) -> str:
    """The test scores as the deraining papers print them: the model's and the rainy input's, Y and RGB.

    Args:
        results: ``trainer.test``'s metrics (``test/psnr_y``, ..., ``test_input/psnr_y``, ...).
        pairs: the number of test pairs, for the title.
        checkpoint: the checkpoint tested, for the title.
    """
    title = "Test" + (f" ({pairs} pairs)" if pairs is not None else "")
    title += f", {checkpoint}" if checkpoint else ", final weights"
    lines = [f"{title}:", f"{'':<10}{'PSNR-Y':>8}{'SSIM-Y':>8}{'PSNR':>8}{'SSIM':>8}"]
    for label, stage in (("derained", "test"), ("input", "test_input")):
        psnr_y, ssim_y, psnr, ssim = (
            float(results[f"{stage}/{k}"]) for k in ("psnr_y", "ssim_y", "psnr", "ssim")
        )
        lines.append(f"{label:<10}{psnr_y:>8.2f}{ssim_y:>8.4f}{psnr:>8.2f}{ssim:>8.4f}")
    return "\n".join(lines)


def export_source(chosen: str, best: str, last: Path) -> str:
    """The checkpoint ``--export_from`` names: ``best`` (the best one, ``""`` when there is none), ``last``, or a
    file name in the checkpoints folder (``best-885.ckpt``).

    Raises:
        WeightsNotFoundError: the named checkpoint does not exist; the message lists those that do.
    """
    if chosen == "best":
        return best
    path = last if chosen == "last" else last.parent / chosen
    if not path.is_file():
        there = ", ".join(sorted(p.name for p in last.parent.glob("*.ckpt"))) or "none"
        raise WeightsNotFoundError(
            f"--export_from {chosen}: no checkpoint {path} (there: {there}); re-run with --export_from NAME"
        )
    return str(path)


def export_provenance(cli: LightningCLI, checkpoint: str | Path) -> dict[str, str]:
    """The provenance metadata of the weights exported from ``checkpoint`` at the end of the run: the resolved
    config, the commit, the data manifest, the checkpoint's step and the validation scores (the last validation's,
    and the monitored best)."""
    config = yaml.safe_load(cli.parser.dump(cli.config, skip_none=False))
    step = torch.load(checkpoint, map_location="cpu", weights_only=True).get("global_step", 0)
    metrics = cli.trainer.callback_metrics
    validation: dict = {"last": {k: round(float(v), 4) for k, v in metrics.items() if k.startswith("val")}}
    callback = cli.trainer.checkpoint_callback
    if callback is not None and callback.best_model_score is not None:
        best = {callback.monitor: round(float(callback.best_model_score), 4)}
        validation["best"] = {**best, "checkpoint": Path(callback.best_model_path).name}
    prov = provenance(config=config, steps=step, validation=validation, checkpoint=Path(checkpoint).name)
    return provenance_metadata(prov)


def run(args: list[str] | None = None, *, prog: str = PROG) -> int:
    torch.set_float32_matmul_precision("high")
    args = resolve_config_args(sys.argv[1:] if args is None else list(args))
    check_moved_options(args)
    cli = DerainCLI(
        DerainLitModule,
        DerainDataModule,
        run=False,
        args=args,
        parser_kwargs={"prog": prog},
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )
    trainer = cli.trainer
    warn_slow_bf16(trainer)
    callback = _checkpoint_callback(trainer)
    run_dir = Path(trainer.default_root_dir)
    last = cli.last
    if cli.start.fine_tune_from is not None:
        load_init_weights(cli.model.net, cli.start.fine_tune_from)
    if cli.start.found_last and trainer.is_global_zero:
        step = torch.load(last, map_location="cpu", weights_only=True).get("global_step", "?")
        print(f"Resuming from {last} (step {step}); pass --resume never to start afresh", flush=True)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.start.resume_from)
    except SystemExit:  # Lightning exits with status 1 after a graceful Ctrl+C; ours is 130, with a hint
        if not trainer.interrupted:
            raise
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning ignores further Ctrl+C while shutting down
    if trainer.interrupted:
        print(f"Interrupted: re-run the same command to resume from {last}", file=sys.stderr)
        return 130
    log_dir = trainer.log_dir  # a collective call under DDP: every rank makes it
    best = callback.best_model_path or (str(last) if last.is_file() else "")
    if cli.config.get("test", True) and cli.datamodule.has_test_split():
        # WeightAveraging, still holding its average after fit, would load the checkpoint's raw weights for the
        # test: without it the test scores the checkpoint's state_dict, what validation scored and export writes
        trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, WeightAveraging)]
        results = trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=best or None, verbose=False)
        if trainer.is_global_zero:
            pairs = len(getattr(cli.datamodule, "test_pairs", ())) or None
            print(format_test_table(results[0], pairs=pairs, checkpoint=best or None), flush=True)
    if cli.config.get("export", True) and trainer.is_global_zero:
        source = export_source(cli.config.get("export_from", "best"), best, last)
        if source:
            out = export_checkpoint(
                source, run_dir / "model.safetensors", extra=export_provenance(cli, source)
            )
            print(f"Exported {source} -> {out}")
        print(
            f"Run folder: {run_dir.resolve()} (checkpoints/, model.safetensors, samples under "
            f"{Path(log_dir or run_dir) / 'samples'})"
        )
    return 0


def main(args: list[str] | None = None, *, prog: str = PROG) -> int:
    """Train, test and export (see the module docstring); returns the exit status (2: a usage or data error, 1: the
    loss diverged, 130: interrupted)."""
    try:
        return run(args, prog=prog)
    except Exception as err:  # noqa: BLE001 - only our expected errors are turned into messages
        cause = _root_cause(err)
        if isinstance(cause, (ConfigNotFoundError, DataError, MovedOptionError, WeightsError)):
            print(f"error: {cause}", file=sys.stderr)
            return 2
        if isinstance(cause, NonFiniteLossError):
            print(f"error: {cause}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())

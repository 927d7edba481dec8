"""Train a deraining network: ``python -m derain.fit --config configs/rain100h.yaml``.

Every option is configuration (LightningCLI): ``--trainer.max_steps 1000``, ``--data.root datasets/Rain100H``,
``--model.net.init_args.dim 32``; ``--print_config`` shows them all. Re-running the same command after an
interruption resumes from ``<run>/checkpoints/last.ckpt`` (``--resume never`` starts afresh). At the end the best
checkpoint (by ``val/psnr_y``) is exported to ``<run>/model.safetensors``.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .data import DataError, DerainDataModule
from .export import export_checkpoint
from .inference import WeightsError
from .lit import DerainLitModule, NonFiniteLossError

__all__ = ["DerainCLI", "main"]


class DerainCLI(LightningCLI):
    """LightningCLI with a best/last checkpoint callback, automatic resume and export."""

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
        parser.add_argument(
            "--resume",
            default="auto",
            help="'auto': continue from <run>/checkpoints/last.ckpt if it exists; 'never'; or a "
            "checkpoint path",
        )
        parser.add_argument(
            "--export",
            default=True,
            type=bool,
            help="export the best checkpoint to <run>/model.safetensors at the end",
        )

    def before_instantiate_classes(self) -> None:
        # A run that resumes from its last.ckpt gets its weights from there: don't read init_weights (the file
        # may be gone or the path relative to another folder by now).
        config = self.config
        if config.model.get("init_weights") is None or config.get("resume") == "never":
            return
        last = _last_checkpoint(config.checkpoint.dirpath, config.trainer.default_root_dir)
        if config.get("resume", "auto") != "auto" or last.is_file():
            print(f"Resuming: --model.init_weights {config.model.init_weights} is not read", flush=True)
            config.model.init_weights = None


def _last_checkpoint(dirpath: str | None, default_root_dir: str | None) -> Path:
    """Where a run keeps ``last.ckpt``: the checkpoint folder, by default ``<default_root_dir>/checkpoints``."""
    return Path(dirpath or Path(default_root_dir or ".") / "checkpoints") / "last.ckpt"


class _LastCheckpoint(ModelCheckpoint):
    """Rewrites ``last.ckpt`` after every validation, at the end of training, and on Ctrl+C or SIGTERM (not on
    errors such as a NaN loss, whose state is not worth resuming)."""

    def on_train_end(self, trainer, pl_module) -> None:
        if self._last_global_step_saved != trainer.global_step and not trainer.fast_dev_run:
            self._save_checkpoint(trainer, self.format_checkpoint_name(self._monitor_candidates(trainer)))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            super().on_exception(trainer, pl_module, exception)


def _checkpoint_callback(trainer) -> ModelCheckpoint:
    """The best-by-metric checkpoint callback, with its folder settled, plus a ``last.ckpt`` saver beside it.

    Lightning's own ``save_last`` only writes ``last`` when a top-k checkpoint was written at the same step, which
    would make a resumed run lose progress; a second callback without a monitor rewrites ``last.ckpt`` after
    every validation.
    """
    callback = trainer.checkpoint_callback
    if callback is None:
        raise RuntimeError("no ModelCheckpoint callback configured")
    if callback.dirpath is None:
        callback.dirpath = str(Path(trainer.default_root_dir) / "checkpoints")
    last = _LastCheckpoint(
        dirpath=callback.dirpath,
        filename="last",
        monitor=None,
        save_top_k=1,
        enable_version_counter=False,
        save_on_train_epoch_end=False,
        save_on_exception=True,
    )
    trainer.callbacks.append(last)
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


def run(args: list[str] | None = None) -> int:
    torch.set_float32_matmul_precision("high")
    cli = DerainCLI(
        DerainLitModule,
        DerainDataModule,
        run=False,
        args=args,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )
    trainer = cli.trainer
    callback = _checkpoint_callback(trainer)
    run_dir = Path(trainer.default_root_dir)
    resume = cli.config.get("resume", "auto")
    ckpt_path = None
    last = _last_checkpoint(callback.dirpath, trainer.default_root_dir)
    if resume == "auto" and last.is_file():
        step = torch.load(last, map_location="cpu", weights_only=True).get("global_step", "?")
        ckpt_path = str(last)
        if trainer.is_global_zero:
            print(f"Resuming from {last} (step {step}); pass --resume never to start afresh", flush=True)
    elif resume not in ("auto", "never"):
        ckpt_path = resume
    sigint = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)
    except SystemExit:  # Lightning exits with status 1 after a graceful Ctrl+C; ours is 130, with a hint
        if not trainer.interrupted:
            raise
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning ignores further Ctrl+C while shutting down
    if trainer.interrupted:
        print(f"Interrupted: re-run the same command to resume from {last}", file=sys.stderr)
        return 130
    log_dir = trainer.log_dir  # a collective call under DDP: every rank makes it
    if cli.config.get("export", True) and trainer.is_global_zero:
        best = callback.best_model_path or (str(last) if last.is_file() else "")
        if best:
            out = export_checkpoint(best, run_dir / "model.safetensors")
            print(f"Exported {best} -> {out}")
        print(
            f"Run folder: {run_dir.resolve()} (checkpoints/, model.safetensors, samples under "
            f"{Path(log_dir or run_dir) / 'samples'})"
        )
    return 0


def main(args: list[str] | None = None) -> int:
    try:
        return run(args)
    except Exception as err:  # noqa: BLE001 - only our expected errors are turned into messages
        cause = _root_cause(err)
        if isinstance(cause, (DataError, WeightsError)):
            print(f"error: {cause}", file=sys.stderr)
            return 2
        if isinstance(cause, NonFiniteLossError):
            print(f"error: {cause}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())

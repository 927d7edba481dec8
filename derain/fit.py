"""Train a deraining network: ``derain fit --config rain100h.yaml`` (or ``python -m derain.fit ...``).

A config name that is not a file here is looked up among the configs that ship with derain (``configs/`` of
the source tree, ``derain/configs`` once installed), from any working directory. Every option is configuration
(LightningCLI): ``--trainer.max_steps 1000``, ``--data.pairs.root datasets/Rain100H``,
``--model.net.init_args.dim 32``; ``--print_config`` shows them all. ``--trainer.precision auto`` trains in bf16 where
the machine computes it in hardware, else in float32 (``derain.train.precision``). ``--init_weights FILE`` starts
from a weights file. Re-running the same command after an interruption resumes from ``<run>/checkpoints/last.ckpt``
(``--resume never`` starts afresh). At the end the best checkpoint (by ``val/psnr_y``) is tested on the test split
when the data has one (``--data.pairs.root`` with ``test/``, or ``--data.pairs.test_dirs``; ``--test false`` skips
it), the table printed, and the checkpoint exported to ``<run>/model.safetensors``.

The command line's configs and moved options are ``derain.fit_configs``'s, the LightningCLI ``derain.fit_cli``'s,
the precision (``auto``, the emulated-bf16 warning) ``derain.train.precision``'s and the export's provenance
``derain.train.export``'s; this module runs them in order.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint, WeightAveraging

from derain.data.module import DerainDataModule
from derain.fit_cli import DerainCLI
from derain.fit_configs import ConfigNotFoundError, MovedOptionError, check_moved_options, resolve_config_args
from derain.pairing import DataError
from derain.train import DerainLitModule, NonFiniteLossError, load_init_weights
from derain.train.export import export_provenance, export_source
from derain.train.precision import DerainTrainer
from derain.weights import WeightsError, export_checkpoint, load_checkpoint
from derain.weights.provenance import git_commit

__all__ = ["format_test_table", "main", "run"]

PROG = "python -m derain.fit"


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


def run(args: list[str] | None = None, *, prog: str = PROG) -> int:
    torch.set_float32_matmul_precision("high")
    args = resolve_config_args(sys.argv[1:] if args is None else list(args))
    check_moved_options(args)
    cli = DerainCLI(
        DerainLitModule,
        DerainDataModule,
        trainer_class=DerainTrainer,
        run=False,
        args=args,
        parser_kwargs={"prog": prog},
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )
    trainer = cli.trainer
    callback = _checkpoint_callback(trainer)
    run_dir = Path(trainer.default_root_dir)
    last = cli.last
    if cli.start.fine_tune_from is not None:
        cli.model.started_from = load_init_weights(cli.model.net, cli.start.fine_tune_from)
    if cli.start.found_last and trainer.is_global_zero:
        try:
            step = load_checkpoint(last, mmap=True).get("global_step", "?")  # Lightning reads it whole
        except WeightsError as err:  # a damaged last.ckpt (a run killed while writing it), and the way out
            raise WeightsError(f"{err}; pass --resume never to start afresh") from None
        print(f"Resuming from {last} (step {step}); pass --resume never to start afresh", flush=True)
    commit = git_commit()  # the code that trains: the checkout may move on while the run does
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
            config = yaml.safe_load(cli.parser.dump(cli.config, skip_none=False))
            extra = export_provenance(config, trainer, source, commit=commit)
            out = export_checkpoint(source, run_dir / "model.safetensors", extra=extra)
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

"""The LightningCLI of ``derain fit``: its options beyond Lightning's (the checkpoint callbacks, ``--resume``,
``--init_weights``, ``--export``, ``--export_from``, ``--test``), and how a run begins, decided once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from derain.train import LastCheckpoint, SampleImages, last_checkpoint
from derain.train.precision import settle_precision

__all__ = ["DerainCLI", "Start", "how_to_start"]


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
    """LightningCLI with a best checkpoint callback, ``last.ckpt`` beside it, automatic resume, ``precision: auto``
    and export.

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
        """Decide how the run begins (:func:`how_to_start`), once, and the precision (``auto`` settled here, so that
        the saved config and the exported weights' provenance name the one that ran); a resumed run does not read
        ``init_weights``."""
        config = self.config
        if config.trainer.precision == "auto":
            config.trainer.precision = settle_precision("auto", config.trainer.accelerator)
        self.last = last_checkpoint(config.checkpoint.dirpath, config.trainer.default_root_dir)
        init_weights = config.get("init_weights")
        self.start = how_to_start(config.get("resume", "auto"), init_weights, self.last)
        if self.start.resume_from is not None and init_weights is not None:
            print(f"Resuming: --init_weights {init_weights} is not read", flush=True)

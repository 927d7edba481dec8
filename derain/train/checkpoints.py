"""``last.ckpt``: the checkpoint a run resumes from, rewritten after every validation, at the end of training and on
Ctrl+C or SIGTERM.

Lightning's own ``ModelCheckpoint(save_last=True)`` writes ``last`` only when it writes a top-k checkpoint at the
same step, which would make a resumed run lose progress; :class:`LastCheckpoint` is a small callback of its own,
through Lightning's public ``Checkpoint`` base class (so the trainer runs it after the other callbacks, whose
state it saves) and ``Trainer.save_checkpoint``. With Lightning's ``WeightAveraging`` the checkpoint keeps the
raw weights for resuming (``current_model_state``) beside the average; only the one written when training ends
holds the average as both, since the callback copies it into the module then.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

__all__ = ["LastCheckpoint", "last_checkpoint"]


def last_checkpoint(dirpath: str | os.PathLike | None, default_root_dir: str | os.PathLike | None) -> Path:
    """Where a run keeps ``last.ckpt``: the checkpoint folder, by default ``<default_root_dir>/checkpoints``."""
    return Path(dirpath or Path(default_root_dir or ".") / "checkpoints") / "last.ckpt"


class LastCheckpoint(Checkpoint):
    """Rewrites ``path`` after every validation, at the end of training, and on Ctrl+C or SIGTERM (not on errors
    such as a NaN loss, whose state is not worth resuming), never twice at one step, never in a sanity check or a
    ``fast_dev_run``.

    Args:
        path: the checkpoint file (``last_checkpoint(...)``).
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._saved_step: int | None = None

    def _save(self, trainer: L.Trainer) -> None:
        if (
            trainer.fast_dev_run
            or trainer.sanity_checking
            or trainer.state.fn != TrainerFn.FITTING
            or self._saved_step == trainer.global_step
        ):
            return
        # every rank calls it; the strategy writes once. A full checkpoint (optimizer, schedule, loops) for
        # resuming, said explicitly: else Lightning logs "`weights_only` was not set" at every save
        trainer.save_checkpoint(self.path, weights_only=False)
        self._saved_step = trainer.global_step

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            self._save(trainer)

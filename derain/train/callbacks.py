"""Training callbacks beside the LightningModule: validation sample images and a compiled training step.

Register them in a config (``SampleImages`` is on in every ``derain.fit`` run, as ``--samples.count``)::

    trainer:
      callbacks:
        - class_path: derain.train.CompileTraining
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from derain.io import to_uint8, write_image_atomic

__all__ = ["CompileTraining", "SampleImages", "TimeBudget", "compile_forward", "cpp_compiler"]

log = logging.getLogger(__name__)


class SampleImages(L.Callback):
    """Writes validation triplets, rainy | derained | clean side by side, as PNGs under ``<log dir>/samples``:
    the first image of each of the first ``count`` batches of every validation run (not the sanity check), named
    ``step<step>_<batch>_<name>.png``, on rank 0. It reads the prediction ``validation_step`` returns (with weight
    averaging, the average's).

    Args:
        count: batches per validation run to write a triplet of (0: none).
    """

    def __init__(self, count: int = 3) -> None:
        super().__init__()
        if count < 0:
            raise ValueError(f"count should be at least 0, got {count}")
        self.count = count
        self.folder: Path | None = None

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # trainer.log_dir broadcasts under DDP: resolve it on every rank, not only on the one writing
        self.folder = Path(trainer.log_dir or trainer.default_root_dir) / "samples"

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx >= self.count or trainer.sanity_checking or not trainer.is_global_zero:
            return
        row = torch.cat([batch["rain"][0], outputs[0].clamp(0, 1), batch["clean"][0]], dim=-1)
        name = Path(str(batch.get("name", [f"{batch_idx}"])[0])).stem
        path = self.folder / f"step{trainer.global_step:07d}_{batch_idx}_{name}.png"
        write_image_atomic(path, to_uint8(row.detach().float()))


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would use on a CPU, if one is installed."""
    candidates = [os.environ.get("CXX"), "g++", "clang++", "c++"]
    return next((found for c in candidates if c and (found := shutil.which(c))), None)


def compile_forward(net: nn.Module) -> Callable[[Tensor], Tensor]:
    """``net``'s forward through ``torch.compile`` (inductor, static shapes: training patches have one size). A
    compiled function, not a module: whoever keeps it gains no parameters or state-dict keys."""
    return torch.compile(net.forward, dynamic=False)


class CompileTraining(L.Callback):
    """Runs the training forward and backward of the module's ``net`` through ``torch.compile``.

    Validation, test, weight averaging and export use the eager network, and the checkpoint's keys do not change.
    The first training step pays the compile (far less when inductor's cache under ``$TORCHINDUCTOR_CACHE_DIR``
    already holds the graphs); ``benchmarks/train.py`` prints what the compile costs and what a step gains. On a
    CPU it needs a C++ compiler (``g++`` or ``clang++``), checked before training. It sets the module's
    ``train_forward`` (``DerainLitModule``) for the run.
    """

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cpu" and not cpp_compiler():
            raise RuntimeError(
                "CompileTraining needs a C++ compiler on a CPU (g++ or clang++ on PATH, or $CXX): install one, "
                "or train without it (drop derain.train.CompileTraining from trainer.callbacks)"
            )
        pl_module.train_forward = compile_forward(pl_module.net)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.train_forward = None


def step_seconds(ends: list[float]) -> float:
    """The seconds a step takes from the times steps ended: the mean of the steps that took at most three times
    their median (a step the process spent stopped, or paused by the machine, is not the run's pace).

    Example:
        >>> step_seconds([0.0, 2.0, 4.0, 6.0, 200.0, 202.5])  # the fourth step held a pause
        2.125
    """
    steps = [b - a for a, b in itertools.pairwise(ends)]
    median = statistics.median(steps)
    usual = [s for s in steps if s <= 3 * median] if median > 0 else steps  # a coarse clock: every step
    return sum(usual) / len(usual)


class TimeBudget(L.Callback):
    """Fits a run to a time budget: its learning-rate schedule ends, and it validates and stops, in time.

    A run's speed differs between machines (a 2-core CPU, a GPU) by far more than any config can guess. After
    ``probe_steps`` training steps this measures the time a step takes (over the last four fifths of them: the
    first steps pay one-off costs; the mean of those steps that took at most ``3 ×`` their median, so that a
    pause of the process, such as a SIGSTOP while tests run, is not read as the machine's speed) and plans the
    run's last step so that it ends ``budget`` seconds after training started, less ``reserve`` of the budget
    (validation, checkpoint, export). It sets the warm-up +
    cosine schedule's length (``DerainLitModule``'s ``WarmupCosine``) to that step and, at it, asks the trainer
    to stop: Lightning then validates and the last checkpoint is written. ``trainer.max_steps`` stays the upper
    bound; ``trainer.max_time`` a guard beside it. The plan is kept in the checkpoint: a resumed run finishes
    the plan it made rather than making another.

    Args:
        budget: seconds, or ``"DD:HH:MM:SS"`` as ``trainer.max_time`` takes it.
        probe_steps: training steps timed before the plan is made.
        reserve: the share of the budget left for what follows training.
    """

    def __init__(self, budget: float | str, probe_steps: int = 50, reserve: float = 0.05) -> None:
        super().__init__()
        if isinstance(budget, str) and ":" not in budget:
            budget = float(budget)
        if isinstance(budget, str):
            parts = [float(p) for p in budget.split(":")]
            if len(parts) != 4:
                raise ValueError(f"budget should be seconds or 'DD:HH:MM:SS', got {budget!r}")
            budget = ((parts[0] * 24 + parts[1]) * 60 + parts[2]) * 60 + parts[3]
        if budget <= 0 or probe_steps < 5 or not 0 <= reserve < 1:
            raise ValueError(
                f"need budget > 0 s, probe_steps >= 5 and 0 <= reserve < 1; got {budget}, {probe_steps}, {reserve}"
            )
        self.budget, self.probe_steps, self.reserve = float(budget), probe_steps, reserve
        self.last_step: int | None = None
        self._start = 0.0
        self._first_step = 0
        self._probe_times: list[float] = []  # when each probed step ended

    def state_dict(self) -> dict[str, Any]:
        return {"last_step": self.last_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_step = state_dict.get("last_step")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start, self._first_step = time.monotonic(), trainer.global_step
        self._probe_times = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        done = trainer.global_step - self._first_step
        if self.last_step is None and done >= self.probe_steps // 5 + len(self._probe_times):
            self._probe_times.append(time.monotonic())  # once a step (a step of several batches ends once)
        if self.last_step is None and done == self.probe_steps:
            now = self._probe_times[-1]
            per_step = max(step_seconds(self._probe_times), 1e-6)
            left = self.budget * (1 - self.reserve) - (now - self._start)
            self.last_step = trainer.global_step + max(0, int(left / per_step))
            if trainer.max_steps and trainer.max_steps > 0:
                self.last_step = min(self.last_step, trainer.max_steps)
            log.info(
                "TimeBudget: %.3f s a step; the run ends at step %d (%.0f s budget)",
                per_step,
                self.last_step,
                self.budget,
            )
            print(f"TimeBudget: {per_step:.3f} s a step; the run ends at step {self.last_step}", flush=True)
            for scheduler in trainer.lr_scheduler_configs:
                for schedule in getattr(scheduler.scheduler, "lr_lambdas", []):
                    if hasattr(schedule, "total"):
                        schedule.total = self.last_step
        if self.last_step is not None and trainer.global_step >= self.last_step:
            trainer.should_stop = True  # Lightning validates before it stops: the last checkpoint follows

"""Training callbacks beside the LightningModule: validation sample images and a compiled training step.

Register them in a config (``SampleImages`` is on in every ``derain.fit`` run, as ``--samples.count``)::

    trainer:
      callbacks:
        - class_path: derain.train.CompileTraining
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from derain.io import to_uint8, write_image_atomic

__all__ = ["CompileTraining", "SampleImages", "compile_forward", "cpp_compiler"]


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

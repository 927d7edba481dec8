"""DerainLitModule: trains an injected restoration network with Charbonnier/L1 loss, AdamW and warm-up + cosine."""

from __future__ import annotations

import copy
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor, nn

from derain.io import to_uint8, write_image_atomic
from derain.metrics import DerainMetrics
from derain.models import network_record
from derain.weights import CHECKPOINT_KEY, WeightsError, load_net

log = logging.getLogger(__name__)

__all__ = ["DerainLitModule", "WarmupCosine", "charbonnier_loss", "NonFiniteLossError"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


def charbonnier_loss(pred: Tensor, target: Tensor, eps: float = 1e-3) -> Tensor:
    """Charbonnier loss ``mean(sqrt((pred - target)² + eps²))``, a smooth L1."""
    return torch.sqrt((pred - target).square() + eps * eps).mean()


class WarmupCosine:
    """Learning-rate factor per optimizer step: linear warm-up, then a cosine, then flat.

    ``factor(step) = 0.01 + 0.99·step/warmup`` for ``step < warmup``; then
    ``min_ratio + (1 − min_ratio)·(1 + cos(π·p))/2`` with ``p = min(1, (step − warmup)/(total − warmup))``.

    An object, not a closure, so that ``LambdaLR.state_dict()`` stores its attributes: a resumed run gets back
    the schedule it started with, whatever ``trainer.max_steps`` says now.

    Args:
        warmup: warm-up steps (from 0.01 to 1).
        total: the step where the cosine reaches ``min_ratio``.
        min_ratio: the final factor.
    """

    def __init__(self, warmup: int, total: int, min_ratio: float):
        self.warmup, self.total, self.min_ratio = warmup, total, min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return 0.01 + 0.99 * step / max(1, self.warmup)
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def load_initial_weights(net: nn.Module, path: str | os.PathLike) -> None:
    """Copy the weights stored in ``path`` (safetensors, Lightning checkpoint, or ``"packaged"``) into ``net``.

    The tensors must fit ``net`` exactly (names and shapes); settings that hold no weights (``grad_checkpoint``,
    top-k ratios) may differ.

    Raises:
        WeightsError: the file is missing or unreadable, or its weights do not fit ``net`` (the message names the
            file and the recorded settings that differ).
    """
    try:
        source = load_net(None if str(path) == "packaged" else path)
    except WeightsError as err:
        raise type(err)(f"init_weights {path}: {err}") from None
    try:
        net.load_state_dict(source.state_dict(), strict=True)
    except RuntimeError as err:
        why = " ".join(str(err).strip().splitlines()[:2])
        mine, theirs = (getattr(n, "init_args", None) or {} for n in (net, source))
        changed = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if type(net) is not type(source):
            why = f"{type(net).__name__} configured, {type(source).__name__} in the file"
        elif changed:
            why = "; ".join(
                f"{k}: {mine.get(k)!r} configured, {theirs.get(k)!r} in the file" for k in changed
            )
        raise WeightsError(
            f"init_weights {path}: the weights do not fit the configured network ({why})"
        ) from None


def _cpp_compiler() -> str | None:
    """The C++ compiler inductor would use on a CPU, if one is installed."""
    candidates = [os.environ.get("CXX"), "g++", "clang++", "c++"]
    return next((found for c in candidates if c and (found := shutil.which(c))), None)


class DerainLitModule(L.LightningModule):
    """Lightning wrapper that trains, validates and tests a deraining network.

    The network is passed in (``net``) and knows nothing of Lightning. One step function serves train, val and
    test; each stage owns its metrics (PSNR/SSIM on MATLAB Y and RGB, 8-bit quantized, and the Y brightness
    bias), logged as ``val/psnr_y``, ``val/ssim_y``, ``val/psnr``, ``val/ssim``, ``val/bias_y`` (and
    ``test/...``); when validation pairs come from several data sets (items' ``"set"``), each set's
    ``val/SET/psnr_y`` and ``val/SET/ssim_y`` too. Testing also scores the rainy input against the clean image (``test_input/...``), the
    baseline the published tables print beside the model.

    Args:
        net: maps a rainy batch (B, 3, H, W) in [0, 1] to the derained batch (unclamped).
        loss: ``"charbonnier"`` (default) or ``"l1"``.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay.
        betas: AdamW betas.
        warmup_steps: linear warm-up steps from ``lr * 0.01``.
        min_lr_ratio: the cosine decays to ``lr * min_lr_ratio`` at the last step.
        schedule_steps: length of the warm-up + cosine schedule; default the run's own length
            (``trainer.max_steps``). Longer than the run: it stops part-way down the cosine, with the learning
            rates a longer run would have had (how a run stopped early is written as a recipe). A resumed run
            keeps the schedule it started with (its length is stored in the checkpoint), whatever
            ``trainer.max_steps`` or this say now.
        sample_images: validation triplets (rainy | derained | clean) written per validation run.
        channels_last: keep the network and batches in channels-last memory format (depthwise-conv backward is
            slow in NCHW; ``benchmarks/train.py`` measures what it gains).
        init_weights: start from these weights (a ``.safetensors`` file from ``derain.export``, a Lightning
            ``.ckpt``, or ``"packaged"`` for the weights that ship with derain) instead of a random init, to
            fine-tune or to continue a finished run with a new schedule; they must fit ``net``. ``derain.fit``
            ignores them when it resumes a run from its ``last.ckpt`` (the checkpoint has the newer state), so
            the file may be gone by then. ``load_from_checkpoint`` reads them again unless given
            ``init_weights=None``.
        ema_decay: keep an exponential moving average of the weights (``ema ← d·ema + (1 − d)·weights`` after
            every optimizer step, ``d = min(ema_decay, (1 + n) / (10 + n))`` at step ``n``); validation, test
            and export then use the average, as does ``forward`` in eval mode. ``0`` (default) keeps none. Around
            0.999 smooths the step-to-step noise of a small-batch run; the checkpoint holds both (``net.*`` and
            ``ema.*``), and resuming with another setting starts the average from the weights or drops it.
        compile: run the training forward and backward of ``net`` through ``torch.compile`` (inductor, static
            shapes: training patches have one size). Validation, test, the moving average and export use the
            eager network, and the checkpoint's keys do not change. The first training step pays the compile
            (far less when inductor's cache under ``$TORCHINDUCTOR_CACHE_DIR`` already holds the graphs);
            ``benchmarks/train.py`` prints what the compile costs and what a step gains. On a CPU it needs a C++
            compiler (``g++`` or ``clang++``). Off by default: short runs and tests would only pay.
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        loss: Literal["charbonnier", "l1"] = "charbonnier",
        lr: float = 3e-4,
        weight_decay: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 200,
        min_lr_ratio: float = 0.01,
        schedule_steps: int | None = None,
        sample_images: int = 3,
        channels_last: bool = True,
        init_weights: str | None = None,
        ema_decay: float = 0.0,
        compile: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["net"])
        self.net = net
        if init_weights is not None:
            load_initial_weights(net, init_weights)
        self.loss_fn = charbonnier_loss if loss == "charbonnier" else nn.functional.l1_loss
        self.metrics = nn.ModuleDict(
            {"val": DerainMetrics(), "test": DerainMetrics(), "test_input": DerainMetrics()}
        )
        self.sample_images = sample_images
        # per validation data set (items' "set"), made as sets appear; not submodules, so checkpoints keep keys
        self._set_metrics: dict[str, DerainMetrics] = {}
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.net.to(memory_format=self.memory_format)
        if schedule_steps is not None and schedule_steps < 1:
            raise ValueError(f"schedule_steps should be at least 1, got {schedule_steps}")
        if not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"ema_decay should be in [0, 1), got {ema_decay}")
        self.ema = copy.deepcopy(self.net).requires_grad_(False) if ema_decay > 0 else None
        self._ema_step = 0  # the optimizer step of the last moving-average update
        self._planned_schedule: WarmupCosine | None = None  # the schedule this run's settings give
        # torch.compile's wrapper of self.net, made at the first training step; kept in a dict so that it is
        # not registered as a submodule (its parameters are self.net's, under other state_dict keys)
        self._compiled: dict[str, nn.Module] = {}

    def forward(self, rain: Tensor) -> Tensor:
        """The derained batch: the trained weights in training mode, their moving average (if kept) in eval."""
        net = self.net if self.training or self.ema is None else self.ema
        return net(rain)

    def train_net(self) -> nn.Module:
        """The network training steps run: ``net``, or its ``torch.compile`` wrapper with ``compile``."""
        if not self.hparams.compile:
            return self.net
        if "net" not in self._compiled:
            self._compiled["net"] = torch.compile(self.net, dynamic=False)
        return self._compiled["net"]

    def on_fit_start(self) -> None:
        if self.hparams.compile and self.device.type == "cpu" and not _cpp_compiler():
            raise RuntimeError(
                "model.compile needs a C++ compiler on a CPU (g++ or clang++ on PATH, or $CXX): install one, "
                "or train without it (--model.compile false)"
            )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Resume across an ``ema_decay`` change: start a missing average from the weights, or drop an unused one."""
        state = checkpoint.get("state_dict", {})
        averaged = [k for k in state if k.startswith("ema.")]
        if self.ema is not None and not averaged:
            log.warning(
                "the checkpoint has no moving average (saved without ema_decay); it starts from its weights"
            )
            for key in [k for k in state if k.startswith("net.")]:
                state["ema." + key.removeprefix("net.")] = state[key].clone()
        elif self.ema is None and averaged:
            log.warning(
                "ema_decay is 0: the checkpoint's moving average is dropped and training goes on without one"
            )
            for key in averaged:
                del state[key]

    @torch.no_grad()
    def update_ema(self, step: int) -> None:
        """One moving-average update of ``self.ema`` towards ``self.net`` (see ``ema_decay``)."""
        if self.ema is None:
            return
        decay = min(self.hparams.ema_decay, (1 + step) / (10 + step))
        for avg, current in zip(self.ema.parameters(), self.net.parameters(), strict=True):
            avg.lerp_(current.detach(), 1.0 - decay)
        for avg, current in zip(self.ema.buffers(), self.net.buffers(), strict=True):
            avg.copy_(current)

    def on_train_start(self) -> None:
        self._ema_step = self.global_step  # a resumed run has averaged up to its step
        scheduler = self.lr_schedulers()
        restored = getattr(scheduler, "lr_lambdas", [None])[0]
        planned = self._planned_schedule
        if isinstance(restored, WarmupCosine) and planned is not None and restored.total != planned.total:
            log.warning(
                "resumed: the learning rate keeps the schedule the run started with (%d steps, warm-up %d), "
                "not the %d steps configured now",
                restored.total,
                restored.warmup,
                planned.total,
            )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Once per optimizer step: with accumulate_grad_batches=k, global_step advances every k-th batch only.
        if self.global_step > self._ema_step:
            self._ema_step = self.global_step
            self.update_ema(self.global_step)

    def step(self, batch: dict[str, Any], stage: str) -> Tensor:
        rain, clean = batch["rain"].contiguous(memory_format=self.memory_format), batch["clean"]
        # training: the (compiled) network; validation/test: the moving average (eval mode), if kept
        pred = self.train_net()(rain) if stage == "train" else self(rain)
        loss = self.loss_fn(pred, clean)
        self.log(
            f"{stage}/loss",
            loss,
            prog_bar=stage == "train",
            batch_size=rain.shape[0],
            sync_dist=stage != "train",
        )
        if stage != "train":
            self.metrics[stage].update(pred.clamp(0, 1), clean)
        if stage == "val" and batch.get("set"):
            for name in set(batch["set"]) - {""}:
                if name not in self._set_metrics:
                    self._set_metrics[name] = DerainMetrics().to(self.device)
                rows = [i for i, s in enumerate(batch["set"]) if s == name]
                self._set_metrics[name].update(pred[rows].clamp(0, 1), clean[rows])
        return loss if stage == "train" else pred

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        loss = self.step(batch, "train")
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"training loss became {loss.item()} at step {self.global_step} "
                f"(batch {batch_idx}); lower the learning rate or check the data"
            )
        return loss

    def on_validation_epoch_start(self) -> None:
        # trainer.log_dir broadcasts under DDP: resolve it on every rank, not only on the one writing samples
        self._sample_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir) / "samples"

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        pred = self.step(batch, "val")
        if (
            batch_idx < self.sample_images
            and self.trainer.is_global_zero
            and not self.trainer.sanity_checking
        ):
            self._write_sample(batch, pred, batch_idx)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.step(batch, "test")
        self.metrics["test_input"].update(batch["rain"], batch["clean"])

    def _epoch_end(self, stage: str) -> None:
        values = self.metrics[stage].compute()
        self.log_dict(
            {f"{stage}/{k}": v for k, v in values.items()}, prog_bar=stage == "val", sync_dist=False
        )
        self.metrics[stage].reset()

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val")
        if len(self._set_metrics) > 1:  # validation on several data sets: each apart, as val/SET/psnr_y
            for name, metrics in sorted(self._set_metrics.items()):
                values = metrics.compute()
                self.log_dict({f"val/{name}/{k}": values[k] for k in ("psnr_y", "ssim_y")}, sync_dist=False)
        for metrics in self._set_metrics.values():
            metrics.reset()

    def on_test_epoch_end(self) -> None:
        self._epoch_end("test")
        self._epoch_end("test_input")

    def _write_sample(self, batch: dict[str, Any], pred: Tensor, index: int) -> None:
        """Save rainy | derained | clean side by side as a PNG under ``<log dir>/samples``."""
        row = torch.cat([batch["rain"][0], pred[0].clamp(0, 1), batch["clean"][0]], dim=-1)
        name = batch.get("name", [f"{index}"])[0]
        path = self._sample_dir / f"step{self.global_step:07d}_{index}_{Path(str(name)).stem}.png"
        write_image_atomic(path, to_uint8(row.float()))

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        decay, no_decay = [], []
        for name, p in self.net.named_parameters():
            if not p.requires_grad:
                continue
            # decay conv kernels only: not norms, temperatures, ratio weights or agent biases
            (decay if p.ndim == 4 and "bias" not in name else no_decay).append(p)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=hp.lr,
            betas=hp.betas,
        )
        total = hp.schedule_steps or max(1, int(self.trainer.estimated_stepping_batches))
        self._planned_schedule = WarmupCosine(min(hp.warmup_steps, max(0, total - 1)), total, hp.min_lr_ratio)
        # A LambdaLR over a callable object rather than torch's LinearLR + CosineAnnealingLR in a SequentialLR:
        # shorter, the closed form (the chained cosine drifts, and climbs back after its end when the run is
        # longer than schedule_steps), its settings travel in the scheduler's state (a resumed run keeps its
        # schedule) and checkpoints of runs started with the earlier LambdaLR still resume.
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, copy.copy(self._planned_schedule))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the network's record (``class_path`` + ``init_args``) for ``derain.export`` and ``load_model``."""
        if getattr(self.net, "init_args", None) is not None:
            checkpoint[CHECKPOINT_KEY] = network_record(self.net)

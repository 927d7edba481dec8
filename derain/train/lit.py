"""DerainLitModule: trains an injected restoration network with a Charbonnier (optionally + FFT, optionally
weighted towards removal) or L1 loss, AdamW and warm-up + cosine."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from typing import Any, Literal

import lightning as L
import torch
from kornia.filters import gaussian_blur2d
from lightning.pytorch.callbacks import WeightAveraging
from torch import Tensor, nn

from derain.metrics import DerainMetrics
from derain.models import network_record
from derain.weights import CHECKPOINT_KEY, STARTED_KEY, WeightsError

from .schedule import WarmupCosine

log = logging.getLogger(__name__)

__all__ = [
    "DerainLitModule",
    "charbonnier_loss",
    "charbonnier_fft_loss",
    "rain_left_weight",
    "fine_rain_left_term",
    "NonFiniteLossError",
]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


def charbonnier_loss(pred: Tensor, target: Tensor, eps: float = 1e-3, weight: Tensor | None = None) -> Tensor:
    """Charbonnier loss ``mean(sqrt((pred - target)² + eps²))``, a smooth L1; with ``weight`` (per element, the
    shape of ``pred``), the weighted mean ``sum(weight · c) / sum(weight)``."""
    c = torch.sqrt((pred - target).square() + eps * eps)
    if weight is None:
        return c.mean()
    return (weight * c).sum() / weight.sum()


def rain_left_weight(pred: Tensor, target: Tensor, rain: Tensor, weight: float) -> Tensor:
    """Per-element loss weights: ``weight`` where the error points towards the rainy input (rain left:
    ``(pred − target) · (rain − target) > 0``), 1 elsewhere (over-removal, and wherever the input is clean).

    A Charbonnier loss so weighted is a quantile (pinball) loss along the rain: the network predicts the
    ``weight / (1 + weight)`` quantile of the rain it is unsure of instead of its median, so it removes more of what
    may be rain and changes a rain-free input no differently."""
    left = (pred - target) * (rain - target) > 0
    return torch.where(left, weight, 1.0).to(pred.dtype).detach()


def fine_rain_left_term(
    pred: Tensor,
    target: Tensor,
    rain: Tensor,
    weight: float,
    sigma: float,
    eps: float = 1e-3,
    items: Tensor | None = None,
) -> Tensor:
    """The removal weight on the error's fine part only: ``(weight − 1)`` × the mean Charbonnier of the fine error
    where it leaves rain (:func:`rain_left_weight`'s test on fine parts), a term added to the loss. With ``items``
    (bool, one a batch item), only those items' errors count (the mean stays over the whole batch).

    The fine part of an image is the image less its Gaussian blur of ``sigma`` (kornia; reflected borders, or
    replicated ones on an image not longer than the kernel's half on a side): streaks, not light or veil. A
    prediction shifted by a constant has the same fine error, so this term cannot pay for removal by lowering the
    light; :func:`rain_left_weight` on the whole error can (its quantile sits below the median wherever rain
    brightens the input, veil included). Computed in float32, autocast off (bf16 noise is near ``eps``)."""
    size = 2 * math.ceil(3 * sigma) + 1
    border = "reflect" if min(pred.shape[-2:]) > size // 2 else "replicate"

    def fine(x: Tensor) -> Tensor:
        return x - gaussian_blur2d(x, (size, size), (sigma, sigma), border_type=border)

    with torch.autocast(pred.device.type, enabled=False):
        error, rain_error = fine(pred.float() - target.float()), fine(rain.float() - target.float()).detach()
        left = (error * rain_error > 0).float()
        if items is not None:
            left = left * items.to(left.device, left.dtype).view(-1, 1, 1, 1)
        return (weight - 1.0) * (left * torch.sqrt(error.square() + eps * eps)).mean()


FFT_WEIGHT = 0.05


def charbonnier_fft_loss(pred: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
    """Charbonnier (weighted by ``weight`` if given) plus ``FFT_WEIGHT`` × the L1 of the difference of the 2-D
    real FFTs (``torch.fft.rfft2``, unnormalised; real and imaginary parts), a frequency loss as in MIMO-UNet; the
    FFT in float32."""
    diff = torch.fft.rfft2(pred.float()) - torch.fft.rfft2(target.float())
    return charbonnier_loss(pred, target, weight=weight) + FFT_WEIGHT * torch.view_as_real(diff).abs().mean()


LOSSES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "charbonnier": charbonnier_loss,
    "l1": nn.functional.l1_loss,
    "charbonnier+fft": charbonnier_fft_loss,
}


class DerainLitModule(L.LightningModule):
    """Trains, validates and tests a deraining network: the loss, AdamW (betas 0.9, 0.999) with warm-up + cosine,
    and the metrics. Weight averaging (Lightning's ``EMAWeightAveraging``), sample images (``SampleImages``),
    compiling (``CompileTraining``) and starting weights (``load_init_weights``) live outside it.

    The network is passed in and knows nothing of Lightning. Train, val and test share :meth:`shared_step`; each
    stage owns its metrics (PSNR/SSIM on MATLAB Y and RGB, 8-bit, and the Y bias), logged as ``val/psnr_y``,
    ``val/ssim_y``, ``val/psnr``, ``val/ssim``, ``val/bias_y`` (and ``test/...``), and each validation data set's
    (items' ``"set"``, when there are several) as ``val/SET/psnr_y``, ``val/SET/ssim_y``. Testing also scores the
    rainy input (``test_input/...``), the baseline the published tables print beside the model.

    Args:
        net: maps a rainy batch (B, 3, H, W) in [0, 1] to the derained batch (unclamped).
        loss: ``"charbonnier"`` (default), ``"l1"`` or ``"charbonnier+fft"`` (:func:`charbonnier_fft_loss`).
        rain_left_weight: the Charbonnier term's weight on errors that leave rain (:func:`rain_left_weight`);
            1 (default) weighs every error alike. Above 1 it rewards removal; Charbonnier losses only.
        rain_left_sigma: 0 (default): ``rain_left_weight`` weighs the whole error. Above 0: the loss is left
            unweighted and :func:`fine_rain_left_term` adds the weight on the error's fine part (the error less
            its Gaussian blur of this sigma, in pixels), so that removal is not paid for by lowering the light.
        rain_left_real: with ``rain_left_sigma``: the batch items marked ``"real_rain"`` (a real photo's rain,
            ``Synthesis.real_layer_dirs``) take ``rain_left_weight`` on the whole error, veil included, as with
            sigma 0; the others on the fine part only. Real rain's veil is rain to take; a synthetic pair's
            clean image says how much light there is, and the whole-error weight lowers it.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay (conv kernels only).
        warmup_steps: linear warm-up steps from ``lr * 0.01``.
        min_lr_ratio: the cosine decays to ``lr * min_lr_ratio`` at the last step.
        schedule_steps: length of the warm-up + cosine schedule; default the run's own length
            (``trainer.max_steps``). Longer than the run: it stops part-way down the cosine, with the learning
            rates a longer run would have had (how a run stopped early is written as a recipe). A resumed run
            keeps the schedule it started with (its length is stored in the checkpoint), whatever
            ``trainer.max_steps`` or this say now.
        channels_last: keep the network and batches in channels-last memory format (depthwise-conv backward is
            slow in NCHW; ``benchmarks/train.py`` measures what it gains).
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        loss: Literal["charbonnier", "l1", "charbonnier+fft"] = "charbonnier",
        rain_left_weight: float = 1.0,
        rain_left_sigma: float = 0.0,
        rain_left_real: bool = False,
        lr: float = 3e-4,
        weight_decay: float = 1e-4,
        warmup_steps: int = 200,
        min_lr_ratio: float = 0.01,
        schedule_steps: int | None = None,
        channels_last: bool = True,
    ):
        super().__init__()
        if schedule_steps is not None and schedule_steps < 1:
            raise ValueError(f"schedule_steps should be at least 1, got {schedule_steps}")
        if not rain_left_weight > 0:
            raise ValueError(f"rain_left_weight should be above 0, got {rain_left_weight}")
        if rain_left_sigma < 0:
            raise ValueError(f"rain_left_sigma should be 0 or above, got {rain_left_sigma}")
        if rain_left_sigma > 0 and not rain_left_weight > 1:
            raise ValueError(
                f"rain_left_sigma {rain_left_sigma} adds the removal weight's extra: rain_left_weight should be "
                f"above 1, got {rain_left_weight}"
            )
        if rain_left_real and not rain_left_sigma > 0:
            raise ValueError(
                "rain_left_real weighs the real rain's items apart from the others' fine part: set rain_left_sigma "
                "above 0 (with sigma 0 every item takes the weight on the whole error)"
            )
        if rain_left_weight != 1.0 and loss == "l1":
            raise ValueError(
                f"rain_left_weight {rain_left_weight} needs a Charbonnier loss, got loss {loss!r}"
            )
        self.save_hyperparameters(ignore=["net"])
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.net = net.to(memory_format=self.memory_format)
        self.loss_fn = LOSSES[loss]
        self.metrics = nn.ModuleDict({s: DerainMetrics() for s in ("val", "test", "test_input")})
        self.set_metrics = nn.ModuleDict()  # per validation data set (items' "set"), added as sets appear
        self.set_keys: dict[str, str] = {}  # set names to keys there (a name like "a.b" is not a key)
        # what training steps run instead of net (CompileTraining's compiled forward: no module, no state keys)
        self.train_forward: Callable[[Tensor], Tensor] | None = None
        self._planned_schedule: WarmupCosine | None = None  # the schedule this run's settings give
        # the weights the run started from (derain.fit --init_weights: file and tensors sha256), kept in its
        # checkpoints so that a resumed run's export still records them
        self.started_from: dict[str, str] | None = None
        self._real_batches = [0, 0]  # rain_left_real: training batches with a real-rain item, and all of them

    def forward(self, rain: Tensor) -> Tensor:
        return self.net(rain)

    def shared_step(self, batch: dict[str, Any], stage: str) -> tuple[Tensor, Tensor]:
        """The prediction (unclamped) and the loss of one batch; the loss is logged as ``<stage>/loss``."""
        rain = batch["rain"].contiguous(memory_format=self.memory_format)
        forward = self.train_forward if stage == "train" and self.train_forward is not None else self.net
        pred = forward(rain)
        clean = batch["clean"]
        left, sigma = self.hparams["rain_left_weight"], self.hparams["rain_left_sigma"]
        if left == 1.0:
            loss = self.loss_fn(pred, clean)
        elif sigma > 0 and self.hparams.get("rain_left_real"):
            loss = self._real_rain_apart_loss(pred, clean, rain, batch, stage, left, sigma)
        elif sigma > 0:
            loss = self.loss_fn(pred, clean) + fine_rain_left_term(pred, clean, rain, left, sigma)
        else:
            loss = self.loss_fn(pred, clean, weight=rain_left_weight(pred, clean, rain, left))
        self.log(
            f"{stage}/loss", loss, prog_bar=stage == "train", batch_size=len(rain), sync_dist=stage != "train"
        )
        return pred, loss

    def _real_rain_apart_loss(
        self,
        pred: Tensor,
        clean: Tensor,
        rain: Tensor,
        batch: dict[str, Any],
        stage: str,
        left: float,
        sigma: float,
    ) -> Tensor:
        """``rain_left_real``'s loss: the weight on the whole error of the items marked ``"real_rain"``, on the
        fine part of the others'. The weighted Charbonnier's mean is over the weights' sum, so the others' fine
        term is scaled by elements / that sum: each item keeps the balance it has in a batch of its own kind."""
        if "real_rain" not in batch:
            raise KeyError(
                "rain_left_real needs batches that mark real rain (items' \"real_rain\", as DerainDataModule's "
                "have); this batch has none"
            )
        real = torch.as_tensor(batch["real_rain"], device=pred.device, dtype=torch.bool).view(-1, 1, 1, 1)
        if stage == "train":
            self._real_batches[0] += int(bool(real.any()))
            self._real_batches[1] += 1
            if self._real_batches == [0, 200]:
                log.warning(
                    "rain_left_real: none of the first 200 training batches held real rain; is "
                    "data.synthesis.real_layer_dirs set (to one of layer_dirs) and its share above 0?"
                )
        weight = torch.where(real, rain_left_weight(pred, clean, rain, left).float(), 1.0)
        others = fine_rain_left_term(pred, clean, rain, left, sigma, items=~real.view(-1))
        return self.loss_fn(pred, clean, weight=weight) + others * (weight.numel() / weight.sum())

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        _, loss = self.shared_step(batch, "train")
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"training loss became {loss.item()} at step {self.global_step} "
                f"(batch {batch_idx}); lower the learning rate or check the data"
            )
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        """Scores the batch; returns the prediction (callbacks such as ``SampleImages`` read it)."""
        pred, _ = self.shared_step(batch, "val")
        self.metrics["val"].update(pred.clamp(0, 1), batch["clean"])
        for name in sorted(set(batch.get("set") or ()) - {""}):
            key = self.set_keys.setdefault(name, f"set{len(self.set_keys)}")
            if key not in self.set_metrics:
                self.set_metrics[key] = DerainMetrics().to(self.device)
            rows = [i for i, s in enumerate(batch["set"]) if s == name]
            self.set_metrics[key].update(pred[rows].clamp(0, 1), batch["clean"][rows])
        return pred

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        pred, _ = self.shared_step(batch, "test")
        self.metrics["test"].update(pred.clamp(0, 1), batch["clean"])
        self.metrics["test_input"].update(batch["rain"], batch["clean"])

    def _log_metrics(self, stage: str) -> None:
        values = self.metrics[stage].compute()
        self.log_dict({f"{stage}/{k}": v for k, v in values.items()}, prog_bar=stage == "val")
        self.metrics[stage].reset()

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val")
        if len(self.set_metrics) > 1:  # validation on several data sets: each apart, as val/SET/psnr_y
            for name, key in sorted(self.set_keys.items()):
                values = self.set_metrics[key].compute()
                self.log_dict({f"val/{name}/{k}": values[k] for k in ("psnr_y", "ssim_y")})
        for metrics in self.set_metrics.values():
            metrics.reset()

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")
        self._log_metrics("test_input")

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        decay, no_decay = [], []
        for name, p in self.net.named_parameters():  # decay conv kernels only: not norms, temperatures, ...
            if p.requires_grad:
                (decay if p.ndim == 4 and "bias" not in name else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0}]
        optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=(0.9, 0.999))
        total = hp.schedule_steps or max(1, int(self.trainer.estimated_stepping_batches))
        self._planned_schedule = WarmupCosine(min(hp.warmup_steps, max(0, total - 1)), total, hp.min_lr_ratio)
        # A LambdaLR over a callable object (not LinearLR + CosineAnnealingLR in a SequentialLR): the closed form,
        # flat after its end, and its settings travel in the scheduler's state (a resumed run keeps its schedule).
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, copy.copy(self._planned_schedule))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        restored = getattr(self.lr_schedulers(), "lr_lambdas", [None])[0]
        planned = self._planned_schedule
        if isinstance(restored, WarmupCosine) and planned is not None and restored.total != planned.total:
            log.warning(
                "resumed: the learning rate keeps the schedule the run started with (%d steps, warm-up %d), not "
                "the %d steps configured now",
                restored.total,
                restored.warmup,
                planned.total,
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the network's record (``class_path`` + ``init_args``) for ``derain.export`` and ``load_model``,
        and what the run started from (``started_from``) for the exported provenance."""
        if getattr(self.net, "init_args", None) is not None:
            checkpoint[CHECKPOINT_KEY] = network_record(self.net)
        if self.started_from is not None:
            checkpoint[STARTED_KEY] = dict(self.started_from)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore what the run started from (``started_from``); refuse a checkpoint of derain's old moving average;
        resume an averaged run without averaging from its raw weights (Lightning's ``WeightAveraging`` keeps them
        as ``current_model_state``)."""
        trainer = self._trainer
        self.started_from = checkpoint.get(STARTED_KEY, self.started_from)
        if any(k.startswith("ema.") for k in checkpoint.get("state_dict", {})):
            raise WeightsError(
                f"{getattr(trainer, 'ckpt_path', None) or 'the checkpoint'}: written with the old "
                "model.ema_decay (ema.* weights), it cannot be resumed or loaded here; export it "
                "(python -m derain.export CKPT OUT.safetensors: the average) and start from that (--init_weights)"
            )
        fitting = trainer is not None and trainer.state.fn == "fit"
        averaging = fitting and any(isinstance(c, WeightAveraging) for c in trainer.callbacks)
        if fitting and not averaging and "current_model_state" in checkpoint:
            log.warning("the checkpoint's moving average is dropped: training goes on from its raw weights")
            checkpoint["state_dict"] = checkpoint["current_model_state"]

"""PSNR/SSIM as deraining papers report them: 8-bit images, MATLAB's BT.601 Y channel, and RGB beside it.

The only hand-written piece is the MATLAB ``rgb2ycbcr`` luma; PSNR and SSIM come from torchmetrics.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

__all__ = ["rgb_to_y_matlab", "quantize_8bit", "DerainMetrics"]

# MATLAB rgb2ycbcr, studio swing: Y = 16 + 65.481 R + 128.553 G + 24.966 B for R, G, B in [0, 1] (0-255 scale).
_Y_WEIGHTS = (65.481, 128.553, 24.966)


def quantize_8bit(img: Tensor) -> Tensor:
    """Clamp to [0, 1] and round to the 256 levels a saved 8-bit PNG holds (still float in [0, 1])."""
    return torch.round(img.clamp(0.0, 1.0) * 255.0) / 255.0


def rgb_to_y_matlab(img: Tensor, *, round_8bit: bool = True) -> Tensor:
    """Luma of MATLAB's ``rgb2ycbcr`` (ITU-R BT.601, studio swing), on the [0, 1] scale.

    ``Y = (16 + 65.481·R + 128.553·G + 24.966·B) / 255`` for R, G, B in [0, 1]; pure white gives 235/255 and
    pure black 16/255. With ``round_8bit`` the 0-255 value is rounded, as MATLAB does for ``uint8`` images (the
    published deraining tables score ``rgb2ycbcr`` of ``uint8`` images). This is *not* kornia's full-range
    ``rgb_to_ycbcr``.

    Args:
        img: RGB image(s) with values in [0, 1].
        round_8bit: round Y to integer levels of 0-255.

    Shape:
        - img: :math:`(B, 3, H, W)`
        - output: :math:`(B, 1, H, W)`

    Example:
        >>> rgb_to_y_matlab(torch.ones(1, 3, 1, 1)).mul(255).item()
        235.0
    """
    if img.ndim != 4 or img.shape[1] != 3:
        raise ValueError(f"Invalid img shape, we expect Bx3xHxW. Got: {tuple(img.shape)}")
    r, g, b = img.unbind(1)
    y = 16.0 + _Y_WEIGHTS[0] * r + _Y_WEIGHTS[1] * g + _Y_WEIGHTS[2] * b
    if round_8bit:
        y = torch.round(y)
    return (y / 255.0).unsqueeze(1)


class DerainMetrics(nn.Module):
    """Running PSNR/SSIM on the MATLAB Y channel and on RGB, and the brightness bias, over 8-bit predictions.

    PSNR and SSIM are computed per image and averaged over images (as the published tables do); SSIM uses an
    11×11 Gaussian window with σ = 1.5. ``bias_y`` is the mean of ``Y(pred) − Y(target)`` in 8-bit levels, per
    image and then averaged over images (negative: darker than the target; signed, so opposite errors of two
    images cancel). ``compute()`` returns ``{"psnr_y", "ssim_y", "psnr", "ssim", "bias_y"}``.

    Shape:
        - pred, target: :math:`(B, 3, H, W)`, values in [0, 1] (pred is clamped and quantized here)
    """

    NAMES = ("psnr_y", "ssim_y", "psnr", "ssim", "bias_y")

    def __init__(self) -> None:
        super().__init__()

        def psnr() -> PeakSignalNoiseRatio:
            return PeakSignalNoiseRatio(data_range=1.0, reduction="elementwise_mean", dim=(1, 2, 3))

        def ssim() -> StructuralSimilarityIndexMeasure:
            return StructuralSimilarityIndexMeasure(
                data_range=1.0, gaussian_kernel=True, sigma=1.5, kernel_size=11
            )

        self.psnr_y, self.ssim_y, self.psnr, self.ssim = psnr(), ssim(), psnr(), ssim()
        self.bias_y = MeanMetric()

    @torch.no_grad()
    def update(self, pred: Tensor, target: Tensor) -> None:
        if pred.shape != target.shape:
            raise ValueError(f"pred and target shapes differ: {tuple(pred.shape)} vs {tuple(target.shape)}")
        # float32 whatever autocast a caller runs under (bf16-mixed validation): SSIM's variances in bf16 are noise
        with torch.autocast(pred.device.type, enabled=False):
            pred = quantize_8bit(pred.float())
            target = quantize_8bit(target.float())
            pred_y, target_y = rgb_to_y_matlab(pred), rgb_to_y_matlab(target)
            self.psnr_y.update(pred_y, target_y)
            self.ssim_y.update(pred_y, target_y)
            self.psnr.update(pred, target)
            self.ssim.update(pred, target)
            self.bias_y.update((pred_y - target_y).mean(dim=(1, 2, 3)) * 255.0)

    def compute(self) -> dict[str, Tensor]:
        return {name: getattr(self, name).compute() for name in self.NAMES}

    def reset(self) -> None:
        for name in self.NAMES:
            getattr(self, name).reset()

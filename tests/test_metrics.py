"""The headline metric: MATLAB's BT.601 Y channel on 8-bit images, PSNR/SSIM from torchmetrics."""

import math

import pytest
import torch

from derain.metrics import DerainMetrics, quantize_8bit, rgb_to_y_matlab


def test_matlab_y_of_hand_computed_colours():
    colours = torch.tensor(
        [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    )
    y = rgb_to_y_matlab(colours.view(5, 3, 1, 1)).flatten() * 255
    # 16 + 65.481 R + 128.553 G + 24.966 B, rounded as MATLAB does for uint8
    assert y.tolist() == [235.0, 16.0, round(16 + 65.481), round(16 + 128.553), round(16 + 24.966)]
    unrounded = rgb_to_y_matlab(colours[2].view(1, 3, 1, 1), round_8bit=False) * 255
    assert unrounded.item() == pytest.approx(81.481, abs=1e-4)


def test_matlab_y_rejects_non_rgb():
    with pytest.raises(ValueError, match=r"we expect Bx3xHxW. Got: \(1, 1, 4, 4\)"):
        rgb_to_y_matlab(torch.zeros(1, 1, 4, 4))


def test_quantize_is_what_a_png_stores():
    x = torch.tensor([-0.2, 0.0, 0.5, 0.7, 1.3])
    assert torch.equal(quantize_8bit(x) * 255, torch.tensor([0.0, 0.0, 128.0, 178.0, 255.0]))


def test_identical_images_score_infinite_psnr_and_ssim_one():
    m = DerainMetrics()
    x = torch.rand(2, 3, 32, 32)
    m.update(x, x)
    out = m.compute()
    assert math.isinf(out["psnr"]) and math.isinf(out["psnr_y"])
    assert out["ssim"].item() == pytest.approx(1.0, abs=1e-6)
    assert out["ssim_y"].item() == pytest.approx(1.0, abs=1e-6)


def test_known_offset_gives_known_psnr():
    # gray levels 100 vs 110: the RGB error is 10 levels -> PSNR = 20 log10(255 / 10).
    # Y of gray level L is round(16 + 219 L / 255): 101.88 -> 102 and 110.47 -> 110, so the Y error is 8.
    pred = torch.full((1, 3, 16, 16), 100 / 255)
    target = torch.full((1, 3, 16, 16), 110 / 255)
    m = DerainMetrics()
    m.update(pred, target)
    out = m.compute()
    assert out["psnr"].item() == pytest.approx(20 * math.log10(255 / 10), abs=1e-3)
    assert out["psnr_y"].item() == pytest.approx(20 * math.log10(255 / 8), abs=1e-3)
    assert out["bias_y"].item() == pytest.approx(-8.0)  # Y levels 102 - 110: darker than the target


def test_bias_is_a_signed_mean_over_images():
    target = torch.full((2, 3, 8, 8), 102 / 255)  # Y of grey L is round(16 + 219 L / 255): 104
    pred = target.clone()
    pred[0, :, :4] = 122 / 255  # half of the first image brighter: Y 121, +17 there
    pred[1] = 97 / 255  # all of the second darker: Y 99, -5
    m = DerainMetrics()
    m.update(pred[:1], target[:1])
    m.update(pred[1:], target[1:])
    assert m.compute()["bias_y"].item() == pytest.approx((17 / 2 - 5) / 2)
    m.reset()
    m.update(target, target)
    assert m.compute()["bias_y"].item() == 0.0


def test_psnr_is_a_mean_over_images_and_predictions_are_quantized():
    target = torch.full((2, 3, 8, 8), 0.5)
    pred = target.clone()
    pred[0] += 4 / 255 + 0.001  # rounds to 4 levels
    pred[1] += 2 / 255
    m = DerainMetrics()
    m.update(pred, target)
    expected = (20 * math.log10(255 / 4) + 20 * math.log10(255 / 2)) / 2
    assert m.compute()["psnr"].item() == pytest.approx(expected, abs=1e-3)
    m.reset()
    with pytest.raises(ValueError, match="shapes differ"):
        m.update(pred[:, :, :4], target)


def test_metrics_under_bf16_autocast_are_the_float32_ones():
    # Lightning's bf16-mixed validation runs the metric update under autocast; SSIM in bf16 read -0.27 on a GPU
    gen = torch.Generator().manual_seed(0)
    target = torch.rand(2, 3, 48, 40, generator=gen)
    pred = (target + 0.05 * torch.randn(2, 3, 48, 40, generator=gen)).clamp(0, 1)
    plain, mixed = DerainMetrics(), DerainMetrics()
    plain.update(pred, target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed.update(pred, target)
    expected, got = plain.compute(), mixed.compute()
    assert all(torch.allclose(got[k], expected[k], atol=1e-6) for k in DerainMetrics.NAMES)

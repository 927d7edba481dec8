"""Procedural rain rendered a batch at a time on the batch's device (kornia), and its use by the data module."""

from __future__ import annotations

import torch

from derain.data import DerainDataModule, Synthesis
from derain.synth import BatchRain, RainStyle

NO_HAZE = RainStyle(
    layers=(2, 2), density=(0.003, 0.003), length=(31.0, 31.0), haze=(0.0, 0.0), angle_jitter=0.0
)


def _streaks(angle: float, seed: int = 0) -> torch.Tensor:
    rain = BatchRain((RainStyle(**{**NO_HAZE.__dict__, "angle": (angle, angle)}),))
    clean = torch.full((2, 3, 96, 96), 0.2)
    out = rain(clean, generator=torch.Generator().manual_seed(seed))
    return (out - clean).mean(1)  # (B, H, W)


def test_rain_only_brightens_and_is_reproducible() -> None:
    rain = BatchRain((NO_HAZE,))
    clean = torch.rand(3, 3, 40, 56, dtype=torch.float64)
    a = rain(clean, generator=torch.Generator().manual_seed(1))
    b = rain(clean, generator=torch.Generator().manual_seed(1))
    assert a.shape == clean.shape and a.dtype == clean.dtype
    torch.testing.assert_close(a, b)
    assert (a >= clean - 1e-6).all() and (a > clean + 0.05).float().mean() > 0.02
    assert not torch.equal(a, rain(clean, generator=torch.Generator().manual_seed(2)))


def test_streaks_fall_along_the_drawn_angle() -> None:
    def along_vs_across(layer: torch.Tensor, dy: int, dx: int) -> float:
        """Mean |difference| to the neighbour 4 px along (dy, dx) divided by the one across it."""
        along = (layer - torch.roll(layer, (4 * dy, 4 * dx), (1, 2))).abs().mean()
        across = (layer - torch.roll(layer, (4 * dx, -4 * dy), (1, 2))).abs().mean()
        return float(along / across)

    assert along_vs_across(_streaks(0.0), 1, 0) < 0.5  # vertical streaks: smooth downwards
    assert along_vs_across(_streaks(45.0), 1, 1) < 0.5  # leaning right by 45°: smooth down-right
    assert along_vs_across(_streaks(45.0), 1, -1) > 0.8  # ... and not down-left


def test_the_data_module_renders_deferred_rain_on_the_device() -> None:
    synthesis = Synthesis(builtin_photos=True, length=8, transplant_prob=0.0, render_on_device=True)
    dm = DerainDataModule(synthesis=synthesis, patch_size=32, batch_size=4, num_workers=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["render"].all() and torch.equal(batch["rain"], batch["clean"])  # workers left the rain
    out = dm.on_after_batch_transfer(batch, 0)
    assert (out["rain"] - out["clean"]).amax(dim=(1, 2, 3)).min() > 0.1  # every sample got rain
    torch.testing.assert_close(out["rain"] * 255, (out["rain"] * 255).round())  # 8-bit, as stored pairs
    plain = DerainDataModule(
        synthesis=Synthesis(builtin_photos=True, length=8), patch_size=32, batch_size=4, num_workers=0
    )
    plain.setup("fit")
    batch = next(iter(plain.train_dataloader()))
    assert not batch["render"].any() and not torch.equal(batch["rain"], batch["clean"])

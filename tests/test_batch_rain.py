"""Procedural rain rendered a batch at a time on the batch's device, the same rain as ``add_rain``'s, and its use
by the data module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from derain.data import DerainDataModule, Synthesis
from derain.synth import RAIN_STYLES, BatchRain, RainStyle, add_rain, recover_layer
from derain.synth.measure import layer_stats

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
    # heavy rain: a 32-pixel crop of light rain may hold no streak at all, as add_rain's may
    synthesis = Synthesis(
        builtin_photos=True,
        length=8,
        transplant_prob=0.0,
        render_on_device=True,
        procedural_styles=("heavy",),
    )
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


# widths 1, 1-2, 2 px; layered: own directions, falloff, blur and location maps; drizzle: short, faint, blurred
@pytest.mark.parametrize("style", ["light", "heavy", "rain100h", "layered", "drizzle"])
def test_batch_rain_draws_the_rain_of_add_rain(style: str) -> None:
    """The two renderers of one style give the same streaks: width (``RainStyle.width``), length, coverage,
    brightness and veil floor, measured on the layers recovered from 48 renders each on grey (``layer_stats``:
    width and length from the autocorrelation, as ``tools/streaks.py`` measures Rain100H's).

    Tolerance: each mean may differ by 4 standard errors of the difference, estimated from the renders
    themselves. Two renders of one renderer differ by more than that once in about 16 000 statistics (the 18
    here: about 1 in 900), and the seeds are fixed, so the test is not flaky; the batch renderer before it
    honoured ``width`` was 6 to 36 standard errors off in streak width (1.5 px for every style).
    """
    n, side, grey = 48, 128, 0.3
    clean = np.full((side, side, 3), grey, np.float32)
    rng = np.random.default_rng(0)
    numpy_stats = [layer_stats(recover_layer(add_rain(clean, rng, style), clean).mean(2)) for _ in range(n)]
    batch = BatchRain((RAIN_STYLES[style],))(
        torch.full((n, 3, side, side), grey), generator=torch.Generator().manual_seed(0)
    )
    batch_stats = [layer_stats(recover_layer(x.permute(1, 2, 0).numpy(), clean).mean(2)) for x in batch]
    for key in ("width", "length", "coverage", "bright_p50", "bright_p90", "floor"):
        a, b = (np.array([stats[key] for stats in sample]) for sample in (numpy_stats, batch_stats))
        error = np.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / n)
        assert abs(b.mean() - a.mean()) <= 4 * error + 1e-9, (
            f"{style} {key}: add_rain {a.mean():.3f}, BatchRain {b.mean():.3f} (4 standard errors: {4 * error:.3f})"
        )

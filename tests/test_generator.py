"""The heavy-rain generator's options (derain.synth.RainStyle): several layers of their own directions, fainter
layers behind the first, blur, a location map; checked ranges; the older styles draw what they drew before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from derain.synth import RAIN_STYLES, BatchRain, RainStyle, add_rain
from derain.synth.measure import layer_stats
from derain.synth.procedural import location_map, rain_layer

DENSE = RainStyle(
    layers=(2, 2),
    density=(0.004, 0.004),
    length=(30.0, 30.0),
    angle=(0.0, 0.0),
    angle_jitter=0.0,
    width=(1, 1),
    brightness=(0.6, 0.6),
    haze=(0.0, 0.0),
)


def with_(style: RainStyle, **changes) -> RainStyle:
    return RainStyle(**{**style.__dict__, **changes})


@pytest.mark.parametrize(
    ("style", "total"),
    [("light", 2031.7024), ("medium", 2295.2539), ("heavy", 3332.8906), ("rain100h", 3572.5247)],
)
def test_the_older_styles_draw_what_they_drew_before(style: str, total: float) -> None:
    """The new options are off in the older styles and draw no random numbers: the same seed gives the same
    rain as before they came (sums recorded with the renderer of commit cc6bd30)."""
    rainy = add_rain(np.full((40, 56, 3), 0.3, np.float32), np.random.default_rng(3), style)
    assert float(rainy.sum()) == pytest.approx(total, rel=1e-5)


def test_layers_of_their_own_direction_spread_the_angles() -> None:
    def spread(style: RainStyle) -> float:
        return float(
            np.mean(
                [
                    layer_stats(rain_layer((128, 128), np.random.default_rng(s), style))["angle_spread"]
                    for s in range(6)
                ]
            )
        )

    parallel, crossing = spread(DENSE), spread(with_(DENSE, cross_prob=1.0, cross_angle=40.0))
    assert parallel < 2.0 and crossing > 2 * parallel


def test_falloff_makes_the_layers_behind_the_first_fainter_and_sparser() -> None:
    single = rain_layer((96, 96), np.random.default_rng(0), with_(DENSE, layers=(1, 1)))
    same = rain_layer((96, 96), np.random.default_rng(0), DENSE)
    faint = rain_layer((96, 96), np.random.default_rng(0), with_(DENSE, falloff=(0.2, 0.2)))
    # the first layer is the same in all three; the second adds less under a falloff
    assert single.mean() < faint.mean() < same.mean()
    assert (faint - single).mean() < 0.2 * (same - single).mean()


def test_blur_softens_the_streaks() -> None:
    sharp = layer_stats(rain_layer((128, 128), np.random.default_rng(1), DENSE))
    soft = layer_stats(rain_layer((128, 128), np.random.default_rng(1), with_(DENSE, blur=(1.5, 1.5))))
    assert soft["width"] > sharp["width"] + 1


def test_a_location_map_leaves_part_of_the_frame_without_rain() -> None:
    mask = location_map((120, 160), np.random.default_rng(0))
    assert mask.shape == (120, 160) and mask.min() == 0.0 and mask.max() == 1.0
    assert 0.3 < (mask > 0.5).mean() < 0.95
    everywhere = rain_layer((120, 160), np.random.default_rng(2), with_(DENSE, density=(0.02, 0.02)))
    patches = rain_layer(
        (120, 160), np.random.default_rng(2), with_(DENSE, density=(0.02, 0.02), location_prob=1.0)
    )

    def dry_blocks(layer: np.ndarray) -> float:  # share of 20-pixel blocks with hardly any rain
        return float((layer.reshape(6, 20, 8, 20).mean((1, 3)) < 0.01).mean())

    assert dry_blocks(everywhere) == 0.0 and dry_blocks(patches) > 0.05


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"density": (0.01, 0.001)},
            r"RainStyle\.density must be a range \(low, high\) within \[1e-06, 1\.0\], got \(0\.01, 0\.001\)",
        ),
        ({"brightness": (0.2, 1.5)}, r"RainStyle\.brightness must be a range .* within \[0\.0, 1\.0\]"),
        ({"layers": (0, 2)}, r"RainStyle\.layers must be a range .* within \[1, 16\]"),
        ({"cross_prob": 1.5}, r"RainStyle\.cross_prob must be in \[0\.0, 1\.0\], got 1\.5"),
        ({"location_prob": -0.1}, r"RainStyle\.location_prob must be in \[0\.0, 1\.0\]"),
    ],
)
def test_an_option_out_of_range_is_named_with_its_range(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        with_(RainStyle(), **changes)


def test_the_heavy_styles_render_heavy_rain() -> None:
    clean = np.full((96, 128, 3), 0.4, np.float32)
    for name in ("rain100h", "layered"):
        rainy = add_rain(clean, np.random.default_rng(0), name)
        assert (
            rainy.shape == clean.shape
            and (rainy >= clean - 1e-6).all()
            and rainy.mean() > clean.mean() + 0.05
        )


def test_drizzle_is_fine_rain_over_more_of_the_frame_than_light_and_fainter_than_medium() -> None:
    """ "drizzle" (the webcam frames' kind of rain): many short faint streaks, not a few bright ones."""
    clean = np.full((128, 128, 3), 0.4, np.float32)

    def added(style: str) -> np.ndarray:
        return np.stack(
            [(add_rain(clean, np.random.default_rng(s), style) - clean).mean(2) for s in range(8)]
        )

    light, drizzle, medium = added("light"), added("drizzle"), added("medium")
    assert (drizzle > 0.02).mean() > 4 * (light > 0.02).mean()
    assert np.quantile(drizzle, 0.99) < 0.6 * np.quantile(medium, 0.99)
    assert (drizzle >= -1e-6).all() and drizzle.max() < 0.5


def test_batch_rain_draws_for_the_older_styles_what_it_drew_before() -> None:
    """BatchRain draws no random numbers for options a style leaves off (sums recorded at commit cc6bd30)."""
    recorded = {"light": 4141.1611, "heavy": 6885.6309, "rain100h": 6960.8716}
    for style, total in recorded.items():
        out = BatchRain((RAIN_STYLES[style],))(
            torch.full((2, 3, 40, 56), 0.3), generator=torch.Generator().manual_seed(1)
        )
        assert float(out.sum()) == pytest.approx(total, rel=1e-5), style

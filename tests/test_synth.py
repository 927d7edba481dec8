"""Synthetic rain: deterministic for a seed, heavy/light where the real data sets are, exact transplants."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

from derain import synth
from derain.metrics import rgb_to_y_matlab
from derain.synth import photos as synth_photos
from derain.synth.transplant import _window_matrix


def psnr_y(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR on MATLAB's Y channel of two float (H, W, 3) images, quantised to 8 bits."""

    def y(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.round(x * 255.0) / 255.0).permute(2, 0, 1)[None].double()
        return rgb_to_y_matlab(t)

    return float(10 * torch.log10(1.0 / (y(a) - y(b)).pow(2).mean()))


@pytest.fixture(scope="module")
def photos() -> list[np.ndarray]:
    return [synth.as_float(im) for im in synth.builtin_clean_images()]


def test_builtin_clean_images_are_uint8_rgb_photos() -> None:
    images = synth.builtin_clean_images()
    assert len(images) == 5  # scikit-image's astronaut, coffee, chelsea, rocket, motorcycle (left)
    for im in images:
        assert im.dtype == np.uint8 and im.ndim == 3 and im.shape[2] == 3 and min(im.shape[:2]) >= 256
    images[0][:] = 0  # callers get copies
    assert synth.builtin_clean_images()[0].any()


def test_builtin_clean_images_do_not_depend_on_gradio(monkeypatch: pytest.MonkeyPatch) -> None:
    from skimage import data as skdata

    expected = [
        skdata.astronaut(),
        skdata.coffee(),
        skdata.chelsea(),
        skdata.rocket(),
        skdata.stereo_motorcycle()[0],
    ]
    synth_photos._builtin_clean_images.cache_clear()
    try:
        with_gradio = synth.builtin_clean_images()
        synth_photos._builtin_clean_images.cache_clear()
        monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` fails, find_spec("gradio") is None
        assert importlib.util.find_spec("gradio") is None
        without_gradio = synth.builtin_clean_images()
    finally:
        synth_photos._builtin_clean_images.cache_clear()
    for images in (with_gradio, without_gradio):
        assert len(images) == len(expected)
        for got, want in zip(images, expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_same_seed_same_rain_other_seed_other_rain(photos: list[np.ndarray]) -> None:
    clean = photos[0][:96, :128]
    a = synth.add_rain(clean, np.random.default_rng(7))
    b = synth.add_rain(clean, np.random.default_rng(7))
    c = synth.add_rain(clean, np.random.default_rng(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.dtype == np.float32 and a.shape == clean.shape and a.min() >= 0 and a.max() <= 1


def test_rain_only_brightens() -> None:
    clean = np.full((64, 64, 3), 0.3, np.float32)
    rainy = synth.add_rain(clean, np.random.default_rng(0), "light")  # light rain has no haze
    assert (rainy >= clean).all() and (rainy > clean).any()


@pytest.mark.parametrize(("style", "low", "high"), [("light", 25.0, 33.0), ("heavy", 11.0, 17.0)])
def test_input_psnr_lands_in_the_range_of_real_data_sets(
    photos: list[np.ndarray], style: str, low: float, high: float
) -> None:
    # Rain200L (light) inputs score about 28 dB PSNR-Y, Rain100H (heavy) about 14 dB.
    rng = np.random.default_rng(0)
    scores = [psnr_y(synth.add_rain(im[:256, :256], rng, style), im[:256, :256]) for im in photos]
    assert low < np.mean(scores) < high, f"{style}: mean PSNR-Y {np.mean(scores):.2f} dB"


def test_streak_layer_follows_its_angle() -> None:
    layer = synth.rain_streaks((128, 128), np.random.default_rng(0), density=0.002, length=31, angle=0.0)
    # Vertical streaks: neighbours along columns correlate far more than along rows.
    vertical = np.corrcoef(layer[1:].ravel(), layer[:-1].ravel())[0, 1]
    horizontal = np.corrcoef(layer[:, 1:].ravel(), layer[:, :-1].ravel())[0, 1]
    assert vertical > 0.8 > horizontal
    assert layer.shape == (128, 128) and 0 <= layer.min() and layer.max() <= 0.6 + 1e-6


def test_unknown_style_is_named() -> None:
    with pytest.raises(ValueError, match="unknown rain style 'hail'"):
        synth.add_rain(np.zeros((8, 8, 3), np.float32), np.random.default_rng(0), "hail")


def test_haze_is_a_veil() -> None:
    image = np.zeros((2, 2, 3), np.float32)
    np.testing.assert_allclose(synth.add_haze(image, 0.25, 0.8), 0.2)


def test_residual_is_clipped_difference() -> None:
    rainy = np.array([[[0.9, 0.2, 0.5]]], np.float32)
    clean = np.array([[[0.4, 0.5, 0.5]]], np.float32)
    np.testing.assert_allclose(synth.rain_residual(rainy, clean), [[[0.5, 0.0, 0.0]]])


def test_transplant_adds_the_residual_exactly_where_not_clipped() -> None:
    rng = np.random.default_rng(0)
    clean = rng.random((40, 60, 3), dtype=np.float32)
    out = synth.transplant(clean, np.full((50, 70, 3), 0.3, np.float32), rng, beta=0.0)  # added
    room = clean <= 0.7 - 1e-6
    np.testing.assert_allclose(out[room], clean[room] + 0.3, atol=1e-6)
    np.testing.assert_array_equal(out[~room], 1.0)


def test_transplant_uses_a_flip_or_rotation_of_the_residual() -> None:
    rng = np.random.default_rng(3)
    residual = rng.random((30, 20, 3), dtype=np.float32) * 0.5
    clean = np.zeros((20, 30, 3), np.float32)  # only the rotated residual fits without resizing
    out = synth.transplant(clean, residual, rng, rotate90=True)
    assert any(np.array_equal(out, synth.dihedral(residual, k)) for k in range(8))


@pytest.mark.parametrize("rotate90", [False, True])
def test_transplanted_streaks_stay_upright_unless_rotations_are_asked_for(rotate90: bool) -> None:
    residual = np.zeros((40, 40, 3), np.float32)
    residual[:, ::5] = 0.5  # vertical streaks
    rng = np.random.default_rng(0)
    outs = [
        synth.transplant(np.zeros((16, 16, 3), np.float32), residual, rng, rotate90=rotate90)
        for _ in range(40)
    ]
    vertical = [bool((out == out[:1]).all()) for out in outs]  # every row the same
    assert all(vertical) if not rotate90 else not all(vertical)


@pytest.mark.parametrize(("rotate90", "orientations"), [(False, {0, 2, 4, 6}), (True, set(range(8)))])
def test_transplanted_layers_take_every_allowed_orientation(rotate90: bool, orientations: set[int]) -> None:
    """Layers are turned by the one augmentation path (``turn_steps``, each step seeded on its own): every upright
    flip (mirror images included), or all eight with ``rotate90``, and the same ones for the same seed."""
    layer = np.random.default_rng(0).random((24, 24, 3), dtype=np.float32) * 0.5
    clean = np.zeros((24, 24, 3), np.float32)
    seen = []
    for seed in range(64):
        out = synth.transplant(clean, layer, np.random.default_rng(seed), rotate90=rotate90, beta=0.0)
        again = synth.transplant(clean, layer, np.random.default_rng(seed), rotate90=rotate90, beta=0.0)
        assert np.array_equal(out, again)
        seen.append(next(k for k in range(8) if np.array_equal(out, synth.dihedral(layer, k))))
    assert set(seen) == orientations


def test_transplant_resizes_a_small_residual_up() -> None:
    out = synth.transplant(
        np.zeros((64, 64, 3), np.float32), np.full((16, 8, 3), 0.25, np.float32), np.random.default_rng(0)
    )
    assert out.shape == (64, 64, 3)
    np.testing.assert_allclose(out, 0.25, atol=1e-6)


# -- rain-layer augmentation ---------------------------------------------------------------------------------


def test_default_layer_augment_changes_nothing_and_draws_the_same_numbers() -> None:
    residual = np.random.default_rng(1).random((50, 70, 3), dtype=np.float32) * 0.4
    clean = np.random.default_rng(2).random((32, 40, 3), dtype=np.float32)
    rng_plain, rng_aug = np.random.default_rng(7), np.random.default_rng(7)
    plain = synth.transplant(clean, residual, rng_plain)
    augmented = synth.transplant(clean, residual, rng_aug, augment=synth.LayerAugment())
    np.testing.assert_array_equal(augmented, plain)
    assert rng_aug.random() == rng_plain.random()  # the shipped recipe's random stream is unchanged


def test_layer_gain_scales_the_added_rain() -> None:
    clean = np.full((16, 16, 3), 0.2, np.float32)
    layer = np.full((40, 40, 3), 0.2, np.float32)
    out = synth.transplant(
        clean, layer, np.random.default_rng(0), augment=synth.LayerAugment(gain=(1.5, 1.5)), beta=0.0
    )
    np.testing.assert_allclose(out, 0.5, atol=1e-6)
    added = [
        float(
            (
                synth.transplant(
                    clean,
                    layer,
                    np.random.default_rng(s),
                    augment=synth.LayerAugment(gain=(0.5, 2.0)),
                    beta=0.0,
                )
                - clean
            ).mean()
        )
        for s in range(20)
    ]
    assert min(added) >= 0.1 - 1e-6 and max(added) <= 0.4 + 1e-6 and max(added) - min(added) > 0.1


def test_layer_scale_resizes_the_streaks() -> None:
    layer = np.zeros((200, 200, 3), np.float32)
    layer[:, ::8] = 0.5  # vertical streaks every 8 px
    out = synth.transplant(
        np.zeros((32, 96, 3), np.float32),
        layer,
        np.random.default_rng(0),
        augment=synth.LayerAugment(scale=(2.0, 2.0)),
    )
    row = out[16, :, 0] - out[16, :, 0].mean()
    lags = {lag: float((row[:-lag] * row[lag:]).mean()) for lag in range(4, 24)}
    assert max(lags, key=lags.get) == 16
    assert np.allclose(out, out[:1])  # still vertical: scale alone does not turn them


def _streak_angle(out: np.ndarray) -> float:
    """Degrees from vertical of a single bright line in ``out`` (least-squares x = a·y + b over its pixels)."""
    ys, xs = np.nonzero(out[..., 0] > 0.25)
    return float(np.degrees(np.arctan(np.polyfit(ys, xs, 1)[0])))


def test_layer_angle_turns_the_streaks_within_the_limit() -> None:
    layer = np.zeros((300, 300, 3), np.float32)
    layer[:, 149:152] = 0.5  # one vertical streak
    clean = np.zeros((48, 48, 3), np.float32)
    angles = []
    for seed in range(60):
        out = synth.transplant(
            clean, layer, np.random.default_rng(seed), augment=synth.LayerAugment(angle=20.0)
        )
        if (out[..., 0] > 0.25).sum() > 40:  # the window caught the streak
            angles.append(_streak_angle(out))
    assert len(angles) >= 3
    assert max(abs(a) for a in angles) <= 20.5 and max(abs(a) for a in angles) > 3


def test_turned_and_resized_window_stays_inside_the_layer() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        lh, lw, h, w = (int(v) for v in rng.integers(2, 400, 4))
        angle, lo = float(rng.uniform(0, 89)), float(rng.uniform(0.5, 2.0))
        matrix = _window_matrix((lh, lw), h, w, rng, (lo, lo * 1.5), angle)
        corners = np.array([[0, 0, 1], [w - 1, 0, 1], [0, h - 1, 1], [w - 1, h - 1, 1]], np.float64)
        x, y = (corners @ matrix.T).T
        eps = 1e-6
        assert x.min() >= -eps and x.max() <= lw - 1 + eps, (lh, lw, h, w, angle)
        assert y.min() >= -eps and y.max() <= lh - 1 + eps, (lh, lw, h, w, angle)


def test_a_layer_as_large_as_the_patch_is_not_zoomed_or_shifted() -> None:
    layer = np.random.default_rng(1).random((24, 40, 3), dtype=np.float32) * 0.5
    out = synth.transplant(
        np.zeros((24, 40, 3), np.float32),
        layer,
        np.random.default_rng(0),
        augment=synth.LayerAugment(scale=(0.5, 1.0)),
    )
    assert any(np.allclose(out, synth.dihedral(layer, k), atol=1e-5) for k in (0, 2, 4, 6))


def test_transplant_layers_adds_two_layers_with_mix_and_keeps_the_stream_without() -> None:
    clean = np.full((16, 16, 3), 0.1, np.float32)
    layers = [np.full((30, 30, 3), 0.2, np.float32)]
    two = synth.transplant_layers(
        clean, layers, np.random.default_rng(0), augment=synth.LayerAugment(mix=1.0), beta=0.0
    )
    np.testing.assert_allclose(two, 0.5, atol=1e-6)
    noisy = [np.random.default_rng(s).random((30, 40, 3), dtype=np.float32) * 0.3 for s in range(3)]
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    plain = synth.transplant_layers(clean, noisy, a)
    np.testing.assert_array_equal(
        synth.transplant_layers(clean, noisy, b, augment=synth.LayerAugment()), plain
    )
    assert a.random() == b.random()
    with pytest.raises(ValueError, match="no rain layers"):
        synth.transplant_layers(clean, [], a)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gain": (0.0, 1.0)}, r"gain must be a range \(low, high\) with 0 < low <= high, got \(0.0, 1.0\)"),
        ({"scale": (2.0, 1.0)}, r"scale must be a range .* got \(2.0, 1.0\)"),
        ({"angle": 90.0}, r"angle must be in \[0, 90\) degrees, got 90.0"),
        ({"mix": 1.5}, r"mix must be a probability in \[0, 1\], got 1.5"),
    ],
)
def test_layer_augment_names_a_bad_setting(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synth.LayerAugment(**kwargs)


def test_composite_layers_recovered_free_of_their_background_and_put_on_another() -> None:
    """A pair made with the fitted composite gives back its layer whatever the background (the additive
    residual shrinks where the background is bright), ``fit_composite_beta`` finds the β, and a transplant puts
    the layer on a new photo with the same composite."""
    from derain.synth import (
        COMPOSITE_BETA,
        background_correlation,
        composite,
        fit_composite_beta,
        recover_layer,
        transplant,
    )

    rng = np.random.default_rng(0)
    background = rng.uniform(0.0, 0.75, (64, 64, 3)).astype(np.float32)
    layer = np.zeros((64, 64, 3), np.float32)
    layer[:, ::4] = rng.uniform(0.1, 0.3, (64, 16, 1))  # streaks, never saturating here
    rainy = np.rint(composite(background, layer, COMPOSITE_BETA) * 255).astype(np.uint8)
    clean = np.rint(background * 255).astype(np.uint8)
    recovered = recover_layer(rainy, clean, COMPOSITE_BETA)
    assert np.abs(recovered - layer).max() < 3 / 255
    additive = np.clip(rainy / 255 - clean / 255, 0, 1)
    assert abs(background_correlation(rainy, clean, COMPOSITE_BETA)) < 0.1
    assert (
        background_correlation(rainy, clean, 0.0) < -0.3
    )  # the additive residual dims on bright backgrounds
    assert additive[:, ::4].mean() < layer[:, ::4].mean() - 0.02
    assert abs(fit_composite_beta(rainy, clean) - COMPOSITE_BETA) <= 0.1
    other = np.full((32, 32, 3), 0.5, np.float32)
    moved = transplant(other, recovered, np.random.default_rng(1), beta=COMPOSITE_BETA)
    assert np.allclose(
        (moved - other) / (1 - COMPOSITE_BETA * other), np.clip(moved - other, 0, 1) / 0.69, atol=1e-6
    )
    put_on = (moved - other) / (1 - COMPOSITE_BETA * 0.5)  # the layer, scaled by the composite's factor
    assert put_on.max() > 0.05
    assert set(np.round(put_on[put_on > 0], 4)) <= set(np.round(recovered[recovered > 0], 4))
    with pytest.raises(ValueError, match=r"composite beta must be in \[0, 1\], got 1.5"):
        composite(other, recovered, 1.5)


def test_saturated_pixels_get_at_least_a_typical_streak_value() -> None:
    from derain.synth import recover_layer

    clean = np.full((20, 20, 3), 200, np.uint8)
    clean[:, 10:] = 40
    rainy = clean.copy()
    rainy[5:15, :] = 255  # a saturated streak across a bright and a dark background
    rainy[0, 0] = 230  # an unsaturated streak pixel: 30 levels over 200
    layer = recover_layer(rainy, clean)
    # the additive residual would read 55 levels on the bright side and 215 on the dark side: here both sides
    # are at least the typical streak value of the image, and the dark side keeps its larger bound
    assert layer[5:15, :10].min() >= layer[0, 0].max() - 1e-6
    assert np.all(layer[5:15, 10:] >= layer[5:15, :10].min())


def test_a_list_of_style_names_picks_one_like_any() -> None:
    clean = np.full((32, 40, 3), 0.3, np.float32)
    drawn = synth.add_rain(clean, np.random.default_rng(5), synth.ANY_STYLES)
    assert np.array_equal(drawn, synth.add_rain(clean, np.random.default_rng(5), "any"))
    assert not np.array_equal(drawn, synth.add_rain(clean, np.random.default_rng(5), ["rain100h"]))
    with pytest.raises(ValueError, match="unknown rain style 'hail'"):
        synth.add_rain(clean, np.random.default_rng(0), ["heavy", "hail", "hail", "hail"] * 8)


def test_the_composite_beta_has_one_default_wherever_it_is_taken() -> None:
    """Every function, class and option of derain that takes the composite's β (``beta``, ``composite_beta``)
    defaults it to ``COMPOSITE_BETA`` or requires it: one quantity, one default (it was 0 in five signatures)."""
    import importlib
    import inspect
    import pkgutil

    import derain

    defaults = {}
    for info in pkgutil.walk_packages(derain.__path__, "derain."):
        if info.name.endswith("__main__"):  # the derain command: importing it runs it
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) != module.__name__ or not callable(obj):
                continue
            try:
                parameters = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            for name in ("beta", "composite_beta"):
                if name in parameters and parameters[name].default is not inspect.Parameter.empty:
                    defaults[f"{obj.__module__}.{obj.__qualname__}({name})"] = parameters[name].default
    assert len(defaults) >= 7, sorted(
        defaults
    )  # composite, recover_layer, add_rain, transplant(_layers), ...
    assert {k: v for k, v in defaults.items() if v != synth.COMPOSITE_BETA} == {}

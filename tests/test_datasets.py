"""The two datasets: real pairs cropped and augmented alike, and rain rendered on the fly onto clean photos (procedural
or transplanted, fixed for validation, seeded per worker and rank)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from data_helpers import make_pairs, noise, write

from derain.data import PairedDataset, Synthesis, SyntheticRainDataset, seed_worker
from derain.pairing import find_pairs
from derain.synth import LayerAugment


def test_paired_augmentation_keeps_rain_and_clean_aligned(tmp_path: Path) -> None:
    # rain = clean + 40 everywhere: any misaligned crop, flip or rotation breaks the constant difference.
    make_pairs(tmp_path, ["1.png", "2.png"], ["1.png", "2.png"])
    data = PairedDataset(find_pairs(tmp_path), patch_size=16, augment=True, seed=0)
    seen = set()
    for _ in range(6):
        for item in data:
            assert item["rain"].shape == item["clean"].shape == (3, 16, 16)
            diff = (item["rain"] - item["clean"]) * 255
            clean_u8 = (item["clean"] * 255).round()
            exact = clean_u8 <= 255 - 40
            torch.testing.assert_close(diff[exact], torch.full_like(diff[exact], 40.0), atol=1e-3, rtol=0)
            seen.add(item["clean"].numpy().tobytes())
    assert len(seen) > 2  # the crops really are random


@pytest.mark.parametrize("rotate90", [False, True])
def test_paired_augmentation_keeps_streaks_upright_unless_asked(tmp_path: Path, rotate90: bool) -> None:
    clean = np.full((24, 32, 3), 60, np.uint8)
    rain = clean.copy()
    rain[:, ::4] = 220  # vertical streaks
    write(tmp_path / "norain" / "1.png", clean)
    write(tmp_path / "rain" / "1.png", rain)
    data = PairedDataset(find_pairs(tmp_path), patch_size=16, augment=True, rotate90=rotate90, seed=0)
    upright = [bool((item["rain"] == item["rain"][:, :1]).all()) for item in (data[0] for _ in range(30))]
    assert all(upright) if not rotate90 else not all(upright)


@pytest.mark.parametrize(("rotate90", "orientations"), [(False, {0, 2, 4, 6}), (True, set(range(8)))])
def test_paired_augmentation_takes_every_allowed_orientation(
    tmp_path: Path, rotate90: bool, orientations: set[int]
) -> None:
    """Mirror images included: the crop path's flips draw apart (one seed for all of them flipped horizontally and
    vertically together, two of the four upright orientations) and apart from the crop's place."""
    from derain.synth import dihedral

    image = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)  # read back as RGB
    write(tmp_path / "norain" / "1.png", image[:, :, ::-1])
    write(tmp_path / "rain" / "1.png", image[:, :, ::-1])
    data = PairedDataset(find_pairs(tmp_path), patch_size=16, augment=True, rotate90=rotate90, seed=0)
    seen = set()
    for _ in range(48):
        out = (data[0]["clean"].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        seen.add(next(k for k in range(8) if np.array_equal(out, dihedral(image, k))))
    assert seen == orientations


def test_patches_larger_than_the_image_are_padded(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    item = PairedDataset(find_pairs(tmp_path), patch_size=40, augment=True)[0]
    assert item["rain"].shape == (3, 40, 40)


def test_full_images_without_patch_size(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["rain-7.png"], ["norain-7.png"], sub=None)
    item = PairedDataset(find_pairs(tmp_path))[0]
    assert item["name"] == "7" and item["rain"].shape == (3, 24, 32) and item["rain"].dtype == torch.float32


def test_synthetic_items_fixed_for_validation_random_for_training() -> None:
    clean = [noise(64, 80, seed=s) for s in range(3)]
    fixed = SyntheticRainDataset(clean, length=4, patch_size=32, seed=5, fixed=True)
    torch.testing.assert_close(fixed[2]["rain"], fixed[2]["rain"])
    assert not torch.equal(fixed[1]["rain"], fixed[2]["rain"])
    train = SyntheticRainDataset(clean, length=4, patch_size=32, seed=5)
    assert not torch.equal(train[0]["rain"], train[0]["rain"])
    item = train[3]
    assert item["rain"].shape == item["clean"].shape == (3, 32, 32) and item["name"] == "synthetic-00003"


def test_synthetic_transplant_adds_a_real_rain_layer() -> None:
    clean = [np.full((40, 40, 3), 100, np.uint8)]
    residual = np.full((50, 50, 3), 20, np.uint8)
    added = Synthesis(transplant_prob=1.0, composite_beta=0.0)
    data = SyntheticRainDataset(clean, length=2, patch_size=32, pair_layers=[residual], synthesis=added)
    item = data[0]
    torch.testing.assert_close(
        item["rain"] - item["clean"], torch.full((3, 32, 32), 20 / 255), atol=1e-6, rtol=0
    )


def test_rendered_streak_layers_are_transplanted_grey_beside_the_pairs_layers() -> None:
    """Grey rendered layers (bright streaks on black) are added to every channel alike; ``layer_share`` splits
    the transplants between them and the pairs' layers."""
    streaks = np.zeros((60, 70, 1), np.uint8)
    streaks[:, ::7] = 90  # vertical streaks, 90 levels
    data = SyntheticRainDataset(
        [np.full((40, 40, 3), 100, np.uint8)],
        length=60,
        patch_size=32,
        pair_layers=[np.full((50, 50, 3), 20, np.uint8)],
        rendered_layers=[streaks],
        # added (β = 0): the layers' levels come through as they are
        synthesis=Synthesis(layer_share=0.5, transplant_prob=1.0, composite_beta=0.0),
    )
    kinds = []
    for i in range(60):
        item = data[i]
        diff = ((item["rain"] - item["clean"]) * 255).round()
        if torch.equal(diff, torch.full_like(diff, 20)):
            kinds.append("pair")
        else:
            assert torch.equal(diff[0], diff[1]) and torch.equal(diff[1], diff[2]), "a grey layer stays grey"
            assert set(diff.unique().tolist()) == {0.0, 90.0}
            kinds.append("streaks")
    assert 15 <= kinds.count("streaks") <= 45, kinds.count("streaks")


def test_items_that_carry_a_real_layer_are_marked_real_rain() -> None:
    """``rendered_layer_real`` marks the items whose rain came from a real photo's layer (one of two mixed
    counts), without changing the random stream; procedural rain is never marked; flags must fit the layers."""
    layers = [np.full((40, 40, 1), level, np.uint8) for level in (10, 30)]

    def items(synthesis: Synthesis, count: int, **layer_options) -> list[dict]:
        photos = [np.full((40, 40, 3), 100, np.uint8)]
        data = SyntheticRainDataset(
            photos, length=count, patch_size=16, rendered_layers=layers, synthesis=synthesis, **layer_options
        )
        return [data[i] for i in range(count)]

    def level(item: dict) -> int:
        return round(float((item["rain"] - item["clean"]).mean() * 255))

    added = Synthesis(transplant_prob=0.5, composite_beta=0.0, procedural_styles=("light",))
    seen = {(level(item), item["real_rain"]) for item in items(added, 60, rendered_layer_real=[False, True])}
    assert (30, True) in seen and (10, False) in seen  # the layer of 30 levels is the real one
    assert all(real == (lv == 30) for lv, real in seen if lv in (10, 30))
    assert any(lv not in (10, 30) and not real for lv, real in seen)  # procedural rain: not real
    mixed = dataclasses.replace(added, transplant_prob=1.0, layer_augment=LayerAugment(mix=1.0))
    halves = {"rendered_layer_weights": [0.5, 0.5]}
    marked = items(mixed, 20, rendered_layer_real=[False, True], **halves)
    for item in marked:  # two layers each: real as soon as one of them is
        assert item["real_rain"] == (level(item) > 20), level(item)
    plain = items(mixed, 20, **halves)
    assert not any(item["real_rain"] for item in plain)  # by default no layer is real
    for a, b in zip(plain, marked, strict=True):  # the marks draw nothing: the same rain item for item
        assert torch.equal(a["rain"], b["rain"])
    with pytest.raises(ValueError, match="rendered_layer_real: 1 flags for 2 layers"):
        items(added, 1, rendered_layer_real=[True])


def test_rendered_layer_weights_choose_the_rendered_layers() -> None:
    """``rendered_layer_weights`` (``layer_shares``) decide which rendered layer a sample gets; a weight of 0
    never draws its layer, and weights that do not fit the layers are refused by name."""
    layers = [np.full((40, 40, 1), level, np.uint8) for level in (10, 30)]
    added = Synthesis(transplant_prob=1.0, composite_beta=0.0)
    data = SyntheticRainDataset(
        [np.full((40, 40, 3), 100, np.uint8)],
        length=20,
        patch_size=16,
        rendered_layers=layers,
        rendered_layer_weights=[0.0, 1.0],
        synthesis=added,
    )
    levels = {round(float((data[i]["rain"] - data[i]["clean"]).mean() * 255)) for i in range(20)}
    assert levels == {30}
    with pytest.raises(ValueError, match="rendered_layer_weights: 1 weights summing to 1 for 2 layers"):
        SyntheticRainDataset(
            [np.full((40, 40, 3), 100, np.uint8)],
            length=1,
            patch_size=8,
            rendered_layers=layers,
            rendered_layer_weights=[1.0],
        )


@pytest.mark.parametrize(("mix", "layers"), [(0.0, 1), (1.0, 2)])
def test_synthetic_transplant_mix_adds_a_second_layer(mix: float, layers: int) -> None:
    clean = [np.full((40, 40, 3), 100, np.uint8)]
    residual = np.full((50, 50, 3), 20, np.uint8)
    data = SyntheticRainDataset(
        clean,
        length=2,
        patch_size=32,
        pair_layers=[residual],
        synthesis=Synthesis(transplant_prob=1.0, layer_augment=LayerAugment(mix=mix), composite_beta=0.0),
    )
    item = data[0]
    expected = torch.full((3, 32, 32), layers * 20 / 255)
    torch.testing.assert_close(item["rain"] - item["clean"], expected, atol=1e-6, rtol=0)


def test_rain_free_items_are_left_as_they_are() -> None:
    clean = [noise(64, 80, seed=s) for s in range(3)]
    residual = np.full((64, 64, 3), 20, np.uint8)
    options = dict(length=40, patch_size=32, pair_layers=[residual], seed=3, fixed=True)
    plain = SyntheticRainDataset(clean, **options, synthesis=Synthesis(composite_beta=0.0))
    assert all(not torch.equal(plain[i]["rain"], plain[i]["clean"]) for i in range(40))
    # Without rain-free items nothing extra is drawn: the stream is pinned (sums recorded on 2026-12-02, when
    # each crop step got a seed of its own; a change here changes every recipe's data).
    assert [int((plain[i]["rain"] * 255).round().sum()) for i in range(4)] == [484641, 452810, 456056, 451340]
    mixed = SyntheticRainDataset(
        clean, **options, synthesis=Synthesis(composite_beta=0.0, rain_free_prob=0.5)
    )
    rain_free = sum(torch.equal(mixed[i]["rain"], mixed[i]["clean"]) for i in range(40))
    assert 8 <= rain_free <= 32
    every = SyntheticRainDataset(
        clean, **options, synthesis=Synthesis(composite_beta=0.0, rain_free_prob=1.0)
    )
    assert all(torch.equal(every[i]["rain"], every[i]["clean"]) for i in range(40))
    with pytest.raises(ValueError, match=r"rain_free_prob must be in \[0, 1\], got 1.5"):
        Synthesis(rain_free_prob=1.5)  # checked once, where the options are made


def test_dataloader_workers_draw_different_random_streams(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    pairs = find_pairs(tmp_path) * 4  # the same pair four times: only the augmentation can tell items apart
    paired = PairedDataset(pairs, patch_size=16, augment=True)
    synthetic = SyntheticRainDataset([noise(64, 64)], length=4, patch_size=16)
    for data in (paired, synthetic):
        loader = torch.utils.data.DataLoader(data, batch_size=1, num_workers=2, worker_init_fn=seed_worker)
        items = {b["rain"].numpy().tobytes() for b in loader}
        assert len(items) == 4, f"{type(data).__name__}: workers repeated each other's random crops"


def test_each_kind_of_dataset_and_each_rank_draws_its_own_stream(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    paired = PairedDataset(find_pairs(tmp_path), patch_size=16, augment=True)
    synthetic = SyntheticRainDataset([noise(64, 64)], length=4, patch_size=16)
    draws = {}
    for rank in (0, 1):
        for data in (paired, synthetic):
            data.reseed(123, rank)
            draws[(type(data).__name__, rank)] = data.rng.integers(2**31, size=4).tolist()
    assert len({tuple(v) for v in draws.values()}) == 4


def test_procedural_styles_pick_the_rain() -> None:
    """``procedural_styles`` reaches the procedural items; the default keeps the random stream of ``"any"``."""
    photo = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)

    def items(styles):
        synthesis = Synthesis() if styles is None else Synthesis(procedural_styles=styles)
        data = SyntheticRainDataset([photo], length=4, patch_size=48, seed=3, fixed=True, synthesis=synthesis)
        return torch.stack([data[i]["rain"] for i in range(4)])

    default, fitted = items(None), items(["rain100h"])
    assert torch.equal(default, items(None)) and torch.equal(fitted, items(["rain100h"]))  # seeded
    assert not torch.equal(default, fitted)
    assert torch.equal(default, items(["light", "medium", "heavy"]))  # the default is "any"'s styles


def test_bad_inputs_name_what_would_fit(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    with pytest.raises(ValueError, match="patch_size must be a positive int or None, got 0"):
        PairedDataset(find_pairs(tmp_path), patch_size=0)
    with pytest.raises(ValueError, match="sets names 2 sets for 1 pairs"):
        PairedDataset(find_pairs(tmp_path), sets=["a", "b"])
    with pytest.raises(ValueError, match="needs at least one clean image"):
        SyntheticRainDataset([], length=1, patch_size=8)
    with pytest.raises(ValueError, match=r"clean image 0: expected uint8 \(H, W, 3\), got float32"):
        SyntheticRainDataset([np.zeros((8, 8, 3), np.float32)], length=1, patch_size=8)
    with pytest.raises(ValueError, match="pair_layer_weights: 1 weights summing to 0.5 for 2 layers"):
        SyntheticRainDataset(
            [noise()], length=1, patch_size=8, pair_layers=[noise(), noise()], pair_layer_weights=[0.5]
        )
    with pytest.raises(IndexError, match="index 4 out of range for a synthetic set of 4"):
        SyntheticRainDataset([noise()], length=4, patch_size=8)[4]

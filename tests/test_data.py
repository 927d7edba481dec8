"""Pair discovery, checks with errors that name the files, aligned paired crops, synthetic data, DataModule."""

from __future__ import annotations

import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from helpers import SHARED_DATA, need_shared_data

from derain.data import (
    DataError,
    DerainDataModule,
    PairedDataset,
    SyntheticRainDataset,
    check_pairs,
    find_overlap,
    find_pairs,
    read_name_list,
)
from derain.synth import LayerAugment

RAIN100H_MINI = SHARED_DATA / "rain100h-train-mini"


def write(path: Path, image: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), image)
    return path


def noise(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def make_pairs(
    folder: Path, rain_names: list[str], clean_names: list[str], *, sub=("rain", "norain")
) -> Path:
    for i, (r, c) in enumerate(zip(rain_names, clean_names, strict=True)):
        clean = noise(seed=i)
        write(folder / sub[1] / c if sub else folder / c, clean)
        write(folder / sub[0] / r if sub else folder / r, cv2.add(clean, 40))
    return folder


def small_synthetic_data(tmp_path: Path, *train_dirs: Path, **options) -> dict:
    """DerainDataModule options: pairs from ``train_dirs`` plus 4 synthetic 16² samples per epoch on one clean
    photo (written under ``tmp_path/clean``), batch 2, no worker processes."""
    write(tmp_path / "clean" / "photo.png", noise(48, 48, seed=9))
    return dict(
        train_dirs=tuple(str(d) for d in train_dirs),
        clean_dirs=(str(tmp_path / "clean"),),
        synthetic_length=4,
        patch_size=16,
        batch_size=2,
        num_workers=0,
        **options,
    )


# -- find_pairs: every layout -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rain", "clean", "sub"),
    [
        (["1.png", "2.png", "10.png"], ["1.png", "2.png", "10.png"], ("rain", "norain")),
        (["a.png", "b.jpg"], ["a.png", "b.jpg"], ("input", "target")),
        (
            ["rain-1.png", "rain-2.png", "rain-10.png"],
            ["norain-1.png", "norain-2.png", "norain-10.png"],
            None,
        ),
        (["norain-1.png", "norain-2.png"], ["norain-1.png", "norain-2.png"], ("rain", "norain")),  # RCDNet
        (
            ["rain-1.png", "rain-2.png"],
            ["norain-1.png", "norain-2.png"],
            ("rain", "norain"),
        ),  # PReNet in folders
        (
            ["norain-1x2.png", "norain-2x2.png"],
            ["norain-1.png", "norain-2.png"],
            ("rain/X2", "norain"),
        ),  # JORDER
    ],
    ids=["rain-norain", "input-target", "prenet-flat", "rcdnet", "prenet-subfolders", "jorder-x2"],
)
def test_every_layout_is_found_and_paired_by_name(tmp_path: Path, rain, clean, sub) -> None:
    make_pairs(tmp_path, rain, clean, sub=sub)
    (tmp_path / "notes.txt").write_text("not an image")  # ignored
    pairs = find_pairs(tmp_path)
    assert [(r.name, c.name) for r, c in pairs] == list(
        zip(rain, clean, strict=True)
    )  # natural order: 2 < 10


def test_unmatched_files_are_all_named(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png", "2.png"], ["1.png", "2.png"])
    write(tmp_path / "rain" / "3.png", noise())
    write(tmp_path / "norain" / "4.png", noise())
    with pytest.raises(DataError, match=r"(?s)2 unmatched.*rain/3\.png \(no clean partner\).*norain/4\.png"):
        find_pairs(tmp_path)


def test_missing_folder_names_the_expected_layouts(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match=r"(?s)nowhere does not exist.*DIR/rain/NAME.*DIR/input/NAME.*rain-NAME"
    ):
        find_pairs(tmp_path / "nowhere")


def test_empty_folder_names_the_expected_layouts(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("no images")
    with pytest.raises(DataError, match=r"no image pairs in .*expected one of the layouts"):
        find_pairs(tmp_path)


def test_root_folder_passed_as_pair_folder_gets_a_hint(tmp_path: Path) -> None:
    make_pairs(tmp_path / "train", ["1.png"], ["1.png"])
    with pytest.raises(DataError, match=r"train/ or test/ sub-folders: pass .*train"):
        find_pairs(tmp_path)


def test_flat_folder_with_stray_images_names_them(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["rain-1.png"], ["norain-1.png"], sub=None)
    write(tmp_path / "photo.png", noise())
    with pytest.raises(DataError, match=r"(?s)fit no pair.*photo\.png"):
        find_pairs(tmp_path)


def test_size_mismatch_is_named(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    write(tmp_path / "rain" / "2.png", noise(24, 32))
    write(tmp_path / "norain" / "2.png", noise(20, 32))
    with pytest.raises(
        DataError, match=r"rain/2\.png is 32x24 but its clean partner .*norain/2\.png is 32x20"
    ):
        check_pairs(find_pairs(tmp_path))


def test_unreadable_image_is_named(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png", "2.png"], ["1.png", "2.png"])
    (tmp_path / "norain" / "2.png").write_bytes(b"\x89PNG truncated")
    with pytest.raises(DataError, match=r"norain/2\.png: unreadable image"):
        check_pairs(find_pairs(tmp_path))
    assert check_pairs(find_pairs(tmp_path)[:1]) == [(24, 32)]


# -- datasets ---------------------------------------------------------------------------------------------


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


def test_transplant_from_limits_the_rain_donors_and_never_uses_held_out_pairs(tmp_path: Path) -> None:
    names = [f"{i}.png" for i in range(1, 6)]
    make_pairs(tmp_path / "a", names, names)
    make_pairs(tmp_path / "b", names[:3], names[:3])
    common = small_synthetic_data(
        tmp_path, tmp_path / "a", tmp_path / "b", val_from=(str(tmp_path / "a"),), val_fraction=0.2
    )
    dm = DerainDataModule(transplant_from=(str(tmp_path / "a"),), **common)
    dm.setup("fit")
    synthetic = dm.train_set.datasets[-1]
    assert len(dm.val_pairs) == 1 and len(synthetic.rain_residuals) == 5 - 1
    everyone = DerainDataModule(**common)
    everyone.setup("fit")
    assert len(everyone.train_set.datasets[-1].rain_residuals) == 5 - 1 + 3
    make_pairs(tmp_path / "c", names[:1], names[:1])  # pairs, but not training pairs
    with pytest.raises(DataError, match=r"transplant_from .*/c'\]: none of these folders"):
        DerainDataModule(transplant_from=(str(tmp_path / "c"),), **common).setup("fit")


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
    data = SyntheticRainDataset(
        clean, length=2, patch_size=32, rain_residuals=[residual], transplant_prob=1.0
    )
    item = data[0]
    torch.testing.assert_close(
        item["rain"] - item["clean"], torch.full((3, 32, 32), 20 / 255), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize(("mix", "layers"), [(0.0, 1), (1.0, 2)])
def test_synthetic_transplant_mix_adds_a_second_layer(mix: float, layers: int) -> None:
    clean = [np.full((40, 40, 3), 100, np.uint8)]
    residual = np.full((50, 50, 3), 20, np.uint8)
    data = SyntheticRainDataset(
        clean,
        length=2,
        patch_size=32,
        rain_residuals=[residual],
        transplant_prob=1.0,
        layer_augment=LayerAugment(mix=mix),
    )
    item = data[0]
    expected = torch.full((3, 32, 32), layers * 20 / 255)
    torch.testing.assert_close(item["rain"] - item["clean"], expected, atol=1e-6, rtol=0)


def test_rain_free_items_are_left_as_they_are() -> None:
    clean = [noise(64, 80, seed=s) for s in range(3)]
    residual = np.full((64, 64, 3), 20, np.uint8)
    options = dict(length=40, patch_size=32, rain_residuals=[residual], seed=3, fixed=True)
    plain = SyntheticRainDataset(clean, **options)
    assert all(not torch.equal(plain[i]["rain"], plain[i]["clean"]) for i in range(40))
    # Without rain-free items the stream is the one from before the option existed (sums recorded then).
    assert [int((plain[i]["rain"] * 255).round().sum()) for i in range(4)] == [568581, 445666, 389968, 393320]
    mixed = SyntheticRainDataset(clean, **options, rain_free_prob=0.5)
    rain_free = sum(torch.equal(mixed[i]["rain"], mixed[i]["clean"]) for i in range(40))
    assert 8 <= rain_free <= 32
    every = SyntheticRainDataset(clean, **options, rain_free_prob=1.0)
    assert all(torch.equal(every[i]["rain"], every[i]["clean"]) for i in range(40))
    with pytest.raises(ValueError, match=r"rain_free_prob must be in \[0, 1\], got 1.5"):
        SyntheticRainDataset(clean, **options, rain_free_prob=1.5)


def test_transplant_augmentation_options_reach_the_synthetic_set(tmp_path: Path) -> None:
    make_pairs(tmp_path / "a", ["1.png", "2.png"], ["1.png", "2.png"])
    common = small_synthetic_data(tmp_path, tmp_path / "a", val_fraction=0.0)
    dm = DerainDataModule(
        transplant_gain=[0.8, 1.3],
        transplant_scale=[0.9, 1.1],
        transplant_angle=10,
        transplant_mix=0.2,
        rain_free_prob=0.1,
        **common,
    )
    dm.setup("fit")
    assert dm.train_set.datasets[-1].rain_free_prob == 0.1
    assert dm.train_set.datasets[-1].layer_augment == LayerAugment(
        gain=(0.8, 1.3), scale=(0.9, 1.1), angle=10.0, mix=0.2
    )
    with pytest.raises(DataError, match=r"transplant_gain must be a range \(low, high\) .* got \(1.3, 0.8\)"):
        DerainDataModule(transplant_gain=[1.3, 0.8], **common)
    with pytest.raises(DataError, match=r"transplant_mix must be a probability in \[0, 1\], got -0.1"):
        DerainDataModule(transplant_mix=-0.1, **common)
    with pytest.raises(DataError, match=r"rain_free_prob must be in \[0, 1\], got 2"):
        DerainDataModule(rain_free_prob=2, **common)


# -- overlap and name lists --------------------------------------------------------------------------------


def test_find_overlap_names_train_pairs_sharing_a_test_background(tmp_path: Path) -> None:
    for name, seed in [("norain-1.png", 11), ("norain-2.png", 2), ("norain-10.png", 12)]:
        write(tmp_path / "train" / "norain" / name, noise(seed=seed))
        write(tmp_path / "train" / "rain" / name, noise(seed=seed + 100))
    for name, seed in [("norain-001.png", 11), ("norain-002.png", 12), ("norain-003.png", 3)]:
        write(tmp_path / "test" / name, noise(seed=seed))
        write(tmp_path / "test" / name.replace("norain", "rain"), noise(seed=seed + 200))
    assert find_overlap(tmp_path / "train", tmp_path / "test") == ["1", "10"]


def test_name_list_ignores_comments_prefixes_and_zero_padding(tmp_path: Path) -> None:
    listing = tmp_path / "names.txt"
    listing.write_text("# header\nnorain-1.png\n  rain-010  # trailing comment\n\n0007.png\nabc\n")
    assert read_name_list(listing) == {"1", "10", "7", "abc"}


# -- DerainDataModule --------------------------------------------------------------------------------------


def test_missing_root_says_the_layout_and_the_synthetic_config(tmp_path: Path) -> None:
    missing = tmp_path / "datasets" / "Rain100H"
    with pytest.raises(
        DataError,
        match=r"(?s)Rain100H does not exist.*ROOT/train/\{rain,norain\}/.*ROOT/test/\{rain,norain\}/"
        r".*configs/synthetic\.yaml",
    ):
        DerainDataModule(root=str(missing))


def test_no_data_source_at_all_is_an_error() -> None:
    with pytest.raises(DataError, match="no training data.*synthetic"):
        DerainDataModule()


def test_synthetic_mode_needs_no_data_on_disk() -> None:
    dm = DerainDataModule(synthetic=True, synthetic_length=8, patch_size=32, batch_size=4, num_workers=0)
    dm.setup("fit")
    train_set = dm.train_set
    dm.setup("fit")  # idempotent
    assert dm.train_set is train_set and dm.train_pairs == [] and dm.val_pairs == []
    batch = next(iter(dm.train_dataloader()))
    assert batch["rain"].shape == batch["clean"].shape == (4, 3, 32, 32)
    assert batch["rain"].dtype == torch.float32 and len(batch["name"]) == 4
    val = list(dm.val_dataloader())
    assert len(val) == 8 and val[0]["rain"].shape == (1, 3, 256, 256)
    torch.testing.assert_close(
        val[3]["rain"], next(x for i, x in enumerate(dm.val_dataloader()) if i == 3)["rain"]
    )


def test_root_train_test_split_exclusion_and_transplant(tmp_path: Path) -> None:
    names = [f"{i}.png" for i in range(1, 11)]
    make_pairs(tmp_path / "root" / "train", names, names)
    make_pairs(tmp_path / "root" / "test", names[:3], names[:3])
    write(tmp_path / "clean" / "a" / "photo.png", noise(48, 48, seed=9))
    exclude = tmp_path / "overlap.txt"
    exclude.write_text("# shares a background with the test set\n0001\n")
    dm = DerainDataModule(
        root=str(tmp_path / "root"),
        exclude_list=str(exclude),
        clean_dirs=(str(tmp_path / "clean"),),
        synthetic_length=5,
        real_repeat=2,
        val_fraction=0.2,
        patch_size=16,
        batch_size=2,
        num_workers=0,
    )
    dm.setup()
    assert [p[0].name for p in dm.excluded_pairs] == ["1.png"]
    assert len(dm.val_pairs) == 2 and len(dm.train_pairs) == 7
    assert not {p[0] for p in dm.val_pairs} & {p[0] for p in dm.train_pairs}
    assert len(dm.train_set) == 7 * 2 + 5
    assert len(dm.test_pairs) == 3
    assert next(iter(dm.val_dataloader()))["rain"].shape == (1, 3, 24, 32)
    assert next(iter(dm.test_dataloader()))["clean"].shape == (1, 3, 24, 32)
    assert next(iter(dm.train_dataloader()))["rain"].shape == (2, 3, 16, 16)


def test_root_without_train_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"has no train/ folder"):
        DerainDataModule(root=str(tmp_path))


@pytest.mark.data
def test_real_rain100h_pairs_with_workers() -> None:
    need_shared_data(RAIN100H_MINI)
    dm = DerainDataModule(
        train_dirs=(str(RAIN100H_MINI),), patch_size=64, batch_size=4, num_workers=2, synthetic_length=0
    )
    dm.setup("fit")
    assert len(dm.train_pairs) + len(dm.val_pairs) == len(find_pairs(RAIN100H_MINI))
    assert len(dm.val_pairs) >= 1
    batches = list(itertools.islice(dm.train_dataloader(), 3))
    assert all(b["rain"].shape == (4, 3, 64, 64) for b in batches)
    # Rain100H is heavy rain: the rainy input is far from the clean image.
    val = next(iter(dm.val_dataloader()))
    assert set(val["rain"].shape[2:]) == {321, 481}
    mse = (val["rain"] - val["clean"]).pow(2).mean()
    assert 10 * torch.log10(1 / mse) < 25


def test_dataloader_workers_draw_different_random_streams(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    pairs = find_pairs(tmp_path) * 4  # the same pair four times: only the augmentation can tell items apart
    paired = PairedDataset(pairs, patch_size=16, augment=True)
    synthetic = SyntheticRainDataset([noise(64, 64)], length=4, patch_size=16)
    for data in (paired, synthetic):
        loader = torch.utils.data.DataLoader(data, batch_size=1, num_workers=2)
        items = {b["rain"].numpy().tobytes() for b in loader}
        assert len(items) == 4, f"{type(data).__name__}: workers repeated each other's random crops"

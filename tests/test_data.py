"""Pair discovery, checks with errors that name the files, aligned paired crops, synthetic data, DataModule."""

from __future__ import annotations

import itertools
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from helpers import SHARED_DATA, need_shared_data

from derain.data import (
    DerainDataModule,
    PairedDataset,
    PairSources,
    Synthesis,
    SyntheticRainDataset,
    content_signature,
    find_overlap,
    seed_worker,
)
from derain.pairing import DataError, check_pairs, find_pairs, read_name_list
from derain.synth import RAIN_STYLES, LayerAugment

RAIN100H_MINI = SHARED_DATA / "rain100h-train-mini"


def write(path: Path, image: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), image)
    return path


def noise(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def make_pairs(
    folder: Path,
    rain_names: list[str],
    clean_names: list[str],
    *,
    sub=("rain", "norain"),
    seed: int | None = None,
) -> Path:
    """Pairs of noise images; each folder's backgrounds differ from another's (seeded by its name) unless
    ``seed`` is given."""
    first = zlib.crc32(folder.name.encode()) % 10_000 * 100 if seed is None else seed
    for i, (r, c) in enumerate(zip(rain_names, clean_names, strict=True)):
        clean = noise(seed=first + i)
        write(folder / sub[1] / c if sub else folder / c, clean)
        write(folder / sub[0] / r if sub else folder / r, cv2.add(clean, 40))
    return folder


def small_synthetic_data(tmp_path: Path, *train_dirs: Path, synthesis: dict | None = None, **pairs) -> dict:
    """DerainDataModule options: pairs from ``train_dirs`` plus 4 synthetic 16² samples per epoch on one clean
    photo (written under ``tmp_path/clean``), batch 2, no worker processes; more ``PairSources``/``Synthesis``
    options in ``pairs``/``synthesis``."""
    write(tmp_path / "clean" / "photo.png", noise(48, 48, seed=9))
    return dict(
        pairs=PairSources(train_dirs=tuple(str(d) for d in train_dirs), **pairs),
        synthesis=Synthesis(clean_dirs=(str(tmp_path / "clean"),), length=4, **(synthesis or {})),
        patch_size=16,
        batch_size=2,
        num_workers=0,
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
    with pytest.raises(DataError, match=r"cannot read image .*norain/2\.png"):
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
    make_pairs(tmp_path / "b", names[:3], names[:3])  # other backgrounds: none leaves training
    split = dict(val_from=(str(tmp_path / "a"),), val_fraction=0.2)
    dm = DerainDataModule(
        **small_synthetic_data(
            tmp_path,
            tmp_path / "a",
            tmp_path / "b",
            synthesis={"transplant_from": (str(tmp_path / "a"),)},
            **split,
        )
    )
    dm.setup("fit")
    synthetic = dm.train_set.datasets[-1]
    assert len(dm.split.val) == 1 and len(synthetic.pair_layers) == 5 - 1
    everyone = DerainDataModule(**small_synthetic_data(tmp_path, tmp_path / "a", tmp_path / "b", **split))
    everyone.setup("fit")
    assert len(everyone.train_set.datasets[-1].pair_layers) == 5 - 1 + 3
    make_pairs(tmp_path / "c", names[:1], names[:1])  # pairs, but not training pairs
    other = {"transplant_from": (str(tmp_path / "c"),)}
    with pytest.raises(DataError, match=r"transplant_from .*/c'\]: none of these folders"):
        DerainDataModule(
            **small_synthetic_data(tmp_path, tmp_path / "a", tmp_path / "b", synthesis=other, **split)
        ).setup("fit")


def test_val_dirs_beside_val_from_validate_on_both(tmp_path: Path) -> None:
    names = [f"{i}.png" for i in range(1, 6)]
    make_pairs(tmp_path / "a", names, names)
    make_pairs(tmp_path / "v", names[:2], names[:2])  # other backgrounds than a's
    both = DerainDataModule(
        **small_synthetic_data(
            tmp_path,
            tmp_path / "a",
            val_dirs=(str(tmp_path / "v"),),
            val_from=(str(tmp_path / "a"),),
            val_fraction=0.4,
        )
    )
    both.setup("fit")
    folders = sorted(rain.parent.parent.name for rain, _ in both.split.val)
    assert folders == ["a", "a", "v", "v"]
    # the hold-out left training; the val_dirs pairs never joined
    assert len(both.train_set.datasets[0]) == 5 - 2
    alone = DerainDataModule(
        **small_synthetic_data(tmp_path, tmp_path / "a", val_dirs=(str(tmp_path / "v"),))
    )
    alone.setup("fit")  # val_dirs without val_from: those pairs only, every training pair trains
    assert len(alone.split.val) == 2 and len(alone.train_set.datasets[0]) == 5


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


def test_synthetic_validation_renders_the_training_rain() -> None:
    """With synthetic data only, the fixed validation crops get the procedural rain that training renders: the
    same composite β and styles (they used to get β = 0 and the default styles whatever the config said)."""
    synthesis = Synthesis(
        builtin_photos=True, length=4, val_length=2, composite_beta=0.3, procedural_styles=("rain100h",)
    )
    dm = DerainDataModule(synthesis=synthesis, patch_size=32, batch_size=2, num_workers=0)
    dm.setup("fit")
    train, val = dm.train_set, dm.val_set
    assert isinstance(val, SyntheticRainDataset) and val.fixed and len(val) == 2
    for options in (val.synthesis, train.synthesis):
        assert (options.composite_beta, options.procedural_styles) == (0.3, ("rain100h",))
    assert val.transplant_prob == 0.0  # procedural rain only


def test_layer_dirs_are_read_and_checked(tmp_path: Path) -> None:
    streaks = np.zeros((60, 70), np.uint8)
    streaks[:, ::7] = 90
    write(tmp_path / "layers" / "1-4.png", streaks)
    write(tmp_path / "layers" / "sub" / "2-4.png", np.dstack([streaks] * 3))
    options = small_synthetic_data(
        tmp_path,
        synthesis={"transplant_prob": 1.0, "layer_dirs": (str(tmp_path / "layers"),), "layer_share": 0.3},
    )
    dm = DerainDataModule(**options)
    dm.setup("fit")
    assert [layer.shape for layer in dm.train_set.rendered_layers] == [(60, 70, 1), (60, 70, 3)]
    assert dm.train_set.synthesis.layer_share == 0.3 and dm.train_set.transplant_prob == 1.0
    with pytest.raises(DataError, match=r"layer_share must be in \[0, 1\], got 1.5"):
        Synthesis(layer_share=1.5)
    with pytest.raises(DataError, match=r"rain layer folder .*nowhere \(layer_dirs\) does not exist"):
        Synthesis(layer_dirs=(str(tmp_path / "nowhere"),))
    (tmp_path / "empty").mkdir()
    options["synthesis"] = Synthesis(
        clean_dirs=(str(tmp_path / "clean"),), layer_dirs=(str(tmp_path / "empty"),)
    )
    with pytest.raises(DataError, match=r"rain layer folder .*empty \(layer_dirs\) holds no images"):
        DerainDataModule(**options).setup("fit")


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
    # Without rain-free items nothing extra is drawn: the stream is pinned (sums recorded on 2026-12-01, when
    # the crops moved to albumentations; a change here changes every recipe's data).
    assert [int((plain[i]["rain"] * 255).round().sum()) for i in range(4)] == [451651, 452612, 400222, 452966]
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


def test_synthesis_options_reach_the_synthetic_set(tmp_path: Path) -> None:
    make_pairs(tmp_path / "a", ["1.png", "2.png"], ["1.png", "2.png"])
    augment = LayerAugment(gain=(0.8, 1.3), scale=(0.9, 1.1), angle=10, mix=0.2)
    options = {"layer_augment": augment, "rain_free_prob": 0.1}
    dm = DerainDataModule(
        **small_synthetic_data(tmp_path, tmp_path / "a", synthesis=options, val_fraction=0.0)
    )
    dm.setup("fit")
    assert dm.train_set.datasets[-1].synthesis.rain_free_prob == 0.1
    assert dm.train_set.datasets[-1].synthesis.layer_augment == augment


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (dict(synthesis=Synthesis, transplant_prob=1.5), r"transplant_prob must be in \[0, 1\], got 1.5"),
        (dict(synthesis=Synthesis, rain_free_prob=2), r"rain_free_prob must be in \[0, 1\], got 2"),
        (dict(synthesis=Synthesis, length=-1), r"length and val_length must be >= 0, got -1"),
        (dict(synthesis=PairSources, val_fraction=1.0), r"val_fraction must be in \[0, 1\), got 1.0"),
        (dict(synthesis=PairSources, repeat=0), r"repeat must be at least 1, got 0"),
        (dict(synthesis=PairSources, train_dirs="a/b"), r"train_dirs must be a list of folders"),
    ],
)
def test_options_out_of_range_name_the_option_and_its_range(options: dict, match: str) -> None:
    group = options.pop("synthesis")
    with pytest.raises(DataError, match=match):
        group(**options)


def test_the_data_variable_is_expanded_and_an_unset_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_pairs(tmp_path / "a", ["1.png"], ["1.png"])
    monkeypatch.setenv("DERAIN_DATA", str(tmp_path))
    assert PairSources(train_dirs=("$DERAIN_DATA/a",)).train_folders() == [tmp_path / "a"]
    monkeypatch.delenv("DERAIN_DATA")
    with pytest.raises(DataError, match=r"train_dirs: \$DERAIN_DATA/a uses \$DERAIN_DATA, which is not set"):
        PairSources(train_dirs=("$DERAIN_DATA/a",))


# -- overlap and name lists --------------------------------------------------------------------------------


def _photo(seed: int, h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth random picture (photo-like: content at coarse scales, unlike white noise)."""
    small = np.random.default_rng(seed).integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def test_find_overlap_finds_test_backgrounds_by_content_in_any_orientation(tmp_path: Path) -> None:
    tests = {f"norain-{i:03d}.png": _photo(i) for i in range(1, 5)}
    for name, image in tests.items():
        write(tmp_path / "test" / name, image)
        write(tmp_path / "test" / name.replace("norain", "rain"), cv2.add(image, 30))
    train = {
        "1": tests["norain-001.png"],  # identical
        "2": np.ascontiguousarray(tests["norain-002.png"][:, ::-1]),  # flipped
        "3": np.ascontiguousarray(np.rot90(tests["norain-003.png"])),  # turned by 90°: another shape
        "4": cv2.imdecode(
            cv2.imencode(".jpg", tests["norain-004.png"], [cv2.IMWRITE_JPEG_QUALITY, 80])[1], 1
        ),
        "5": _photo(50),
        "6": _photo(60, 64, 48),
    }
    for name, image in train.items():
        write(tmp_path / "train" / "norain" / f"{name}.png", image)
        write(tmp_path / "train" / "rain" / f"{name}.png", cv2.add(image, 30))
    assert find_overlap(tmp_path / "train", tmp_path / "test") == ["1", "2", "3", "4"]


def test_name_list_ignores_comments_prefixes_and_zero_padding(tmp_path: Path) -> None:
    listing = tmp_path / "names.txt"
    listing.write_text("# header\nnorain-1.png\n  train/rain-010  # trailing comment\n\n0007.png\nx/y/abc\n")
    assert read_name_list(listing) == [((), "1"), (("train",), "10"), ((), "7"), (("x", "y"), "abc")]


def test_excluded_names_reach_only_their_own_folder(tmp_path: Path) -> None:
    names = [f"{i}.png" for i in range(1, 4)]
    make_pairs(tmp_path / "a" / "train", names, names)
    make_pairs(tmp_path / "b" / "train", names, names)
    make_pairs(tmp_path / "extra", names, names)
    listing = tmp_path / "exclude.txt"
    listing.write_text("extra/1\na/train/2\n")
    options = dict(val_fraction=0.0, exclude_list=str(listing))
    dm = DerainDataModule(
        **small_synthetic_data(
            tmp_path, tmp_path / "a/train", tmp_path / "b/train", tmp_path / "extra", **options
        )
    )
    dm.setup("fit")
    dropped = sorted(str(clean.relative_to(tmp_path)) for _, clean in dm.split.excluded)
    assert dropped == ["a/train/norain/2.png", "extra/norain/1.png"] and len(dm.split.train) == 9 - 2
    for text, match in [
        ("1\n", "bare pair names but there are 3"),
        ("train/1\n", "fits several"),
        ("zz/1\n", "names no"),
    ]:
        listing.write_text(text)
        with pytest.raises(DataError, match=match):
            DerainDataModule(
                **small_synthetic_data(
                    tmp_path, tmp_path / "a/train", tmp_path / "b/train", tmp_path / "extra", **options
                )
            ).setup("fit")


# -- DerainDataModule --------------------------------------------------------------------------------------


def test_missing_root_says_the_layout_and_the_synthetic_config(tmp_path: Path) -> None:
    missing = tmp_path / "datasets" / "Rain100H"
    with pytest.raises(
        DataError,
        match=r"(?s)Rain100H does not exist.*ROOT/train/\{rain,norain\}/.*ROOT/test/\{rain,norain\}/"
        r".*configs/synthetic\.yaml",
    ):
        PairSources(root=str(missing))


def test_no_data_source_at_all_is_an_error() -> None:
    with pytest.raises(DataError, match="no training data.*builtin_photos"):
        DerainDataModule()


def test_synthetic_mode_needs_no_data_on_disk() -> None:
    dm = DerainDataModule(
        synthesis=Synthesis(builtin_photos=True, length=8), patch_size=32, batch_size=4, num_workers=0
    )
    dm.setup("fit")
    train_set = dm.train_set
    dm.setup("fit")  # idempotent
    assert dm.train_set is train_set and dm.split.train == [] and dm.split.val == []
    batch = next(iter(dm.train_dataloader()))
    assert batch["rain"].shape == batch["clean"].shape == (4, 3, 32, 32)
    assert batch["rain"].dtype == torch.float32 and len(batch["name"]) == 4
    val = list(dm.val_dataloader())
    assert len(val) == 8 and val[0]["rain"].shape == (1, 3, 256, 256)
    torch.testing.assert_close(
        val[3]["rain"], next(x for i, x in enumerate(dm.val_dataloader()) if i == 3)["rain"]
    )


def test_root_train_test_split_overlap_exclusion_and_transplant(tmp_path: Path) -> None:
    for i in range(1, 11):  # rainy = clean + 40 (clean at most 127: nothing saturates)
        for split in (
            ("train", "test") if i <= 3 else ("train",)
        ):  # test 1-3 have the backgrounds of train 1-3
            clean = noise(seed=i) // 2
            write(tmp_path / "root" / split / "norain" / f"{i}.png", clean)
            write(tmp_path / "root" / split / "rain" / f"{i}.png", clean + 40)
    write(tmp_path / "clean" / "a" / "photo.png", noise(48, 48, seed=9) // 2)
    exclude = tmp_path / "overlap.txt"
    exclude.write_text("# by hand\n0004\n")
    options = dict(
        synthesis=Synthesis(
            clean_dirs=(str(tmp_path / "clean"),), length=5, transplant_prob=1.0, composite_beta=0.0
        ),
        patch_size=16,
        batch_size=2,
        num_workers=0,
    )
    pairs = dict(root=str(tmp_path / "root"), exclude_list=str(exclude), repeat=2, val_fraction=0.2)
    dm = DerainDataModule(pairs=PairSources(**pairs), **options)
    dm.setup()
    assert [p[0].name for p in dm.split.excluded] == ["4.png"]
    assert [p[0].name for p in dm.split.test_overlap] == ["1.png", "2.png", "3.png"]  # found by content
    assert len(dm.split.val) == 1 and len(dm.split.train) == 5
    assert not {p[0] for p in dm.split.val} & {p[0] for p in dm.split.train}
    assert len(dm.train_set) == 5 * 2 + 5
    assert len(dm.test_pairs) == 3
    assert next(iter(dm.val_dataloader()))["rain"].shape == (1, 3, 24, 32)
    assert next(iter(dm.test_dataloader()))["clean"].shape == (1, 3, 24, 32)
    assert next(iter(dm.train_dataloader()))["rain"].shape == (2, 3, 16, 16)
    # Transplant (added, composite_beta 0): the synthetic samples carry the training pairs' rain layers (+40
    # everywhere, on a photo no brighter than 127), so rainy - clean is 40 grey levels at every pixel.
    synthetic = dm.train_set.datasets[-1]
    assert len(synthetic.pair_layers) == 5 and all((r == 40).all() for r in synthetic.pair_layers)
    for i in range(5):
        item = synthetic[i]
        torch.testing.assert_close(
            item["rain"] - item["clean"], torch.full((3, 16, 16), 40 / 255), atol=1e-6, rtol=0
        )
    kept = DerainDataModule(pairs=PairSources(**pairs, drop_test_overlap=False), **options)
    kept.setup("fit")
    assert kept.split.test_overlap == [] and len(kept.split.train) + len(kept.split.val) == 9


def test_root_without_train_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"has no train/ folder"):
        PairSources(root=str(tmp_path))


@pytest.mark.data
def test_real_rain100h_pairs_with_workers() -> None:
    need_shared_data(RAIN100H_MINI)
    dm = DerainDataModule(pairs=PairSources(train_dirs=(str(RAIN100H_MINI),)), patch_size=64, batch_size=4)
    dm.setup("fit")
    assert len(dm.split.train) + len(dm.split.val) == len(find_pairs(RAIN100H_MINI))
    assert len(dm.split.val) >= 1
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
        loader = torch.utils.data.DataLoader(data, batch_size=1, num_workers=2, worker_init_fn=seed_worker)
        items = {b["rain"].numpy().tobytes() for b in loader}
        assert len(items) == 4, f"{type(data).__name__}: workers repeated each other's random crops"


def test_clean_photos_that_show_a_held_out_or_test_image_are_dropped(tmp_path: Path) -> None:
    for i in range(1, 5):  # train pairs 1-4 (rainy = clean + 40); test pair 9
        write(tmp_path / "root" / "train" / "norain" / f"{i}.png", _photo(i))
        write(tmp_path / "root" / "train" / "rain" / f"{i}.png", cv2.add(_photo(i), 40))
    write(tmp_path / "root" / "test" / "norain" / "9.png", _photo(9))
    write(tmp_path / "root" / "test" / "rain" / "9.png", cv2.add(_photo(9), 40))
    # the photo pool holds every background: a turned one of each training pair, the test one, and one other
    for i in (1, 2, 3, 4, 9):
        write(tmp_path / "clean" / f"{i}.png", np.ascontiguousarray(np.rot90(_photo(i))))
    write(tmp_path / "clean" / "other.png", _photo(77))
    pairs = PairSources(root=str(tmp_path / "root"), val_fraction=0.5)
    dm = DerainDataModule(
        pairs=pairs,
        synthesis=Synthesis(clean_dirs=(str(tmp_path / "clean"),), length=4),
        patch_size=16,
        batch_size=2,
        num_workers=0,
    )
    dm.setup("fit")
    held = {p[1].name for p in dm.split.val}
    assert len(held) == 2 and dm.pool.dropped_photos == 3  # the two held-out backgrounds and the test one
    kept = {content_signature(im).tobytes() for im in dm.pool.photos}
    for name in [*held, "9.png"]:
        assert content_signature(np.ascontiguousarray(np.rot90(_photo(int(name[0]))))).tobytes() not in kept
    assert len(dm.pool.photos) == 3


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


def test_exclude_list_names_that_match_nothing_are_reported(tmp_path: Path, caplog) -> None:
    make_pairs(tmp_path / "a", ["1.png", "2.png"], ["1.png", "2.png"])
    (tmp_path / "exclude.txt").write_text("a/1\na/7\n")
    options = dict(val_fraction=0.0, exclude_list=str(tmp_path / "exclude.txt"))
    dm = DerainDataModule(**small_synthetic_data(tmp_path, tmp_path / "a", **options))
    with caplog.at_level("WARNING"):
        dm.setup("fit")
    assert len(dm.split.excluded) == 1 and "no pair named 7" in caplog.text


def test_procedural_styles_pick_the_rain_and_are_checked(tmp_path: Path) -> None:
    """``procedural_styles`` reaches the procedural items (and the device renderer); the default keeps the
    random stream of ``"any"``; unknown names are an error naming the option and the styles there are."""
    photo = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)

    def items(styles):
        synthesis = Synthesis() if styles is None else Synthesis(procedural_styles=styles)
        data = SyntheticRainDataset([photo], length=4, patch_size=48, seed=3, fixed=True, synthesis=synthesis)
        return torch.stack([data[i]["rain"] for i in range(4)])

    default, fitted = items(None), items(["rain100h"])
    assert torch.equal(default, items(None)) and torch.equal(fitted, items(["rain100h"]))  # seeded
    assert not torch.equal(default, fitted)
    options = small_synthetic_data(tmp_path, synthesis={"procedural_styles": ("rain100h",)})
    dm = DerainDataModule(**options)
    dm.setup("fit")
    assert dm.train_set.synthesis.procedural_styles == ("rain100h",)
    options = small_synthetic_data(
        tmp_path, synthesis={"render_on_device": True, "procedural_styles": ("heavy",)}
    )
    dm = DerainDataModule(**options)
    dm.setup("fit")
    batch = {
        "rain": torch.zeros(2, 3, 32, 32),
        "clean": torch.full((2, 3, 32, 32), 0.4),
        "render": torch.ones(2, dtype=torch.bool),
    }
    dm.on_after_batch_transfer(batch, 0)
    assert dm._batch_rain.styles == (RAIN_STYLES["heavy"],)
    with pytest.raises(
        DataError,
        match=r"procedural_styles must name one or more of light, medium, heavy, rain100h; got \['drizzle'\] \('drizzle' unknown\)",
    ):
        Synthesis(procedural_styles=("drizzle",))
    with pytest.raises(DataError, match=r"procedural_styles must name one or more"):
        Synthesis(procedural_styles=())
    assert Synthesis(procedural_styles="heavy").procedural_styles == ("heavy",)  # one name: a tuple of one


def test_val_from_holds_out_a_seeded_share_of_each_folder(tmp_path: Path) -> None:
    make_pairs(tmp_path / "heavy", [f"{i}.png" for i in range(10)], [f"{i}.png" for i in range(10)])
    make_pairs(tmp_path / "light", [f"{i}.png" for i in range(20)], [f"{i}.png" for i in range(20)])
    folders = (tmp_path / "heavy", tmp_path / "light")
    split = dict(val_from=tuple(str(f) for f in folders), val_fraction=0.2)
    both = DerainDataModule(**small_synthetic_data(tmp_path, *folders, **split))
    both.setup("fit")
    held = sorted((r.parent.parent.name, r.name) for r, _ in both.split.val)
    assert [f for f, _ in held].count("heavy") == 2 and [f for f, _ in held].count("light") == 4
    assert not {r for r, _ in both.split.val} & {r for r, _ in both.split.train}
    # a val_from folder that does not train gives the same share to validation, and nothing to training
    heavy_only = DerainDataModule(**small_synthetic_data(tmp_path, tmp_path / "heavy", **split))
    heavy_only.setup("fit")
    assert sorted((r.parent.parent.name, r.name) for r, _ in heavy_only.split.val) == held
    assert {r.parent.parent.name for r, _ in heavy_only.split.train} == {"heavy"}
    # validation items name their data set, so validation can report each apart
    assert sorted({item["set"] for item in both.val_set}) == ["heavy", "light"]
    assert {both.train_set[i]["set"] for i in range(len(both.train_set))} <= {"", "heavy", "light"}


def test_training_pairs_showing_a_validation_background_leave_training(tmp_path: Path, caplog) -> None:
    names = [f"{i}.png" for i in range(5)]
    make_pairs(tmp_path / "a", names, names, seed=0)
    make_pairs(tmp_path / "b", names, names, seed=0)  # b/N shows a/N's background under other rain
    dm = DerainDataModule(
        **small_synthetic_data(
            tmp_path, tmp_path / "a", tmp_path / "b", val_from=(str(tmp_path / "a"),), val_fraction=0.4
        )
    )
    dm.setup("fit")
    held = sorted(r.name for r, _ in dm.split.val)
    assert len(held) == 2 and sorted(r.name for r, _ in dm.split.val_background) == held
    assert {r.parent.parent.name for r, _ in dm.split.val_background} == {"b"}
    assert len(dm.split.train) == 10 - 2 - 2
    assert "dropped 2 of 8 training pairs whose clean image shows a validation image" in caplog.text


def test_transplant_shares_give_each_donor_folder_its_share(tmp_path: Path) -> None:
    make_pairs(tmp_path / "heavy", ["1.png", "2.png"], ["1.png", "2.png"])
    make_pairs(tmp_path / "light", [f"{i}.png" for i in range(6)], [f"{i}.png" for i in range(6)])
    folders = (str(tmp_path / "heavy"), str(tmp_path / "light"))
    options = {"transplant_from": folders, "transplant_shares": (0.75, 0.25), "transplant_prob": 1.0}
    dm = DerainDataModule(
        **small_synthetic_data(tmp_path, *map(Path, folders), synthesis=options, val_fraction=0.0)
    )
    dm.setup("fit")
    synthetic = dm.train_set.datasets[-1]
    np.testing.assert_allclose(synthetic.pair_layer_weights, [0.375] * 2 + [0.25 / 6] * 6)
    # the draws follow the weights: heavy layers three times in four
    rng = np.random.default_rng(0)
    picks = [rng.choice(len(synthetic.pair_layers), p=synthetic.pair_layer_weights) for _ in range(4000)]
    assert abs(np.mean(np.asarray(picks) < 2) - 0.75) < 0.03
    assert synthetic[0]["rain"].shape == (3, 16, 16)


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        ((1.0,), r"transplant_shares \[1.0\] must give one share in \[0, 1\] for each of the 2"),
        ((0.5, 0.6), r"transplant_shares \[0.5, 0.6\] must sum to 1, got 1.1"),
        ((1.5, -0.5), r"must give one share in \[0, 1\]"),
    ],
)
def test_transplant_shares_out_of_range_name_the_option(tmp_path: Path, shares, message) -> None:
    with pytest.raises(DataError, match=message):
        Synthesis(transplant_from=(str(tmp_path / "a"), str(tmp_path / "b")), transplant_shares=shares)

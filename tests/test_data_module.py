"""``DerainDataModule``: the split and the pool it builds put together into the training, validation and test sets and
their loaders; the procedural rain of a batch drawn on its device."""

from __future__ import annotations

import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from data_helpers import make_pairs, noise, numbered, photo, small_synthetic_data, write
from helpers import SHARED_DATA, need_shared_data

from derain.data import DerainDataModule, PairSources, Synthesis, SyntheticRainDataset, content_signature
from derain.pairing import DataError, find_pairs
from derain.synth import RAIN_STYLES, LayerAugment

RAIN100H_MINI = SHARED_DATA / "rain100h-train-mini"


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


def test_clean_photos_that_show_a_held_out_or_test_image_are_dropped(tmp_path: Path) -> None:
    for i in range(1, 5):  # train pairs 1-4 (rainy = clean + 40); test pair 9
        write(tmp_path / "root" / "train" / "norain" / f"{i}.png", photo(i))
        write(tmp_path / "root" / "train" / "rain" / f"{i}.png", cv2.add(photo(i), 40))
    write(tmp_path / "root" / "test" / "norain" / "9.png", photo(9))
    write(tmp_path / "root" / "test" / "rain" / "9.png", cv2.add(photo(9), 40))
    # the photo pool holds every background: a turned one of each training pair, the test one, and one other
    for i in (1, 2, 3, 4, 9):
        write(tmp_path / "clean" / f"{i}.png", np.ascontiguousarray(np.rot90(photo(i))))
    write(tmp_path / "clean" / "other.png", photo(77))
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

    def shown(seed: int) -> bytes:  # the photo as the pool reads it: turned, and RGB (cv2 wrote BGR)
        return content_signature(np.ascontiguousarray(np.rot90(photo(seed))[..., ::-1])).tobytes()

    assert kept == {shown(i) for i in range(1, 5) if f"{i}.png" not in held} | {
        content_signature(np.ascontiguousarray(photo(77)[..., ::-1])).tobytes()
    }
    assert len(dm.pool.photos) == 3


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


def test_layer_dirs_and_transplant_shares_reach_the_synthetic_set(tmp_path: Path) -> None:
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
    assert dm.train_set.rendered_layers == dm.pool.rendered_layers
    assert dm.train_set.synthesis.layer_share == 0.3 and dm.train_set.transplant_prob == 1.0
    assert dm.train_set.rendered_layer_real == [False, False]
    write(tmp_path / "real" / "3-4.png", streaks)  # a real photo's rain, marked so by its folder
    real = {"transplant_prob": 1.0, "layer_dirs": (str(tmp_path / "layers"), str(tmp_path / "real"))}
    dm = DerainDataModule(
        **small_synthetic_data(tmp_path, synthesis={**real, "real_layer_dirs": (str(tmp_path / "real"),)})
    )
    dm.setup("fit")
    assert dm.pool.rendered_layer_real == dm.train_set.rendered_layer_real == [False, False, True]
    batch = next(iter(dm.train_dataloader()))
    assert batch["real_rain"].dtype == torch.bool and len(batch["real_rain"]) == len(batch["rain"])
    make_pairs(tmp_path / "heavy", numbered(2, start=1), numbered(2, start=1))
    make_pairs(tmp_path / "light", numbered(6), numbered(6))
    folders = (str(tmp_path / "heavy"), str(tmp_path / "light"))
    shares = {"transplant_from": folders, "transplant_shares": (0.75, 0.25), "transplant_prob": 1.0}
    dm = DerainDataModule(
        **small_synthetic_data(tmp_path, *map(Path, folders), synthesis=shares, val_fraction=0.0)
    )
    dm.setup("fit")
    synthetic = dm.train_set.datasets[-1]
    np.testing.assert_allclose(synthetic.pair_layer_weights, [0.375] * 2 + [0.25 / 6] * 6)
    assert synthetic[0]["rain"].shape == (3, 16, 16)


def test_validation_sets_hold_out_of_training_and_name_their_data_set(tmp_path: Path) -> None:
    make_pairs(tmp_path / "a", numbered(5, start=1), numbered(5, start=1))
    make_pairs(tmp_path / "v", numbered(2, start=1), numbered(2, start=1))  # other backgrounds than a's
    options = dict(val_dirs=(str(tmp_path / "v"),), val_from=(str(tmp_path / "a"),), val_fraction=0.4)
    both = DerainDataModule(**small_synthetic_data(tmp_path, tmp_path / "a", **options))
    both.setup("fit")
    assert len(both.val_set) == len(both.split.val) == 4
    assert len(both.train_set.datasets[0]) == len(both.split.train) == 5 - 2  # the hold-out left training
    # validation items name their data set, so validation can report each apart
    assert sorted(item["set"] for item in both.val_set) == ["a", "a", "v", "v"]
    assert {both.train_set[i]["set"] for i in range(len(both.train_set))} == {""}
    alone = DerainDataModule(
        **small_synthetic_data(tmp_path, tmp_path / "a", val_dirs=(str(tmp_path / "v"),))
    )
    alone.setup("fit")  # val_dirs without val_from: those pairs only, every training pair trains
    assert len(alone.val_set) == 2 and len(alone.train_set.datasets[0]) == 5


def test_the_device_renders_the_deferred_procedural_rain(tmp_path: Path) -> None:
    options = small_synthetic_data(
        tmp_path, synthesis={"render_on_device": True, "procedural_styles": ("heavy",)}
    )
    dm = DerainDataModule(**options)
    dm.setup("fit")
    assert dm.train_set.synthesis.procedural_styles == ("heavy",)
    batch = {
        "rain": torch.zeros(2, 3, 32, 32),
        "clean": torch.full((2, 3, 32, 32), 0.4),
        "render": torch.tensor([True, False]),
    }
    dm.on_after_batch_transfer(batch, 0)
    assert dm._batch_rain.styles == (RAIN_STYLES["heavy"],)
    assert batch["rain"][0].min() >= 0.4 - 1e-6 and batch["rain"][0].max() > 0.5  # rain, never darker
    assert torch.equal(batch["rain"][0], torch.round(batch["rain"][0] * 255) / 255)  # 8 bits
    assert not batch["rain"][1].any()  # not marked: left as it came


def test_set_up_options_out_of_range_are_named(tmp_path: Path) -> None:
    options = small_synthetic_data(tmp_path)
    for name, value, match in [
        ("patch_size", 0, "patch_size must be at least 1, got 0"),
        ("batch_size", 0, "batch_size must be at least 1, got 0"),
        ("num_workers", -1, "num_workers must be >= 0, got -1"),
    ]:
        with pytest.raises(DataError, match=match):
            DerainDataModule(**{**options, name: value})
    with pytest.raises(DataError, match="only 4 training samples for batch_size 8"):
        DerainDataModule(**{**options, "batch_size": 8}).setup("fit")

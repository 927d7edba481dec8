"""tools/generators.py, the generator-fidelity benchmark: its arms' configs and its errors (the training runs
themselves are research, minutes each, not tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import SHARED_DATA, need_shared_data
from test_real_rain import tool

from derain.io import list_images

generators = tool("generators")


def test_a_missing_data_folder_is_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "rain100h-train-mini").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        generators.main([str(tmp_path / "out"), "--data", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"{tmp_path / 'rain200h-test-samples'} is missing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written


def test_an_unknown_arm_names_the_choices(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        generators.main([str(tmp_path), "--data", str(tmp_path), "--arms", "hail"])
    assert exit_info.value.code == 2
    assert "unknown arm(s) ['hail']: expected real14 or styles" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        generators.main([str(tmp_path), "--data", str(tmp_path), "--dim", "4"])
    assert exit_info.value.code == 2
    assert "--dim >= 8, got 800, 8, 128, 4" in capsys.readouterr().err


def test_generated_arms_see_no_real_heavy_layer_and_the_reference_sees_14(tmp_path: Path) -> None:
    need_shared_data(SHARED_DATA / "rain200h-test-samples")
    args = generators.parse_args([str(tmp_path), "--data", str(SHARED_DATA)])
    photos = tmp_path / "photos"
    layered = generators.arm_config("layered", SHARED_DATA, photos, tmp_path / "layered", args)
    pairs, synthesis = layered["data"]["pairs"], layered["data"]["synthesis"]
    assert "train_dirs" not in pairs and synthesis["transplant_prob"] == 0.0
    assert synthesis["procedural_styles"] == ["layered"] and synthesis["clean_dirs"] == [str(photos)]
    assert layered["seed_everything"] == layered["data"]["seed"] == 0
    assert layered["model"]["net"]["init_args"] == {"dim": 24}  # the shipped width unless --dim
    other = generators.parse_args([str(tmp_path), "--data", str(SHARED_DATA), "--seed", "1"])
    seeded = generators.arm_config("layered", SHARED_DATA, photos, tmp_path / "layered", other)
    assert seeded["seed_everything"] == seeded["data"]["seed"] == 1  # other weights, other rain
    wide = generators.parse_args([str(tmp_path), "--data", str(SHARED_DATA), "--dim", "40"])
    assert generators.arm_config("layered", SHARED_DATA, photos, tmp_path / "w", wide)["model"]["net"] == {
        "class_path": "derain.models.DerainNet",
        "init_args": {"dim": 40},
    }
    (tmp_path / "layered").mkdir()
    (tmp_path / "layered" / "config.yaml").write_text(yaml.safe_dump(layered, sort_keys=False))
    with pytest.raises(SystemExit, match="holds another budget, seed or data than this run asks for"):
        generators.train("layered", SHARED_DATA, photos, tmp_path, other)  # --seed 1 over a seed-0 arm
    seeded_reference = generators.arm_config("real14", SHARED_DATA, photos, tmp_path / "real14", other)
    assert seeded_reference["data"]["seed"] == 0  # the recipe's hold-out stays
    mixed = generators.arm_config("rain100h+layered", SHARED_DATA, photos, tmp_path / "mixed", args)
    assert mixed["data"]["synthesis"]["procedural_styles"] == ["rain100h", "layered"]  # one drawn per sample
    reference = generators.arm_config("real14", SHARED_DATA, photos, tmp_path / "real14", args)
    mini = str(SHARED_DATA / "rain100h-train-mini")
    assert reference["data"]["pairs"]["train_dirs"] == reference["data"]["pairs"]["val_from"] == [mini]
    assert reference["data"]["synthesis"]["transplant_from"] == [mini]
    honest = generators.honest_names(SHARED_DATA)
    assert [len(v) for v in honest.values()] == [4, 3]  # the 7 pairs no arm trains on


def test_the_photos_leave_out_every_heavy_background(tmp_path: Path) -> None:
    need_shared_data(SHARED_DATA / "clean" / "bsds500-leakfree")
    folder, kept, left = generators.photo_folder(SHARED_DATA, tmp_path)
    photos = list_images(SHARED_DATA / generators.PHOTOS, recursive=True)
    assert left >= 9 and kept + left == len(photos)  # 9 of Rain100H's 18 backgrounds are BSDS photos
    assert len(list(folder.iterdir())) == kept

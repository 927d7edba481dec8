"""tools/architectures.py, the equal-data architecture benchmark: its arms, configs, the equal-CPU-time step, the
table and its errors; one ``--quick`` smoke run (slow, on the shared data)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from helpers import SHARED_DATA, need_shared_data
from test_real_rain import tool

from derain.models import DerainNet

architectures = tool("architectures")


def test_a_missing_data_folder_is_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "raintrainl").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        architectures.main([str(tmp_path / "out"), "--data", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"{tmp_path / 'rain200l-samples'} is missing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unknown_arms_and_uneven_budgets_are_usage_errors(tmp_path: Path, capsys) -> None:
    for argv, message in (
        (["--arms", "base", "huge"], "unknown arm(s) ['huge']"),
        (["--steps", "10"], "--steps must be under 4 or a multiple of 4"),
        (["--arms", "base", "base"], "an arm is named twice"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            architectures.main([str(tmp_path), "--data", str(tmp_path), *argv])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_seconds_a_step_counts_training_time_not_file_times(tmp_path: Path) -> None:
    """A resumed arm's quarter checkpoints are written hours apart; the Timer's count leaves the gap out."""
    (tmp_path / "checkpoints").mkdir()
    for step, seconds, mtime in ((2, 10.0, 5_000_000), (8, 40.0, 1_000), (5, 99.0, 9_000_000)):
        path = tmp_path / "checkpoints" / f"best-{step}.ckpt"
        torch.save({"state_dict": {}, "callbacks": {"Timer": {"time_elapsed": {"train": seconds}}}}, path)
        os.utime(path, (mtime, mtime))
    assert architectures.seconds_a_step(tmp_path) == pytest.approx(5.0)  # (40 - 10) / (8 - 2)
    torch.save({"state_dict": {}}, tmp_path / "checkpoints" / "best-8.ckpt")  # a run without a Timer
    assert architectures.seconds_a_step(tmp_path) is None
    for name in (architectures.LIGHT, architectures.RAIN200L, architectures.PHOTOS):
        (tmp_path / "data" / name).mkdir(parents=True)
    args = architectures.parse_args([str(tmp_path / "out"), "--data", str(tmp_path / "data")])
    config = architectures.arm_config("base", tmp_path / "data", tmp_path / "out" / "base", args)
    assert architectures.TIMER in config["trainer"]["callbacks"]


def test_every_arm_builds_and_differs_from_base() -> None:
    sizes = {}
    for arm in architectures.ARMS:
        net = DerainNet(**architectures.net_args(arm))
        sizes[arm] = sum(p.numel() for p in net.parameters())
    assert sizes["loss-fft"] == sizes["base"] and architectures.ARMS["loss-fft"]["loss"] == "charbonnier+fft"
    assert abs(sizes["stride1-d24"] - sizes["base"]) < 5000  # nearly the same weights at twice the resolution
    assert sizes["stride1-d16"] < sizes["base"] < sizes["fullres"] < sizes["fullres2"]
    assert sizes["base"] < sizes["d32"] < sizes["d48"] and sizes["base"] < sizes["blocks2444"]


def test_an_arm_trains_on_raintrainl_with_its_hold_out_out(tmp_path: Path) -> None:
    need_shared_data(SHARED_DATA / "raintrainl")
    args = architectures.parse_args([str(tmp_path), "--data", str(SHARED_DATA), "--precision", "32"])
    assert (args.steps, args.batch, args.patch, args.jobs, args.workers) == (800, 8, 128, 1, 2)
    config = architectures.arm_config("fullres2", SHARED_DATA, tmp_path / "fullres2", args)
    light = str(SHARED_DATA / "raintrainl")
    pairs, synthesis = config["data"]["pairs"], config["data"]["synthesis"]
    assert pairs["train_dirs"] == pairs["val_from"] == synthesis["transplant_from"] == [light]
    assert pairs["val_fraction"] == 0.2 and config["data"]["seed"] == config["seed_everything"] == 0
    assert synthesis["clean_dirs"] == [str(SHARED_DATA / "clean" / "bsds500-leakfree")]
    assert config["trainer"]["accelerator"] == "auto" and config["trainer"]["val_check_interval"] == 200
    assert config["model"]["net"]["init_args"] == {"full_res_mixers": ["tksa", "agent"], "full_res_dim": 16}
    assert yaml.safe_load(yaml.safe_dump(config)) == config  # plain YAML
    assert len(architectures.held_out(SHARED_DATA / "raintrainl")) == 40
    (tmp_path / "fullres2").mkdir()
    (tmp_path / "fullres2" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    other = architectures.parse_args([str(tmp_path), "--data", str(SHARED_DATA), "--steps", "400"])
    with pytest.raises(SystemExit, match="holds another budget, seed or data"):
        architectures.train("fullres2", SHARED_DATA, tmp_path, other)


def test_heavy_arms_train_on_generated_rain_and_score_the_21_heavy_pairs(tmp_path: Path, capsys) -> None:
    for name in ("rain100h-train-mini", "rain200h-test-samples", "clean/bsds500-leakfree"):
        need_shared_data(SHARED_DATA / name)
    args = architectures.parse_args([str(tmp_path), "--data", str(SHARED_DATA), "--rain", "heavy"])
    config = architectures.arm_config("base", SHARED_DATA, tmp_path / "base", args)
    pairs, synthesis = config["data"]["pairs"], config["data"]["synthesis"]
    assert "train_dirs" not in pairs and synthesis["transplant_prob"] == 0.0  # no real pair or layer
    assert synthesis["procedural_styles"] == ["rain100h", "layered"]
    assert pairs["val_dirs"] == [
        str(SHARED_DATA / n) for n in ("rain100h-train-mini", "rain200h-test-samples")
    ]
    assert synthesis["clean_dirs"] == [str(tmp_path / "photos")]  # the pool less the 21 pairs' backgrounds
    text = architectures.table({"base": {"heavy21": 24.0, "s_per_step": None}}, 800, "heavy")
    assert (
        "generated heavy rain (rain100h+layered)" in text and "| base | — | — | — | — | 24.00 | — |" in text
    )
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    light = architectures.parse_args([str(tmp_path), "--data", str(SHARED_DATA)])
    with pytest.raises(SystemExit, match="holds another budget, seed or data"):  # one OUT, one --rain
        architectures.train("base", SHARED_DATA, tmp_path, light)


def test_equal_cpu_time_takes_the_last_quarter_within_the_first_arms_budget() -> None:
    steps = [200, 400, 600, 800]
    assert architectures.equal_cpu_step(steps, 1.0, 800 * 1.0) == 800
    assert architectures.equal_cpu_step(steps, 2.0, 800 * 1.0) == 400  # twice as costly: half the steps
    assert architectures.equal_cpu_step(steps, 1.5, 800 * 1.0) == 400  # 533 allowed: the quarter below
    assert architectures.equal_cpu_step(steps, 5.0, 800 * 1.0) is None  # not even the first quarter fits


def test_the_table_shows_every_column() -> None:
    d = {"mean": 0.5, "ci95": [0.1, 0.9], "std": 0.2, "wins": 30, "n": 40}
    summary = {
        "base": {"raintrainl40": 30.0, "rain200l3": 31.0, "s_per_step": 0.05, "params": 100, "infer_yd": 1.0,
                 "step_yd": 2.0, "equal_cpu_step": 800, "equal_cpu": 30.0},
        "d32": {"raintrainl40": 30.5, "rain200l3": 31.5, "s_per_step": None, "d_raintrainl40": d,
                "d_rain200l3": d},
    }  # fmt: skip
    text = architectures.table(summary, 800, "light")
    assert "| base | 100 | 1.00 | 2.00 | 0.050 | 30.00 | — | 31.00 | — | 30.00 | 800 |" in text
    assert (
        "| d32 | — | — | — | — | 30.50 | +0.50 [+0.10, +0.90] | 31.50 | +0.50 [+0.10, +0.90] | — | — |"
        in text
    )


@pytest.mark.slow
def test_quick_trains_two_arms_and_writes_the_table(tmp_path: Path, capsys) -> None:
    need_shared_data(SHARED_DATA / "raintrainl")
    assert architectures.main([str(tmp_path), "--data", str(SHARED_DATA), "--quick", "--no-costs"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["arms"]) == ["base", "loss-fft"] and summary["steps"] == 3
    assert summary["arms"]["base"]["saved_steps"] == [1, 2, 3]
    assert summary["arms"]["base"]["s_per_step"] > 0  # the runs' Timer counted
    assert "d_raintrainl40" in summary["arms"]["loss-fft"]
    assert (tmp_path / "table.md").read_text() in capsys.readouterr().out
    assert (tmp_path / "base" / "model.safetensors").is_file()

"""`python -m derain.fit --config NAME`: bundled config names from any folder, in a checkout and installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from derain.cli import main as derain_main
from derain.fit import ConfigNotFoundError, Start, how_to_start, resolve_config_args
from derain.fit import main as fit_main

REPO = Path(__file__).resolve().parents[1]


def printed_config(args: list[str], capsys) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        fit_main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def test_a_bare_config_name_works_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = printed_config(["--config", "rain100h.yaml"], capsys)
    assert config["trainer"]["default_root_dir"] == "runs/rain100h"
    # --config=NAME, names in sub-folders, stages layered, and the README's configs/NAME from another folder
    config = printed_config(
        ["--config=derain-small/stage1.yaml", "--config", "configs/derain-small/stage2-augment.yaml"], capsys
    )
    assert config["data"]["synthesis"]["layer_augment"]["angle"] == 12.0


def test_an_existing_path_wins_over_the_bundled_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rain100h.yaml").write_text("trainer:\n  default_root_dir: runs/mine\n")
    assert printed_config(["--config", "rain100h.yaml"], capsys)["trainer"]["default_root_dir"] == "runs/mine"


def test_names_with_sub_folders_and_inline_yaml(tmp_path, monkeypatch):
    bundled = tmp_path / "bundled"
    (bundled / "derain-small").mkdir(parents=True)
    (bundled / "derain-small" / "stage1.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    stage1 = str(bundled / "derain-small" / "stage1.yaml")
    assert resolve_config_args(["--config", "derain-small/stage1.yaml", "-c", "x: 1"], bundled) == [
        "--config",
        stage1,
        "-c",
        "x: 1",
    ]
    assert resolve_config_args(["--config=derain-small/stage1.yaml", "--data.root=a.yaml"], bundled) == [
        f"--config={stage1}",
        "--data.root=a.yaml",
    ]


def test_an_unknown_config_name_says_which_configs_ship(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigNotFoundError, match=r"rain100x\.yaml.*rain100h\.yaml.*synthetic\.yaml"):
        resolve_config_args(["--config", "rain100x.yaml"])
    assert fit_main(["--config", "rain100x.yaml"]) == 2
    err = capsys.readouterr().err
    assert (
        "error: --config rain100x.yaml" in err
        and "derain-small/stage1.yaml" in err
        and "Traceback" not in err
    )


def test_the_usage_line_names_the_module(capsys):
    with pytest.raises(SystemExit):
        fit_main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m derain.fit ")


def test_how_a_run_starts_is_one_function_of_its_options(tmp_path: Path) -> None:
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert how_to_start("auto", None, last) == Start()  # afresh
    assert how_to_start("auto", "w.safetensors", last) == Start(fine_tune_from="w.safetensors")
    assert how_to_start("never", "w.safetensors", last) == Start(fine_tune_from="w.safetensors")
    last.parent.mkdir()
    last.touch()
    # a run that resumes takes its weights from the checkpoint: init_weights is not read
    assert how_to_start("auto", "w.safetensors", last) == Start(resume_from=str(last), found_last=True)
    assert how_to_start("never", None, last) == Start()
    assert how_to_start("other.ckpt", "w.safetensors", last) == Start(resume_from="other.ckpt")


def test_the_command_line_is_read_not_rewritten(monkeypatch, capsys) -> None:
    argv = ["derain", "fit", "--config", "synthetic.yaml", "--print_config"]
    monkeypatch.setattr(sys, "argv", list(argv))
    with pytest.raises(SystemExit):
        derain_main(argv[1:])
    assert sys.argv == argv and "trainer:" in capsys.readouterr().out

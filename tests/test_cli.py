"""The ``derain`` command: one front door to the commands, each with the options it has as
``python -m derain.NAME``, and the same exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from derain.cli import COMMANDS, main

OPTIONS = {
    "infer": "--weights --tile --overlap --ensemble --strength --backend --device --overwrite --recursive --format "
    "--shard",
    "evaluate": "--rain --pred --clean --weights --tile --overlap --ensemble --backend --device --csv --json --names",
    "app": "--host --port --weights --tile --overlap --ensemble --backend --device --random-weights "
    "--max-megapixels --max-video-seconds --concurrency --max-queue",
    "export": "--opset",
    "fit": "--config --print_config --resume --export --export_from --test --trainer.max_steps --model.net "
    "--data.pairs.root",
    "info": "--config",
    "recipe": "--plan --accept-rebuilt --restore",
    "pin": "--needs --note",
    "models": "--help",
    "grow": "--dim --blocks --full-res --full-res-dim --noise --seed",
}
"""What each command's ``--help`` lists (``app`` gained ``--overlap``, which the other two had)."""


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


def test_the_command_lists_its_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(["--help"], capsys)
    assert set(COMMANDS) == {
        "infer",
        "fit",
        "evaluate",
        "app",
        "export",
        "info",
        "recipe",
        "pin",
        "models",
        "grow",
    }
    assert all(f"    {name}" in text for name in COMMANDS)
    assert help_of(["--version"], capsys).startswith("derain 0.")
    with pytest.raises(SystemExit) as exit_info:
        main(["derain-the-sky"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_subcommand_helps_with_its_own_options(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of([name, "--help"], capsys)
    assert text.startswith(f"usage: derain {name} ")
    missing = [option for option in OPTIONS[name].split() if option not in text]
    assert not missing, f"derain {name} --help lacks {missing}"


def test_subcommands_return_the_commands_status(tmp_path, tiny_weights) -> None:
    assert (
        main(["infer", str(tmp_path / "nowhere"), str(tmp_path / "out"), "--weights", str(tiny_weights)]) == 2
    )
    assert main(["export", str(tmp_path / "missing.ckpt"), str(tmp_path / "x.safetensors")]) == 2


@pytest.mark.slow
def test_python_dash_m_forms_still_work() -> None:
    for args in (
        ["-m", "derain", "--help"],
        ["-m", "derain.infer", "--help"],
        ["-m", "derain.export", "--help"],
    ):
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.startswith("usage: ")


@pytest.mark.parametrize("name", ["infer", "evaluate", "app"])
def test_the_three_model_commands_refuse_a_bad_device_and_bad_tiling_alike(
    name: str, tmp_path, tiny_weights, capsys: pytest.CaptureFixture[str]
) -> None:
    """One "load the model or exit 2" (derain.arguments): each command names a device torch cannot use and
    tiling that cannot work, in one line, with status 2 (evaluate and the page let a bad --device through)."""
    (tmp_path / "in").mkdir()
    where = {"infer": [str(tmp_path / "in"), str(tmp_path / "out")], "app": []}
    where["evaluate"] = ["--rain", str(tmp_path / "in"), "--clean", str(tmp_path / "in")]
    common = [*where[name], "--weights", str(tiny_weights)]
    assert main([name, *common, "--device", "nonsense"]) == 2
    assert "error: cannot use --device 'nonsense'" in capsys.readouterr().err
    assert main([name, *common, "--tile", "64", "--overlap", "64"]) == 2  # the page has --overlap too
    assert "error: need tile >= 0 and 0 <= overlap < tile, got tile=64, overlap=64" in capsys.readouterr().err


@pytest.mark.slow
def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """``derain info | head -1``: the reader stops reading; the command stops too, with no traceback. The pipe's
    reader is closed before the command writes (``head`` exiting first would be a race: small outputs fit in the
    pipe whole)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "derain", "info"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.stderr == "" and proc.returncode == 141  # as a command stopped by SIGPIPE

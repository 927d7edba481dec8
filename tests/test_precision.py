"""``--trainer.precision auto``: bf16 where the machine computes it in hardware, float32 elsewhere, the choice said
in one line; from a config and from the command line, through a whole ``derain fit`` run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from helpers import TINY_NET
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator, MPSAccelerator, XLAAccelerator
from training_helpers import QUIET, make_folder

from derain.fit import main as fit_main
from derain.train import precision
from derain.train.precision import (
    DerainTrainer,
    auto_precision,
    cpu_bf16_is_native,
    cpu_flags,
    settle_precision,
    training_device,
)
from derain.weights.provenance import read_provenance

SAPPHIRE = {"fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16"}
"""A Xeon's flags: bf16 in hardware."""
EPYC = {"fpu", "sse2", "avx2", "fma"}
"""An AVX2-only CPU's flags: bf16 emulated."""


@pytest.fixture
def flags(monkeypatch):
    """Sets the CPU flags :mod:`derain.train.precision` reads (None: ``/proc/cpuinfo`` unreadable)."""

    def set_flags(value: set[str] | None) -> None:
        monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo=precision.CPUINFO: value)

    return set_flags


def test_the_flags_come_from_the_flags_lines_of_cpuinfo(tmp_path: Path) -> None:
    (tmp_path / "avx2").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\nbugs\t\t: spectre_v1\n")
    (tmp_path / "sapphire").write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    assert cpu_flags(tmp_path / "avx2") == EPYC  # the bugs line is not flags
    assert cpu_bf16_is_native(tmp_path / "avx2") is False
    assert cpu_bf16_is_native(tmp_path / "sapphire") is True
    assert cpu_flags(tmp_path / "missing") is None and cpu_bf16_is_native(tmp_path / "missing") is None


def test_auto_on_a_cpu_is_bf16_only_with_it_in_hardware(flags) -> None:
    flags({"avx2", "avx512_bf16"})
    assert auto_precision("cpu") == ("bf16-mixed", "this CPU computes bf16 in hardware (avx512_bf16)")
    flags(SAPPHIRE)
    assert auto_precision("cpu")[0] == "bf16-mixed"
    flags(EPYC)
    assert auto_precision("cpu") == (
        "32-true",
        "this CPU has no AVX512-BF16 or AMX: bf16 would be emulated, several times slower",
    )
    flags(None)
    assert auto_precision("cpu")[0] == "32-true"


def test_auto_on_a_cuda_device_asks_it_for_bf16(monkeypatch, flags) -> None:
    flags(SAPPHIRE)  # the CPU's flags do not decide for a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert auto_precision("cuda") == ("32-true", "the CUDA device (NVIDIA T4) does not support bf16")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert auto_precision("gpu") == ("bf16-mixed", "the CUDA device (NVIDIA H100) supports bf16")
    assert auto_precision("mps")[0] == "32-true"


def test_the_device_is_known_before_the_trainer_is_built(monkeypatch) -> None:
    for cls in (CUDAAccelerator, MPSAccelerator, XLAAccelerator):
        monkeypatch.setattr(cls, "is_available", staticmethod(lambda: False))
    assert training_device("auto") == training_device(None) == training_device("cpu") == "cpu"
    assert training_device(CPUAccelerator()) == "cpu"
    assert training_device("lightning.pytorch.accelerators.CUDAAccelerator") == "cuda"
    assert training_device("mps") == "mps"
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    assert training_device("auto") == training_device("gpu") == "cuda"
    assert training_device("cpu") == "cpu"


def test_the_choice_is_one_line_and_bf16_that_would_be_emulated_is_warned(flags, capsys) -> None:
    flags(SAPPHIRE)
    assert settle_precision("auto", "cpu") == "bf16-mixed"
    assert settle_precision("bf16-mixed", "cpu") == "bf16-mixed"  # in hardware: nothing to say
    out, err = capsys.readouterr()
    assert out == "precision auto -> bf16-mixed: this CPU computes bf16 in hardware (avx512_bf16, amx_bf16)\n"
    assert err == ""
    flags(EPYC)
    assert settle_precision("auto", "cpu") == "32-true"
    assert settle_precision(32, "cpu") == 32 and settle_precision(None, "cpu") is None
    assert capsys.readouterr().out.startswith("precision auto -> 32-true: this CPU has no AVX512-BF16 or AMX")
    assert settle_precision("bf16-mixed", "cpu") == "bf16-mixed"  # asked for by name: warned, not changed
    err = capsys.readouterr().err
    assert err.startswith("warning: --trainer.precision bf16-mixed on a CPU without AVX512-BF16 or AMX")
    assert len(err.splitlines()) == 1


def test_the_trainer_takes_auto(flags) -> None:
    quiet = dict(
        logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False
    )
    flags(EPYC)
    assert DerainTrainer(precision="auto", accelerator="cpu", **quiet).precision == "32-true"
    flags(SAPPHIRE)
    assert DerainTrainer(precision="auto", accelerator="cpu", **quiet).precision == "bf16-mixed"


def tiny_run(tmp_path: Path, *extra: str) -> list[str]:
    """``derain fit`` arguments of a tiny CPU run on a tiny folder (``extra`` before the rest)."""
    data = make_folder(tmp_path / "pairs")
    val = make_folder(tmp_path / "val", seed=1)
    return [
        *TINY_NET,
        *QUIET,
        *extra,
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        "--trainer.accelerator=cpu",
        f"--data.pairs.train_dirs=[{data}]",
        f"--data.pairs.val_dirs=[{val}]",
        "--data.patch_size=32",
        "--data.batch_size=2",
        "--data.num_workers=0",
    ]


@pytest.mark.slow
def test_a_config_with_precision_auto_runs(tmp_path, flags, capsys) -> None:
    config = tmp_path / "auto.yaml"
    config.write_text("trainer:\n  precision: auto\n")
    flags(EPYC)
    assert (
        fit_main(
            ["--config", str(config), *tiny_run(tmp_path, "--trainer.fast_dev_run=true", "--export=false")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("precision auto -> 32-true: this CPU has no AVX512-BF16 or AMX") == 1


@pytest.mark.slow
def test_precision_auto_from_the_command_line_is_recorded_as_what_ran(tmp_path, flags, capsys) -> None:
    flags(SAPPHIRE)
    assert fit_main(tiny_run(tmp_path, "--trainer.precision", "auto", "--trainer.max_steps=1")) == 0
    assert "precision auto -> bf16-mixed: this CPU computes bf16" in capsys.readouterr().out
    # the exported weights' provenance names the precision that ran, not auto
    config = read_provenance(tmp_path / "run" / "model.safetensors")["config"]
    assert config["trainer"]["precision"] == "bf16-mixed"


def test_the_bundled_configs_fit_the_machine() -> None:
    configs = Path(__file__).resolve().parents[1] / "configs"
    for name in ("synthetic.yaml", "rain100h.yaml"):
        assert yaml.safe_load((configs / name).read_text())["trainer"]["precision"] == "auto", name

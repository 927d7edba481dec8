"""``derain fit`` (``python -m derain.fit``) as a user runs it: config names from any folder, how a run starts, a run
that trains, tests and exports (with its provenance), DDP, and errors as one line with an exit status."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers import TINY_NET, tiny_net
from safetensors import safe_open
from training_helpers import QUIET, make_folder

import derain.fit
import derain.train.callbacks
from derain.cli import main as derain_main
from derain.fit import main as fit_main
from derain.fit_cli import Start, how_to_start
from derain.fit_configs import ConfigNotFoundError, resolve_config_args
from derain.io import read_rgb, to_tensor
from derain.metrics import DerainMetrics
from derain.models import DerainNet
from derain.train import TimeBudget
from derain.train.export import export_source
from derain.weights import WeightsError, load_net, save_net, tensors_sha256
from derain.weights.provenance import read_provenance

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


def test_moved_options_are_one_line_errors_naming_the_new_spelling(tmp_path, capsys):
    old_run = tmp_path / "config.yaml"  # a run folder's config, saved before the options moved
    old_run.write_text(
        "trainer:\n  callbacks:\n    - class_path: derain.monitor.AttentionMonitor\n"
        "model:\n  ema_decay: 0.999\n  lr: 0.001\n"
    )
    assert fit_main(["--config", str(old_run), "--trainer.max_steps=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {old_run}: ")
    assert "derain.monitor.AttentionMonitor is now derain.train.AttentionMonitor" in err
    assert (
        "model.ema_decay is now a trainer.callbacks entry, lightning.pytorch.callbacks.EMAWeightAveraging"
        in err
    )
    assert fit_main(["--config", "synthetic.yaml", "--model.init_weights=packaged"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "error: the command line: model.init_weights is now init_weights (top level: --init_weights FILE)"
    )


@pytest.mark.slow
def test_fast_dev_run_on_the_synthetic_default(tmp_path):
    args = [
        "--config",
        str(REPO / "configs/synthetic.yaml"),
        *TINY_NET,
        *QUIET,
        "--trainer.fast_dev_run=true",
        f"--trainer.default_root_dir={tmp_path}",
        "--data.num_workers=0",
        "--data.synthesis.length=8",
        "--data.synthesis.val_length=1",
        "--data.batch_size=2",
        "--data.patch_size=32",
        "--export=false",
    ]
    assert fit_main(args) == 0


@pytest.mark.slow
def test_training_learns_resumes_and_exports(tmp_path, capsys, monkeypatch):
    data = make_folder(tmp_path / "pairs")
    val = make_folder(tmp_path / "val", seed=1)  # other backgrounds: training pairs showing them would leave
    run = tmp_path / "run"
    common = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={run}",
        f"--data.pairs.train_dirs=[{data}]",
        f"--data.pairs.val_dirs=[{val}]",
        "--data.patch_size=32",
        "--data.batch_size=4",
        "--data.num_workers=0",
        "--data.pairs.repeat=4",
        "--model.lr=0.01",
        "--model.warmup_steps=0",
        "--model.min_lr_ratio=1.0",
        "--trainer.accelerator=cpu",
        "--trainer.check_val_every_n_epoch=1",
        "--trainer.log_every_n_steps=1",
    ]
    start = save_net(tiny_net(seed=3), tmp_path / "start.safetensors")
    assert fit_main([*common, "--trainer.max_steps=8", f"--init_weights={start}"]) == 0
    last = run / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == 8 and {"optimizer_states", "lr_schedulers"} <= saved.keys()  # resumable
    capsys.readouterr()

    # the same command with more steps resumes from last.ckpt and says so; it exports the last weights, naming the
    # commit of the code when the run started (the checkout may move on while it trains)
    commits = iter(["at-start", "later"])
    monkeypatch.setattr(derain.fit, "git_commit", lambda: next(commits))
    assert fit_main([*common, "--trainer.max_steps=40", "--export_from=last"]) == 0
    out = capsys.readouterr().out
    assert f"Resuming from {last} (step 8)" in out
    assert torch.load(last, weights_only=True)["global_step"] == 40

    # the exported weights rebuild the network without Lightning, and it learned: PSNR above the input's
    weights = run / "model.safetensors"
    with safe_open(weights, "pt") as f:
        meta = f.metadata()
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    assert meta["format"] == "derain-net-v2" and meta["source"] == "last.ckpt"
    prov = read_provenance(weights)  # how they were made
    assert (
        prov["steps"] == 40
        and prov["config"]["trainer"]["max_steps"] == 40
        and prov["checkpoint"] == "last.ckpt"
        and prov["commit"] == "at-start"
    )
    files = sum(p.is_file() for p in [*data.rglob("*"), *val.rglob("*")])
    assert prov["data"]["folders"] == [str(data), str(val)] and prov["data"]["files"] == files
    assert "val/psnr_y" in prov["validation"]["last"] and prov["validation"]["best"]["checkpoint"].startswith(
        "best-"
    )
    # what the run started from, kept through the resume (which did not read init_weights)
    assert prov["started_from"] == {"file": str(start), "tensors_sha256": tensors_sha256(start)}
    record = json.loads(meta["net"])
    assert record["class_path"] == "derain.models.net.DerainNet"
    net = DerainNet(**record["init_args"])
    net.load_state_dict(state)
    rain = to_tensor(read_rgb(data / "rain/000.png"))[None]
    clean = to_tensor(read_rgb(data / "norain/000.png"))[None]
    with torch.no_grad():
        pred = net.eval()(rain).clamp(0, 1)

    def psnr(a, b):
        return -10 * torch.log10((a - b).square().mean()).item()

    assert psnr(pred, clean) > psnr(rain, clean) + 1.0, (psnr(pred, clean), psnr(rain, clean))


def rain_folder_run(root: Path, run: Path) -> list[str]:
    """A tiny network trained on a ``root`` with train/ and test/ pair folders, into ``run``."""
    return [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={run}",
        f"--data.pairs.root={root}",
        "--data.pairs.val_fraction=0.25",
        "--data.pairs.drop_test_overlap=false",
        "--data.patch_size=32",
        "--data.batch_size=3",
        "--data.num_workers=0",
    ]


@pytest.mark.slow
def test_fit_tests_the_best_checkpoint_and_prints_the_table(tmp_path, capsys):
    root = tmp_path / "Rain"
    make_folder(root / "train", n=4)
    make_folder(root / "test", n=2, seed=1)
    args = [
        *rain_folder_run(root, tmp_path / "run"),
        "--trainer.max_steps=2",
        "--trainer.accelerator=cpu",
        "--export=false",
    ]
    assert fit_main(args) == 0
    out = capsys.readouterr().out
    best = next((tmp_path / "run" / "checkpoints").glob("best-*.ckpt"))
    assert f"Test (2 pairs), {best}:" in out
    lines = out[out.index("Test (2 pairs)") :].splitlines()
    assert lines[1].split() == ["PSNR-Y", "SSIM-Y", "PSNR", "SSIM"]
    assert lines[2].split()[0] == "derained" and len(lines[2].split()) == 5
    # the input's row scores the rainy images against the clean ones
    metrics = DerainMetrics()
    for name in ("000.png", "001.png"):
        rain, clean = (to_tensor(read_rgb(root / "test" / sub / name))[None] for sub in ("rain", "norain"))
        metrics.update(rain, clean)
    scores = {k: float(v) for k, v in metrics.compute().items()}
    psnr_y, ssim_y, psnr, ssim = (scores[k] for k in ("psnr_y", "ssim_y", "psnr", "ssim"))
    assert lines[3].split() == ["input", f"{psnr_y:.2f}", f"{ssim_y:.4f}", f"{psnr:.2f}", f"{ssim:.4f}"]


@pytest.mark.slow
def test_an_averaged_run_tests_and_exports_the_average(tmp_path, capsys):
    root, run = tmp_path / "Rain", tmp_path / "run"
    make_folder(root / "train", n=4)
    make_folder(root / "test", n=2, seed=1)
    args = [
        *rain_folder_run(root, run),
        "--trainer.max_steps=4",
        "--trainer.accelerator=cpu",
        "--model.lr=0.02",
        "--model.warmup_steps=0",
        "--trainer.callbacks+=EMAWeightAveraging",
        "--trainer.callbacks.decay=0.5",
    ]
    assert fit_main(args) == 0
    out = capsys.readouterr().out
    derained = out[out.index("Test (2 pairs)") :].splitlines()[2].split()
    best = torch.load(next((run / "checkpoints").glob("best-*.ckpt")), weights_only=True)
    average, raw = best["state_dict"]["net.embed.1.weight"], best["current_model_state"]["net.embed.1.weight"]
    assert not torch.allclose(average, raw)
    net = load_net(run / "model.safetensors")
    assert torch.equal(net.state_dict()["embed.1.weight"], average)  # the export is the average
    metrics = DerainMetrics()  # ... and so is what the test scored (not the raw weights kept for resuming)
    with torch.no_grad():
        for name in ("000.png", "001.png"):
            rain, clean = (to_tensor(read_rgb(root / "test" / s / name))[None] for s in ("rain", "norain"))
            metrics.update(net.eval()(rain).clamp(0, 1), clean)
    scores = metrics.compute()
    assert float(derained[1]) == pytest.approx(float(scores["psnr_y"]), abs=0.011)
    assert float(derained[2]) == pytest.approx(float(scores["ssim_y"]), abs=1.1e-4)


@pytest.mark.slow
def test_missing_data_root_exits_2_with_one_clear_message(tmp_path):
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "derain.fit",
            "--config",
            str(REPO / "configs/rain100h.yaml"),
            f"--data.pairs.root={tmp_path / 'nowhere'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert str(tmp_path / "nowhere") in proc.stderr
    assert (
        "train/{rain,norain}" in proc.stderr and "derain fit --config configs/synthetic.yaml" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_nan_loss_stops_with_the_step(tmp_path, capsys):
    data = make_folder(tmp_path / "pairs", n=2)
    args = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--data.pairs.train_dirs=[{data}]",
        "--data.pairs.val_fraction=0",
        "--data.patch_size=32",
        "--data.batch_size=2",
        "--data.num_workers=0",
        "--model.lr=1e30",
        "--model.warmup_steps=0",
        "--trainer.max_steps=50",
        "--trainer.limit_val_batches=0",
    ]
    assert fit_main(args) == 1
    assert "training loss became" in capsys.readouterr().err


@pytest.mark.slow
def test_missing_init_weights_exits_2_naming_the_file(tmp_path, capsys):
    args = [*TINY_NET, *QUIET, f"--trainer.default_root_dir={tmp_path}"]
    args += ["--data.synthesis.builtin_photos=true", "--data.synthesis.length=8"]
    assert fit_main([*args, f"--init_weights={tmp_path / 'nope.safetensors'}"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "nope.safetensors" in err and "Traceback" not in err


def test_a_damaged_last_checkpoint_exits_2_naming_it_and_the_way_out(tmp_path, capsys):
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.parent.mkdir()
    last.write_bytes(b"cut short")
    args = [*TINY_NET, *QUIET, f"--trainer.default_root_dir={tmp_path}"]
    args += ["--data.synthesis.builtin_photos=true", "--data.synthesis.length=8", "--trainer.max_steps=1"]
    assert fit_main(args) == 2
    err = capsys.readouterr().err
    assert f"cannot read checkpoint {last}" in err and "--resume never" in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_ddp_on_two_cpu_processes(tmp_path):
    data = make_folder(tmp_path / "pairs")
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "derain.fit",
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={run}",
        f"--data.pairs.train_dirs=[{data}]",
        f"--data.pairs.val_dirs=[{make_folder(tmp_path / 'val', seed=1)}]",
        "--data.patch_size=32",
        "--data.batch_size=2",
        "--data.num_workers=0",
        "--trainer.max_steps=2",
        "--trainer.strategy=ddp",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
    ]
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 2
    assert ckpt["derain_net"]["class_path"] == "derain.models.net.DerainNet"
    assert (run / "model.safetensors").is_file()


def test_export_from_names_the_checkpoint_the_run_exports(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in ("best-707.ckpt", "last.ckpt"):
        (folder / name).write_bytes(b"x")
    last = folder / "last.ckpt"
    assert export_source("best", "b.ckpt", last) == "b.ckpt"
    assert export_source("last", "b.ckpt", last) == str(last)
    assert export_source("best-707.ckpt", "", last) == str(folder / "best-707.ckpt")
    with pytest.raises(
        WeightsError, match=r"--export_from best-708.ckpt: .*\(there: best-707.ckpt, last.ckpt\)"
    ):
        export_source("best-708.ckpt", "", last)


def test_no_config_needs_the_development_data_folder():
    for path in [*(REPO / "configs").rglob("*.yaml"), *(REPO / "experiments").rglob("*.yaml")]:
        body = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        assert "shared" not in body, f"{path} names ../shared: use $DERAIN_DATA"


def test_the_rain100h_config_trains_leak_safe(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    data = printed_config(["--config", "rain100h.yaml"], capsys)["data"]
    assert data["pairs"]["root"] == "datasets/Rain100H" and data["pairs"]["drop_test_overlap"] is True


def test_a_pause_during_the_time_budgets_probe_is_not_read_as_the_machines_pace(monkeypatch, capsys):
    """Steps of 2 s, one of them held 200 s (the process stopped while tests ran): the plan is the 2-s pace's."""
    clock = [0.0]
    monkeypatch.setattr(derain.train.callbacks, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    trainer = SimpleNamespace(global_step=0, max_steps=-1, lr_scheduler_configs=[], should_stop=False)
    budget = TimeBudget(budget=1000, probe_steps=10, reserve=0.0)
    budget.on_train_start(trainer, None)
    for step in range(1, 11):
        clock[0] += 2.0 + (200.0 if step == 5 else 0.0)
        trainer.global_step = step
        for _ in range(2):  # two batches a step (gradient accumulation): one step, timed once
            budget.on_train_batch_end(trainer, None)
    assert budget.last_step == 10 + int((1000 - 220) / 2.0)  # the budget's wall time left, at 2 s a step
    assert "TimeBudget: 2.000 s a step" in capsys.readouterr().out


def test_a_time_budget_plans_the_last_step_ends_the_cosine_and_validates(tmp_path, capsys):
    data = make_folder(tmp_path / "pairs")
    val = make_folder(tmp_path / "val", seed=1)
    run = tmp_path / "run"
    args = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={run}",
        f"--data.pairs.train_dirs=[{data}]",
        f"--data.pairs.val_dirs=[{val}]",
        "--data.patch_size=32",
        "--data.batch_size=2",
        "--data.num_workers=0",
        "--data.pairs.repeat=50",
        "--trainer.accelerator=cpu",
        "--trainer.max_steps=100000",
        "--trainer.val_check_interval=100000",
        "--trainer.check_val_every_n_epoch=null",
        "--trainer.callbacks+=derain.train.TimeBudget",
        "--trainer.callbacks.budget=6",
        "--trainer.callbacks.probe_steps=10",
        "--export_from=last",
    ]
    assert fit_main(args) == 0
    out = capsys.readouterr().out
    planned = int(re.search(r"TimeBudget: [\d.]+ s a step; the run ends at step (\d+)", out).group(1))
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert (
        10 <= saved["global_step"] == planned < 100000
    )  # stopped at the plan, and the last checkpoint followed
    schedule = saved["lr_schedulers"][0]["lr_lambdas"][0]
    assert schedule["total"] == planned  # the cosine ends where the run does
    assert list(
        (run / "checkpoints").glob("best-*.ckpt")
    )  # it validated at its last step (no other validation)

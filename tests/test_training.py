"""Training as a user runs it: the CLI, resume, export, learning on a tiny folder, DDP, errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import lightning as L
import numpy as np
import pytest
import torch
import yaml
from helpers import TINY, TINY_NET, tiny_net
from safetensors import safe_open

from derain.fit import main as fit_main
from derain.inference import WeightsError, load_model
from derain.io import read_rgb, to_tensor
from derain.metrics import DerainMetrics
from derain.models import DerainNet, network_record
from derain.train import DerainLitModule, NonFiniteLossError, WarmupCosine, charbonnier_loss
from derain.weights import export_checkpoint, read_checkpoint_net, save_net

REPO = Path(__file__).resolve().parents[1]
QUIET = [
    "--trainer.enable_progress_bar=false",
    "--trainer.logger=false",
    "--trainer.enable_model_summary=false",
]


def make_folder(root: Path, n: int = 4, size: int = 32, seed: int = 0) -> Path:
    """A tiny paired folder: smooth clean images; rain is a bright veil (haze) plus diagonal streaks."""
    rng = np.random.default_rng(seed)
    for sub in ("rain", "norain"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[0:size, 0:size]
    for i in range(n):
        base = rng.uniform(0.2, 0.6, 3)
        clean = (base[None, None] + 0.2 * np.sin((xx + yy * (i + 1))[..., None] / 7.0)) * 255
        streak = (((xx + 2 * yy + i) % 7) == 0)[..., None] * 90.0
        rain = np.clip(0.7 * clean + 0.3 * 255 + streak, 0, 255)
        cv2.imwrite(str(root / "rain" / f"{i:03d}.png"), rain.astype(np.uint8))
        cv2.imwrite(str(root / "norain" / f"{i:03d}.png"), clean.astype(np.uint8))
    return root


def test_charbonnier_is_smooth_l1():
    a, b = torch.zeros(4), torch.tensor([0.0, 1.0, -2.0, 0.5])
    assert charbonnier_loss(a, b, eps=0).item() == pytest.approx(b.abs().mean().item())
    assert charbonnier_loss(a, a, eps=1e-3).item() == pytest.approx(1e-3)


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
def test_training_learns_resumes_and_exports(tmp_path, capsys):
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
    assert fit_main([*common, "--trainer.max_steps=8"]) == 0
    last = run / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == 8 and {"optimizer_states", "lr_schedulers"} <= saved.keys()  # resumable
    capsys.readouterr()

    # the same command with more steps resumes from last.ckpt and says so
    assert fit_main([*common, "--trainer.max_steps=40"]) == 0
    out = capsys.readouterr().out
    assert f"Resuming from {last} (step 8)" in out
    assert torch.load(last, weights_only=True)["global_step"] == 40

    # the exported weights rebuild the network without Lightning, and it learned: PSNR above the input's
    weights = run / "model.safetensors"
    with safe_open(weights, "pt") as f:
        meta = f.metadata()
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    assert meta["format"] == "derain-net-v2"
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
    assert "train/{rain,norain}" in proc.stderr and "derain fit --config configs/synthetic.yaml" in proc.stderr
    assert "Traceback" not in proc.stderr


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


def test_nan_loss_message_names_the_step():
    module = DerainLitModule(DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),)))
    batch = {"rain": torch.full((1, 3, 8, 8), float("nan")), "clean": torch.zeros(1, 3, 8, 8)}
    module.log = lambda *a, **k: None
    with pytest.raises(NonFiniteLossError, match="at step 0"):
        module.training_step(batch, 0)


def test_init_weights_starts_from_a_weights_file(tmp_path):
    def tiny(dim: int = 8, seed: int = 0) -> DerainNet:
        torch.manual_seed(seed)
        return DerainNet(dim=dim, blocks=(1,), heads=(1,), mixers=(("tksa",),))

    source = save_net(tiny(seed=1), tmp_path / "source.safetensors")
    module = DerainLitModule(tiny(seed=2), init_weights=str(source))
    expected = load_model(source, device="cpu").state_dict()
    got = module.net.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    assert not torch.equal(tiny(seed=2).state_dict()["embed.1.weight"], expected["embed.1.weight"])

    with pytest.raises(
        WeightsError, match=r"source\.safetensors.*do not fit.*dim: 16 configured, 8 in the file"
    ):
        DerainLitModule(tiny(dim=16), init_weights=str(source))
    # a setting that holds no weights may differ
    torch.manual_seed(2)
    other = DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),), grad_checkpoint=True)
    module = DerainLitModule(other, init_weights=str(source))
    assert torch.equal(module.net.state_dict()["embed.1.weight"], expected["embed.1.weight"])


def test_init_weights_packaged_fine_tunes_the_shipped_model(monkeypatch, tmp_path):
    import derain.weights

    torch.manual_seed(3)
    shipped = save_net(
        DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("agent",),)), tmp_path / "s.safetensors"
    )
    monkeypatch.setattr(derain.weights, "packaged_weights", lambda: shipped)
    module = DerainLitModule(
        DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("agent",),)), init_weights="packaged"
    )
    expected = load_model(shipped, device="cpu").state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in module.net.state_dict().items())


def test_fine_tune_resumes_without_its_init_weights_file(tmp_path, capsys):
    data = make_folder(tmp_path / "pairs")
    torch.manual_seed(5)
    tiny = DerainNet(**TINY)
    source = save_net(tiny, tmp_path / "start.safetensors")
    run = tmp_path / "run"
    common = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={run}",
        f"--data.pairs.train_dirs=[{data}]",
        "--data.pairs.val_fraction=0",
        "--data.patch_size=32",
        "--data.batch_size=4",
        "--data.num_workers=0",
        "--trainer.accelerator=cpu",
        "--trainer.limit_val_batches=0",
        f"--model.init_weights={source}",
        "--export=false",
    ]
    assert fit_main([*common, "--trainer.max_steps=2"]) == 0
    source.unlink()  # the resumed run takes its weights from last.ckpt, not from the (now missing) start file
    capsys.readouterr()
    assert fit_main([*common, "--trainer.max_steps=4"]) == 0
    out = capsys.readouterr().out
    assert f"Resuming: --model.init_weights {source} is not read" in out and "(step 2)" in out
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


def test_missing_init_weights_exits_2_naming_the_file(tmp_path, capsys):
    args = [*TINY_NET, *QUIET, f"--trainer.default_root_dir={tmp_path}"]
    args += ["--data.synthesis.builtin_photos=true", "--data.synthesis.length=8"]
    assert fit_main([*args, f"--model.init_weights={tmp_path / 'nope.safetensors'}"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "nope.safetensors" in err and "Traceback" not in err


def test_ema_averages_weights_and_is_what_validation_and_export_use(tmp_path):
    torch.manual_seed(0)
    module = DerainLitModule(DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),)), ema_decay=0.9)
    start = {k: v.clone() for k, v in module.ema.state_dict().items()}
    with torch.no_grad():
        for p in module.net.parameters():
            p.add_(1.0)
    module.update_ema(step=1000)  # decay min(0.9, 1001/1010) = 0.9
    for k, v in module.ema.state_dict().items():
        torch.testing.assert_close(v, start[k] + 0.1 if v.is_floating_point() else start[k])
    module.update_ema(step=0)  # warm-up: decay 1/10, the average jumps most of the way
    weight = module.ema.state_dict()["embed.1.weight"]
    torch.testing.assert_close(
        weight, 0.1 * (start["embed.1.weight"] + 0.1) + 0.9 * (start["embed.1.weight"] + 1)
    )

    # validation runs the average, not the raw weights
    module.log = lambda *a, **k: None
    batch = {"rain": torch.rand(1, 3, 16, 16), "clean": torch.rand(1, 3, 16, 16)}
    with torch.no_grad():
        module.eval()  # as Lightning sets it for validation
        pred = module.step(batch, "val")
        torch.testing.assert_close(pred, module.ema(batch["rain"]))
        assert not torch.allclose(pred, module.net(batch["rain"]))
        module.train()  # training steps run the raw weights
        torch.testing.assert_close(module(batch["rain"]), module.net(batch["rain"]))

    # a checkpoint with both exports the average
    state = {f"net.{k}": v for k, v in module.net.state_dict().items()}
    state |= {f"ema.{k}": v for k, v in module.ema.state_dict().items()}
    torch.save({"state_dict": state, "derain_net": network_record(module.net)}, tmp_path / "both.ckpt")
    exported, _ = read_checkpoint_net(tmp_path / "both.ckpt")
    assert torch.equal(exported["embed.1.weight"], module.ema.state_dict()["embed.1.weight"])
    with pytest.raises(ValueError, match="ema_decay"):
        DerainLitModule(DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),)), ema_decay=1.0)


def test_resume_across_an_ema_decay_change(tmp_path, caplog):
    run = tmp_path / "run"
    common = [*TINY_NET, *QUIET, f"--trainer.default_root_dir={run}", "--data.synthesis.builtin_photos=true"]
    common += ["--data.synthesis.length=8", "--data.batch_size=4"]
    common += [
        "--data.num_workers=0",
        "--data.patch_size=32",
        "--trainer.limit_val_batches=0",
        "--export=false",
    ]
    last = run / "checkpoints" / "last.ckpt"
    assert fit_main([*common, "--trainer.max_steps=2"]) == 0
    # a run saved without an average resumes with one: the average starts from the saved weights
    assert fit_main([*common, "--trainer.max_steps=3", "--model.ema_decay=0.9"]) == 0
    assert "has no moving average" in caplog.text
    state = torch.load(last, weights_only=True)["state_dict"]
    assert state.keys() >= {"ema.embed.1.weight", "net.embed.1.weight"}
    # (one step after the start, with the warm-up decay 1/10, the average is still near the weights)
    torch.testing.assert_close(state["ema.embed.1.weight"], state["net.embed.1.weight"], atol=0.05, rtol=0)
    # and back: a run that kept one resumes without, dropping it
    assert fit_main([*common, "--trainer.max_steps=4"]) == 0
    assert "checkpoint's moving average is dropped" in caplog.text
    state = torch.load(last, weights_only=True)["state_dict"]
    assert (
        not any(k.startswith("ema.") for k in state)
        and torch.load(last, weights_only=True)["global_step"] == 4
    )


def test_export_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        export_checkpoint(tmp_path / "missing.ckpt", tmp_path / "out.safetensors")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.ckpt"):
        read_checkpoint_net(bad)
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(ValueError, match="other.ckpt has no 'derain_net' record"):
        read_checkpoint_net(other)


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


@pytest.mark.slow
def test_ctrl_c_saves_last_and_the_same_command_resumes(tmp_path, monkeypatch, capsys):
    data = make_folder(tmp_path / "pairs")
    run = tmp_path / "run"
    args = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={run}",
        f"--data.pairs.train_dirs=[{data}]",
        "--data.pairs.val_fraction=0",
        "--data.patch_size=32",
        "--data.batch_size=2",
        "--data.num_workers=0",
        "--data.pairs.repeat=8",
        "--trainer.max_steps=12",
        "--trainer.limit_val_batches=0",
    ]
    original = DerainLitModule.training_step

    def interrupt_at_step_5(self, batch, batch_idx):
        if self.global_step == 5:
            raise KeyboardInterrupt
        return original(self, batch, batch_idx)

    monkeypatch.setattr(DerainLitModule, "training_step", interrupt_at_step_5)
    assert fit_main(args) == 130
    assert "re-run the same command to resume" in capsys.readouterr().err
    last = run / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 5

    monkeypatch.setattr(DerainLitModule, "training_step", original)
    assert fit_main(args) == 0
    assert "Resuming from" in capsys.readouterr().out
    assert torch.load(last, weights_only=True)["global_step"] == 12


# The shipped weights' stages, each layered over the ones before it.
SHIPPED = [
    "derain-small/stage1.yaml",
    "derain-small/stage2-augment.yaml",
    "derain-small/stage3-large-patch.yaml",
    "derain-small/stage4-rain-free.yaml",
    "derain-small/stage5-continue.yaml",
    "derain-small/stage6-continue.yaml",
    "derain-small/stage7-garg-long.yaml",
]
STAGE8_LONG = [
    "derain-small/stage8-arm-focused.yaml",
    "derain-small/stage8-arm-focused-light.yaml",
    "derain-small/stage8-long.yaml",
]
RECIPES = [
    *(SHIPPED[:n] for n in range(1, len(SHIPPED) + 1)),
    [*SHIPPED[:4], "derain-small/gpu.yaml"],
    [*SHIPPED, "derain-small/stage8-arm-mix.yaml"],
    [*SHIPPED, "derain-small/stage8-arm-focused.yaml"],
    [*SHIPPED, "derain-small/stage8-arm-focused.yaml", "derain-small/stage8-arm-focused-light.yaml"],
    [*SHIPPED, *STAGE8_LONG],
    ["rain100h.yaml"],
    ["synthetic.yaml"],
]


def test_the_recipes_cover_every_config():
    configs = REPO / "configs"
    assert {name for stages in RECIPES for name in stages} == {
        p.relative_to(configs).as_posix() for p in configs.rglob("*.yaml")
    }
    # one line per stage in the recipe's README
    readme = (configs / "derain-small" / "README.md").read_text()
    assert all(f"`{Path(name).name}`" in readme for name in [*SHIPPED, "derain-small/gpu.yaml"])


def test_no_config_needs_the_development_data_folder():
    for path in (REPO / "configs").rglob("*.yaml"):
        body = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        assert "shared" not in body, f"{path} names ../shared: use $DERAIN_DATA"


@pytest.mark.parametrize("stages", RECIPES, ids=lambda stages: "+".join(Path(s).stem for s in stages))
def test_every_recipe_parses(stages, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # bare names resolve to the bundled configs from any folder
    args = [a for name in stages for a in ("--config", name)]
    with pytest.raises(SystemExit) as exit_info:
        fit_main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    data, model, last = config["data"], config["model"], Path(stages[-1]).stem
    if "stage1" in last:
        assert data["pairs"]["train_dirs"][0] == "$DERAIN_DATA/rain100h-train-mini"
    if any("stage2-augment" in s for s in stages):
        augment = data["synthesis"]["layer_augment"]
        assert augment["angle"] == 12.0 and augment["mix"] == 0.15
    if last == "stage2-augment":
        assert model["schedule_steps"] == 4200
    if last in ("stage3-large-patch", "stage4-rain-free", "stage5-continue"):
        assert (data["patch_size"], data["batch_size"]) == (256, 2)
    if last == "stage3-large-patch":  # as run: its own cosine, from the augment stage
        assert model["schedule_steps"] is None
        assert model["init_weights"] == "runs/derain-small/stage2/model.safetensors"
    if any("stage4-rain-free" in s for s in stages):
        rain_free = 0.1 if any("stage8-arm-focused" in s for s in stages) else 0.15
        assert data["synthesis"]["rain_free_prob"] == rain_free and model["schedule_steps"] is None
        assert config["checkpoint"]["save_top_k"] == 3
    if last == "stage4-rain-free":
        assert model["init_weights"] == "runs/derain-small/stage3/model.safetensors"
    if last == "stage5-continue":
        assert model["init_weights"] == "runs/derain-small/stage4/model.safetensors" and model["lr"] == 1e-4
        assert (config["seed_everything"], config["trainer"]["max_steps"]) == (7, 2200)
    if last == "stage7-garg-long":  # Rain200H validates beside the Rain100H hold-out, and donates no rain
        assert data["pairs"]["val_dirs"] == ["$DERAIN_DATA/rain200h-test-samples"]
        assert data["pairs"]["val_from"] == ["$DERAIN_DATA/rain100h-train-mini"]
        assert "$DERAIN_DATA/rain200h-test-samples" not in data["pairs"]["train_dirs"]
        assert data["synthesis"]["transplant_from"] == ["$DERAIN_DATA/rain100h-train-mini"]
        assert data["synthesis"]["layer_share"] == 0.3
        assert model["init_weights"] == "runs/derain-small/stage6/model.safetensors"
    # the same validation in every stage-8 run: 7 heavy pairs and 40 RainTrainL ones
    if last.startswith("stage8"):
        assert data["pairs"]["val_dirs"] == ["$DERAIN_DATA/rain200h-test-samples"]
        assert data["pairs"]["val_from"] == ["$DERAIN_DATA/rain100h-train-mini", "$DERAIN_DATA/raintrainl"]
        assert (data["pairs"]["val_fraction"], data["seed"]) == (0.2, 0)
        assert model["init_weights"] == "runs/derain-small/stage7/model.safetensors"
        assert (data["patch_size"], data["batch_size"]) == (256, 2)
    if last.startswith("stage8-arm"):  # the arms compare at equal CPU work
        assert config["trainer"]["max_steps"] == 1400
    if last == "stage8-arm-focused-light":
        assert "$DERAIN_DATA/raintrainl" in data["pairs"]["train_dirs"]
        assert data["synthesis"]["transplant_shares"] == [0.75, 0.25]
    if last == "stage8-long":  # the focused + light arm, long, on one cosine from stage 7, same validation
        assert data["synthesis"]["transplant_shares"] == [0.75, 0.25] and model["lr"] == 3e-4
        assert model["schedule_steps"] is None and config["trainer"]["max_steps"] == 9000
        assert config["trainer"]["default_root_dir"] == "runs/derain-small/stage8-long"
    if last == "gpu":  # prepared for a lent GPU: shipped weights, no runs/ needed
        assert model["init_weights"] == "packaged" and data["synthesis"]["rain_free_prob"] == 0.15
        assert (config["trainer"]["accelerator"], data["batch_size"]) == ("gpu", 16)
    if last == "rain100h":
        assert data["pairs"]["root"] == "datasets/Rain100H" and data["pairs"]["drop_test_overlap"] is True


def test_load_from_checkpoint_across_an_ema_decay_change(tmp_path):
    def net():
        return DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),))

    torch.manual_seed(0)
    plain = DerainLitModule(net())
    ckpt = tmp_path / "plain.ckpt"
    torch.save({"state_dict": plain.state_dict(), "pytorch-lightning_version": "2.6.0"}, ckpt)
    averaged = DerainLitModule.load_from_checkpoint(ckpt, net=net(), ema_decay=0.9, weights_only=True)
    for key, value in plain.net.state_dict().items():
        torch.testing.assert_close(averaged.ema.state_dict()[key], value)
    torch.save({"state_dict": averaged.state_dict(), "pytorch-lightning_version": "2.6.0"}, ckpt)
    again = DerainLitModule.load_from_checkpoint(ckpt, net=net(), ema_decay=0.0, weights_only=True)
    assert again.ema is None


def test_schedule_steps_sets_the_cosine_length_independently_of_the_run():
    net = DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),))
    module = DerainLitModule(net, lr=1.0, warmup_steps=10, min_lr_ratio=0.0, schedule_steps=110)
    schedule = module.configure_optimizers()["lr_scheduler"]["scheduler"].lr_lambdas[0]
    assert schedule(0) == pytest.approx(0.01) and schedule(10) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.5) and schedule(110) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="schedule_steps should be at least 1, got 0"):
        DerainLitModule(net, schedule_steps=0)


def test_the_schedule_keeps_the_warm_up_and_cosine_formula():
    def formula(step: int, warmup_steps: int, total: int, min_lr_ratio: float) -> float:
        warmup = min(warmup_steps, max(0, total - 1))
        if step < warmup:
            return 0.01 + 0.99 * step / max(1, warmup)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    net = DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),))
    for warmup, total, min_ratio in [(10, 110, 0.0), (0, 7, 0.01), (200, 50, 0.1), (3, 1, 0.5)]:
        module = DerainLitModule(
            net, lr=0.5, warmup_steps=warmup, min_lr_ratio=min_ratio, schedule_steps=total
        )
        scheduler = module.configure_optimizers()["lr_scheduler"]["scheduler"]
        for step in range(total + 20):  # past the end it stays at the minimum
            for group in scheduler.optimizer.param_groups:
                assert group["lr"] == pytest.approx(0.5 * formula(step, warmup, total, min_ratio), rel=1e-12)
            scheduler.optimizer.step()
            scheduler.step()


@pytest.mark.slow
def test_a_resumed_run_keeps_the_learning_rate_schedule_it_started(tmp_path, monkeypatch, caplog):
    data = make_folder(tmp_path / "pairs")
    common = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--data.pairs.train_dirs=[{data}]",
        "--data.pairs.val_fraction=0",
        "--data.pairs.repeat=8",
        "--data.patch_size=32",
        "--data.batch_size=2",
        "--data.num_workers=0",
        "--trainer.limit_val_batches=0",
        "--model.lr=0.01",
        "--model.warmup_steps=2",
        "--model.min_lr_ratio=0.1",
        "--export=false",
    ]
    lrs: dict[int, float] = {}
    stop_at = [5]  # the first run is stopped there (Ctrl+C)
    original = DerainLitModule.training_step

    def record_lr(self, batch, batch_idx):
        if self.global_step in stop_at:
            stop_at.clear()
            raise KeyboardInterrupt
        lrs[self.global_step] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return original(self, batch, batch_idx)

    monkeypatch.setattr(DerainLitModule, "training_step", record_lr)
    assert fit_main([*common, "--trainer.max_steps=12"]) == 130
    # resumed with a longer run: the 12-step schedule goes on (flat at its minimum after step 12)
    assert fit_main([*common, "--trainer.max_steps=20"]) == 0
    started = WarmupCosine(warmup=2, total=12, min_ratio=0.1)
    assert sorted(lrs) == list(range(20))
    for step, lr in lrs.items():
        assert lr == pytest.approx(0.01 * started(step), rel=1e-9), step
    assert "keeps the schedule the run started with (12 steps, warm-up 2), not the 20 steps" in caplog.text


def test_ema_updates_once_per_optimizer_step_with_gradient_accumulation(tmp_path):
    torch.manual_seed(0)
    net = DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("tksa",),))
    module = DerainLitModule(net, lr=0.01, warmup_steps=0, ema_decay=0.5, sample_images=0)
    start = {k: v.detach().clone() for k, v in module.net.named_parameters()}

    class WeightsPerStep(L.Callback):
        """The raw weights after each optimizer step (global_step counts them)."""

        def __init__(self):
            self.weights: dict[int, dict[str, torch.Tensor]] = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.weights[trainer.global_step] = {
                k: v.detach().clone() for k, v in pl_module.net.named_parameters()
            }

    seen = WeightsPerStep()
    batches = [{"rain": torch.rand(3, 16, 16), "clean": torch.rand(3, 16, 16)} for _ in range(6)]
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[seen],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=1))
    assert trainer.global_step == 3 and sorted(seen.weights) == [0, 1, 2, 3]  # 6 batches, 3 optimizer steps
    expected = start
    for step in (1, 2, 3):  # one update per optimizer step, with the decay of that step
        decay = min(0.5, (1 + step) / (10 + step))
        expected = {k: decay * v + (1 - decay) * seen.weights[step][k] for k, v in expected.items()}
    for name, averaged in module.ema.named_parameters():
        torch.testing.assert_close(averaged, expected[name], rtol=0, atol=1e-6, msg=name)


def test_fit_tests_the_best_checkpoint_and_prints_the_table(tmp_path, capsys):
    root = tmp_path / "Rain"
    make_folder(root / "train", n=4)
    make_folder(root / "test", n=2, seed=1)
    args = [
        *TINY_NET,
        *QUIET,
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--data.pairs.root={root}",
        "--data.pairs.val_fraction=0.25",
        "--data.pairs.drop_test_overlap=false",
        "--data.patch_size=32",
        "--data.batch_size=3",
        "--data.num_workers=0",
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


def test_validation_reports_each_data_set_apart(tmp_path):
    from torch.utils.data import DataLoader

    from derain.data import PairedDataset, find_pairs

    heavy, light = make_folder(tmp_path / "heavy", n=2), make_folder(tmp_path / "light", n=3, seed=1)
    pairs = find_pairs(heavy) + find_pairs(light)
    sets = ["heavy"] * 2 + ["light"] * 3
    loader = DataLoader(PairedDataset(pairs, sets=sets), batch_size=1)
    net = tiny_net()
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (logged,) = trainer.validate(DerainLitModule(net, sample_images=0), loader, verbose=False)
    expected = {}
    for name, group in (("heavy", pairs[:2]), ("light", pairs[2:])):
        metrics = DerainMetrics()
        with torch.no_grad():
            for rain_path, clean_path in group:
                rain, clean = (to_tensor(read_rgb(p))[None] for p in (rain_path, clean_path))
                metrics.update(net(rain).clamp(0, 1), clean)
        expected[name] = {k: float(v) for k, v in metrics.compute().items()}
    for name in ("heavy", "light"):
        assert logged[f"val/{name}/psnr_y"] == pytest.approx(expected[name]["psnr_y"], abs=1e-3)
        assert logged[f"val/{name}/ssim_y"] == pytest.approx(expected[name]["ssim_y"], abs=1e-4)
    assert "val/psnr_y" in logged  # and the whole validation, as before

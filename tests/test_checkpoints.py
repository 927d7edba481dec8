"""``last.ckpt``: written after validation and on Ctrl+C; the same command resumes from it with its weights, optimizer,
schedule and step, whatever changed in the moving average or the starting weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import TINY_NET, tiny_net
from training_helpers import QUIET, make_folder

from derain.fit import main as fit_main
from derain.train import DerainLitModule, LastCheckpoint, WarmupCosine, last_checkpoint
from derain.weights import save_net


def test_last_checkpoint_lives_in_the_checkpoint_folder(tmp_path: Path) -> None:
    assert last_checkpoint(None, tmp_path) == tmp_path / "checkpoints" / "last.ckpt"
    assert last_checkpoint(tmp_path / "ckpts", tmp_path / "run") == tmp_path / "ckpts" / "last.ckpt"
    assert last_checkpoint(None, None) == Path("checkpoints") / "last.ckpt"
    assert LastCheckpoint(str(tmp_path / "x.ckpt")).path == tmp_path / "x.ckpt"


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


@pytest.mark.slow
def test_fine_tune_resumes_without_its_init_weights_file(tmp_path, capsys):
    data = make_folder(tmp_path / "pairs")
    source = save_net(tiny_net(seed=5), tmp_path / "start.safetensors")
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


@pytest.mark.slow
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

"""``last.ckpt``: written after validation and on Ctrl+C; the same command resumes from it with its weights, optimizer,
schedule and step, whatever changed in the weight averaging or the starting weights; an old moving average is refused."""

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
        f"--init_weights={source}",
        "--export=false",
    ]
    assert fit_main([*common, "--trainer.max_steps=2"]) == 0
    source.unlink()  # the resumed run takes its weights from last.ckpt, not from the (now missing) start file
    capsys.readouterr()
    assert fit_main([*common, "--trainer.max_steps=4"]) == 0
    out = capsys.readouterr().out
    assert f"Resuming: --init_weights {source} is not read" in out and "(step 2)" in out
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


@pytest.mark.slow
def test_resume_across_a_change_of_weight_averaging(tmp_path, caplog, capsys):
    run = tmp_path / "run"
    common = [*TINY_NET, *QUIET, f"--trainer.default_root_dir={run}", "--data.synthesis.builtin_photos=true"]
    common += ["--data.synthesis.length=8", "--data.batch_size=4"]
    common += [
        "--data.num_workers=0",
        "--data.patch_size=32",
        "--trainer.limit_val_batches=0",
        "--export=false",
    ]
    ema = ["--trainer.callbacks+=EMAWeightAveraging", "--trainer.callbacks.decay=0.9"]
    last = run / "checkpoints" / "last.ckpt"
    assert fit_main([*common, "--trainer.max_steps=2"]) == 0
    # a run saved without an average resumes with one (Lightning's WeightAveraging starts it from the weights)
    assert fit_main([*common, "--trainer.max_steps=3", *ema]) == 0
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == 3 and int(saved["averaging_state"]["n_averaged"]) == 1
    assert saved["state_dict"].keys() == saved["current_model_state"].keys()  # average, and raw for resuming
    # and back: a run that kept one resumes without, from its raw weights, dropping the average
    assert fit_main([*common, "--trainer.max_steps=4"]) == 0
    assert "checkpoint's moving average is dropped" in caplog.text
    saved = torch.load(last, weights_only=True)
    assert "current_model_state" not in saved and saved["global_step"] == 4

    # a checkpoint of the old hand-written average (model.ema_decay: ema.* weights) is refused in one line
    saved["state_dict"] |= {"ema." + k.removeprefix("net."): v for k, v in saved["state_dict"].items()}
    torch.save(saved, last)
    capsys.readouterr()
    assert fit_main([*common, "--trainer.max_steps=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {last}: written with the old model.ema_decay"), err
    assert "python -m derain.export" in err[-1]


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

"""Weights that say how they were made: the tensors' sha256 (what the recipe pins, blind to metadata) and the
provenance entry (config, commit, data manifest, steps, validation) written at export and read back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import tiny_net

from derain.export import main as export_main
from derain.models import network_record
from derain.weights import (
    CHECKPOINT_KEY,
    STARTED_KEY,
    WeightsError,
    export_checkpoint,
    load_net,
    save_net,
    tensors_sha256,
)
from derain.weights.provenance import (
    checkpoint_provenance,
    config_folders,
    data_manifest,
    git_commit,
    provenance,
    provenance_metadata,
    read_provenance,
    saved_config,
    weights_ref,
    write_provenance,
)


def test_the_tensors_hash_ignores_metadata_and_the_checkpoint_prefix(tmp_path) -> None:
    net = tiny_net(seed=1)
    a = save_net(net, tmp_path / "a.safetensors", extra={"source": "a"})
    b = save_net(net, tmp_path / "b.safetensors", extra={"source": "b", "more": "x"})
    torch.save(
        {
            "state_dict": {f"net.{k}": v for k, v in net.state_dict().items()},
            CHECKPOINT_KEY: network_record(net),
        },
        tmp_path / "c.ckpt",
    )
    assert (
        tensors_sha256(a)
        == tensors_sha256(b)
        == tensors_sha256(tmp_path / "c.ckpt")
        == tensors_sha256(net.state_dict())
    )
    assert a.read_bytes() != b.read_bytes()
    assert tensors_sha256(save_net(tiny_net(seed=2), tmp_path / "other.safetensors")) != tensors_sha256(a)


def test_provenance_goes_in_at_export_and_comes_back(tmp_path) -> None:
    net = tiny_net(seed=3)
    ckpt = tmp_path / "last.ckpt"
    torch.save(
        {
            "state_dict": {f"net.{k}": v for k, v in net.state_dict().items()},
            CHECKPOINT_KEY: network_record(net),
        },
        ckpt,
    )
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "1.png").write_bytes(b"12345")
    config = {"seed_everything": 4, "data": {"pairs": {"train_dirs": [str(tmp_path / "pairs"), "nowhere"]}}}
    prov = provenance(
        config=config, steps=12, validation={"val/psnr_y": 21.5}, commit="abc123", checkpoint="last.ckpt"
    )
    out = export_checkpoint(ckpt, tmp_path / "model.safetensors", extra=provenance_metadata(prov))
    back = read_provenance(out)
    assert back == prov and back["steps"] == 12 and back["commit"] == "abc123"
    assert (
        back["data"]["files"] == 1
        and back["data"]["bytes"] == 5
        and back["data"]["folders"] == [str(tmp_path / "pairs")]
    )
    assert tensors_sha256(out) == tensors_sha256(net.state_dict()) and load_net(out) is not None


def test_provenance_attached_later_keeps_the_tensors(tmp_path) -> None:
    plain = save_net(tiny_net(seed=5), tmp_path / "plain.safetensors")
    assert read_provenance(plain) is None
    before = tensors_sha256(plain)
    prov = provenance(config={}, steps=3, validation={}, commit=None, data={})
    out = write_provenance(plain, prov, tmp_path / "with.safetensors")
    assert read_provenance(out)["steps"] == 3 and tensors_sha256(out) == before
    write_provenance(plain, prov)  # in place
    assert read_provenance(plain)["steps"] == 3 and not list(tmp_path.glob("*.tmp*"))


def test_the_data_manifest_names_folders_as_the_config_spells_them(tmp_path, monkeypatch) -> None:
    for where in ("here", "there"):
        (tmp_path / where / "set" / "rain").mkdir(parents=True)
        (tmp_path / where / "set" / "rain" / "1.png").write_bytes(b"abc")
    monkeypatch.setenv("DERAIN_DATA", str(tmp_path / "here"))
    here = data_manifest(["$DERAIN_DATA/set"])
    monkeypatch.setenv("DERAIN_DATA", str(tmp_path / "there"))
    assert data_manifest(["$DERAIN_DATA/set"]) == here  # the same data elsewhere: the same hash
    (tmp_path / "there" / "set" / "rain" / "1.png").write_bytes(b"abcd")
    assert data_manifest(["$DERAIN_DATA/set"])["sha256"] != here["sha256"]  # a file changed size
    config = {
        "pairs": {"train_dirs": ["$DERAIN_DATA/set", "$DERAIN_DATA/missing"], "repeat": 4},
        "loss": "l1",
    }
    assert config_folders(config) == ["$DERAIN_DATA/set"]


def test_no_commit_outside_a_git_checkout(tmp_path) -> None:
    assert git_commit(tmp_path) is None


def test_a_copy_sent_elsewhere_names_the_commit_it_was_sent_as(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DERAIN_COMMIT", "cacb8763addbe86b26aff6786f4513919e5b07a7")
    assert git_commit(tmp_path) == git_commit() == "cacb8763addbe86b26aff6786f4513919e5b07a7"


def _run_checkpoint(run, net, **more) -> Path:
    """A checkpoint as derain.fit leaves one in ``run/checkpoints`` (network, step, best score, start)."""
    (run / "checkpoints").mkdir(parents=True)
    ckpt = run / "checkpoints" / "last.ckpt"
    monitor = "ModelCheckpoint{'monitor': 'val/psnr_y', 'mode': 'max'}"
    best = {
        "monitor": "val/psnr_y",
        "best_model_score": torch.tensor(21.54321),
        "best_model_path": "x/best-7.ckpt",
    }
    saved = {
        "state_dict": {f"net.{k}": v for k, v in net.state_dict().items()},
        CHECKPOINT_KEY: network_record(net),
        "global_step": 7,
        "callbacks": {"TimeBudget": {"last_step": 7}, monitor: best},
        **more,
    }
    torch.save(saved, ckpt)
    return ckpt


def _saved_config(run: Path, version: int | None, seed: int, when: float, root: str = "runs/x") -> Path:
    """A config LightningCLI saved for a run (``version`` None: the run had no logger), written at ``when``."""
    config = (
        run / "config.yaml"
        if version is None
        else run / "lightning_logs" / f"version_{version}" / "config.yaml"
    )
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"seed_everything: {seed}\ntrainer:\n  default_root_dir: {root}\ndata:\n  pairs:\n    repeat: 4\n"
    )
    os.utime(config, (when, when))
    return config


def test_derain_export_records_what_the_checkpoint_and_its_run_say(tmp_path, capsys) -> None:
    net = tiny_net(seed=6)
    start = save_net(tiny_net(seed=7), tmp_path / "start.safetensors")
    run = tmp_path / "runs" / "x"
    ckpt = _run_checkpoint(run, net, **{STARTED_KEY: weights_ref(start)})
    written = ckpt.stat().st_mtime
    _saved_config(run, 0, 1, written - 20)
    chosen = _saved_config(run, 1, 2, written - 10)
    _saved_config(run, 2, 3, written + 10)  # a later run's, saved after the checkpoint
    _saved_config(run, 3, 4, written - 5, root="runs/other")  # another run's checkpoints folder
    assert export_main([str(ckpt), str(tmp_path / "out.safetensors")]) == 0
    assert f"config from {chosen.resolve()}" in capsys.readouterr().out
    prov = read_provenance(tmp_path / "out.safetensors")
    # the config of the run that wrote the checkpoint: the newest saved before it that names its folder
    assert prov["config"]["seed_everything"] == 2 and prov["config_source"] == str(chosen.resolve())
    assert prov["steps"] == 7 and prov["checkpoint"] == "last.ckpt" and prov["exported_by"] == "derain export"
    assert prov["validation"] == {"best": {"val/psnr_y": 21.5432, "checkpoint": "best-7.ckpt"}}
    assert prov["started_from"] == {"file": str(start), "tensors_sha256": tensors_sha256(start)}
    # the commit that trained is not in a checkpoint: none claimed, the exporting code's named apart
    assert prov["commit"] is None and "export_commit" in prov
    assert tensors_sha256(tmp_path / "out.safetensors") == tensors_sha256(net.state_dict())


def test_a_run_without_a_logger_saves_its_config_beside_its_checkpoints(tmp_path) -> None:
    run = tmp_path / "runs" / "x"
    ckpt = _run_checkpoint(run, tiny_net(seed=9))
    config = _saved_config(run, None, 5, ckpt.stat().st_mtime - 1)
    assert saved_config(ckpt) == config.resolve()
    # an absolute root names another folder: not this run's
    _saved_config(run, 0, 6, ckpt.stat().st_mtime - 1, root="/elsewhere/x")
    assert saved_config(ckpt) == config.resolve()
    config.write_text("seed_everything: [unclosed\n")
    os.utime(config, (ckpt.stat().st_mtime - 1,) * 2)
    with pytest.raises(WeightsError, match="config.yaml: not a readable YAML config"):
        checkpoint_provenance(ckpt)


def test_a_checkpoint_without_its_run_records_its_own_hyperparameters(tmp_path) -> None:
    ckpt = _run_checkpoint(tmp_path / "run", tiny_net(seed=8), hyper_parameters={"lr": 0.001})
    prov = checkpoint_provenance(ckpt)
    assert prov["config"] == {"model": {"lr": 0.001}, "data": {}} and "started_from" not in prov
    assert prov["config_source"].startswith("the checkpoint's hyperparameters")


def test_derain_export_names_a_missing_checkpoint(tmp_path, capsys) -> None:
    assert export_main([str(tmp_path / "none.ckpt"), str(tmp_path / "out.safetensors")]) == 2
    assert "checkpoint not found: " + str(tmp_path / "none.ckpt") in capsys.readouterr().err
    assert not (tmp_path / "out.safetensors").exists()

"""Weights that say how they were made: the tensors' sha256 (what the recipe pins, blind to metadata) and the
provenance entry (config, commit, data manifest, steps, validation) written at export and read back."""

from __future__ import annotations

import torch
from helpers import tiny_net

from derain.models import network_record
from derain.weights import CHECKPOINT_KEY, export_checkpoint, load_net, save_net, tensors_sha256
from derain.weights.provenance import (
    config_folders,
    data_manifest,
    git_commit,
    provenance,
    provenance_metadata,
    read_provenance,
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

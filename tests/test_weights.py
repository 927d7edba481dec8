"""``derain.weights``, the one owner of weights files: the format (record + tensors in a safetensors file), saving,
exporting a checkpoint, loading to an ``nn.Module``, the packaged file, and errors that name the file."""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import pytest
import torch
from helpers import TINY, tiny_net
from safetensors import safe_open
from safetensors.torch import save_file

from derain.models import network_record
from derain.weights import (
    CHECKPOINT_KEY,
    FORMAT,
    WeightsError,
    WeightsNotFoundError,
    export_checkpoint,
    load_checkpoint,
    load_net,
    packaged_weights,
    read_checkpoint_net,
    read_safetensors,
    resolve,
    save_net,
    save_tensors,
)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_weights_file_is_the_record_and_the_tensors(tmp_path: Path) -> None:
    net = tiny_net(seed=1)
    path = save_net(net, tmp_path / "net.safetensors", extra={"source": "test"})
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        keys = set(f.keys())
    assert meta["format"] == FORMAT == "derain-net-v2" and meta["source"] == "test"
    record = json.loads(meta["net"])
    assert record == network_record(net) and record["init_args"]["dim"] == TINY["dim"]
    assert keys == set(net.state_dict())
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically: nothing left beside it


def test_save_then_load_gives_the_same_network(tmp_path: Path) -> None:
    net = tiny_net(seed=2)
    loaded = load_net(save_net(net, tmp_path / "net.safetensors"))
    assert type(loaded) is type(net) and loaded.init_args == net.init_args and same_weights(loaded, net)
    x = torch.rand(1, 3, 20, 28)
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), net(x))


def test_a_half_precision_file_loads_as_a_float32_network(tmp_path: Path) -> None:
    net = tiny_net(seed=5).eval()
    meta, state = read_safetensors(save_net(net, tmp_path / "net.safetensors"))
    half = save_tensors({k: v.half() for k, v in state.items()}, tmp_path / "half.safetensors", meta)
    loaded = load_net(half).eval()
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    x = torch.rand(1, 3, 20, 28)
    with torch.no_grad():
        assert torch.allclose(loaded(x), net(x), atol=1e-2)


def test_a_checkpoint_exports_its_moving_average_or_its_weights(tmp_path: Path) -> None:
    net, ema = tiny_net(seed=3), tiny_net(seed=4)
    plain = {f"net.{k}": v for k, v in net.state_dict().items()}
    torch.save({"state_dict": plain, CHECKPOINT_KEY: network_record(net)}, tmp_path / "plain.ckpt")
    state, record = read_checkpoint_net(tmp_path / "plain.ckpt")
    assert record == network_record(net) and state.keys() == net.state_dict().keys()
    both = plain | {f"ema.{k}": v for k, v in ema.state_dict().items()}
    torch.save({"state_dict": both, CHECKPOINT_KEY: network_record(net)}, tmp_path / "both.ckpt")
    out = export_checkpoint(tmp_path / "both.ckpt", tmp_path / "both.safetensors")
    assert same_weights(load_net(out), ema)  # the average is what the run validated
    with safe_open(str(out), framework="pt") as f:
        assert f.metadata()["source"] == "both.ckpt"
    assert same_weights(load_net(tmp_path / "plain.ckpt"), net)  # a checkpoint loads as it is, too


def test_the_packaged_weights_are_a_derain_weights_file() -> None:
    path = packaged_weights()
    assert path.name == "derain-small.safetensors" and resolve(None) == path
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["format"] == FORMAT


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


def _resident_bytes(field: str = "VmRSS") -> int:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), from Linux's /proc."""
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from Linux's /proc")
def test_a_peek_at_a_checkpoint_maps_its_tensors_and_does_not_read_them(tmp_path: Path) -> None:
    # what derain fit's resume message and the provenance of an export read: the step, not 64 MB of weights
    path = tmp_path / "big.ckpt"
    torch.save({"state_dict": {"net.w": torch.ones(16 * 2**20)}, "global_step": 7}, path)
    gc.collect()
    before = _resident_bytes()
    peek = load_checkpoint(path, mmap=True)
    peeked = _resident_bytes() - before
    assert peek["global_step"] == 7 and peeked < 16 * 2**20
    # the tensors are there, read on demand
    assert torch.equal(peek["state_dict"]["net.w"][-4:], torch.ones(4))
    before = _resident_bytes()
    full = load_checkpoint(path)
    assert _resident_bytes() - before > 48 * 2**20 and full["global_step"] == 7
    legacy = tmp_path / "legacy.ckpt"  # torch's format before 1.6 cannot be mapped: it is read whole
    torch.save({"state_dict": {}, "global_step": 3}, legacy, _use_new_zipfile_serialization=False)
    assert load_checkpoint(legacy, mmap=True)["global_step"] == 3


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads peak memory from Linux's /proc")
def test_reading_a_checkpoints_network_does_not_read_its_optimizer_state(tmp_path: Path) -> None:
    # an export, `load_model` and `tensors_sha256` of a .ckpt: 4 MB of network in a 132 MB checkpoint
    path = tmp_path / "trained.ckpt"
    torch.save(
        {
            "state_dict": {"net.w": torch.full((2**20,), 2.0)},
            "current_model_state": {"net.w": torch.ones(16 * 2**20)},
            "optimizer_states": [{"state": {0: {"exp_avg": torch.ones(16 * 2**20)}}}],
            CHECKPOINT_KEY: {"class_path": "derain.models.DerainNet", "init_args": {}},
        },
        path,
    )
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from what is resident now
    before = _resident_bytes()
    state, record = read_checkpoint_net(path)
    assert float(state["w"].sum()) == 2.0 * 2**20 and record["init_args"] == {}
    # read whole, the checkpoint's 132 MB would pass through memory
    assert _resident_bytes("VmHWM") - before < 32 * 2**20
    # what was read is the reader's own: the run that wrote the checkpoint may write it again, in place
    with path.open("r+b") as f:
        f.write(b"\0" * path.stat().st_size)
    path.unlink()
    assert float(state["w"].sum()) == 2.0 * 2**20


def write_other_format(path: Path) -> None:
    save_file({"w": torch.zeros(1)}, str(path), metadata={"format": "other"})


@pytest.mark.parametrize(
    ("name", "content", "error", "match"),
    [
        ("nope.safetensors", None, WeightsNotFoundError, r"weights file .*nope\.safetensors does not exist"),
        ("empty.safetensors", b"", WeightsError, r"empty\.safetensors: the weights file is empty"),
        ("junk.safetensors", b"junk", WeightsError, r"junk\.safetensors: not a readable safetensors file"),
        (
            "other.safetensors",
            write_other_format,
            WeightsError,
            r"other\.safetensors: metadata 'format' is 'other'",
        ),
        ("net.onnx", b"onnx", WeightsError, r"net\.onnx: an ONNX file runs with backend onnxruntime"),
        ("net.bin", b"bin", WeightsError, r"net\.bin: unknown weights suffix '\.bin'"),
    ],
    ids=["missing", "empty", "junk", "other-format", "onnx", "unknown-suffix"],
)
def test_unusable_files_are_errors_naming_the_file(tmp_path: Path, name, content, error, match) -> None:
    path = tmp_path / name
    if callable(content):
        content(path)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(error, match=match):
        load_net(path)


def test_weights_that_do_not_fit_their_record_are_an_error_naming_the_file(tmp_path: Path) -> None:
    path = save_net(tiny_net(), tmp_path / "net.safetensors")
    with safe_open(str(path), framework="pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = f.metadata()
    state.pop(next(iter(state)))
    save_file(state, str(tmp_path / "short.safetensors"), metadata=meta)
    with pytest.raises(WeightsError, match=r"short\.safetensors: the weights do not fit the stored network"):
        load_net(tmp_path / "short.safetensors")

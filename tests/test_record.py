"""One record of the network (``class_path`` + ``init_args``): taken from the constructor call, stored by export
and checkpoints, and the only thing loading builds from."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from derain.inference import WeightsError, load_model
from derain.models import DerainNet, Recorded, build_network, network_record
from derain.weights import FORMAT, export_checkpoint, save_net

NON_DEFAULT = {
    "dim": 8,
    "blocks": (1, 1, 2),
    "heads": (1, 2, 2),
    "mixers": (("channel",), ("agent",), ("agent", "tksa")),
    "topk_ratios": (0.5, 0.75),
    "ratio_weighting": "softmax",
    "agents": (4, 9, 4),
    "agent_source": "learned",
    "agent_bias": False,
    "agent_dwc": False,
    "ffn_expansion": 1.5,
    "refine_blocks": 1,
    "embed_stride": 1,
}


class TinyResidual(Recorded, nn.Module):
    """A network that is not a DerainNet, to show that loading builds whatever class the record names."""

    def __init__(self, *, width: int = 4, gain: float = 0.5):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, 3, 1))
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gain * self.body(x)


def _randomise(net: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p) * 0.1)
    return net.eval()


def test_the_record_is_the_constructor_call_with_defaults_filled() -> None:
    record = network_record(DerainNet(**NON_DEFAULT))
    assert record["class_path"] == "derain.models.net.DerainNet"
    args = record["init_args"]
    assert {k: args[k] for k in NON_DEFAULT} == json.loads(json.dumps(NON_DEFAULT))
    assert args["grad_checkpoint"] is False and args["in_channels"] == 3  # defaults are recorded too
    # every constructor argument is in the record, so none can be forgotten by hand
    import inspect

    assert set(args) == set(inspect.signature(DerainNet.__init__).parameters) - {"self"}


@pytest.mark.parametrize("via", ["safetensors", "checkpoint"])
def test_a_non_default_network_round_trips_with_equal_outputs(tmp_path: Path, via: str) -> None:
    net = _randomise(DerainNet(**NON_DEFAULT))
    if via == "safetensors":
        path = save_net(net, tmp_path / "net.safetensors")
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        assert meta["format"] == FORMAT and json.loads(meta["net"]) == network_record(net)
    else:
        state = {f"net.{k}": v for k, v in net.state_dict().items()}
        torch.save({"state_dict": state, "derain_net": network_record(net)}, tmp_path / "run.ckpt")
        path = export_checkpoint(tmp_path / "run.ckpt", tmp_path / "net.safetensors")
    loaded = load_model(path, device="cpu")
    assert network_record(loaded) == network_record(net)
    x = torch.rand(1, 3, 37, 51)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), net(x), rtol=0, atol=0)


def test_loading_builds_the_class_the_record_names(tmp_path: Path) -> None:
    net = _randomise(TinyResidual(width=6, gain=0.25))
    loaded = load_model(save_net(net, tmp_path / "tiny.safetensors"), device="cpu")
    assert type(loaded) is TinyResidual and loaded.init_args == {"width": 6, "gain": 0.25}
    x = torch.rand(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), net(x), rtol=0, atol=0)


def test_version_1_files_still_load(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    net = _randomise(DerainNet(**TINY))
    state = {k: v.contiguous() for k, v in net.state_dict().items()}
    save_file(
        state,
        tmp_path / "old.safetensors",
        metadata={"format": "derain-net-v1", "config": json.dumps(net.init_args)},
    )
    loaded = load_model(tmp_path / "old.safetensors", device="cpu")
    assert network_record(loaded) == network_record(net)


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"class_path": "os.system", "init_args": {}}, "not a network class"),
        (
            {"class_path": "torch.nn.Linear", "init_args": {"in_features": 9, "out_features": 9}},
            "not a network",
        ),
        ({"class_path": "antigravity.Fly", "init_args": {}}, "outside derain and its module is not imported"),
        ({"class_path": "derain.models.nope.Net", "init_args": {}}, "cannot import"),
        ({"class_path": "derain.models.DerainNet", "init_args": {"depth": 3}}, "depth"),
        ({"class_path": "derain.models.DerainNet", "init_args": {"dim": 0}}, "cannot build"),
        ({"init_args": {}}, "class_path"),
    ],
)
def test_bad_records_are_errors_naming_the_problem(tmp_path: Path, record: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_network(record)
    from safetensors.torch import save_file

    save_file(
        {"w": torch.zeros(1)},
        tmp_path / "bad.safetensors",
        metadata={"format": FORMAT, "net": json.dumps(record)},
    )
    with pytest.raises(WeightsError, match="bad.safetensors"):
        load_model(tmp_path / "bad.safetensors", device="cpu")


def test_a_weights_file_never_makes_derain_import_code() -> None:
    with pytest.raises(ValueError, match="not imported"):
        build_network({"class_path": "this.Zen", "init_args": {}})
    assert "this" not in sys.modules and "antigravity" not in sys.modules


def test_huge_sizes_in_a_record_are_refused_before_any_allocation(tmp_path: Path) -> None:
    net = DerainNet(**TINY)
    record = {**network_record(net), "init_args": {**net.init_args, "dim": 4_000_000}}  # ~TBs if allocated
    save_file(
        {k: v.contiguous() for k, v in net.state_dict().items()},
        tmp_path / "huge.safetensors",
        metadata={"format": FORMAT, "net": json.dumps(record)},
    )
    with pytest.raises(WeightsError, match=r"huge\.safetensors: the weights do not fit the stored network"):
        load_model(tmp_path / "huge.safetensors", device="cpu")


class WithOptions(Recorded, nn.Module):
    def __init__(self, width: int = 4, **options: float):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 1)
        self.options = options


def test_keyword_options_are_recorded_as_the_keywords_they_were() -> None:
    net = WithOptions(width=5, gain=0.5)
    assert net.init_args == {"width": 5, "gain": 0.5}
    assert build_network(network_record(net)).options == {"gain": 0.5}


def test_classes_that_cannot_be_rebuilt_by_name_are_refused() -> None:
    with pytest.raises(TypeError, match=r"\*args"):

        class Positional(Recorded, nn.Module):
            def __init__(self, *sizes: int):
                super().__init__()

    class Local(Recorded, nn.Module):
        def __init__(self, width: int = 2):
            super().__init__()

    with pytest.raises(TypeError, match="cannot be imported by name"):
        network_record(Local())


def test_a_network_without_a_record_cannot_be_exported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Conv2d does not record"):
        save_net(nn.Conv2d(3, 3, 1), tmp_path / "x.safetensors")

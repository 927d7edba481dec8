"""DerainNet: any size in gives the same size out, gradients flow, the config rebuilds it."""

import pytest
import torch
from helpers import grads_finite

from derain.models import DerainNet


def tiny(**kw):
    cfg = dict(dim=8, blocks=(1, 1, 1), heads=(1, 2, 2), mixers=(("agent",), ("tksa",), ("agent",)), agents=9)
    cfg.update(kw)
    return DerainNet(**cfg)


@pytest.mark.parametrize("size", [(1, 3, 37, 53), (2, 3, 64, 48), (1, 3, 5, 7)])
def test_any_size_in_same_size_out_with_finite_grads(size):
    torch.manual_seed(0)
    # 5×7 leaves a 1×1 bottleneck map: its one token is every agent's value, whatever the agent biases
    zero_ok = ("bottleneck.0.attn.agg_bias", "bottleneck.0.attn.bcast_bias") if size[-1] < 8 else ()
    grads_finite(tiny(), torch.rand(*size, requires_grad=True), zero_ok=zero_ok)


@pytest.mark.parametrize("dead", ["dropped", "multiplied by zero"])
def test_the_gradient_check_catches_a_dead_branch(dead, monkeypatch):
    net = tiny()
    attn = net.bottleneck[0].attn
    forward = attn.forward
    if dead == "dropped":
        monkeypatch.setattr(attn, "forward", lambda x: torch.zeros_like(x))
    else:
        monkeypatch.setattr(attn, "forward", lambda x: 0.0 * forward(x))
    with pytest.raises(
        AssertionError, match=r"^bottleneck\.0\.(norm1|attn)\..*: (no gradient|gradient zero)"
    ):
        grads_finite(net, torch.rand(1, 3, 37, 53, requires_grad=True))


def test_default_model_size_and_shape():
    net = DerainNet()
    n = sum(p.numel() for p in net.parameters())
    assert n <= 2_500_000, n
    with torch.no_grad():
        assert net(torch.rand(1, 3, 37, 53)).shape == (1, 3, 37, 53)


def test_output_is_residual_on_input():
    net = tiny()
    with torch.no_grad():
        for p in net.head.parameters():
            p.zero_()
        x = torch.rand(1, 3, 20, 28)
        assert torch.equal(net(x), x)


def test_config_rebuilds_the_same_network():
    net = tiny(embed_stride=1)
    clone = DerainNet(**net.init_args)
    clone.load_state_dict(net.state_dict())
    x = torch.rand(1, 3, 24, 24)
    with torch.no_grad():
        assert torch.equal(net(x), clone(x))


def test_mixers_are_config():
    net = tiny(mixers=(("channel",), ("tksa",), ("tksa",)))
    kinds = {type(m.attn).__name__ for m in net.modules() if hasattr(m, "attn")}
    assert kinds == {"ChannelAttention", "TopKSparseAttention"}


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="one mixer per block"):
        tiny(mixers=(("agent", "tksa"), ("tksa",), ("agent",)))
    with pytest.raises(ValueError, match="unknown mixer 'dense'"):
        tiny(mixers=(("dense",), ("tksa",), ("agent",)))
    with pytest.raises(ValueError, match="one entry per level"):
        tiny(heads=(1, 2))

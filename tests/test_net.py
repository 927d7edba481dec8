"""DerainNet: any size in gives the same size out, gradients flow, the config rebuilds it."""

import pytest
import torch
from helpers import TINY, grads_finite, tiny_net

from derain.models import DerainNet


@pytest.mark.parametrize("size", [(1, 3, 37, 53), (2, 3, 64, 48), (1, 3, 5, 7)])
def test_any_size_in_same_size_out_with_finite_grads(size):
    torch.manual_seed(0)
    grads_finite(tiny_net().train(), torch.rand(*size, requires_grad=True))


@pytest.mark.parametrize("dead", ["dropped", "multiplied by zero"])
def test_the_gradient_check_catches_a_dead_branch(dead, monkeypatch):
    net = tiny_net().train()
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
    net = tiny_net()
    with torch.no_grad():
        for p in net.head.parameters():
            p.zero_()
        x = torch.rand(1, 3, 20, 28)
        assert torch.equal(net(x), x)


def test_config_rebuilds_the_same_network():
    net = DerainNet(**TINY, embed_stride=1)
    clone = DerainNet(**net.init_args)
    clone.load_state_dict(net.state_dict())
    x = torch.rand(1, 3, 24, 24)
    with torch.no_grad():
        assert torch.equal(net(x), clone(x))


def test_mixers_are_config():
    net = DerainNet(**{**TINY, "mixers": (("channel",), ("tksa",))})
    kinds = {type(m.attn).__name__ for m in net.modules() if hasattr(m, "attn")}
    assert kinds == {"ChannelAttention", "TopKSparseAttention"}


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="one mixer per block"):
        DerainNet(**{**TINY, "mixers": (("agent", "tksa"), ("agent",))})
    with pytest.raises(ValueError, match="unknown mixer 'dense'"):
        DerainNet(**{**TINY, "mixers": (("dense",), ("agent",))})
    with pytest.raises(ValueError, match="one entry per level"):
        DerainNet(**{**TINY, "heads": (1,)})

"""The research options of DerainNet (agent source/count/bias/DWC, ratio weighting, checkpointing, bf16): each
does what it says, and the default network is exactly what it was."""

import hashlib

import pytest
import torch
from helpers import grads_finite, three_level_net
from torch.utils._python_dispatch import TorchDispatchMode

from derain.models import AgentAttention, DerainNet, TopKSparseAttention
from derain.models.attention import agent_attention

# sha256 of the sorted "name:shape" lines of DerainNet().state_dict(), captured before the research options
# were added (162 tensors). Trained weights of the default network must keep loading.
DEFAULT_STATE_DICT_SHA256 = "a40ce12232559821ed8f8a725cd52295f5b6e4b3fd1ae5e34983d08b5765f72b"


pytestmark = pytest.mark.usefixtures("one_thread")
tiny = three_level_net


def test_default_network_state_dict_is_unchanged():
    net = DerainNet()
    lines = "\n".join(f"{k}:{tuple(v.shape)}" for k, v in sorted(net.state_dict().items()))
    assert hashlib.sha256(lines.encode()).hexdigest() == DEFAULT_STATE_DICT_SHA256
    assert (
        net.init_args["agent_source"] == "pool" and net.init_args["agent_bias"] and net.init_args["agent_dwc"]
    )
    assert net.init_args["ratio_weighting"] == "raw" and not net.init_args["grad_checkpoint"]


def test_old_configs_without_the_new_keys_still_build():
    old = dict(DerainNet().init_args)
    for key in ("ratio_weighting", "agent_source", "agent_bias", "agent_dwc", "grad_checkpoint"):
        old.pop(key)
    assert DerainNet(**old).init_args == DerainNet().init_args


def test_agent_bias_off_leaves_no_bias_parameters():
    attn = AgentAttention(16, 2, agents=9, agent_bias=False)
    names = [n for n, _ in attn.named_parameters()]
    assert not any("agg_bias" in n or "bcast_bias" in n for n in names), names
    assert attn.biases(5, 7) == (None, None)
    grads_finite(attn, torch.randn(1, 16, 13, 11, requires_grad=True))
    net = tiny(agent_bias=False)
    assert not any("_bias" in n for n, _ in net.named_parameters())
    assert DerainNet(**net.init_args).init_args["agent_bias"] is False


def test_agent_dwc_off_removes_the_conv_and_changes_the_output():
    torch.manual_seed(0)
    with_dwc = AgentAttention(16, 2, agents=9)
    without = AgentAttention(16, 2, agents=9, dwc=False)
    assert without.dwc is None and not any(n.startswith("dwc") for n, _ in without.named_parameters())
    missing = without.load_state_dict(with_dwc.state_dict(), strict=False)
    assert set(missing.unexpected_keys) == {"dwc.weight", "dwc.bias"} and not missing.missing_keys
    x = torch.randn(2, 16, 12, 10)
    with torch.no_grad():
        assert not torch.allclose(with_dwc(x), without(x))
        v = with_dwc.qkv(x).chunk(3, dim=1)[2]
        # the only difference is the DWC of V, projected
        assert torch.allclose(with_dwc(x) - without(x), with_dwc.proj(with_dwc.dwc(v)), atol=1e-5)
    grads_finite(without, x.clone().requires_grad_())


def test_learned_agents_are_a_parameter_independent_of_the_input(monkeypatch):
    torch.manual_seed(1)
    attn = AgentAttention(16, 2, agents=10, agent_source="learned")  # need not be a square
    assert attn.agent_tokens.shape == (1, 2, 10, 8)
    assert "agent_tokens" in dict(attn.named_parameters())
    grads_finite(attn, torch.randn(2, 16, 9, 14, requires_grad=True))
    assert attn.agent_tokens.grad is not None
    seen = []

    def spy(q, k, v, agents, *args, **kw):
        seen.append(agents.detach().clone())
        return agent_attention(q, k, v, agents, *args, **kw)

    monkeypatch.setattr("derain.models.attention.agent_attention", spy)
    with torch.no_grad():
        attn(torch.randn(1, 16, 9, 14))
        attn(torch.randn(1, 16, 20, 6) * 3)
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[0], attn.agent_tokens)
    with pytest.raises(ValueError, match="perfect square"):
        AgentAttention(16, 2, agents=10)  # pooled agents need a square grid
    with pytest.raises(ValueError, match="at least 1"):
        AgentAttention(16, 2, agents=0)
    with pytest.raises(ValueError, match="divisible"):
        AgentAttention(10, 3)
    with pytest.raises(ValueError, match="agent_source"):
        AgentAttention(16, 2, agent_source="random")


def test_softmax_ratio_weighting_sums_to_one():
    attn = TopKSparseAttention(16, 2, ratio_weighting="softmax")
    with torch.no_grad():
        attn.ratio_weights.copy_(torch.tensor([3.0, -1.0, 0.5, 2.0]))
    w = attn.mixing_weights()
    assert torch.allclose(w.sum(), torch.tensor(1.0)) and (w > 0).all()
    assert torch.allclose(
        TopKSparseAttention(16, 2, ratio_weighting="softmax").mixing_weights(), torch.full((4,), 0.25)
    )
    raw = TopKSparseAttention(16, 2)
    assert torch.equal(raw.mixing_weights(), raw.ratio_weights)
    grads_finite(attn, torch.randn(1, 16, 10, 9, requires_grad=True))
    net = tiny(ratio_weighting="softmax")
    layers = [m for m in net.modules() if isinstance(m, TopKSparseAttention)]
    assert layers and all(m.ratio_weighting == "softmax" for m in layers)


def test_agents_per_level():
    net = tiny(agents=(4, 9, 16), mixers=(("agent",), ("agent", "agent"), ("agent",)), refine_blocks=1)
    counts = {name: m.agents for name, m in net.named_modules() if isinstance(m, AgentAttention)}
    assert counts == {
        "encoders.0.0.attn": 4,
        "encoders.1.0.attn": 9,
        "encoders.1.1.attn": 9,
        "bottleneck.0.attn": 16,
        "decoders.0.0.attn": 4,
        "decoders.1.0.attn": 9,
        "decoders.1.1.attn": 9,
        "refine.0.attn": 4,
    }
    assert net.init_args["agents"] == [4, 9, 16]
    grads_finite(net, torch.rand(1, 3, 21, 30, requires_grad=True))
    with pytest.raises(ValueError, match="one count per level"):
        tiny(agents=(4, 9))


def test_grad_checkpoint_gives_the_same_output_and_grads():
    torch.manual_seed(2)
    plain = tiny()
    ckpt = tiny(grad_checkpoint=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.rand(2, 3, 24, 20)
    outs, grads = [], []
    for net in (plain, ckpt):
        net.train()
        y = net(x)
        y.square().mean().backward()
        outs.append(y.detach())
        grads.append({n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None})
    assert torch.equal(outs[0], outs[1])
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name
    # checkpointing really happens: the graph keeps fewer tensors for the backward pass
    saved = []
    for net in (plain, ckpt):
        count = [0]

        def pack(t, count=count):
            count[0] += 1
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            net(x)
        saved.append(count[0])
    assert saved[1] < saved[0] / 2, saved
    with torch.no_grad():
        assert torch.equal(ckpt.eval()(x), plain.eval()(x))  # eval: no checkpointing


class DtypeRecorder(TorchDispatchMode):
    """Records the input dtype of every top-k, softmax, exp and cumsum the network runs."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in ("topk", "_softmax", "exp", "cumsum"):
            self.seen.add((func.overloadpacket.__name__, args[0].dtype))
        return func(*args, **(kwargs or {}))


def test_bf16_autocast_keeps_topk_and_softmax_in_float32_and_stays_close():
    torch.manual_seed(0)
    net = tiny().eval()
    x = torch.rand(2, 3, 40, 56)
    recorder = DtypeRecorder()
    with torch.no_grad():
        ref = net(x)
        with torch.autocast("cpu", dtype=torch.bfloat16), recorder:
            out = net(x)
    assert {name for name, _ in recorder.seen} == {"topk", "_softmax", "exp", "cumsum"}
    assert {dtype for _, dtype in recorder.seen} == {torch.float32}
    err = (out.float() - ref).abs()
    # Measured (seeds 0-4): max 0.005-0.012, mean 0.0011-0.0019 (bf16 has an 8-bit mantissa, the convs and
    # matmuls run in it). Bound: max 0.03, mean 1/255 (one 8-bit level).
    assert err.max() < 0.03, err.max()
    assert err.mean() < 1 / 255, err.mean()


def test_full_resolution_stage_starts_as_a_no_op_and_then_learns():
    parent = tiny().eval()
    child = DerainNet(**{**parent.init_args, "full_res_mixers": ("tksa", "agent"), "full_res_dim": 8}).eval()
    result = child.load_state_dict(parent.state_dict(), strict=False)
    assert not result.unexpected_keys and all(k.startswith("full_") for k in result.missing_keys)
    x = torch.rand(2, 3, 37, 53)  # odd sizes: padded and cropped back
    with torch.no_grad():
        assert torch.equal(child(x), parent(x))
    child.train()
    child(x).square().mean().backward()
    assert child.full_head.weight.grad.abs().sum() > 0  # the zero output conv gets a gradient at once
    assert child.full_down[1].weight.grad.abs().sum() > 0


def test_full_resolution_stage_rejects_unknown_mixers():
    with pytest.raises(ValueError, match="unknown mixer 'conv'"):
        DerainNet(full_res_mixers=("conv",))

"""The attention cores against naive references, and the modules on odd sizes."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import grads_finite

from derain.models import (
    AgentAttention,
    ChannelAttention,
    TopKSparseAttention,
    agent_attention,
    topk_channel_attention,
)
from derain.models.attention import adaptive_avg_pool, reference_topk_channel_attention
from derain.models.probes import watch_agents

RATIOS = (1 / 2, 2 / 3, 3 / 4, 4 / 5)


def naive_topk(q, k, v, ratios, weights):
    """TKSA row by row, written apart from the library's code: sort each row of logits, keep its first
    ⌊r·c⌋ entries (at least one), normalise their exponentials by hand, and sum the kept rows of v."""
    logits = q @ k.transpose(-2, -1)
    batch, heads, c, _ = logits.shape
    rows = []
    for b, h, i in itertools.product(range(batch), range(heads), range(c)):
        row = logits[b, h, i]
        order = sorted(range(c), key=lambda j: row[j].item(), reverse=True)
        out = torch.zeros_like(v[b, h, 0])
        for r, w in zip(ratios, weights, strict=True):
            kept = order[: max(1, math.floor(r * c + 1e-9))]
            e = torch.stack([torch.exp(row[j] - row[order[0]]) for j in kept])
            out = out + w * sum(e[n] / e.sum() * v[b, h, j] for n, j in enumerate(kept))
        rows.append(out)
    return torch.stack(rows).reshape(v.shape)


def naive_agent(q, k, v, agents, scale, b1=None, b2=None):
    agg = agents @ k.transpose(-2, -1) * scale
    bc = q @ agents.transpose(-2, -1) * scale
    agg = agg + b1 if b1 is not None else agg
    bc = bc + b2 if b2 is not None else bc
    return bc.softmax(-1) @ (agg.softmax(-1) @ v)


def test_topk_matches_naive_forward_and_grad():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 12, 50, dtype=torch.float64, requires_grad=True) for _ in range(3))
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64, requires_grad=True)
    fast = topk_channel_attention(q, k, v, RATIOS, w)
    ref = naive_topk(q, k, v, RATIOS, w)
    assert fast.shape == (2, 3, 12, 50)
    assert torch.allclose(fast, ref, atol=1e-10)
    g = torch.randn_like(fast)
    grads_fast = torch.autograd.grad(fast, (q, k, v, w), g)
    grads_ref = torch.autograd.grad(ref, (q, k, v, w), g)
    for a, b in zip(grads_fast, grads_ref, strict=True):
        assert torch.allclose(a, b, atol=1e-10)


def test_library_reference_is_the_naive_form():
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 2, 10, 30, dtype=torch.float64) for _ in range(3))
    w = torch.rand(4, dtype=torch.float64)
    assert torch.allclose(
        reference_topk_channel_attention(q, k, v, RATIOS, w), naive_topk(q, k, v, RATIOS, w)
    )


def test_topk_on_hand_computed_logits():
    # k = v = identity: the logits are q's rows and the output is the mixed attention matrix itself
    q = torch.tensor([[[[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 2.0]]]], dtype=torch.float64)
    eye = torch.eye(3, dtype=torch.float64)[None, None]
    one, two = 1 / (1 + math.exp(-1)), 1 / (1 + math.exp(-2))  # softmax of two logits 1 or 2 apart
    keep_two = [[one, 1 - one, 0.0], [0.0, two, 1 - two], [1 - one, 0.0, one]]
    keep_one = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    expected = 0.75 * torch.tensor(keep_two, dtype=torch.float64) + 0.25 * torch.tensor(keep_one).double()
    weights = torch.tensor([0.75, 0.25], dtype=torch.float64)
    for attention in (topk_channel_attention, reference_topk_channel_attention, naive_topk):
        out = attention(q, eye, eye, (2 / 3, 1 / 3), weights)  # keep 2 of 3, and 1 of 3
        assert torch.allclose(out[0, 0], expected, atol=1e-12), attention.__name__


def test_topk_float32_within_1e5():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 24, 300) for _ in range(3))
    w = torch.rand(4)
    assert torch.allclose(
        topk_channel_attention(q, k, v, RATIOS, w), naive_topk(q, k, v, RATIOS, w), atol=1e-5
    )


def test_topk_ratio_one_is_dense_channel_softmax():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 8, 40) for _ in range(3))
    out = topk_channel_attention(q, k, v, (1.0,), torch.ones(1))
    dense = (q @ k.transpose(-2, -1)).softmax(-1) @ v
    assert torch.allclose(out, dense, atol=1e-6)


def test_topk_keeps_at_least_one_and_rejects_bad_input():
    q, k, v = (torch.randn(1, 1, 3, 5) for _ in range(3))
    # floor(0.1 * 3) = 0 -> keep one: the row's argmax gets all the mass, so out = v[argmax]
    out = topk_channel_attention(q, k, v, (0.1,), torch.ones(1))
    best = (q @ k.transpose(-2, -1)).argmax(-1)
    assert torch.allclose(out, v[0, 0][best[0, 0]].unsqueeze(0).unsqueeze(0))
    with pytest.raises(ValueError, match="one weight per ratio"):
        topk_channel_attention(q, k, v, (0.5, 1.0), torch.ones(3))
    with pytest.raises(ValueError, match=r"ratios must lie in \(0, 1\]"):
        topk_channel_attention(q, k, v, (1.5,), torch.ones(1))


def test_agent_attention_matches_naive_with_biases():
    torch.manual_seed(3)
    b, h, n_tok, n_ag, d = 2, 2, 70, 9, 8
    q, k, v = (torch.randn(b, h, n_tok, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    agents = torch.randn(b, h, n_ag, d, dtype=torch.float64, requires_grad=True)
    b1 = torch.randn(1, h, n_ag, n_tok, dtype=torch.float64, requires_grad=True)
    b2 = torch.randn(1, h, n_tok, n_ag, dtype=torch.float64, requires_grad=True)
    fast = agent_attention(q, k, v, agents, 0.3, b1, b2)
    ref = naive_agent(q, k, v, agents, 0.3, b1, b2)
    assert fast.shape == (b, h, n_tok, d)
    assert torch.allclose(fast, ref, atol=1e-10)
    g = torch.randn_like(fast)
    for a, r in zip(
        torch.autograd.grad(fast, (q, k, v, agents, b1, b2), g),
        torch.autograd.grad(ref, (q, k, v, agents, b1, b2), g),
        strict=True,
    ):
        assert torch.allclose(a, r, atol=1e-10)
    assert torch.allclose(
        agent_attention(q, k, v, agents, 0.3), naive_agent(q, k, v, agents, 0.3), atol=1e-10
    )


@pytest.mark.parametrize("bias_tokens", [1, 4096 + 77])
def test_agent_attention_in_token_chunks_matches_naive(bias_tokens):
    torch.manual_seed(6)
    n_tok = 4096 + 77  # more than one broadcast chunk
    q, k, v = (torch.randn(1, 2, n_tok, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    agents = torch.randn(1, 2, 9, 4, dtype=torch.float64)
    b2 = torch.randn(1, 2, bias_tokens, 9, dtype=torch.float64)
    fast, ref = agent_attention(q, k, v, agents, 0.4, None, b2), naive_agent(q, k, v, agents, 0.4, None, b2)
    assert torch.allclose(fast, ref, atol=1e-10)
    g = torch.randn_like(fast)
    for a, r in zip(
        torch.autograd.grad(fast, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g), strict=True
    ):
        assert torch.allclose(a, r, atol=1e-10)


def test_agent_attention_with_one_agent_per_token_is_two_step_softmax():
    # with n = N agents equal to the keys, aggregation is softmax(K Kᵀ s) V: check against SDPA twice
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 1, 16, 4) for _ in range(3))
    out = agent_attention(q, k, v, k, 0.5)
    ref = F.scaled_dot_product_attention(q, k, F.scaled_dot_product_attention(k, k, v, scale=0.5), scale=0.5)
    assert torch.allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize(
    "module", [TopKSparseAttention(16, 2), AgentAttention(16, 2, agents=9), ChannelAttention(16, 4)]
)
@pytest.mark.parametrize("size", [(1, 16, 37, 53), (2, 16, 64, 48)])
def test_modules_keep_shape_and_have_finite_grads(module, size):
    grads_finite(module, torch.randn(*size, requires_grad=True))


def test_agent_biases_resize_to_any_map():
    attn = AgentAttention(8, 2, agents=16, bias_grid=7)
    for h, w in [(5, 9), (37, 53), (64, 48)]:
        b1, b2 = attn.biases(h, w)
        assert b1.shape == (1, 2, 16, h * w)
        assert b2.shape == (1, 2, h * w, 16)
    # resizing a constant grid gives the constant back
    with torch.no_grad():
        attn.agg_bias.fill_(0.25)
    b1, _ = attn.biases(11, 13)
    assert torch.allclose(b1, torch.full_like(b1, 0.25))


def test_agent_bias_cache_follows_parameter_updates():
    attn = AgentAttention(8, 1, agents=4).eval()
    x = torch.randn(1, 8, 10, 12)
    with torch.no_grad():
        y1 = attn(x)
        attn.bcast_bias.add_(1.0 * torch.randn_like(attn.bcast_bias))
        y2 = attn(x)
        attn._bias_cache = None
        y3 = attn(x)
    assert not torch.allclose(y1, y2)
    assert torch.allclose(y2, y3)


def test_tksa_ratios_validated():
    with pytest.raises(ValueError, match="divisible"):
        TopKSparseAttention(10, 3)
    with pytest.raises(ValueError, match="ratios"):
        TopKSparseAttention(8, 1, ratios=(0.0,))


def test_agent_layer_hands_out_its_broadcast_weights_for_maps():
    attn = AgentAttention(8, 2, agents=9).eval()
    x = torch.randn(1, 8, 10, 12)
    seen = []
    with torch.no_grad():
        y = attn(x)
        with watch_agents(attn, lambda name, weights, size: seen.append((name, weights, size))) as layers:
            assert torch.equal(attn(x), y)  # watching does not change the output
        assert list(layers) == [""] and attn(x) is not None and len(seen) == 1  # the hook is gone
    name, weights, size = seen[0]
    assert name == "" and size == (10, 12) and weights.shape == (1, 2, 120, 9)
    assert torch.allclose(weights.sum(-1), torch.ones(1, 2, 120))
    q, k, v, agents, b1, b2 = attn._tokens(x)
    _, expected = agent_attention(q, k, v, agents, attn.scale, b1, b2, return_weights=True)
    torch.testing.assert_close(weights, expected)  # the weights the layer's forward mixes with


@pytest.mark.parametrize(("h", "w", "side"), [(7, 7, 7), (13, 29, 7), (5, 3, 2), (40, 24, 3)])
def test_adaptive_avg_pool_matches_torch(h: int, w: int, side: int) -> None:
    x = torch.randn(2, 3, h, w, dtype=torch.float64)
    torch.testing.assert_close(adaptive_avg_pool(x, side), F.adaptive_avg_pool2d(x, side))

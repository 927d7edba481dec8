"""The two token mixers of derain: top-k sparse channel attention and agent attention.

Functional cores (`topk_channel_attention`, `agent_attention`) hold the math and are what the tests compare
against naive references; the modules (`TopKSparseAttention`, `AgentAttention`) hold the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

__all__ = [
    "topk_channel_attention",
    "agent_attention",
    "TopKSparseAttention",
    "AgentAttention",
    "ChannelAttention",
]

DEFAULT_RATIOS: tuple[float, ...] = (1 / 2, 2 / 3, 3 / 4, 4 / 5)


def _keep_counts(ratios: Sequence[float], c: int) -> list[int]:
    for r in ratios:
        if not 0.0 < r <= 1.0:
            raise ValueError(f"top-k ratios must lie in (0, 1], got {r}")
    return [max(1, int(math.floor(r * c + 1e-9))) for r in ratios]


def _at_least_float32(t: Tensor) -> Tensor:
    """Half/bfloat16 to float32 (softmax and top-k stay accurate under autocast); float32/64 unchanged."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def topk_channel_attention(
    q: Tensor, k: Tensor, v: Tensor, ratios: Sequence[float], weights: Tensor
) -> Tensor:
    """Multi-ratio top-k sparse attention over channels (DRSformer's TKSA).

    For logits ``A = q @ kᵀ`` (one c×c matrix per head) and each ratio ``r``, keep the top ``⌊r·c⌋`` (at least
    one) logits of each row, softmax over the kept ones, and mix the ratios::

        out = Σᵢ weights[i] · softmax(topk_{kᵢ}(A)) @ v

    The fast path selects once for the largest k and derives every smaller mask from that sorted selection:
    with ``e = exp(a - max)`` over the sorted kept logits, the softmax normaliser for ``kᵢ`` is the prefix sum
    of ``e`` at ``kᵢ``, so the mixed probability of rank ``j`` is ``e_j · Σᵢ [j < kᵢ] · weights[i] / Zᵢ``. The
    mixed map is scattered back into a dense c×c matrix and multiplied with ``v`` once.

    Args:
        q: queries, already L2-normalised and scaled by the temperature.
        k: keys, already L2-normalised.
        v: values.
        ratios: fractions of each row to keep, each in (0, 1].
        weights: one mixing weight per ratio (shape ``(len(ratios),)``).

    Shape:
        - q, k, v: :math:`(B, heads, c, N)`
        - output: :math:`(B, heads, c, N)`
    """
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"expected q, k of equal shape (B, heads, c, N) and v (B, heads, c, *); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if weights.shape != (len(ratios),):
        raise ValueError(
            f"expected one weight per ratio ({len(ratios)}), got weights of shape {tuple(weights.shape)}"
        )
    c = q.shape[-2]
    counts = _keep_counts(ratios, c)
    k_max = max(counts)
    logits = q @ k.transpose(-2, -1)  # (B, heads, c, c)
    dtype = logits.dtype
    logits = _at_least_float32(logits)  # softmax and the prefix sums stay in float32 under autocast
    vals, idx = torch.topk(logits, k_max, dim=-1, sorted=True)  # (B, heads, c, k_max), descending
    e = torch.exp(vals - vals[..., :1])
    z = torch.cumsum(e, dim=-1)  # z[..., j] = normaliser when keeping j + 1 entries
    ranks = torch.arange(k_max, device=q.device)
    coef = torch.zeros(*e.shape, device=q.device, dtype=e.dtype)
    for count, w in zip(counts, weights.to(e.dtype).unbind(0), strict=True):
        coef = coef + (ranks < count).to(e.dtype) * (w / z[..., count - 1 : count])
    probs = torch.zeros_like(logits).scatter(-1, idx, e * coef)
    return probs.to(dtype) @ v


def agent_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    agents: Tensor,
    scale: float,
    agg_bias: Tensor | None = None,
    bcast_bias: Tensor | None = None,
) -> Tensor:
    """Agent attention (Han et al., ECCV 2024): softmax attention routed through n agent tokens.

    Aggregation, then broadcast::

        V_A = softmax(A · Kᵀ · s + B1) @ V        (n agents gather from all N tokens)
        out = softmax(Q · Aᵀ · s + B2) @ V_A      (every token reads from the agents)

    Cost is O(N·n·d): linear in the number of tokens; no N×N matrix is formed.

    Args:
        q, k, v: queries, keys and values.
        agents: agent tokens.
        scale: logit scale ``s`` (usually ``d ** -0.5``).
        agg_bias: ``B1``, broadcastable to :math:`(B, heads, n, N)`.
        bcast_bias: ``B2``, broadcastable to :math:`(B, heads, N, n)`.

    Shape:
        - q, k, v: :math:`(B, heads, N, d)`
        - agents: :math:`(B, heads, n, d)`
        - output: :math:`(B, heads, N, d)`
    """
    if q.shape != k.shape or k.shape[:-1] != v.shape[:-1] or agents.shape[:2] != q.shape[:2]:
        raise ValueError(
            f"expected q, k, v of shape (B, heads, N, d) and agents (B, heads, n, d); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, {tuple(agents.shape)}"
        )
    agents = agents * scale
    agg = agents @ k.transpose(-2, -1)  # (B, heads, n, N)
    if agg_bias is not None:
        agg = agg + agg_bias
    agent_v = _at_least_float32(agg).softmax(dim=-1).to(v.dtype) @ v  # (B, heads, n, d)
    bcast = q @ agents.transpose(-2, -1)  # (B, heads, N, n)
    if bcast_bias is not None:
        bcast = bcast + bcast_bias
    return _at_least_float32(bcast).softmax(dim=-1).to(v.dtype) @ agent_v


class TopKSparseAttention(nn.Module):
    """TKSA: multi-ratio top-k sparse attention over channels (DRSformer, CVPR 2023).

    Q, K, V come from a 1×1 conv then a 3×3 depthwise conv; Q and K are L2-normalised along pixels and the
    logits scaled by a learnable temperature per head. Cost is linear in the number of pixels.

    Args:
        dim: channels C.
        heads: attention heads; ``dim`` must be divisible by it.
        ratios: top-k ratios, each in (0, 1].
        bias: whether the convolutions carry a bias.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(
        self, dim: int, heads: int = 1, *, ratios: Sequence[float] = DEFAULT_RATIOS, bias: bool = False
    ):
        super().__init__()
        assert dim % heads == 0, f"dim should be divisible by heads, got dim={dim}, heads={heads}"
        _keep_counts(ratios, dim // heads)
        self.heads = heads
        self.ratios = tuple(float(r) for r in ratios)
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.ratio_weights = nn.Parameter(torch.full((len(self.ratios),), 1.0 / len(self.ratios)))
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=bias)
        self.qkv_dw = nn.Conv2d(dim * 3, dim * 3, 3, padding=1, groups=dim * 3, bias=bias)
        self.proj = nn.Conv2d(dim, dim, 1, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        q, k, v = self.qkv_dw(self.qkv(x)).chunk(3, dim=1)
        q, k, v = (rearrange(t, "b (head c) h w -> b head c (h w)", head=self.heads) for t in (q, k, v))
        q = F.normalize(q, dim=-1) * self.temperature
        k = F.normalize(k, dim=-1)
        out = topk_channel_attention(q, k, v, self.ratios, self.ratio_weights)
        return self.proj(rearrange(out, "b head c (h w) -> b (head c) h w", h=h, w=w))


class ChannelAttention(TopKSparseAttention):
    """Dense channel attention (Restormer's MDTA): TKSA with the single ratio 1.0, i.e. no sparsity."""

    def __init__(self, dim: int, heads: int = 1, *, bias: bool = False):
        super().__init__(dim, heads, ratios=(1.0,), bias=bias)
        self.ratio_weights.requires_grad_(False)


class AgentAttention(nn.Module):
    """Agent attention over pixels (Han et al., ECCV 2024) for (B, C, H, W) feature maps.

    Agents are pooled from Q to a √n×√n grid with adaptive average pooling. Learnable agent biases B1/B2 live on
    a ``bias_grid``×``bias_grid`` grid and are bilinearly resized to the feature map, so any H×W works. A 3×3
    depthwise conv of V (DWC) restores local detail; a 1×1 conv projects the output.

    Args:
        dim: channels C.
        heads: attention heads; ``dim`` must be divisible by it.
        agents: number of agent tokens n, a perfect square.
        bias_grid: side of the grid the agent biases are stored on.
        bias: whether the convolutions carry a bias.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(self, dim: int, heads: int = 1, *, agents: int = 49, bias_grid: int = 7, bias: bool = False):
        super().__init__()
        assert dim % heads == 0, f"dim should be divisible by heads, got dim={dim}, heads={heads}"
        side = math.isqrt(agents)
        assert side * side == agents, f"agents should be a perfect square, got {agents}"
        self.heads = heads
        self.pool_side = side
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=bias)
        self.agg_bias = nn.Parameter(torch.randn(heads, agents, bias_grid, bias_grid) * 0.02)
        self.bcast_bias = nn.Parameter(torch.randn(heads, agents, bias_grid, bias_grid) * 0.02)
        self.dwc = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.proj = nn.Conv2d(dim, dim, 1, bias=bias)
        self._bias_cache: tuple | None = None

    def biases(self, h: int, w: int) -> tuple[Tensor, Tensor]:
        """B1 of shape (1, heads, n, H·W) and B2 of shape (1, heads, H·W, n), resized to an H×W map.

        Outside autograd the resized biases are cached per map size (inference reuses them for every tile).
        """
        if torch.is_grad_enabled() and (self.agg_bias.requires_grad or self.bcast_bias.requires_grad):
            return self._resize_biases(h, w)
        key = (h, w, self.agg_bias._version, self.bcast_bias._version, self.agg_bias.device)
        if self._bias_cache is None or self._bias_cache[0] != key:
            with torch.no_grad():
                self._bias_cache = (key, self._resize_biases(h, w))
        return self._bias_cache[1]

    def _resize_biases(self, h: int, w: int) -> tuple[Tensor, Tensor]:
        b1 = F.interpolate(self.agg_bias, size=(h, w), mode="bilinear", align_corners=False)
        b2 = F.interpolate(self.bcast_bias, size=(h, w), mode="bilinear", align_corners=False)
        return rearrange(b1, "head n h w -> 1 head n (h w)"), rearrange(b2, "head n h w -> 1 head (h w) n")

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        q, k, v = self.qkv(x).chunk(3, dim=1)
        agents = F.adaptive_avg_pool2d(q, self.pool_side)
        q, k, v, agents = (
            rearrange(t, "b (head d) h w -> b head (h w) d", head=self.heads) for t in (q, k, v, agents)
        )
        b1, b2 = self.biases(h, w)
        out = agent_attention(q, k, v, agents, self.scale, b1.to(q.dtype), b2.to(q.dtype))
        out = rearrange(out, "b head (h w) d -> b (head d) h w", h=h, w=w)
        v_map = rearrange(v, "b head (h w) d -> b (head d) h w", h=h, w=w)
        return self.proj(out + self.dwc(v_map))

"""The two token mixers of derain: top-k sparse channel attention and agent attention.

Functional cores (`topk_channel_attention`, `agent_attention`) hold the math and are what the tests compare
against naive references; the modules (`TopKSparseAttention`, `AgentAttention`) hold the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

__all__ = [
    "topk_channel_attention",
    "reference_topk_channel_attention",
    "agent_attention",
    "TopKSparseAttention",
    "AgentAttention",
    "ChannelAttention",
    "normalized_entropy",
    "adaptive_avg_pool",
]

BROADCAST_CHUNK = 4096
"""Tokens per chunk of agent attention's broadcast step."""

DEFAULT_RATIOS: tuple[float, ...] = (1 / 2, 2 / 3, 3 / 4, 4 / 5)


def _check_heads(dim: int, heads: int) -> None:
    """A ValueError unless ``heads`` divides ``dim``."""
    if heads < 1 or dim % heads:
        raise ValueError(f"dim should be divisible by heads, got dim={dim}, heads={heads}")


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


def reference_topk_channel_attention(
    q: Tensor, k: Tensor, v: Tensor, ratios: Sequence[float], weights: Tensor
) -> Tensor:
    """The naive form of :func:`topk_channel_attention`, as DRSformer writes it: for each ratio a top-k mask,
    a softmax over the kept logits and a product with ``v``. Slower; kept as the reference the fast path is
    tested and benchmarked against. Same arguments and shapes."""
    logits = q @ k.transpose(-2, -1)
    out = torch.zeros_like(v)
    for count, w in zip(_keep_counts(ratios, logits.shape[-1]), weights.unbind(0), strict=True):
        keep = torch.zeros_like(logits).scatter(-1, logits.topk(count, dim=-1).indices, 1.0)
        out = out + w * (logits.masked_fill(keep == 0, float("-inf")).softmax(dim=-1) @ v)
    return out


def agent_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    agents: Tensor,
    scale: float,
    agg_bias: Tensor | None = None,
    bcast_bias: Tensor | None = None,
    *,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
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
        return_weights: also return the broadcast probabilities ``softmax(Q · Aᵀ · s + B2)`` (float32 or
            float64), e.g. to monitor agent collapse.

    Shape:
        - q, k, v: :math:`(B, heads, N, d)`
        - agents: :math:`(B, heads, n, d)` (or :math:`(1, heads, n, d)`: agents shared by the batch)
        - output: :math:`(B, heads, N, d)`; with ``return_weights`` also the weights :math:`(B, heads, N, n)`
    """
    if (
        q.shape != k.shape
        or k.shape[:-1] != v.shape[:-1]
        or agents.shape[1] != q.shape[1]
        or agents.shape[0] not in (1, q.shape[0])
    ):
        raise ValueError(
            f"expected q, k, v of shape (B, heads, N, d) and agents (B, heads, n, d); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, {tuple(agents.shape)}"
        )
    agents = agents * scale
    agg = agents @ k.transpose(-2, -1)  # (B, heads, n, N)
    if agg_bias is not None:
        agg = agg + agg_bias
    agent_v = _at_least_float32(agg).softmax(dim=-1).to(v.dtype) @ v  # (B, heads, n, d)
    if return_weights:
        weights = _broadcast_weights(q, agents, bcast_bias)
        return weights.to(v.dtype) @ agent_v, weights
    # Each token's broadcast row is independent: run them in cache-sized chunks of tokens (about 3x faster at
    # N = 64k on a CPU than one (N, n) pass, and the same numbers).
    n_tok = q.shape[-2]
    if torch.compiler.is_exporting() or n_tok <= BROADCAST_CHUNK:  # a traced graph (ONNX) has one path
        return _broadcast_weights(q, agents, bcast_bias).to(v.dtype) @ agent_v
    chunks = []
    for start in range(0, n_tok, BROADCAST_CHUNK):
        stop = min(start + BROADCAST_CHUNK, n_tok)
        bias = bcast_bias
        if bias is not None and bias.shape[-2] != 1:  # a bias broadcast over tokens applies to every chunk
            bias = bias[..., start:stop, :]
        chunks.append(_broadcast_weights(q[..., start:stop, :], agents, bias).to(v.dtype) @ agent_v)
    return torch.cat(chunks, dim=-2)


def _broadcast_weights(q: Tensor, agents: Tensor, bias: Tensor | None) -> Tensor:
    """``softmax(Q · Aᵀ + B2)`` over the agents (``agents`` already scaled), at least float32."""
    logits = q @ agents.transpose(-2, -1)  # (B, heads, N, n)
    if bias is not None:
        logits = logits + bias
    return _at_least_float32(logits).softmax(dim=-1)


def adaptive_avg_pool(x: Tensor, side: int) -> Tensor:
    """``F.adaptive_avg_pool2d(x, side)`` as two averaging matrices, for traced graphs (ONNX).

    Bin ``i`` of a side of length ``n`` averages ``[⌊i·n/side⌋, ⌈(i+1)·n/side⌉)``, as adaptive pooling does;
    here the bins are computed from the input's size when the graph runs (the ONNX exporter's own translation
    of adaptive pooling fixes kernel and stride at the traced size).

    Shape:
        - x: :math:`(B, C, H, W)`
        - output: :math:`(B, C, side, side)`
    """

    def bins(n: int) -> Tensor:
        i = torch.arange(side, device=x.device).unsqueeze(1)
        pos = torch.arange(n, device=x.device).unsqueeze(0)
        inside = ((pos >= (i * n) // side) & (pos < ((i + 1) * n + side - 1) // side)).to(x.dtype)
        return inside / inside.sum(1, keepdim=True)

    h, w = x.shape[-2:]
    return torch.einsum("ih,bchw,jw->bcij", bins(h), x, bins(w))


def normalized_entropy(probs: Tensor) -> Tensor:
    """Mean entropy of the distributions along the last axis, divided by ``log n`` (n = last axis length).

    1.0 means every distribution is uniform (for agent attention: every pixel reads all agents equally, the
    agents have collapsed); 0.0 means one-hot. Zero probabilities contribute nothing (``0 · log 0 = 0``).

    Shape:
        - probs: :math:`(*, n)`, each row summing to 1
        - output: scalar
    """
    n = probs.shape[-1]
    if n == 1:
        return probs.new_ones(())
    return torch.special.entr(probs).sum(-1).mean() / math.log(n)


class TopKSparseAttention(nn.Module):
    """TKSA: multi-ratio top-k sparse attention over channels (DRSformer, CVPR 2023).

    Q, K, V come from a 1×1 conv then a 3×3 depthwise conv; Q and K are L2-normalised along pixels and the
    logits scaled by a learnable temperature per head. Cost is linear in the number of pixels.

    Args:
        dim: channels C.
        heads: attention heads; ``dim`` must be divisible by it.
        ratios: top-k ratios, each in (0, 1].
        ratio_weighting: how the learnable per-ratio parameters become mixing weights: ``"raw"`` uses them as
            they are (DRSformer; initialised to 1/len(ratios)), ``"softmax"`` normalises them to sum to 1
            (initialised to 0, i.e. uniform weights).
        bias: whether the convolutions carry a bias.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        *,
        ratios: Sequence[float] = DEFAULT_RATIOS,
        ratio_weighting: Literal["raw", "softmax"] = "raw",
        bias: bool = False,
    ):
        super().__init__()
        _check_heads(dim, heads)
        if ratio_weighting not in ("raw", "softmax"):
            raise ValueError(f"ratio_weighting should be 'raw' or 'softmax', got {ratio_weighting!r}")
        _keep_counts(ratios, dim // heads)
        self.heads = heads
        self.ratios = tuple(float(r) for r in ratios)
        self.ratio_weighting = ratio_weighting
        init = 1.0 / len(self.ratios) if ratio_weighting == "raw" else 0.0
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.ratio_weights = nn.Parameter(torch.full((len(self.ratios),), init))
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=bias)
        self.qkv_dw = nn.Conv2d(dim * 3, dim * 3, 3, padding=1, groups=dim * 3, bias=bias)
        self.proj = nn.Conv2d(dim, dim, 1, bias=bias)

    def mixing_weights(self) -> Tensor:
        """The per-ratio weights as the attention uses them (after the softmax with ``"softmax"``)."""
        w = self.ratio_weights
        return w.softmax(0) if self.ratio_weighting == "softmax" else w

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        q, k, v = self.qkv_dw(self.qkv(x)).chunk(3, dim=1)
        q, k, v = (rearrange(t, "b (head c) h w -> b head c (h w)", head=self.heads) for t in (q, k, v))
        q = F.normalize(q, dim=-1) * self.temperature
        k = F.normalize(k, dim=-1)
        out = topk_channel_attention(q, k, v, self.ratios, self.mixing_weights())
        return self.proj(rearrange(out, "b head c (h w) -> b (head c) h w", h=h, w=w))


class ChannelAttention(TopKSparseAttention):
    """Dense channel attention (Restormer's MDTA): TKSA with the single ratio 1.0, i.e. no sparsity."""

    def __init__(self, dim: int, heads: int = 1, *, bias: bool = False):
        super().__init__(dim, heads, ratios=(1.0,), bias=bias)
        self.ratio_weights.requires_grad_(False)


class AgentAttention(nn.Module):
    """Agent attention over pixels (Han et al., ECCV 2024) for (B, C, H, W) feature maps.

    Agents are pooled from Q to a √n×√n grid with adaptive average pooling (``agent_source="pool"``, the paper's
    form) or are n learned tokens per head, the same for every input (``"learned"``, the tutorial form).
    Learnable agent biases B1/B2 live on a ``bias_grid``×``bias_grid`` grid and are bilinearly resized to the
    feature map, so any H×W works. A 3×3 depthwise conv of V (DWC) restores local detail; a 1×1 conv projects
    the output.

    What each pixel reads from the agents, the broadcast weights ``softmax(Q·Aᵀ·s + B2)``, is
    :meth:`broadcast_weights` of the layer's input; ``derain.models.probes.watch_agents`` hands them out from a
    forward hook (collapse monitoring, attention maps), so ``forward`` itself always takes the fast path.

    Args:
        dim: channels C.
        heads: attention heads; ``dim`` must be divisible by it.
        agents: number of agent tokens n; a perfect square with ``agent_source="pool"``.
        agent_source: ``"pool"`` (agents pooled from Q) or ``"learned"`` (an ``agent_tokens`` parameter).
        agent_bias: learnable agent biases B1/B2; False leaves no bias parameters at all.
        dwc: add the depthwise conv of V; False leaves no DWC conv.
        bias_grid: side of the grid the agent biases are stored on.
        bias: whether the convolutions carry a bias.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        *,
        agents: int = 49,
        agent_source: Literal["pool", "learned"] = "pool",
        agent_bias: bool = True,
        dwc: bool = True,
        bias_grid: int = 7,
        bias: bool = False,
    ):
        super().__init__()
        _check_heads(dim, heads)
        if agent_source not in ("pool", "learned"):
            raise ValueError(f"agent_source should be 'pool' or 'learned', got {agent_source!r}")
        if agents < 1:
            raise ValueError(f"agents should be at least 1, got {agents}")
        side = math.isqrt(agents)
        if agent_source == "pool" and side * side != agents:
            raise ValueError(f"agents should be a perfect square with agent_source 'pool', got {agents}")
        self.heads = heads
        self.agents = agents
        self.agent_source = agent_source
        self.pool_side = side
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=bias)
        self.agent_tokens = (
            nn.Parameter(torch.randn(1, heads, agents, dim // heads)) if agent_source == "learned" else None
        )
        self.agg_bias = (
            nn.Parameter(torch.randn(heads, agents, bias_grid, bias_grid) * 0.02) if agent_bias else None
        )
        self.bcast_bias = (
            nn.Parameter(torch.randn(heads, agents, bias_grid, bias_grid) * 0.02) if agent_bias else None
        )
        self.dwc = nn.Conv2d(dim, dim, 3, padding=1, groups=dim) if dwc else None
        self.proj = nn.Conv2d(dim, dim, 1, bias=bias)
        self._bias_cache: tuple | None = None

    def biases(self, h: int, w: int) -> tuple[Tensor, Tensor] | tuple[None, None]:
        """B1 of shape (1, heads, n, H·W) and B2 of shape (1, heads, H·W, n), resized to an H×W map.

        ``(None, None)`` without agent biases. Outside autograd the resized biases are cached per map size
        (inference reuses them for every tile).
        """
        if self.agg_bias is None or self.bcast_bias is None:
            return None, None
        if torch.compiler.is_exporting():  # in a traced graph the resize is part of the graph, for any size
            return self._resize_biases(h, w)
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

    def _tokens(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
        """Q, K, V ``(B, heads, H·W, d)``, the agents ``(B or 1, heads, n, d)`` and the biases B1, B2 of ``x``."""
        h, w = x.shape[-2:]
        q, k, v = self.qkv(x).chunk(3, dim=1)
        if self.agent_tokens is None:
            pool = adaptive_avg_pool if torch.compiler.is_exporting() else F.adaptive_avg_pool2d
            agents = pool(q, self.pool_side)
            agents = rearrange(agents, "b (head d) h w -> b head (h w) d", head=self.heads)
        else:
            agents = self.agent_tokens.to(q.dtype)  # (1, heads, n, d): the same agents for every input
        q, k, v = (rearrange(t, "b (head d) h w -> b head (h w) d", head=self.heads) for t in (q, k, v))
        b1, b2 = self.biases(h, w)
        if b1 is not None and b2 is not None:
            b1, b2 = b1.to(q.dtype), b2.to(q.dtype)
        return q, k, v, agents, b1, b2

    def broadcast_weights(self, x: Tensor) -> Tensor:
        """What each pixel of ``x`` reads from the agents: ``softmax(Q·Aᵀ·s + B2)``, at least float32.

        Shape:
            - x: :math:`(B, C, H, W)`
            - output: :math:`(B, heads, H·W, n)`, rows summing to 1
        """
        q, _, _, agents, _, b2 = self._tokens(x)
        return _broadcast_weights(q, agents * self.scale, b2)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        q, k, v, agents, b1, b2 = self._tokens(x)
        out = agent_attention(q, k, v, agents, self.scale, b1, b2)
        out = rearrange(out, "b head (h w) d -> b (head d) h w", h=h, w=w)
        if self.dwc is not None:
            out = out + self.dwc(rearrange(v, "b head (h w) d -> b (head d) h w", h=h, w=w))
        return self.proj(out)

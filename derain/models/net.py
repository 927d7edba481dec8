"""DerainNet: a U-Net of transformer blocks (TKSA and agent attention) that predicts the rain residual."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .attention import DEFAULT_RATIOS, AgentAttention, ChannelAttention, TopKSparseAttention
from .record import Recorded

__all__ = ["DerainNet", "TransformerBlock", "LayerNorm2d", "GatedFeedForward", "MIXERS"]

MIXERS = ("tksa", "agent", "channel")


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of each pixel.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, 1, 1))
        self.bias = nn.Parameter(torch.zeros(dim, 1, 1))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        return (x - mu) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class GatedFeedForward(nn.Module):
    """Gated depthwise-conv feed-forward (Restormer's GDFN): ``W_out(GELU(a) ⊙ b)``, ``a, b = DW(W_in x)``.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(self, dim: int, expansion: float = 2.0, bias: bool = False):
        super().__init__()
        hidden = int(dim * expansion)
        self.project_in = nn.Conv2d(dim, hidden * 2, 1, bias=bias)
        self.dw = nn.Conv2d(hidden * 2, hidden * 2, 3, padding=1, groups=hidden * 2, bias=bias)
        self.project_out = nn.Conv2d(hidden, dim, 1, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.dw(self.project_in(x)).chunk(2, dim=1)
        return self.project_out(F.gelu(a) * b)


class TransformerBlock(nn.Module):
    """``x + mixer(norm(x))``, then ``x + ffn(norm(x))``.

    With ``grad_checkpoint`` (set by ``DerainNet``), training forwards with gradients enabled keep no
    activations inside the block and recompute them in the backward pass (``torch.utils.checkpoint``).

    Args:
        dim: channels C.
        mixer: the token mixer, e.g. ``TopKSparseAttention(dim, heads)`` (``DerainNet`` builds it).
        expansion: feed-forward hidden width, as a multiple of ``dim``.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H, W)`
    """

    def __init__(self, dim: int, mixer: nn.Module, *, expansion: float = 2.0):
        super().__init__()
        self.norm1 = LayerNorm2d(dim)
        self.attn = mixer
        self.norm2 = LayerNorm2d(dim)
        self.ffn = GatedFeedForward(dim, expansion)
        self.grad_checkpoint = False

    def _forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))

    def forward(self, x: Tensor) -> Tensor:
        if self.grad_checkpoint and self.training and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


def _check_levels(
    blocks: tuple[int, ...],
    heads: tuple[int, ...],
    mixers: tuple[tuple[str, ...], ...],
    agents: int | tuple[int, ...],
) -> tuple[int, ...]:
    """Check that the per-level tuples agree (one mixer a block, known mixers); each level's agent count."""
    levels = len(blocks)
    if not (len(heads) == len(mixers) == levels):
        raise ValueError(
            f"blocks, heads and mixers need one entry per level; got {len(blocks)}, {len(heads)}, {len(mixers)}"
        )
    for i, (n, kinds) in enumerate(zip(blocks, mixers, strict=True)):
        if len(kinds) != n:
            raise ValueError(f"level {i}: mixers {kinds} should name one mixer per block ({n} blocks)")
        unknown = [kind for kind in kinds if kind not in MIXERS]
        if unknown:
            raise ValueError(f"level {i}: unknown mixer {unknown[0]!r}; expected one of {MIXERS}")
    level_agents = (agents,) * levels if isinstance(agents, int) else tuple(agents)
    if len(level_agents) != levels:
        raise ValueError(f"agents needs one count per level ({levels}) or a single int; got {agents}")
    return level_agents


class DerainNet(Recorded, nn.Module):
    """Residual deraining U-Net built from TKSA and agent-attention transformer blocks.

    Level ``i`` works at 1/(embed_stride·2^i) resolution with ``dim·2^i`` channels; the last level is the bottleneck. Encoder
    and decoder of a level share its ``blocks``/``heads``/``mixers`` entries. Down/up-sampling use
    pixel-unshuffle/pixel-shuffle. The network predicts the rain residual: ``output = input + net(input)``,
    not clamped (clamp to [0, 1] at the end of inference). Inputs of any H×W are reflect-padded to a multiple of
    ``2^(levels-1)`` and the output cropped back.

    Args:
        in_channels: image channels.
        dim: channels of the first level.
        blocks: transformer blocks per level (encoder and decoder alike).
        heads: attention heads per level.
        mixers: per level, one mixer name per block: ``"tksa"``, ``"agent"`` or ``"channel"`` (dense).
        topk_ratios: TKSA top-k ratios.
        ratio_weighting: TKSA ratio mixing weights: ``"raw"`` learnable weights as they are (DRSformer) or
            ``"softmax"``-normalised to sum to 1.
        agents: agent tokens per agent-attention block: one count for every level, or one per level, e.g.
            ``(9, 16, 49, 49)``. Perfect squares with ``agent_source="pool"``.
        agent_source: ``"pool"``: agents pooled from Q (Agent Attention paper); ``"learned"``: n learned
            tokens per head, independent of the input.
        agent_bias: learnable agent biases B1/B2 (False: none, no parameters).
        agent_dwc: the depthwise conv of V in agent attention (False: none).
        ffn_expansion: hidden width of the feed-forward, as a multiple of the channels.
        refine_blocks: extra blocks at the first level after the decoder.
        embed_stride: the image is pixel-unshuffled by this factor before the first conv (and the residual
            pixel-shuffled back), so level 0 works at 1/embed_stride resolution with no information lost.
            1 is Restormer's full-resolution layout; 2 (default) is about 4× cheaper on a CPU.
        full_res_mixers: a cheap stage at the image's own resolution beside a strided network: one block a
            mixer name before the pixel-unshuffle (its features enter level 0 through ``full_down``) and one
            after the pixel-shuffle (on level 0's output plus those features), whose residual ``full_head``
            adds to the network's. ``()`` (default): none. ``full_down`` and ``full_head`` start at zero, so
            adding the stage to a trained network keeps its function (``derain.models.grow``).
        full_res_dim: channels of the full-resolution stage.
        grad_checkpoint: recompute each transformer block's activations in the backward pass instead of
            storing them (less memory, ~30% more compute); only in training mode with gradients enabled.

    The constructor's arguments are recorded as ``net.init_args`` (``derain.models.Recorded``): with the class
    path they are the network's one description, which weights files carry and ``load_model`` builds from.

    Shape:
        - input: :math:`(B, C_{in}, H, W)`, values in [0, 1]
        - output: :math:`(B, C_{in}, H, W)`
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        dim: int = 24,
        blocks: tuple[int, ...] = (1, 2, 2, 2),
        heads: tuple[int, ...] = (1, 2, 4, 8),
        mixers: tuple[tuple[str, ...], ...] = (
            ("agent",),
            ("tksa", "agent"),
            ("tksa", "agent"),
            ("tksa", "agent"),
        ),
        topk_ratios: tuple[float, ...] = DEFAULT_RATIOS,
        ratio_weighting: Literal["raw", "softmax"] = "raw",
        agents: int | tuple[int, ...] = 49,
        agent_source: Literal["pool", "learned"] = "pool",
        agent_bias: bool = True,
        agent_dwc: bool = True,
        ffn_expansion: float = 2.0,
        refine_blocks: int = 0,
        embed_stride: int = 2,
        full_res_mixers: tuple[str, ...] = (),
        full_res_dim: int = 16,
        grad_checkpoint: bool = False,
    ):
        super().__init__()
        levels = len(blocks)
        level_agents = _check_levels(blocks, heads, mixers, agents)
        _check_levels((len(full_res_mixers),), (1,), (tuple(full_res_mixers),), 49)
        if embed_stride not in (1, 2, 4):
            raise ValueError(f"embed_stride should be 1, 2 or 4, got {embed_stride}")
        self.multiple = embed_stride * 2 ** (levels - 1)
        widths = [dim * 2**i for i in range(levels)]

        def mixer(level: int, kind: str) -> nn.Module:
            c, h = (full_res_dim, 1) if level < 0 else (widths[level], heads[level])
            if kind == "tksa":
                return TopKSparseAttention(c, h, ratios=topk_ratios, ratio_weighting=ratio_weighting)
            if kind == "agent":
                return AgentAttention(
                    c,
                    h,
                    agents=level_agents[max(level, 0)],
                    agent_source=agent_source,
                    agent_bias=agent_bias,
                    dwc=agent_dwc,
                )
            return ChannelAttention(c, h)

        def block(level: int, kind: str) -> TransformerBlock:  # level -1: the full-resolution stage
            c = full_res_dim if level < 0 else widths[level]
            return TransformerBlock(c, mixer(level, kind), expansion=ffn_expansion)

        def stage(level: int) -> nn.Sequential:
            return nn.Sequential(*(block(level, kind) for kind in mixers[level]))

        s2 = embed_stride**2
        self.embed = nn.Sequential(
            nn.PixelUnshuffle(embed_stride), nn.Conv2d(in_channels * s2, dim, 3, padding=1, bias=False)
        )
        self.encoders = nn.ModuleList(stage(i) for i in range(levels - 1))
        self.downs = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(widths[i], widths[i] // 2, 3, padding=1, bias=False), nn.PixelUnshuffle(2)
            )
            for i in range(levels - 1)
        )
        self.bottleneck = stage(levels - 1)
        self.ups = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(widths[i + 1], widths[i + 1] * 2, 3, padding=1, bias=False), nn.PixelShuffle(2)
            )
            for i in range(levels - 1)
        )
        self.fuses = nn.ModuleList(
            nn.Conv2d(widths[i] * 2, widths[i], 1, bias=False) for i in range(levels - 1)
        )
        self.decoders = nn.ModuleList(stage(i) for i in range(levels - 1))
        self.refine = nn.Sequential(
            *(block(0, mixers[0][0] if mixers[0] else "tksa") for _ in range(refine_blocks))
        )
        self.head = nn.Sequential(
            nn.Conv2d(dim, in_channels * s2, 3, padding=1, bias=False), nn.PixelShuffle(embed_stride)
        )
        self.full_res = bool(full_res_mixers)
        if self.full_res:
            fd = full_res_dim
            self.full_embed = nn.Conv2d(in_channels, fd, 3, padding=1, bias=False)
            self.full_encoder = nn.Sequential(*(block(-1, kind) for kind in full_res_mixers))
            self.full_down = nn.Sequential(
                nn.PixelUnshuffle(embed_stride), nn.Conv2d(fd * s2, dim, 3, padding=1, bias=False)
            )
            self.full_up = nn.Sequential(
                nn.Conv2d(dim, fd * s2, 3, padding=1, bias=False), nn.PixelShuffle(embed_stride)
            )
            self.full_decoder = nn.Sequential(*(block(-1, kind) for kind in full_res_mixers))
            self.full_head = nn.Conv2d(fd, in_channels, 3, padding=1, bias=False)
            for zero in (self.full_down[1], self.full_head):  # the stage starts as a no-op
                nn.init.zeros_(zero.weight)
        for m in self.modules():
            if isinstance(m, TransformerBlock):
                m.grad_checkpoint = grad_checkpoint

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        pad_h, pad_w = (-h) % self.multiple, (-w) % self.multiple
        inp = x
        if torch.compiler.is_exporting():
            # A traced graph (ONNX) serves every size: it always pads, by reflection (a no-op pad when the
            # size is already a multiple); derain.inference.onnx.OnnxNet replicates sides too short to reflect first.
            inp = F.pad(x, (0, pad_w, 0, pad_h), mode="reflect")
        elif pad_h or pad_w:
            mode = "reflect" if pad_h < h and pad_w < w else "replicate"
            inp = F.pad(x, (0, pad_w, 0, pad_h), mode=mode)
        feat = self.embed(inp)
        if self.full_res:
            full = self.full_encoder(self.full_embed(inp))
            feat = feat + self.full_down(full)
        skips = []
        for encoder, down in zip(self.encoders, self.downs, strict=True):
            feat = encoder(feat)
            skips.append(feat)
            feat = down(feat)
        feat = self.bottleneck(feat)
        for i in reversed(range(len(self.decoders))):
            feat = self.ups[i](feat)
            feat = self.decoders[i](self.fuses[i](torch.cat([feat, skips[i]], dim=1)))
        feat = self.refine(feat)
        residual = self.head(feat)
        if self.full_res:
            residual = residual + self.full_head(self.full_decoder(self.full_up(feat) + full))
        out = inp + residual
        return out[..., :h, :w]

"""Growing a trained ``DerainNet`` into a bigger one that computes the same function before it trains on.

- :func:`widen`: ``factor``× the channels of every level (``dim`` 24 → 48), each channel duplicated.
- :func:`deepen`: blocks appended to each level, each an exact identity (its two out-projections start at zero).
- :func:`add_full_res`: the full-resolution stage added to a network without one (its two joining convs start at
  zero, ``DerainNet(full_res_mixers=...)``).
- :func:`grow`: the three in that order, from the options a command takes.

Why widening keeps the function. Every feature map of the wide network is the parent's with each channel repeated
``f`` times: wide channel ``j`` holds parent channel ``src[j]``, where ``src`` (an index map, each parent channel in
it ``f`` times) is chosen per tensor. Then, exactly:

- a conv reading a duplicated input takes its weights at ``[src_out, src_in] / f`` (the ``f`` copies of an input
  channel sum to it once); a depthwise conv, its LayerNorm and every bias take ``[src]``;
- ``LayerNorm2d`` sees every value ``f`` times: the same mean and variance;
- ``chunk(k)`` (Q/K/V, the feed-forward's gate halves) keeps a duplication when each chunk is duplicated within
  itself: ``src = [t·C + j // f]`` for chunk ``t``;
- pixel-unshuffle by ``r`` maps channel ``c`` to ``c·r² + i``, so its output duplicates the parent's with
  ``src' = [src[c]·r² + i]``; pixel-shuffle gives back ``src`` when the conv before it writes ``src'``;
- attention keeps the parent's heads, each ``f``× wider: the Q/K/V maps duplicate each head's channels within the
  head. TKSA's c×c logits then hold every parent logit ``f`` times in a row (Q and K are L2-normalised along
  pixels, which duplication leaves as it is); keeping the top ``f·k`` of them keeps the same logits, the softmax
  gives each copy ``1/f`` of the parent's probability and the product with duplicated V sums the copies back. That
  needs every top-k count to scale exactly, ``⌊r·f·c⌋ = f·⌊r·c⌋``, which is checked. Agent attention's dot
  products over ``f·d`` channels are ``f``× the parent's while its scale ``(f·d)^-½`` is ``f^-½`` of the
  parent's: Q and K (so the pooled agents too) are scaled by ``f^-¼`` and the logits come out the same.

The full-resolution stage keeps its width (``full_res_dim``); only the convs joining it to level 0 widen.

Example:
    >>> from derain.models import DerainNet
    >>> parent = DerainNet(dim=8, blocks=(1, 1), heads=(1, 1), mixers=(("tksa",), ("agent",)), agents=4)
    >>> child = grow(parent, dim=16, blocks=(2, 2), full_res_mixers=("tksa",))
    >>> child.init_args["dim"], child.init_args["blocks"], child.init_args["full_res_mixers"]
    (16, [2, 2], ['tksa'])
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .attention import AgentAttention, TopKSparseAttention, _keep_counts
from .net import DerainNet, GatedFeedForward, LayerNorm2d, TransformerBlock

__all__ = ["add_full_res", "deepen", "grow", "widen"]


# ------------------------------------------------------------------------------------------------ index maps


def _repeat(n: int, f: int) -> Tensor:
    """``[0]*f + [1]*f + ...``: each of ``n`` channels ``f`` times in a row (head-aware for any head count)."""
    return torch.arange(n * f) // f


def _chunks(k: int, n: int, f: int) -> Tensor:
    """``k`` chunks of ``n`` channels, each repeated within itself: what survives ``chunk(k)``."""
    return torch.cat([t * n + _repeat(n, f) for t in range(k)])


def _shuffled(src: Tensor, r2: int) -> Tensor:
    """The map of a pixel-unshuffle's output (or of the conv before a pixel-shuffle): ``src[c]·r² + i``."""
    return (src[:, None] * r2 + torch.arange(r2)).flatten()


# ------------------------------------------------------------------------------------------------ copying


def _conv(new: nn.Conv2d, old: nn.Conv2d, out: Tensor | None, inp: Tensor | None, f: int, rows=None) -> None:
    """``new`` from ``old``: output channels by ``out``, input channels by ``inp`` (a duplicated input: ÷f), rows
    times ``rows``; ``None`` leaves that side as it is. A depthwise conv takes only ``out``."""
    w, b = old.weight, old.bias
    if out is not None:
        w = w.index_select(0, out.to(w.device))
        b = None if b is None else b.index_select(0, out.to(b.device))
    if inp is not None and old.groups == 1:
        w = w.index_select(1, inp.to(w.device)) / f
    if rows is not None:
        w = w * rows.to(w).view(-1, 1, 1, 1)
        b = None if b is None else b * rows.to(b)
    if w.shape != new.weight.shape or (b is None) != (new.bias is None):
        raise ValueError(f"widening: a conv of shape {tuple(w.shape)} does not fit {tuple(new.weight.shape)}")
    new.weight.copy_(w)
    if b is not None:
        new.bias.copy_(b)


def _norm(new: LayerNorm2d, old: LayerNorm2d, src: Tensor) -> None:
    new.weight.copy_(old.weight.index_select(0, src.to(old.weight.device)))
    new.bias.copy_(old.bias.index_select(0, src.to(old.bias.device)))


def _mixer(new: nn.Module, old: nn.Module, src: Tensor, f: int) -> None:
    """A widened attention layer: the parent's heads, each ``f``× wider (module docstring)."""
    c = old.proj.out_channels
    qkv = _chunks(3, c, f)
    if isinstance(old, AgentAttention):
        rows = torch.ones(3 * c * f)
        rows[: 2 * c * f] = f**-0.25  # Q and K: f·(q·k)·f^-½ (the wider scale) is the parent's logit
        _conv(new.qkv, old.qkv, qkv, src, f, rows)
        if old.agent_tokens is not None:
            new.agent_tokens.copy_(old.agent_tokens.repeat_interleave(f, dim=-1) * f**-0.25)
        for name in ("agg_bias", "bcast_bias"):  # per head and agent: unchanged
            if getattr(old, name) is not None:
                getattr(new, name).copy_(getattr(old, name))
        if old.dwc is not None:
            _conv(new.dwc, old.dwc, _repeat(c, f), None, f)
    elif isinstance(old, TopKSparseAttention):  # ChannelAttention too
        _conv(new.qkv, old.qkv, qkv, src, f)
        _conv(new.qkv_dw, old.qkv_dw, qkv, None, f)
        new.temperature.copy_(old.temperature)
        new.ratio_weights.copy_(old.ratio_weights)
    else:
        raise TypeError(f"widening: unknown mixer {type(old).__name__}")
    _conv(new.proj, old.proj, src, _repeat(c, f), f)


def _ffn(new: GatedFeedForward, old: GatedFeedForward, src: Tensor, f: int) -> None:
    hidden = old.project_out.in_channels
    gates = _chunks(2, hidden, f)  # a and b of chunk(2), each duplicated within its half
    _conv(new.project_in, old.project_in, gates, src, f)
    _conv(new.dw, old.dw, gates, None, f)
    _conv(new.project_out, old.project_out, src, _repeat(hidden, f), f)


def _stage(new: nn.Sequential, old: nn.Sequential, src: Tensor, f: int) -> None:
    for nb, ob in zip(new, old, strict=True):
        _norm(nb.norm1, ob.norm1, src)
        _mixer(nb.attn, ob.attn, src, f)
        _norm(nb.norm2, ob.norm2, src)
        _ffn(nb.ffn, ob.ffn, src, f)


def _copy_widened(new: DerainNet, old: DerainNet, f: int) -> None:
    """Every tensor of ``new`` from ``old``'s: level ``i``'s feature maps duplicate the parent's by ``maps[i]``."""
    maps = [_repeat(old.embed[1].out_channels, f)]
    for nd, od in zip(new.downs, old.downs, strict=True):
        half = _repeat(od[0].out_channels, f)
        _conv(nd[0], od[0], half, maps[-1], f)
        maps.append(_shuffled(half, 4))
    _conv(new.embed[1], old.embed[1], maps[0], None, f)
    for i, (ne, oe, nd, od) in enumerate(
        zip(new.encoders, old.encoders, new.decoders, old.decoders, strict=True)
    ):
        _stage(ne, oe, maps[i], f)
        _stage(nd, od, maps[i], f)
        _conv(new.ups[i][0], old.ups[i][0], _shuffled(maps[i], 4), maps[i + 1], f)
        width = old.fuses[i].out_channels  # torch.cat([up, skip]): both in level i's map
        _conv(new.fuses[i], old.fuses[i], maps[i], torch.cat([maps[i], maps[i] + width]), f)
    _stage(new.bottleneck, old.bottleneck, maps[-1], f)
    _stage(new.refine, old.refine, maps[0], f)
    _conv(new.head[0], old.head[0], None, maps[0], f)
    if old.full_res:  # the stage keeps its width; the convs joining it to level 0 widen on that side
        for name in ("full_embed", "full_encoder", "full_decoder", "full_head"):
            getattr(new, name).load_state_dict(getattr(old, name).state_dict())
        _conv(new.full_down[1], old.full_down[1], maps[0], None, f)
        _conv(new.full_up[0], old.full_up[0], None, maps[0], f)


# ------------------------------------------------------------------------------------------------ checks


def _check_net(net: nn.Module) -> DerainNet:
    if not isinstance(net, DerainNet):
        raise TypeError(f"growth works on a DerainNet, got {type(net).__name__}")
    return net


def _check_widen(net: DerainNet, f: int) -> None:
    """A ValueError unless every TKSA top-k count and feed-forward width scales exactly by ``f``."""
    if f < 1:
        raise ValueError(f"the widening factor should be a positive integer, got {f}")
    for name, m in net.named_modules():
        if name.startswith("full_"):  # the full-resolution stage keeps its width
            continue
        if isinstance(m, TopKSparseAttention):
            c = m.qkv.in_channels // m.heads
            for r, k, wide in zip(
                m.ratios, _keep_counts(m.ratios, c), _keep_counts(m.ratios, f * c), strict=True
            ):
                if wide != f * k:
                    raise ValueError(
                        f"cannot widen {name} ×{f}: its top-k ratio {r:.4g} keeps {k} of a head's {c} channels "
                        f"(head size {c}) but {wide} of {f * c}, not {f * k}: the top-k counts must scale exactly "
                        "(choose another width or ratios)"
                    )
        if isinstance(m, GatedFeedForward):
            dim, hidden = m.project_out.out_channels, m.project_out.in_channels
            wide = int(f * dim * net.init_args["ffn_expansion"])
            if wide != f * hidden:
                raise ValueError(
                    f"cannot widen {name} ×{f}: its hidden width {hidden} becomes {wide}, not {f * hidden}"
                )


def _build(net: DerainNet, seed: int | None, **changes) -> DerainNet:
    """``net``'s class with ``changes`` to its record, on ``net``'s device and dtype, in its mode; its fresh
    parameters seeded (the caller's random state is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        new = type(net)(**{**net.init_args, **changes})
    p = next(net.parameters())
    return new.to(device=p.device, dtype=p.dtype).train(net.training)


# ------------------------------------------------------------------------------------------------ growth


@torch.no_grad()
def widen(
    net: DerainNet, factor: int = 2, noise: float = 0.0, generator: torch.Generator | None = None
) -> DerainNet:
    """``net`` with ``factor``× the channels at every level (``dim`` × factor, the same heads), each parent channel
    duplicated, so the wide network computes what ``net`` does (to float rounding).

    Args:
        net: the parent (unchanged).
        factor: how many times wider.
        noise: Gaussian noise added to every duplicated tensor, as a multiple of that parent tensor's standard
            deviation, so the copies of a channel can learn apart (0: an exact copy of the function).
        generator: the noise's random stream (CPU); default torch's global one.

    Raises:
        ValueError: a TKSA top-k count would not scale exactly (the message names the layer, the ratio and the
            head size), or a feed-forward width would not.
    """
    net, f = _check_net(net), int(factor)
    if f != factor:
        raise ValueError(f"the widening factor should be a whole number, got {factor}")
    _check_widen(net, f)
    new = _build(net, None, dim=net.init_args["dim"] * f)
    _copy_widened(new, net, f)
    if noise:
        parent = net.state_dict()
        for name, t in new.state_dict().items():
            if t.shape != parent[name].shape and t.is_floating_point():
                draw = torch.randn(t.shape, generator=generator, dtype=torch.float64)
                t.add_(draw.to(t) * noise * parent[name].double().std(unbiased=False).item())
    return new


def _cycled(old: Sequence[str], n: int, level: int) -> tuple[str, ...]:
    if not old:
        raise ValueError(f"level {level} has no blocks whose mixers new ones could follow: pass mixers")
    return tuple(old) + tuple(old[j % len(old)] for j in range(len(old), n))


@torch.no_grad()
def deepen(
    net: DerainNet,
    blocks: Sequence[int],
    mixers: Sequence[Sequence[str]] | None = None,
    *,
    seed: int = 0,
) -> DerainNet:
    """``net`` with blocks appended to each level (encoder, decoder and bottleneck alike) up to ``blocks``, each new
    block an exact identity: its attention's ``proj`` and feed-forward's ``project_out`` start at zero. The refine
    blocks and the full-resolution stage stay as they are.

    Args:
        net: the parent (unchanged).
        blocks: blocks per level, each at least the parent's, e.g. ``(2, 4, 4, 4)``.
        mixers: every level's mixers, the parent's first, e.g. ``(("agent", "agent"), ("tksa", "agent", "tksa",
            "agent"), ...)``; default: the new blocks cycle through the level's own mixers in order.
        seed: seeds the new blocks' other parameters.

    Raises:
        ValueError: ``blocks`` has another number of levels or fewer blocks than the parent somewhere, or
            ``mixers`` does not begin with the parent's.
    """
    net = _check_net(net)
    old_blocks, old_mixers = tuple(net.init_args["blocks"]), [tuple(m) for m in net.init_args["mixers"]]
    blocks = tuple(int(n) for n in blocks)
    if len(blocks) != len(old_blocks) or any(n < o for n, o in zip(blocks, old_blocks, strict=True)):
        raise ValueError(
            f"blocks should name each of the {len(old_blocks)} levels, none below {old_blocks}; got {blocks}"
        )
    if mixers is None:
        mixers = [_cycled(m, n, i) for i, (m, n) in enumerate(zip(old_mixers, blocks, strict=True))]
    mixers = [tuple(m) for m in mixers]
    for i, (new_m, old_m) in enumerate(zip(mixers, old_mixers, strict=False)):
        if new_m[: len(old_m)] != old_m:
            raise ValueError(f"level {i}: mixers {new_m} should begin with the parent's {old_m}")
    new = _build(net, seed, blocks=blocks, mixers=tuple(mixers))
    new.load_state_dict(net.state_dict(), strict=False)  # the new blocks' keys stay as built
    stages = [
        *zip(new.encoders, net.encoders, strict=True),
        *zip(new.decoders, net.decoders, strict=True),
        (new.bottleneck, net.bottleneck),
    ]
    for grown, parent in stages:
        for block in grown[len(parent) :]:
            _zero_outputs(block)
    return new


def _zero_outputs(block: TransformerBlock) -> None:
    for conv in (block.attn.proj, block.ffn.project_out):
        nn.init.zeros_(conv.weight)
        if conv.bias is not None:
            nn.init.zeros_(conv.bias)


@torch.no_grad()
def add_full_res(net: DerainNet, mixers: Sequence[str], dim: int = 16, *, seed: int = 0) -> DerainNet:
    """``net`` with a full-resolution stage (``DerainNet``'s ``full_res_mixers``, ``full_res_dim``): every parent
    tensor copied; the stage's ``full_down`` and ``full_head`` start at zero, so the output is exactly the parent's.

    Args:
        net: the parent (unchanged), without a full-resolution stage.
        mixers: the stage's mixers, e.g. ``("tksa",)``.
        dim: the stage's channels.
        seed: seeds the stage's other parameters.
    """
    net = _check_net(net)
    if net.full_res:
        raise ValueError(
            f"the network has a full-resolution stage already ({net.init_args['full_res_mixers']})"
        )
    if not mixers:
        raise ValueError("a full-resolution stage needs at least one mixer, e.g. ('tksa',)")
    new = _build(net, seed, full_res_mixers=tuple(mixers), full_res_dim=int(dim))
    new.load_state_dict(net.state_dict(), strict=False)
    return new


def grow(
    net: DerainNet,
    *,
    dim: int | None = None,
    blocks: Sequence[int] | None = None,
    mixers: Sequence[Sequence[str]] | None = None,
    full_res_mixers: Sequence[str] | None = None,
    full_res_dim: int = 16,
    noise: float = 0.0,
    seed: int = 0,
) -> DerainNet:
    """``net`` grown: wider to ``dim`` (:func:`widen`), then deeper to ``blocks`` (:func:`deepen`), then with a
    full-resolution stage (:func:`add_full_res`); each option left at None skips its step. With ``noise=0`` the
    result computes what ``net`` does.

    Args:
        net: the parent (unchanged).
        dim: the new first-level channels, a multiple of the parent's.
        blocks: the new blocks per level.
        mixers: the mixers of every block after deepening (default: new blocks cycle their level's mixers).
        full_res_mixers: the full-resolution stage's mixers.
        full_res_dim: its channels.
        noise: widening's symmetry-breaking noise (a multiple of each duplicated tensor's std).
        seed: seeds the noise and the new blocks' and stage's parameters.
    """
    net = _check_net(net)
    grown = net
    if dim is not None and dim != net.init_args["dim"]:
        if dim % net.init_args["dim"]:
            raise ValueError(f"dim {dim} should be a multiple of the parent's {net.init_args['dim']}")
        stream = torch.Generator().manual_seed(seed)
        grown = widen(grown, dim // net.init_args["dim"], noise=noise, generator=stream)
    if blocks is not None or mixers is not None:
        grown = deepen(grown, blocks or grown.init_args["blocks"], mixers, seed=seed)
    if full_res_mixers:
        grown = add_full_res(grown, full_res_mixers, full_res_dim, seed=seed)
    return copy.deepcopy(net) if grown is net else grown

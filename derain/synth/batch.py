"""Procedural rain rendered on a whole batch, on the batch's device, instead of in loader workers.

``derain.synth.add_rain`` renders one numpy image at a time in DataLoader workers; on a GPU those workers become
the bottleneck. ``BatchRain`` draws the same rain for a batch ``(B, 3, H, W)`` with torch's random numbers where
the batch already is: per sample a style, a fall angle, a veil and a tint; per layer and sample a density, a
streak length, angle, width and brightness, drawn from the same ``RainStyle`` ranges as ``add_rain``; seeds
smeared by the very streak of ``add_rain`` (``derain.synth.line_kernel``: its length, angle and ``width``,
tapered), the layers' own directions, falloff, blur and location maps as ``add_rain`` draws them, layers
screen-blended, put on the veiled image by the same composite. ``DerainDataModule`` uses it
when ``synthesis.render_on_device`` is set: the workers then only crop clean photos for the procedural samples.

The streak kernels are drawn on the CPU (a few small arrays a layer) and applied on the device, one kernel a
sample, by ``kornia.filters.filter2d``; ``tests/test_batch_rain.py`` holds the streak width, length, coverage and
brightness to those of ``add_rain``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from kornia.filters import filter2d, gaussian_blur2d
from torch import Tensor, nn

from .composite import COMPOSITE_BETA, composite
from .procedural import ANY_STYLES, RAIN_STYLES, SHARED, RainStyle, line_kernel

__all__ = ["BatchRain"]


def _uniform(low: Tensor, high: Tensor, generator: torch.Generator | None) -> Tensor:
    return low + (high - low) * torch.rand(low.shape, generator=generator, device=low.device, dtype=low.dtype)


def _integers(low: Tensor, high: Tensor, generator: torch.Generator | None) -> Tensor:
    """Integers drawn uniformly from ``[low, high]`` (inclusive, as ``RainStyle``'s integer ranges)."""
    drawn = low + torch.rand(low.shape, generator=generator, device=low.device) * (high - low + 1)
    return drawn.floor().clamp(max=high)


def _smear(seeds: Tensor, lengths: list[float], angles: list[float], widths: list[int]) -> Tensor:
    """Each sample's seeds ``(B, 1, H, W)`` filtered by its own ``line_kernel(length, angle, width)``, as
    ``add_rain``'s ``cv2.filter2D`` does (a correlation, zero outside), clipped to [0, 1]."""
    kernels = [line_kernel(*drawn) for drawn in zip(lengths, angles, widths, strict=True)]
    size = max(k.shape[0] for k in kernels)
    stack = np.zeros((len(kernels), size, size), np.float32)
    for i, k in enumerate(kernels):  # odd sizes: each kernel stays centred in the largest one
        off = (size - k.shape[0]) // 2
        stack[i, off : off + k.shape[0], off : off + k.shape[0]] = k
    kernel = torch.from_numpy(stack).to(seeds.device)
    return filter2d(seeds, kernel, border_type="constant", behaviour="corr").clamp(0, 1)


def _blur(layer: Tensor, sigma: Tensor) -> Tensor:
    """Each sample's layer ``(B, 1, H, W)`` blurred with its own Gaussian σ (below 0.05: left sharp)."""
    if float(sigma.max()) <= 0.05:
        return layer
    size = 2 * math.ceil(3 * float(sigma.max())) + 1
    sigmas = sigma.clamp(min=1e-3)[:, None].expand(-1, 2)
    blurred = gaussian_blur2d(layer, (size, size), sigmas, border_type="constant")
    return torch.where((sigma > 0.05)[:, None, None, None], blurred, layer)


def _location_map(
    b: int, h: int, w: int, generator: torch.Generator | None, device, cell: int = 48
) -> Tensor:
    """``derain.synth.procedural.location_map`` for ``b`` samples: smooth noise cut at a random level."""
    coarse = torch.rand(b, 1, -(-h // cell) + 1, -(-w // cell) + 1, generator=generator, device=device)
    field = F.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=False)
    share = 0.4 + 0.5 * torch.rand(b, generator=generator, device=device)  # of the frame that gets rain
    ordered = field.flatten(1).sort(dim=1).values
    index = ((1 - share) * (h * w - 1)).round().long().clamp(0, h * w - 1)
    level = ordered.gather(1, index[:, None])[:, :, None, None]
    return ((field - level) / 0.08 + 0.5).clamp(0, 1)


class BatchRain(nn.Module):
    """Render procedural rain onto a batch of clean images:
    ``clip(v + streaks · tint · (1 − β · v), 0, 1)`` with ``v = veil(clean)`` (``derain.synth.composite``).

    Args:
        styles: the styles a sample's parameters are drawn from, one picked at random per sample.
        beta: the composite's β (default ``COMPOSITE_BETA``; 0 adds the streaks).

    Shape:
        - input: :math:`(B, 3, H, W)` clean images in [0, 1], any device and float dtype
        - output: :math:`(B, 3, H, W)` rainy images, never darker than the veiled clean image

    Example:
        >>> rain = BatchRain()
        >>> rain(torch.zeros(2, 3, 32, 48), generator=torch.Generator().manual_seed(0)).shape
        torch.Size([2, 3, 32, 48])
    """

    def __init__(
        self,
        styles: tuple[RainStyle, ...] = tuple(RAIN_STYLES[n] for n in ANY_STYLES),
        beta: float = COMPOSITE_BETA,
    ) -> None:
        super().__init__()
        if not styles:
            raise ValueError("BatchRain needs at least one RainStyle")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"BatchRain beta must be in [0, 1], got {beta}")
        self.beta = beta
        self.styles = styles
        fields = ("density", "brightness", "angle", "haze", "layers", "length", "width")
        table = {f: torch.tensor([getattr(s, f) for s in styles], dtype=torch.float32) for f in fields}
        table["angle_jitter"] = torch.tensor([(-s.angle_jitter, s.angle_jitter) for s in styles])
        table["cross_angle"] = torch.tensor([(-s.cross_angle, s.cross_angle) for s in styles])
        table["falloff"] = torch.tensor([s.falloff for s in styles])
        table["blur"] = torch.tensor([s.blur for s in styles])
        table["chances"] = torch.tensor([(s.cross_prob, s.location_prob) for s in styles])
        for name, value in table.items():
            self.register_buffer(name, value, persistent=False)  # (styles, 2): low, high
        self.max_layers = max(s.layers[1] for s in styles)
        self.max_width = max(s.width[1] for s in styles)

    def forward(self, clean: Tensor, generator: torch.Generator | None = None) -> Tensor:
        b, _, h, w = clean.shape
        dev, dt = clean.device, torch.float32
        style = torch.randint(len(self.styles), (b,), generator=generator, device=dev)

        def ranges(field: str) -> tuple[Tensor, Tensor]:
            table = getattr(self, field).to(dev)[style]
            return table[:, 0], table[:, 1]

        def draw(field: str) -> Tensor:
            return _uniform(*ranges(field), generator)

        base_angle = draw("angle")
        n_layers = _integers(*ranges("layers"), generator)
        keep = torch.ones(b, 1, h, w, device=dev, dtype=dt)
        cross_prob, location_prob = (self.chances.to(dev)[style][:, k] for k in (0, 1))
        # the options the styles leave off draw nothing: the older styles' rain stays what it was for a seed
        crossing, falling = bool((self.chances[:, 0] > 0).any()), bool((self.falloff != 1).any())
        blurring, patchy = bool((self.blur > 0).any()), bool((self.chances[:, 1] > 0).any())
        scale = torch.ones(b, device=dev, dtype=dt)
        for i in range(self.max_layers):
            active = (i < n_layers).to(dt)
            density, length = draw("density"), draw("length")
            angle = base_angle + draw("angle_jitter")
            width = _integers(*ranges("width"), generator)
            if i and crossing:  # a layer of its own direction
                own = torch.rand(b, generator=generator, device=dev) < cross_prob
                angle = torch.where(own, base_angle + draw("cross_angle"), angle)
            if i and falling:  # fainter and sparser behind the first
                scale = scale * draw("falloff")
            density = (density * scale).clamp(min=1e-6)
            pad = int(math.ceil(float(length.max()))) // 2 + self.max_width  # seeds outside still reach in
            hp, wp = h + 2 * pad, w + 2 * pad
            u = torch.rand(b, 1, hp, wp, generator=generator, device=dev, dtype=dt)
            low, high = SHARED.drop
            seeds = (u < density[:, None, None, None]).to(dt) * (
                low + (high - low) * torch.rand(b, 1, hp, wp, generator=generator, device=dev)
            )
            smeared = _smear(seeds, length.tolist(), angle.tolist(), [int(x) for x in width.tolist()])
            brightness = draw("brightness") * scale * active
            layer = smeared[..., pad : pad + h, pad : pad + w] * brightness[:, None, None, None]
            if blurring:
                layer = _blur(layer, draw("blur"))
            if patchy:
                patches = torch.rand(b, generator=generator, device=dev) < location_prob
                where = _location_map(b, h, w, generator, dev)
                layer = torch.where(patches[:, None, None, None], layer * where, layer)
            keep = keep * (1 - layer)
        streaks = 1 - keep
        t = draw("haze")[:, None, None, None]
        low, high = (torch.full((b, 1), v, device=dev) for v in SHARED.airlight)
        spread = SHARED.airlight_tint
        airlight = _uniform(low, high, generator)
        airlight = airlight + (torch.rand(b, 3, generator=generator, device=dev) * 2 * spread - spread)
        tint = 1 - torch.rand(b, 3, generator=generator, device=dev) * SHARED.streak_tint
        image = clean.to(dt)
        veiled = image * (1 - t) + airlight[:, :, None, None] * t
        return composite(veiled, streaks * tint[:, :, None, None], self.beta).to(clean.dtype)

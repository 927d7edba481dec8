"""Procedural rain rendered on a whole batch, on the batch's device (kornia), instead of in loader workers.

``derain.synth.add_rain`` renders one numpy image at a time in DataLoader workers; on a GPU those workers become
the bottleneck. ``BatchRain`` draws the same kind of rain (sparse seeds smeared by a motion-blur line along
the fall direction, several layers screen-blended, a greyish veil) for a batch ``(B, 3, H, W)`` with torch's
random numbers and kornia's filters, where the batch already is. ``DerainDataModule`` uses it when
``synthesis.render_on_device`` is set: the workers then only crop clean photos for the procedural samples.

Per sample: the style (light, medium, heavy: ``derain.synth.RAIN_STYLES``), the fall angle, each layer's density
and brightness, the veil and the tint. Per layer and batch: the streak length (one motion kernel size per
``kornia.filters.motion_blur`` call).
"""

from __future__ import annotations

import math

import torch
from kornia.filters import gaussian_blur2d, motion_blur
from torch import Tensor, nn

from .composite import COMPOSITE_BETA
from .procedural import ANY_STYLES, RAIN_STYLES, RainStyle

__all__ = ["BatchRain"]


def _uniform(low: Tensor, high: Tensor, generator: torch.Generator | None) -> Tensor:
    return low + (high - low) * torch.rand(low.shape, generator=generator, device=low.device, dtype=low.dtype)


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
        fields = ("density", "brightness", "angle", "haze", "layers", "length")
        table = {f: torch.tensor([getattr(s, f) for s in styles], dtype=torch.float32) for f in fields}
        for name, value in table.items():
            self.register_buffer(name, value, persistent=False)  # (styles, 2): low, high
        self.max_layers = max(s.layers[1] for s in styles)
        self.angle_jitter = max(s.angle_jitter for s in styles)

    def streak_layer(self, seeds: Tensor, length: float, angle: Tensor) -> Tensor:
        """Seeds ``(B, 1, H, W)`` smeared along ``angle`` (degrees from vertical, ``(B,)``), peak-preserving."""
        size = max(3, int(math.ceil(length)) | 1)
        # kornia's angle turns anti-clockwise (as seen) from horizontal; ours is derain.synth.line_kernel's: from
        # vertical, positive going down to the right.
        smeared = motion_blur(seeds, size, 90.0 + angle, torch.zeros_like(angle), border_type="constant")
        return (smeared * size).clamp(0, 1)  # the kernel sums to 1 over ~size pixels: a seed keeps its peak

    def forward(self, clean: Tensor, generator: torch.Generator | None = None) -> Tensor:
        b, _, h, w = clean.shape
        dev, dt = clean.device, torch.float32
        style = torch.randint(len(self.styles), (b,), generator=generator, device=dev)

        def draw(field: str) -> Tensor:
            table = getattr(self, field).to(dev)[style]
            return _uniform(table[:, 0], table[:, 1], generator)

        base_angle = draw("angle")
        layers = self.layers.to(dev)[style]
        n_layers = layers[:, 0] + torch.rand(b, generator=generator, device=dev) * (
            layers[:, 1] - layers[:, 0] + 1
        )
        n_layers = n_layers.floor().clamp(max=layers[:, 1])
        length_range = self.length.to(dev)[style]
        keep = torch.ones(b, 1, h, w, device=dev, dtype=dt)
        for i in range(self.max_layers):
            active = (i < n_layers).to(dt)
            # One kernel size per layer for the batch: the longest this layer's samples drew.
            length = float(_uniform(length_range[:, 0], length_range[:, 1], generator).max())
            jitter = (torch.rand(b, generator=generator, device=dev) * 2 - 1) * self.angle_jitter
            pad = length // 2 + 2  # seeds outside the frame still drop streaks into it
            hp, wp = h + 2 * int(pad), w + 2 * int(pad)
            density = draw("density")[:, None, None, None]
            u = torch.rand(b, 1, hp, wp, generator=generator, device=dev, dtype=dt)
            seeds = (u < density).to(dt) * (
                0.5 + 0.5 * torch.rand(b, 1, hp, wp, generator=generator, device=dev)
            )
            layer = self.streak_layer(seeds, length, base_angle + jitter)[
                ..., int(pad) : int(pad) + h, int(pad) : int(pad) + w
            ]
            if i % 2:  # every other layer a little thicker, as drops nearer the camera
                layer = gaussian_blur2d(layer, (3, 3), (0.6, 0.6)) * 1.6
            layer = layer.clamp(0, 1) * (draw("brightness") * active)[:, None, None, None]
            keep = keep * (1 - layer)
        streaks = 1 - keep
        t = draw("haze")[:, None, None, None]
        airlight = _uniform(
            torch.full((b, 1), 0.75, device=dev), torch.full((b, 1), 0.95, device=dev), generator
        )
        airlight = airlight + (torch.rand(b, 3, generator=generator, device=dev) * 0.06 - 0.03)
        tint = 1 - torch.rand(b, 3, generator=generator, device=dev) * 0.08
        image = clean.to(dt)
        veiled = image * (1 - t) + airlight[:, :, None, None] * t
        rain = streaks * tint[:, :, None, None]
        if self.beta:
            rain = rain * (1 - self.beta * veiled)
        return (veiled + rain).clamp(0, 1).to(clean.dtype)

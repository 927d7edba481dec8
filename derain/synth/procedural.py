"""Procedural rain: streak layers (sparse seeds smeared by a tapered line along the fall direction), haze, and
``add_rain``, which puts them on a photo with the composite (``derain.synth.composite``).

Every function is pure: randomness comes only from the ``numpy.random.Generator`` passed in, so the same seed
gives the same image. Images are float32 arrays (H, W, 3) with values in [0, 1]:

    hazy  = clean · (1 − t) + A · t
    rainy = clip(hazy + streaks · (1 − β · hazy), 0, 1)        (β: ``COMPOSITE_BETA`` unless told otherwise)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from .composite import COMPOSITE_BETA, as_float, check_image, composite

__all__ = [
    "ANY_STYLES",
    "RAIN_STYLES",
    "SHARED",
    "RainStyle",
    "SharedRanges",
    "add_haze",
    "add_rain",
    "line_kernel",
    "location_map",
    "rain_layer",
    "rain_streaks",
]

Range = tuple[float, float]


@dataclass(frozen=True)
class RainStyle:
    """Ranges that one rainy image's parameters are drawn from (uniformly, ``(low, high)``).

    Attributes:
        layers: number of streak layers, inclusive integer range.
        density: fraction of pixels that seed a streak, per layer.
        length: streak length in pixels.
        angle: base fall angle in degrees from vertical (positive leans right); shared by all layers.
        angle_jitter: each layer's angle deviates from the base angle by at most this many degrees.
        width: streak thickness in pixels, inclusive integer range.
        brightness: peak streak intensity added to the image.
        haze: veil transmission loss ``t``; 0 means no haze.
        cross_prob: chance that a layer after the first falls in a direction of its own, ``base ± cross_angle``
            instead of ``base ± angle_jitter`` (rain of several directions; 0: every layer near the base).
        cross_angle: how far such a layer's direction may turn from the base angle, in degrees.
        falloff: each layer after the first has the previous one's density and brightness times a factor drawn
            from this range (fainter, sparser layers behind the first; ``(1, 1)``: all drawn alike).
        blur: the Gaussian σ (pixels) each layer is blurred with, drawn per layer (out-of-focus and soft
            streaks; ``(0, 0)``: sharp).
        location_prob: chance that a layer falls only where a random location map lets it (rain in patches,
            the binary map ``R`` of JORDER's model, smoothed); 0: everywhere.

    A value out of its range is a ``ValueError`` naming the field and the range.
    """

    layers: tuple[int, int] = (1, 3)
    density: Range = (0.0015, 0.004)
    length: Range = (15.0, 40.0)
    angle: Range = (-30.0, 30.0)
    angle_jitter: float = 4.0
    width: tuple[int, int] = (1, 2)
    brightness: Range = (0.3, 0.5)
    haze: Range = (0.0, 0.03)
    cross_prob: float = 0.0
    cross_angle: float = 0.0
    falloff: Range = (1.0, 1.0)
    blur: Range = (0.0, 0.0)
    location_prob: float = 0.0

    def __post_init__(self) -> None:
        limits = {
            "layers": (1, 16),
            "density": (1e-6, 1.0),
            "length": (1.0, 512.0),
            "angle": (-90.0, 90.0),
            "width": (1, 16),
            "brightness": (0.0, 1.0),
            "haze": (0.0, 1.0),
            "falloff": (0.0, 1.0),
            "blur": (0.0, 16.0),
        }
        for name, (low, high) in limits.items():
            a, b = getattr(self, name)
            if not low <= a <= b <= high:
                raise ValueError(
                    f"RainStyle.{name} must be a range (low, high) within [{low}, {high}], got ({a}, {b})"
                )
        for name, (low, high) in {
            "angle_jitter": (0.0, 90.0),
            "cross_prob": (0.0, 1.0),
            "cross_angle": (0.0, 90.0),
            "location_prob": (0.0, 1.0),
        }.items():
            if not low <= getattr(self, name) <= high:
                raise ValueError(f"RainStyle.{name} must be in [{low}, {high}], got {getattr(self, name)}")


# Calibrated on 21 natural photos (builtin + Kodak + SUN): mean input PSNR-Y of "light" ≈ 28.5 dB (Rain200L:
# 27.9), "medium" ≈ 21 dB (DDN/DID-MDN: 23-24), "heavy" ≈ 13.5 dB (Rain100H test: 13.5). The heavy residual
# statistics (mean 0.18, 45 % of pixels above 0.1) are close to Rain100H's (0.21, 61 %).
RAIN_STYLES: dict[str, RainStyle] = {
    "light": RainStyle(
        layers=(1, 2),
        density=(0.001, 0.003),
        length=(8.0, 25.0),
        width=(1, 1),
        brightness=(0.25, 0.45),
        haze=(0.0, 0.0),
    ),
    "medium": RainStyle(
        layers=(1, 3),
        density=(0.0015, 0.004),
        length=(15.0, 40.0),
        width=(1, 2),
        brightness=(0.3, 0.5),
        haze=(0.0, 0.03),
    ),
    "heavy": RainStyle(
        layers=(2, 3),
        density=(0.0025, 0.004),
        length=(25.0, 50.0),
        width=(1, 2),
        brightness=(0.4, 0.65),
        haze=(0.02, 0.1),
    ),
    # Fitted by hand to the 18 Rain100H development layers (recovered under the fitted composite), measured with
    # tools/streaks.py (median [quartiles]; real | heavy | this): coverage above 0.1 0.79 [0.60, 0.85] |
    # 0.47 | 0.71 [0.63, 0.80]; autocorrelation length 32 [19, 36] | 21 | 31 [28, 36] px; width 3 | 2 | 3 px;
    # fall angle quartiles −2°…+5° | −6°…+21° | −1°…+3°; streak brightness median / 90th percentile 0.31 / 0.58 |
    # 0.36 / 0.56 | 0.35 / 0.55; veil floor (10th percentile) 0.025 | 0.027 | 0.014. Not in "any".
    "rain100h": RainStyle(
        layers=(2, 3),
        density=(0.0025, 0.0055),
        length=(25.0, 65.0),
        angle=(-8.0, 8.0),
        angle_jitter=3.0,
        width=(2, 2),
        brightness=(0.25, 0.6),
        haze=(0.0, 0.06),
    ),
}


@dataclass(frozen=True)
class SharedRanges:
    """The ranges every style shares, drawn alike by ``add_rain`` (numpy) and ``BatchRain`` (torch).

    Attributes:
        drop: a streak seed's intensity (drops differ in size and distance).
        airlight: the haze veil's grey level ``A``.
        airlight_tint: each channel of ``A`` deviates from that grey by at most this much.
        streak_tint: each channel of the streaks is dimmed by at most this much (rain reflects the sky: near
            white).
    """

    drop: Range = (0.5, 1.0)
    airlight: Range = (0.75, 0.95)
    airlight_tint: float = 0.03
    streak_tint: float = 0.08


SHARED = SharedRanges()
"""The one table of the shared ranges; the renderers read it, never their own copies."""

# Drawn to cover the 21 real heavy layers (Rain100H's 18 development pairs, Rain200H's 3; recovered under the fitted
# composite, derain.synth.measure): coverage above 0.1 0.12–0.94, streak brightness median 0.10–0.66,
# autocorrelation length 10–62 px, width 2–3.5 px, fall angle −10°…+12°, veil floor 0–0.16; with what JORDER's
# model of Rain100H has (O = α(B + Σ S̃ₜ·R) + (1 − α)·A): layers of their own directions, fainter behind the first,
# soft, and a location map of where rain falls. Alone it trails "rain100h" on the 21 real heavy pairs; drawn beside
# it (procedural_styles [rain100h, layered]) it leads (tools/generators.py, docs/history.md). Not in "any".
RAIN_STYLES["layered"] = RainStyle(
    layers=(1, 4),
    density=(0.002, 0.008),
    length=(16.0, 90.0),
    angle=(-12.0, 12.0),
    angle_jitter=2.0,
    width=(2, 2),
    brightness=(0.2, 0.75),
    haze=(0.0, 0.12),
    cross_prob=0.4,
    cross_angle=30.0,
    falloff=(0.6, 1.0),
    blur=(0.0, 0.5),
    location_prob=0.25,
)

# Faint, dense, short, near-vertical streaks: the fine rain of the webcam frames (gtrain-webcam-pairs: Stick,
# Hualien), which the legs that learnt real-rainy's long streaks changed least (docs/history.md, "derain-base,
# leg 9"). On 20 leak-free BSDS photos (add_rain, seed 0) as faint overall as "light": input PSNR-Y 32.1 dB
# (27.4-37.4) against its 31.8 (27.0-37.2); on grey, 18-60 % of the pixels gain more than 0.02 (light: 2-7 %), the
# 99th percentile half medium's. Not in "any".
RAIN_STYLES["drizzle"] = RainStyle(
    layers=(2, 3),
    density=(0.006, 0.015),
    length=(4.0, 14.0),
    angle=(-10.0, 10.0),
    angle_jitter=2.0,
    width=(1, 1),
    brightness=(0.08, 0.25),
    haze=(0.0, 0.03),
    blur=(0.3, 0.8),
)

ANY_STYLES: tuple[str, ...] = ("light", "medium", "heavy")
"""The styles ``add_rain(style="any")`` and ``BatchRain()`` draw from: light to heavy rain of any kind."""


def line_kernel(length: float, angle: float, width: int = 1) -> np.ndarray:
    """A motion-blur kernel: a line of ``length`` pixels through the centre, tapered towards its ends.

    Args:
        length: line length in pixels (at least 1).
        angle: orientation in degrees from vertical, positive leaning right (the kernel is symmetric).
        width: line thickness in pixels.

    Returns:
        float32 (k, k) kernel with peak 1 (not normalised: a seed of intensity v becomes a streak of peak v).
    """
    if length < 1:
        raise ValueError(f"streak length must be at least 1 pixel, got {length}")
    size = int(np.ceil(length)) | 1  # odd, so the line is centred
    half = (size - 1) / 2
    kernel = np.zeros((size, size), np.float32)
    rad = np.deg2rad(angle)
    dx, dy = np.sin(rad) * length / 2, np.cos(rad) * length / 2
    shift = 4  # sub-pixel precision of cv2.line (2**4)
    p1 = (round((half - dx) * 2**shift), round((half - dy) * 2**shift))
    p2 = (round((half + dx) * 2**shift), round((half + dy) * 2**shift))
    cv2.line(kernel, p1, p2, 1.0, thickness=max(int(width), 1), lineType=cv2.LINE_AA, shift=shift)
    # Taper: full intensity in the middle, fading to 30 % at the ends, like a drop's exposure trail.
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) - half
    along = np.abs(xx * np.sin(rad) + yy * np.cos(rad)) / max(length / 2, 1e-6)
    kernel *= np.clip(1.0 - 0.7 * along**2, 0.3, 1.0)
    return kernel / max(float(kernel.max()), 1e-6)


def rain_streaks(
    shape: tuple[int, int],
    rng: np.random.Generator,
    *,
    density: float,
    length: float,
    angle: float,
    width: int = 1,
    brightness: float = 0.6,
) -> np.ndarray:
    """One layer of parallel rain streaks: sparse random seeds smeared along ``angle``.

    Args:
        shape: (H, W) of the layer.
        rng: the source of randomness.
        density: fraction of pixels that seed a streak, in (0, 1].
        length: streak length in pixels.
        angle: fall direction in degrees from vertical.
        width: streak thickness in pixels.
        brightness: peak intensity of a streak.

    Returns:
        float32 (H, W) layer in [0, brightness].
    """
    h, w = int(shape[0]), int(shape[1])
    if h < 1 or w < 1:
        raise ValueError(f"rain layer shape must be positive (H, W), got {shape}")
    if not 0.0 < density <= 1.0:
        raise ValueError(f"streak density must be in (0, 1], got {density}")
    pad = int(np.ceil(length)) // 2 + width  # seeds outside the frame still drop streaks into it
    seeds = (rng.random((h + 2 * pad, w + 2 * pad)) < density).astype(np.float32)
    seeds *= rng.uniform(*SHARED.drop, seeds.shape).astype(np.float32)
    streaks = cv2.filter2D(seeds, -1, line_kernel(length, angle, width), borderType=cv2.BORDER_CONSTANT)
    streaks = streaks[pad : pad + h, pad : pad + w]
    return np.clip(streaks, 0.0, 1.0) * np.float32(brightness)


def location_map(shape: tuple[int, int], rng: np.random.Generator, cell: int = 48) -> np.ndarray:
    """Where rain falls: a smooth random field (noise on a ``cell``-pixel grid, resized) cut at a random level
    with soft edges, so a random 40–90 % of the frame gets rain.

    Returns:
        float32 (H, W) map in [0, 1].
    """
    h, w = int(shape[0]), int(shape[1])
    coarse = rng.random((max(2, -(-h // cell) + 1), max(2, -(-w // cell) + 1))).astype(np.float32)
    field = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_CUBIC)
    level = float(np.quantile(field, 1.0 - rng.uniform(0.4, 0.9)))
    return np.clip((field - level) / 0.08 + 0.5, 0.0, 1.0)


def rain_layer(
    shape: tuple[int, int], rng: np.random.Generator, style: RainStyle | None = None
) -> np.ndarray:
    """Several streak layers of one storm, each of its own density, length, width and brightness; near one fall
    angle, or (``cross_prob``) in directions of their own; optionally fainter behind the first (``falloff``),
    blurred (``blur``) and falling in patches (``location_prob``).

    The layers are combined by screen blending, ``1 − Π(1 − layer)``, so crossing streaks saturate softly.

    Args:
        shape: (H, W) of the layer.
        rng: the source of randomness.
        style: parameter ranges; the default ``RainStyle()`` is medium rain.

    Returns:
        float32 (H, W) rain layer in [0, 1].
    """
    style = style or RainStyle()
    shape = tuple(int(s) for s in shape[:2])
    base = rng.uniform(*style.angle)
    keep = np.ones(shape, np.float32)
    scale = 1.0
    for i in range(int(rng.integers(style.layers[0], style.layers[1] + 1))):
        density, length = rng.uniform(*style.density), rng.uniform(*style.length)
        angle = base + rng.uniform(-style.angle_jitter, style.angle_jitter)
        width, brightness = (
            int(rng.integers(style.width[0], style.width[1] + 1)),
            rng.uniform(*style.brightness),
        )
        if i and style.cross_prob and rng.random() < style.cross_prob:
            angle = base + rng.uniform(-style.cross_angle, style.cross_angle)
        if i and style.falloff != (1.0, 1.0):
            scale *= rng.uniform(*style.falloff)
        layer = rain_streaks(
            shape,
            rng,
            density=max(density * scale, 1e-6),
            length=length,
            angle=angle,
            width=width,
            brightness=brightness * scale,
        )
        sigma = rng.uniform(*style.blur) if style.blur != (0.0, 0.0) else 0.0
        if sigma > 0.05:
            layer = cv2.GaussianBlur(layer, (0, 0), sigma)
        if style.location_prob and rng.random() < style.location_prob:
            layer = layer * location_map(shape, rng)
        keep *= 1.0 - layer
    return 1.0 - keep


def add_haze(image: np.ndarray, t: float, airlight: float | np.ndarray = 0.9) -> np.ndarray:
    """The atmospheric veil of dense rain: ``image · (1 − t) + A · t``.

    Args:
        image: float (H, W, 3) in [0, 1].
        t: veil strength in [0, 1]; 0 returns the image unchanged.
        airlight: the veil's colour ``A``, a scalar or an RGB triple.
    """
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"haze strength t must be in [0, 1], got {t}")
    return (image * (1.0 - t) + np.asarray(airlight, np.float32) * t).astype(np.float32)


def add_rain(
    clean: np.ndarray,
    rng: np.random.Generator,
    style: RainStyle | str | Sequence[str] = "any",
    *,
    beta: float = COMPOSITE_BETA,
) -> np.ndarray:
    """Render rain onto a clean image: optional haze, then streaks put on by ``composite`` with ``beta``,
    clipped to [0, 1].

    Args:
        clean: (H, W, 3) image, float in [0, 1] or uint8.
        rng: the source of randomness.
        style: a ``RainStyle``, a name from ``RAIN_STYLES``, several such names to pick one of at random, or
            ``"any"`` for ``ANY_STYLES``.
        beta: the composite's β (``composite``; default ``COMPOSITE_BETA``; 0 adds the streaks).

    Returns:
        float32 (H, W, 3) rainy image in [0, 1].

    Example:
        >>> rng = np.random.default_rng(0)
        >>> add_rain(np.zeros((32, 48, 3), np.float32), rng, "heavy").shape
        (32, 48, 3)
    """
    check_image(clean, "add_rain clean image")
    if style == "any":
        style = ANY_STYLES
    if not isinstance(style, (str, RainStyle)):  # names to pick one from
        style = str(rng.choice(list(style)))
    if isinstance(style, str):
        if style in RAIN_STYLES:
            style = RAIN_STYLES[style]
        else:
            raise ValueError(f"unknown rain style {style!r}; expected 'any' or one of {sorted(RAIN_STYLES)}")
    image = as_float(clean)
    t = rng.uniform(*style.haze)
    if t > 0:
        spread = SHARED.airlight_tint
        airlight = rng.uniform(*SHARED.airlight) + rng.uniform(-spread, spread, 3)
        image = add_haze(image, t, airlight)
    streaks = rain_layer(clean.shape[:2], rng, style)[..., None]
    tint = np.float32(1.0) - rng.uniform(0.0, SHARED.streak_tint, 3).astype(np.float32)
    return composite(image, streaks * tint, beta)

"""Synthetic rain: procedural streak layers, haze, and transplants of real rain layers onto clean photos.

Every function is pure: randomness comes only from the ``numpy.random.Generator`` passed in, so the same seed
gives the same image. Images are float32 arrays (H, W, 3) with values in [0, 1].

The rain model is Rain100H's composite (``O = B + S`` when β = 0, plus an atmospheric veil):

    hazy  = clean · (1 − t) + A · t
    rainy = clip(hazy + streaks · (1 − β · hazy), 0, 1)        (β: ``COMPOSITE_BETA`` unless told otherwise)

Streaks are sparse random seeds smeared by a line kernel (a motion blur along the fall direction). The
residual ``clip(rainy − clean, 0, 1)`` of a real pair is a rain layer too, and ``transplant`` adds one to
another clean photo.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

__all__ = [
    "RainStyle",
    "RAIN_STYLES",
    "line_kernel",
    "rain_streaks",
    "rain_layer",
    "add_haze",
    "add_rain",
    "as_float",
    "rain_residual",
    "COMPOSITE_BETA",
    "composite",
    "recover_layer",
    "background_correlation",
    "fit_composite_beta",
    "LayerAugment",
    "transplant",
    "transplant_layers",
    "dihedral",
    "builtin_clean_images",
]

Range = tuple[float, float]

COMPOSITE_BETA = 0.62
"""The fitted β of Rain100H's rain composite ``rainy = clean + layer · (1 − β · clean)`` (``benchmarks/
composite.py`` fits it on the 18 development pairs: the β for which the recovered layer no longer correlates with
the background in unsaturated streak pixels; 0 is plain addition, 1 a screen blend). The one default of β
wherever it is taken: ``composite``, ``add_rain``, ``transplant``, ``BatchRain``, the synthetic dataset and
``Synthesis.composite_beta``."""


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
    """

    layers: tuple[int, int] = (1, 3)
    density: Range = (0.0015, 0.004)
    length: Range = (15.0, 40.0)
    angle: Range = (-30.0, 30.0)
    angle_jitter: float = 4.0
    width: tuple[int, int] = (1, 2)
    brightness: Range = (0.3, 0.5)
    haze: Range = (0.0, 0.03)


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
    # benchmarks/streaks.py (median [quartiles]; real | heavy | this): coverage above 0.1 0.79 [0.60, 0.85] |
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

ANY_STYLES: tuple[str, ...] = ("light", "medium", "heavy")
"""The styles ``add_rain(style="any")`` and ``BatchRain()`` draw from: light to heavy rain of any kind."""


def _check_image(image: np.ndarray, what: str) -> None:
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{what}: expected an (H, W, 3) image, got shape {tuple(image.shape)}")


def as_float(image: np.ndarray) -> np.ndarray:
    """uint8 or float image -> float32 in [0, 1] (uint8 is divided by 255, float is only cast)."""
    if image.dtype == np.uint8:
        return image.astype(np.float32) / 255.0
    return image.astype(np.float32, copy=False)


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
    seeds *= rng.uniform(0.5, 1.0, seeds.shape).astype(np.float32)  # drops differ in size and distance
    streaks = cv2.filter2D(seeds, -1, line_kernel(length, angle, width), borderType=cv2.BORDER_CONSTANT)
    streaks = streaks[pad : pad + h, pad : pad + w]
    return np.clip(streaks, 0.0, 1.0) * np.float32(brightness)


def rain_layer(
    shape: tuple[int, int], rng: np.random.Generator, style: RainStyle | None = None
) -> np.ndarray:
    """Several streak layers of one storm: similar angles, random densities, lengths and widths.

    The layers are combined by screen blending, ``1 − Π(1 − layer)``, so crossing streaks saturate softly.

    Args:
        shape: (H, W) of the layer.
        rng: the source of randomness.
        style: parameter ranges; the default ``RainStyle()`` is medium rain.

    Returns:
        float32 (H, W) rain layer in [0, 1].
    """
    style = style or RainStyle()
    base = rng.uniform(*style.angle)
    keep = np.ones(tuple(int(s) for s in shape[:2]), np.float32)
    for _ in range(int(rng.integers(style.layers[0], style.layers[1] + 1))):
        layer = rain_streaks(
            shape,
            rng,
            density=rng.uniform(*style.density),
            length=rng.uniform(*style.length),
            angle=base + rng.uniform(-style.angle_jitter, style.angle_jitter),
            width=int(rng.integers(style.width[0], style.width[1] + 1)),
            brightness=rng.uniform(*style.brightness),
        )
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
        style: a ``RainStyle``, a name from ``RAIN_STYLES`` (``"light"``, ``"medium"``, ``"heavy"``,
            ``"rain100h"``), several such names to pick one of at random, or ``"any"`` for ``ANY_STYLES``.
        beta: the composite's β (``composite``; default ``COMPOSITE_BETA``; 0 adds the streaks).

    Returns:
        float32 (H, W, 3) rainy image in [0, 1].

    Example:
        >>> rng = np.random.default_rng(0)
        >>> add_rain(np.zeros((32, 48, 3), np.float32), rng, "heavy").shape
        (32, 48, 3)
    """
    _check_image(clean, "add_rain clean image")
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
        airlight = rng.uniform(0.75, 0.95) + rng.uniform(-0.03, 0.03, 3)  # greyish, slightly tinted
        image = add_haze(image, t, airlight)
    streaks = rain_layer(clean.shape[:2], rng, style)[..., None]
    tint = np.float32(1.0) - rng.uniform(0.0, 0.08, 3).astype(np.float32)  # rain reflects the sky: near white
    return composite(image, streaks * tint, beta)


def rain_residual(rainy: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """The rain layer of a pair: ``clip(rainy − clean, 0, 1)`` as float32 (inputs uint8 or float)."""
    if rainy.shape != clean.shape:
        raise ValueError(f"rain_residual: rainy shape {rainy.shape} differs from clean shape {clean.shape}")
    return np.clip(as_float(rainy) - as_float(clean), 0.0, 1.0)


SATURATED = 254 / 255
"""Rainy pixels at or above this value are saturated: the layer there is only known to be at least a bound."""


def composite(clean: np.ndarray, layer: np.ndarray, beta: float = COMPOSITE_BETA) -> np.ndarray:
    """Put a rain layer on a clean image: ``clip(clean + layer · (1 − β · clean), 0, 1)``, float32.

    ``beta = 0`` is plain addition, 1 a screen blend; Rain100H's rain lies between (``COMPOSITE_BETA``). A layer
    of shape (H, W, 1) is added to every channel alike.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"composite beta must be in [0, 1], got {beta}")
    base = as_float(clean)
    return np.clip(base + as_float(layer) * (1.0 - beta * base), 0.0, 1.0).astype(np.float32)


def recover_layer(rainy: np.ndarray, clean: np.ndarray, beta: float = COMPOSITE_BETA) -> np.ndarray:
    """The rain layer of a pair under ``composite``'s model, free of its background, float32 in [0, 1].

    Where the rainy pixel is below saturation the layer is ``(rainy − clean) / (1 − β · clean)``. Where it is
    saturated the composite only bounds it from below; there the layer is the larger of that bound and the
    90th percentile of the image's unsaturated streak pixels (a typical bright streak), rather than the bound
    alone, which would be low wherever the background is bright and leave dark ghosts of its edges.
    """
    if rainy.shape != clean.shape:
        raise ValueError(f"recover_layer: rainy shape {rainy.shape} differs from clean shape {clean.shape}")
    r, b = as_float(rainy), as_float(clean)
    layer = np.clip((r - b) / np.maximum(1.0 - beta * b, 1e-6), 0.0, 1.0)
    saturated = r >= SATURATED
    streak = (layer > 8 / 255) & ~saturated
    if saturated.any():
        typical = float(np.percentile(layer[streak], 90)) if streak.any() else 1.0
        layer = np.where(saturated, np.maximum(layer, typical), layer)
    return layer.astype(np.float32)


def background_correlation(rainy: np.ndarray, clean: np.ndarray, beta: float) -> float:
    """Correlation between the recovered layer and the background in the pair's unsaturated streak pixels
    (rain at least 8 levels), over all channels: 0 when the layer does not depend on what is behind it."""
    r, b = as_float(rainy), as_float(clean)
    layer = (r - b) / np.maximum(1.0 - beta * b, 1e-6)
    streak = (r - b > 8 / 255) & (r < SATURATED)
    if streak.sum() < 2:
        return float("nan")
    return float(np.corrcoef(layer[streak], b[streak])[0, 1])


def fit_composite_beta(rainy: np.ndarray, clean: np.ndarray, *, steps: int = 101) -> float:
    """The β in [0, 1] whose recovered layer has the smallest absolute correlation with the background."""
    betas = np.linspace(0.0, 1.0, steps)
    corr = np.array([background_correlation(rainy, clean, b) for b in betas])
    return float(betas[int(np.nanargmin(np.abs(corr)))])


def dihedral(image: np.ndarray, k: int) -> np.ndarray:
    """One of the 8 flips/90° rotations of an (H, W, ...) array: ``k`` in 0..7 (bit 2 = horizontal flip)."""
    if k >= 4:
        image = image[:, ::-1]
    return np.rot90(image, k % 4)


@dataclass(frozen=True)
class LayerAugment:
    """Random changes to a real rain layer before ``transplant`` adds it, so a few layers give many.

    Attributes:
        gain: the layer is multiplied by a factor drawn uniformly from ``(low, high)``: fainter or brighter rain.
        scale: the layer is resized by a factor drawn log-uniformly from ``(low, high)``: thinner/shorter or
            thicker/longer streaks.
        angle: the layer is turned by at most this many degrees either way (uniform): a new fall direction.
        mix: probability that ``transplant_layers`` adds a second layer on top (drawn and augmented
            independently): denser rain.

    The default changes nothing. A factor too small for the turned window to fit inside the layer is raised
    until it fits (e.g. 256² crops of a 321-pixel-high layer: at least 0.8, more when turned).

    Raises:
        ValueError: a range is not ``0 < low <= high``, ``angle`` is not in [0, 90) or ``mix`` not in [0, 1].
    """

    gain: Range = (1.0, 1.0)
    scale: Range = (1.0, 1.0)
    angle: float = 0.0
    mix: float = 0.0

    def __post_init__(self) -> None:
        for name in ("gain", "scale"):
            value = tuple(getattr(self, name))
            if len(value) != 2 or not 0 < value[0] <= value[1]:
                raise ValueError(f"{name} must be a range (low, high) with 0 < low <= high, got {value}")
            object.__setattr__(self, name, (float(value[0]), float(value[1])))
        if not 0.0 <= self.angle < 90.0:
            raise ValueError(f"angle must be in [0, 90) degrees, got {self.angle}")
        if not 0.0 <= self.mix <= 1.0:
            raise ValueError(f"mix must be a probability in [0, 1], got {self.mix}")

    @property
    def warps(self) -> bool:
        """Whether the layer is resized or turned (otherwise it is only cropped)."""
        return self.scale != (1.0, 1.0) or self.angle > 0


def _window_matrix(
    layer_shape: tuple[int, int], h: int, w: int, rng: np.random.Generator, scale: Range, angle: float
) -> np.ndarray:
    """The 2×3 map from an (h, w) output window to layer coordinates: a random turn, factor and place.

    Output pixel (x, y) reads the layer at ``centre + R(θ) · (x − (w−1)/2, y − (h−1)/2) / s``. The factor ``s`` is
    raised when needed so that the turned window lies wholly inside the layer (a small layer, a large patch),
    and the centre is drawn where it does.
    """
    lh, lw = layer_shape
    s = float(np.exp(rng.uniform(np.log(scale[0]), np.log(scale[1]))))
    theta = np.deg2rad(rng.uniform(-angle, angle)) if angle > 0 else 0.0
    c, sn = abs(np.cos(theta)), abs(np.sin(theta))
    # half extents of the turned window, in layer pixels at s = 1 (pixel centres, hence w − 1 and h − 1)
    half_w, half_h = (c * (w - 1) + sn * (h - 1)) / 2, (sn * (w - 1) + c * (h - 1)) / 2
    s = max(s, 2 * half_w / max(lw - 1, 1), 2 * half_h / max(lh - 1, 1))
    ex, ey = half_w / s, half_h / s
    cx = rng.uniform(ex, max(ex, lw - 1 - ex))
    cy = rng.uniform(ey, max(ey, lh - 1 - ey))
    cos, sin = np.cos(theta) / s, np.sin(theta) / s
    ox, oy = (w - 1) / 2, (h - 1) / 2
    return np.array([[cos, -sin, cx - cos * ox + sin * oy], [sin, cos, cy - sin * ox - cos * oy]], np.float64)


def transplant(
    clean: np.ndarray,
    residual: np.ndarray,
    rng: np.random.Generator,
    *,
    rotate90: bool = False,
    augment: LayerAugment | None = None,
    beta: float = COMPOSITE_BETA,
) -> np.ndarray:
    """Put a real rain layer on another clean image: random flip/rotation and crop of ``residual``.

    Flips/rotations that leave the residual at least as large as ``clean`` are preferred; when none does,
    the residual is resized up (bilinear) until it covers ``clean`` (with ``augment``'s resizing or turning:
    its factor is raised until the turned window fits).

    Args:
        clean: (H, W, 3) image, float in [0, 1] or uint8.
        residual: (h, w, 3) rain layer, e.g. from ``rain_residual``, or a grey (h, w, 1) one (a rendered
            streak layer, added to every channel alike), float in [0, 1] or uint8.
        rng: the source of randomness.
        rotate90: also allow 90° rotations of the layer. Off by default: they turn falling streaks
            horizontal, which real rain never is; flips and 180° turns keep streaks upright.
        augment: random gain, resizing and small turns of the layer (``LayerAugment``; its ``mix`` is
            ``transplant_layers``'). None or the default: the layer as it is.
        beta: the composite's β (``composite``): by default ``COMPOSITE_BETA``, Rain100H's (for layers from
            ``recover_layer``); 0 adds the layer (for ``clip(rainy − clean)`` layers).

    Returns:
        float32 (H, W, 3) rainy image ``composite(clean, gain · crop(residual), beta)``.
    """
    _check_image(clean, "transplant clean image")
    if residual.ndim != 3 or residual.shape[2] not in (1, 3):
        raise ValueError(
            f"transplant rain residual: expected an (H, W, 3) or grey (H, W, 1) layer, got {tuple(residual.shape)}"
        )
    h, w = clean.shape[:2]
    rh, rw = residual.shape[:2]
    if rh < 1 or rw < 1:
        raise ValueError(f"transplant: the rain residual is empty, shape {residual.shape}")
    allowed = range(8) if rotate90 else range(0, 8, 2)  # odd k rotates by 90° and swaps H, W
    fits = [k for k in allowed if (rh, rw)[k % 2] >= h and (rw, rh)[k % 2] >= w]
    k = int(rng.choice(fits)) if fits else int(rng.choice(list(allowed)))
    layer = np.ascontiguousarray(dihedral(as_float(residual), k))
    if augment is not None and augment.warps:
        matrix = _window_matrix(layer.shape[:2], h, w, rng, augment.scale, augment.angle)
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        crop = cv2.warpAffine(layer, matrix, (w, h), flags=flags, borderMode=cv2.BORDER_REFLECT_101)
    else:
        lh, lw = layer.shape[:2]
        if lh < h or lw < w:
            scale = max(h / lh, w / lw)
            size = (max(w, int(np.ceil(lw * scale))), max(h, int(np.ceil(lh * scale))))
            layer = cv2.resize(layer, size, interpolation=cv2.INTER_LINEAR)
            lh, lw = layer.shape[:2]
        y = int(rng.integers(lh - h + 1))
        x = int(rng.integers(lw - w + 1))
        crop = layer[y : y + h, x : x + w]
    if crop.ndim == 2:  # OpenCV drops the channel axis of a grey layer
        crop = crop[:, :, None]
    if augment is not None and augment.gain != (1.0, 1.0):
        crop = crop * np.float32(rng.uniform(*augment.gain))
    return composite(clean, crop, beta)


def transplant_layers(
    clean: np.ndarray,
    residuals: Sequence[np.ndarray],
    rng: np.random.Generator,
    *,
    rotate90: bool = False,
    augment: LayerAugment | None = None,
    beta: float = COMPOSITE_BETA,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """``transplant`` one random layer of ``residuals`` onto ``clean``, or two with probability ``augment.mix``.

    ``weights`` (summing to 1) is each layer's chance of being drawn; default equal.

    Two layers add up (``clip(clean + a + b)``): denser rain than any single layer. Without ``augment`` or with
    ``mix`` 0, exactly ``transplant`` of one random layer (the same random numbers drawn).
    """
    if not residuals:
        raise ValueError("transplant_layers: no rain layers given")
    two = augment is not None and augment.mix > 0 and rng.random() < augment.mix
    rainy = clean
    for _ in range(2 if two else 1):
        pick = rng.integers(len(residuals)) if weights is None else rng.choice(len(residuals), p=weights)
        layer = residuals[int(pick)]
        rainy = transplant(rainy, layer, rng, rotate90=rotate90, augment=augment, beta=beta)
    return rainy


@lru_cache(maxsize=1)
def _builtin_clean_images() -> tuple[np.ndarray, ...]:
    from skimage import data as skdata

    images = [
        skdata.astronaut(),
        skdata.coffee(),
        skdata.chelsea(),
        skdata.rocket(),
        skdata.stereo_motorcycle()[0],
    ]
    return tuple(np.ascontiguousarray(im[..., :3], dtype=np.uint8) for im in images)


def builtin_clean_images() -> list[np.ndarray]:
    """Natural photos shipped inside scikit-image, for synthetic rain with no data on disk.

    The astronaut, coffee, chelsea, rocket and the left motorcycle stereo view: the same five photos on every
    installation (they are part of scikit-image's wheel; nothing is downloaded).

    Returns:
        uint8 RGB (H, W, 3) arrays (fresh copies: callers may modify them).
    """
    return [im.copy() for im in _builtin_clean_images()]

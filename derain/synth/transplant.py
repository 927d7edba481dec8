"""Rain-layer transplant: a real pair's rain layer (or a rendered streak layer), flipped, cropped and varied, put
on another clean photo with the composite (``derain.synth.composite``).

Every function is pure: randomness comes only from the ``numpy.random.Generator`` passed in. Layers are flipped
and turned by the one augmentation path, albumentations' (:func:`turn_steps`, which the training crops of
``derain.data`` use too), seeded from that generator.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from .composite import COMPOSITE_BETA, as_float, check_image, composite

__all__ = ["LayerAugment", "dihedral", "seed_steps", "transplant", "transplant_layers", "turn_steps"]

Range = tuple[float, float]


def dihedral(image: np.ndarray, k: int) -> np.ndarray:
    """One of the 8 flips/90° rotations of an (H, W, ...) array: ``k`` in 0..7 (bit 2 = horizontal flip); a
    reference to check turned images against (what turns them is :func:`turn_steps`)."""
    if k >= 4:
        image = image[:, ::-1]
    return np.rot90(image, k % 4)


def turn_steps(turns: str) -> list:
    """The random flips and turns of the one augmentation path (albumentations transforms), for training pairs,
    clean photos (``derain.data.transforms.crop_transform``) and rain layers (:func:`transplant`).

    Args:
        turns: ``"upright"``: horizontal and vertical flips (rain stays near vertical); ``"rotate90"``: horizontal
            flips and 90° turns; ``"any"``: all 8 flips and turns (clean photos before rain).
    """
    import albumentations as A  # on use: importing derain.synth stays light

    steps = {
        "upright": lambda: [A.HorizontalFlip(p=0.5), A.VerticalFlip(p=0.5)],
        "rotate90": lambda: [A.HorizontalFlip(p=0.5), A.RandomRotate90(p=1.0)],
        "any": lambda: [A.SquareSymmetry(p=1.0)],
    }
    if turns not in steps:
        raise ValueError(f"turns should be one of {', '.join(steps)}, got {turns!r}")
    return steps[turns]()


def seed_steps(transform: Any, rng: np.random.Generator) -> None:
    """Seed an albumentations ``Compose`` from ``rng``, each of its steps with a seed of its own.

    ``Compose.set_random_seed`` gives every step the same seed, so the steps draw the same numbers: a horizontal
    and a vertical flip at ``p=0.5`` are then always applied together (two of the four upright orientations, never
    a mirror image), and a random crop's position follows the flip.
    """
    transform.set_random_seed(int(rng.integers(2**31)))
    for step in transform.transforms:
        step.set_random_seed(int(rng.integers(2**31)))


@functools.cache
def _turner(turns: str, transpose: bool) -> Any:
    """``turn_steps(turns)`` (then a transpose, which swaps H and W) as one transform, made once a process; each
    use reseeds it from the caller's generator."""
    import albumentations as A

    return A.Compose(turn_steps(turns) + ([A.Transpose(p=1.0)] if transpose else []), seed=0)


def _turn(layer: np.ndarray, h: int, w: int, rng: np.random.Generator, rotate90: bool) -> np.ndarray:
    """``layer`` randomly flipped (and with ``rotate90`` turned), preferring turns that leave it at least (h, w)."""
    lh, lw = layer.shape[:2]
    plain, turned = lh >= h and lw >= w, lw >= h and lh >= w
    if rotate90 and plain != turned:  # one orientation fits: flips only, in that orientation
        turner = _turner("upright", transpose=turned)
    else:
        turner = _turner("rotate90" if rotate90 else "upright", transpose=False)
    seed_steps(turner, rng)
    return np.ascontiguousarray(turner(image=layer)["image"])


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
    check_image(clean, "transplant clean image")
    if residual.ndim != 3 or residual.shape[2] not in (1, 3):
        raise ValueError(
            f"transplant rain residual: expected an (H, W, 3) or grey (H, W, 1) layer, got {tuple(residual.shape)}"
        )
    h, w = clean.shape[:2]
    rh, rw = residual.shape[:2]
    if rh < 1 or rw < 1:
        raise ValueError(f"transplant: the rain residual is empty, shape {residual.shape}")
    layer = _turn(as_float(residual), h, w, rng, rotate90)
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
    picks: list[int] | None = None,
) -> np.ndarray:
    """``transplant`` one random layer of ``residuals`` onto ``clean``, or two with probability ``augment.mix``.

    ``weights`` (summing to 1) is each layer's chance of being drawn; default equal. ``picks``, if given, gets
    the index of each layer drawn appended (which source the rain came from).

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
        if picks is not None:
            picks.append(int(pick))
        rainy = transplant(rainy, layer, rng, rotate90=rotate90, augment=augment, beta=beta)
    return rainy

"""Synthetic rain: the composite (one β default), procedural streaks, layer transplants, and the batch renderer.

- ``composite``: ``rainy = clean + layer · (1 − β · clean)``, ``COMPOSITE_BETA``, recovering a pair's layer;
- ``procedural``: ``RainStyle``, ``RAIN_STYLES``, streak layers and ``add_rain`` (numpy, one image);
- ``transplant``: a real or rendered rain layer put on another photo (``LayerAugment``);
- ``batch``: ``BatchRain``, the procedural rain of a whole batch on its device (torch);
- ``photos``: clean photos that ship with scikit-image.

Everything is pure: randomness comes only from the generator passed in. No Lightning, gradio or argparse here.
``BatchRain`` loads on first use, so the numpy renderers (and ``derain.data.split``) import no kornia.
"""

from __future__ import annotations

import importlib
from typing import Any

from .composite import (
    COMPOSITE_BETA,
    SATURATED,
    as_float,
    background_correlation,
    composite,
    fit_composite_beta,
    rain_residual,
    recover_layer,
)
from .photos import builtin_clean_images
from .procedural import (
    ANY_STYLES,
    RAIN_STYLES,
    RainStyle,
    add_haze,
    add_rain,
    line_kernel,
    rain_layer,
    rain_streaks,
)
from .transplant import LayerAugment, dihedral, transplant, transplant_layers

__all__ = [
    "ANY_STYLES",
    "BatchRain",
    "COMPOSITE_BETA",
    "LayerAugment",
    "RAIN_STYLES",
    "RainStyle",
    "SATURATED",
    "add_haze",
    "add_rain",
    "as_float",
    "background_correlation",
    "builtin_clean_images",
    "composite",
    "dihedral",
    "fit_composite_beta",
    "line_kernel",
    "rain_layer",
    "rain_residual",
    "rain_streaks",
    "recover_layer",
    "transplant",
    "transplant_layers",
]


def __getattr__(name: str) -> Any:
    if name == "BatchRain":
        return importlib.import_module(f"{__name__}.batch").BatchRain
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Restoring photos and videos: ``load_model`` (torch or onnxruntime) and the one ``restore()``.

No Lightning, gradio or argparse here: restoring a photo imports none of them. ONNX (``derain.inference.onnx``)
needs ``derain[onnx]``, videos (``derain.inference.video``) need ``derain[video]``; both are imported only when
used. The weights errors are ``derain.weights``'; they are named here too, for ``load_model``'s callers.
"""

from derain.weights import FORMAT as WEIGHTS_FORMAT
from derain.weights import PACKAGED_WEIGHTS, WeightsError, WeightsNotFoundError, packaged_weights

from .backends import BACKENDS, DEFAULT_BACKEND, default_device, load_model
from .image import (
    DEFAULT_TILE,
    ENSEMBLE_FLIPS,
    MAX_PIXELS_UNTILED,
    blend_window,
    ensemble_flips,
    load_image,
    restore,
    tile_starts,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DEFAULT_TILE",
    "ENSEMBLE_FLIPS",
    "MAX_PIXELS_UNTILED",
    "PACKAGED_WEIGHTS",
    "WEIGHTS_FORMAT",
    "WeightsError",
    "WeightsNotFoundError",
    "blend_window",
    "default_device",
    "ensemble_flips",
    "load_image",
    "load_model",
    "packaged_weights",
    "restore",
    "tile_starts",
]

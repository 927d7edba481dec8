"""Restoring photos and videos: ``load_model`` (torch or onnxruntime) and the one ``restore()``.

``read_image`` is the package's one image reader (:func:`derain.io.read_image`, named here for ``restore``'s
callers): gray, RGB or RGBA, 8 or 16 bit, EXIF-upright; unlike ``derain.io.read_rgb`` it keeps what ``restore``
gives back (alpha, 16-bit depth, grayscale).

No Lightning, gradio or argparse here: restoring a photo imports none of them. ONNX (``derain.inference.onnx``)
needs ``derain[onnx]``, videos (``derain.inference.video``) need ``derain[video]``; both are imported only when
used. The weights errors are ``derain.weights``'; they are named here too, for ``load_model``'s callers.
"""

from derain.io import read_image
from derain.weights import FORMAT as WEIGHTS_FORMAT
from derain.weights import PACKAGED_WEIGHTS, WeightsError, WeightsNotFoundError, packaged_weights

from .backends import BACKENDS, DEFAULT_BACKEND, default_device, load_model
from .image import (
    DEFAULT_TILE,
    ENSEMBLE_FLIPS,
    MAX_PIXELS_UNTILED,
    MAX_STRENGTH,
    RestoreOptions,
    blend_window,
    ensemble_flips,
    restore,
    tile_starts,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DEFAULT_TILE",
    "ENSEMBLE_FLIPS",
    "MAX_PIXELS_UNTILED",
    "MAX_STRENGTH",
    "PACKAGED_WEIGHTS",
    "RestoreOptions",
    "WEIGHTS_FORMAT",
    "WeightsError",
    "WeightsNotFoundError",
    "blend_window",
    "default_device",
    "ensemble_flips",
    "load_model",
    "packaged_weights",
    "read_image",
    "restore",
    "tile_starts",
]

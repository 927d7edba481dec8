"""Clean photos that need no data on disk: the ones scikit-image ships."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["builtin_clean_images"]


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

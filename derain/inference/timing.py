"""How long restoring takes on this machine: :class:`SpeedEstimate`, for expected times shown before a photo runs,
and :func:`yardstick`, the unit speeds are reported in so that they compare across machines.

Only the measuring: what the web page makes of it (its default quality) is the page's (``derain.page``), and
``benchmarks/page.py`` checks it against measured times.

Example:
    >>> speed = SpeedEstimate(2.0)              # 2 s a megapixel for one pass
    >>> speed.seconds(500_000, passes=4)
    4.0
    >>> speed.update(10**6, 1, 1.0)             # a measured photo: 1 MP, one pass, 1 s
    >>> speed.per_megapixel
    1.0
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections import deque

import numpy as np
import torch
from torch import nn

from .image import RestoreOptions, restore

__all__ = ["SpeedEstimate", "yardstick"]


def yardstick(repeats: int = 3) -> float:
    """Seconds of the machine's unit of speed: 10 convolutions 48→48 3×3 on a 321×481 map, forward, at the
    current thread count (median of ``repeats``, after a warm-up). Speeds reported in yardsticks compare across
    machines (``benchmarks/``, ``tools/architectures.py``, ``derain models``)."""
    conv = nn.Conv2d(48, 48, 3, padding=1)
    x = torch.rand(1, 48, 321, 481)
    times = []
    with torch.inference_mode():
        conv(x)  # warm-up
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(10):
                conv(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


class SpeedEstimate:
    """Seconds one network pass takes per megapixel here, from a start-up reading and then from measured photos.

    Until a photo is measured, the estimate is the start-up reading (:meth:`measure`). From then on it is the
    median, per megapixel and pass, of the last ``window`` measured photos: it follows the machine's load, and
    one slow photo (or a start-up on a busy CPU) does not stay on the page. Safe to update from several threads.

    Args:
        per_megapixel: the start-up reading, seconds per megapixel of one pass (> 0).
        window: how many of the latest measured photos the median runs over.
    """

    CALIBRATION = (256, 256)
    """Size (H, W) of the photo :meth:`measure` times."""

    def __init__(self, per_megapixel: float, *, window: int = 9) -> None:
        if not per_megapixel > 0 or window < 1:
            raise ValueError(f"need per_megapixel > 0 and window >= 1, got {per_megapixel} and {window}")
        self._start = float(per_megapixel)
        self._measured: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()

    @classmethod
    def measure(
        cls, model: nn.Module, *, options: RestoreOptions | None = None, rounds: int = 3, window: int = 9
    ) -> SpeedEstimate:
        """The start-up reading of ``model``: one warm-up pass on a ``CALIBRATION``-sized photo (first-call set-up
        is not per pixel), then the median of ``rounds`` timed passes.

        Args:
            model: the network, as :func:`derain.inference.restore` runs it.
            options: the tiling ``restore`` runs with (default ``RestoreOptions()``); one pass whatever its
                ``ensemble``, as the estimate is per pass.
            rounds: timed passes after the warm-up (>= 1).
            window: see the class.
        """
        if rounds < 1:
            raise ValueError(f"rounds should be >= 1, got {rounds}")
        one_pass = dataclasses.replace(options or RestoreOptions(), ensemble=1)
        image = np.random.default_rng(0).integers(0, 256, (*cls.CALIBRATION, 3), dtype=np.uint8)
        restore(model, image, options=one_pass)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            restore(model, image, options=one_pass)
            times.append(time.perf_counter() - start)
        megapixels = image.shape[0] * image.shape[1] / 1e6
        return cls(max(statistics.median(times), 1e-9) / megapixels, window=window)

    @property
    def per_megapixel(self) -> float:
        """Seconds per megapixel of one pass: the median of the measured photos, or the start-up reading."""
        with self._lock:
            return statistics.median(self._measured) if self._measured else self._start

    def seconds(self, pixels: int, passes: int = 1) -> float:
        """Expected seconds for a photo of ``pixels`` derained with ``passes`` network passes."""
        return self.per_megapixel * pixels / 1e6 * passes

    def update(self, pixels: int, passes: int, seconds: float) -> None:
        """Fold in a measured photo of ``pixels`` that took ``seconds`` with ``passes`` passes (ignored unless
        all three are positive)."""
        if pixels > 0 and passes > 0 and seconds > 0:
            with self._lock:
                self._measured.append(seconds / (pixels / 1e6 * passes))

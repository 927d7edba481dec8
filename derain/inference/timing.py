"""How long restoring takes on this machine: :class:`SpeedEstimate`, for expected times shown before a photo runs.

No gradio here: the web page and ``benchmarks/page.py`` share it.

Example:
    >>> speed = SpeedEstimate(2.0)              # 2 s a megapixel for one pass
    >>> speed.seconds(500_000, passes=4)
    4.0
    >>> speed.update(10**6, 1, 1.0)             # a measured photo: 1 MP, one pass, 1 s
    >>> speed.per_megapixel
    1.0
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque

import numpy as np
from torch import nn

from .image import restore

__all__ = ["BEST_DEFAULT_MAX_S", "SpeedEstimate"]

BEST_DEFAULT_MAX_S = 3.0
""":meth:`SpeedEstimate.auto_quality` picks *Best* when it is expected to take at most this many seconds for a
1-megapixel photo, else *Fast* (one pass)."""


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
        cls, model: nn.Module, *, tile: int | None, overlap: int, rounds: int = 3, window: int = 9
    ) -> SpeedEstimate:
        """The start-up reading of ``model``: one warm-up pass on a ``CALIBRATION``-sized photo (first-call set-up
        is not per pixel), then the median of ``rounds`` timed passes.

        Args:
            model: the network, as :func:`derain.inference.restore` runs it.
            tile: tile size passed to ``restore``.
            overlap: tile overlap passed to ``restore``.
            rounds: timed passes after the warm-up (>= 1).
            window: see the class.
        """
        if rounds < 1:
            raise ValueError(f"rounds should be >= 1, got {rounds}")
        image = np.random.default_rng(0).integers(0, 256, (*cls.CALIBRATION, 3), dtype=np.uint8)
        restore(model, image, tile=tile, overlap=overlap)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            restore(model, image, tile=tile, overlap=overlap)
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

    def auto_quality(self, ensemble: int) -> str:
        """``"best"`` when *Best* (``ensemble`` passes) is expected to take at most ``BEST_DEFAULT_MAX_S`` for a
        1-megapixel photo, else ``"fast"``."""
        return "best" if self.seconds(10**6, ensemble) <= BEST_DEFAULT_MAX_S else "fast"

    def update(self, pixels: int, passes: int, seconds: float) -> None:
        """Fold in a measured photo of ``pixels`` that took ``seconds`` with ``passes`` passes (ignored unless
        all three are positive)."""
        if pixels > 0 and passes > 0 and seconds > 0:
            with self._lock:
                self._measured.append(seconds / (pixels / 1e6 * passes))

"""The learning-rate schedule: linear warm-up, then a cosine, then flat (``DerainLitModule``'s, per step)."""

from __future__ import annotations

import math

__all__ = ["WarmupCosine"]


class WarmupCosine:
    """Learning-rate factor per optimizer step: linear warm-up, then a cosine, then flat.

    ``factor(step) = 0.01 + 0.99·step/warmup`` for ``step < warmup``; then
    ``min_ratio + (1 − min_ratio)·(1 + cos(π·p))/2`` with ``p = min(1, (step − warmup)/(total − warmup))``.

    An object, not a closure, so that ``LambdaLR.state_dict()`` stores its attributes: a resumed run gets back
    the schedule it started with, whatever ``trainer.max_steps`` says now.

    Args:
        warmup: warm-up steps (from 0.01 to 1).
        total: the step where the cosine reaches ``min_ratio``.
        min_ratio: the final factor.
    """

    def __init__(self, warmup: int, total: int, min_ratio: float):
        self.warmup, self.total, self.min_ratio = warmup, total, min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return 0.01 + 0.99 * step / max(1, self.warmup)
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

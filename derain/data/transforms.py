"""The datasets' random streams: the one crop path (albumentations) and the seeding of every loader worker.

Each dataset draws from its own numpy generator and transform, seeded from the dataset's ``seed``, its kind
(``SALT``), the worker's torch seed and the process's rank, so that workers and DDP ranks never repeat each other
and a seed gives the same samples.
"""

from __future__ import annotations

import albumentations as A
import cv2
import numpy as np
from torch.utils.data import ConcatDataset, get_worker_info

from derain.synth.transplant import seed_steps, turn_steps

__all__ = ["Seeded", "crop_transform", "seed_worker"]


def crop_transform(patch_size: int | None, *, random: bool, turns: str) -> A.Compose | None:
    """The one crop path: reflect-pad to ``patch_size``, crop (random or centred), then flips.

    Args:
        patch_size: crop side, or None for whole images.
        random: random crops and flips; otherwise a centre crop and nothing else.
        turns: which flips and turns (``derain.synth.transplant.turn_steps``: ``"upright"``, ``"rotate90"``,
            ``"any"``).
    """
    steps: list[A.BasicTransform] = []
    if patch_size is not None:
        steps.append(A.PadIfNeeded(patch_size, patch_size, border_mode=cv2.BORDER_REFLECT_101))
        steps.append(A.RandomCrop(patch_size, patch_size) if random else A.CenterCrop(patch_size, patch_size))
    if random:
        steps += turn_steps(turns)  # the flips rain layers get too
    return A.Compose(steps, additional_targets={"clean": "image"}, seed=0) if steps else None


class Seeded:
    """A dataset's random stream: a numpy generator and its albumentations transform, reseeded per worker.

    The stream is seeded by the dataset's ``seed``, its ``SALT`` (so two kinds of dataset never draw the same
    sequence), the worker's torch seed and the process's rank (so DDP ranks, which share a global seed, differ).
    """

    SALT = 0
    seed: int
    transform: A.Compose | None

    def reseed(self, worker_seed: int, rank: int = 0) -> None:
        """Start this process's stream (``DerainDataModule``'s ``worker_init_fn`` calls it in every worker)."""
        self.rng = np.random.default_rng([self.seed, self.SALT, worker_seed, rank])
        if self.transform is not None:
            seed_steps(self.transform, self.rng)


def seed_worker(worker_id: int, rank: int = 0) -> None:
    """``worker_init_fn``: give every dataset in this worker its own stream, from the worker's torch seed and the
    process's rank (bind ``rank`` with ``functools.partial``)."""
    info = get_worker_info()
    if info is None:
        return
    stack = [info.dataset]
    while stack:
        dataset = stack.pop()
        if isinstance(dataset, ConcatDataset):
            stack.extend(dataset.datasets)
        elif isinstance(dataset, Seeded):
            dataset.reseed(info.seed, rank)

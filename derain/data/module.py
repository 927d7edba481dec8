"""``DerainDataModule``: the training, validation and test data of a run, assembled from the options.

The real pairs are split by ``derain.data.split.split_pairs`` (kept as ``split``); the photos and layers of
synthetic rain are ``derain.data.pool.synthetic_pool``'s (kept as ``pool``); the datasets are
``derain.data.datasets``'. With ``synthesis.render_on_device`` the procedural rain of a training batch is drawn
where the batch is (``derain.synth.BatchRain``), after the transfer.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from derain.pairing import DataError, Pair, check_pairs, find_pairs, pair_set
from derain.synth import RAIN_STYLES, BatchRain

from .datasets import PairedDataset, SyntheticRainDataset
from .options import PairSources, Synthesis
from .overlap import signatures
from .pool import SyntheticPool, synthetic_pool
from .split import Split, split_pairs
from .transforms import seed_worker

__all__ = ["DerainDataModule"]

log = logging.getLogger(__name__)


class DerainDataModule(L.LightningDataModule):
    """Training, validation and test data for deraining: real pairs, synthetic rain, or both.

    Training: the real pairs of ``pairs`` (minus the listed and the test-overlapping ones, minus the validation
    hold-out), repeated ``pairs.repeat`` times, plus ``synthesis.length`` synthetic pairs per epoch when
    ``synthesis`` has photos. Validation: ``pairs.val_dirs`` (full images), plus a seeded ``pairs.val_fraction``
    of the ``pairs.val_from`` training pairs when that is set; without ``val_dirs``, that seeded share of the
    real training pairs (full images); else, with only synthetic data, ``synthesis.val_length`` fixed
    synthetic 256×256 crops. Test: ``root/test`` and ``pairs.test_dirs`` (full images). Validation and test
    loaders use batch size 1: image sizes differ.

    Batches are dicts: ``{"rain": (B, 3, H, W), "clean": (B, 3, H, W), "name": list[str], "render": (B,) bool,
    "set": list[str], "real_rain": (B,) bool}`` (``derain.data.datasets``' items, collated).

    Args:
        pairs: real pairs (:class:`PairSources`).
        synthesis: synthetic rain (:class:`Synthesis`).
        rotate90: augment with 90° turns too (they turn rain streaks horizontal, which photographed rain is
            not; off by default: flips and 180° turns only).
        patch_size: training crop size.
        batch_size: training batch size.
        num_workers: DataLoader worker processes.
        seed: seed of hold-out splits, augmentation and synthetic rain.
    """

    VAL_PATCH = 256

    def __init__(
        self,
        *,
        pairs: PairSources = PairSources(),
        synthesis: Synthesis = Synthesis(),
        rotate90: bool = False,
        patch_size: int = 128,
        batch_size: int = 8,
        num_workers: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(
            {"pairs": dataclasses.asdict(pairs), "synthesis": dataclasses.asdict(synthesis)}
            | {"rotate90": rotate90, "patch_size": patch_size, "batch_size": batch_size, "seed": seed}
        )
        if pairs.root is None and not pairs.train_dirs and not synthesis.used:
            raise DataError(
                "no training data: set pairs.root (ROOT/train/{rain,norain}/), pairs.train_dirs, "
                "synthesis.clean_dirs or synthesis.builtin_photos (configs/synthetic.yaml trains with no data on "
                "disk)"
            )
        for name, value in (("patch_size", patch_size), ("batch_size", batch_size)):
            if value < 1:
                raise DataError(f"{name} must be at least 1, got {value}")
        if num_workers < 0:
            raise DataError(f"num_workers must be >= 0, got {num_workers}")
        self.pairs = pairs
        self.synthesis = synthesis
        self.rotate90 = rotate90
        self.patch_size = patch_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

        self.split = Split()
        """Where the real pairs went (``split_pairs``), set by ``setup("fit")``."""
        self.pool = SyntheticPool()
        """The photos and layers of synthetic rain (``synthetic_pool``), set by ``setup("fit")``."""
        self.test_pairs: list[Pair] = []
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self._batch_rain: BatchRain | None = None

    # -- set-up --------------------------------------------------------------------------------------------

    def _held_signatures(self) -> list[np.ndarray]:
        """The signatures of the held-out clean images: validation's, and the test split's when it is kept out."""
        held = [signatures([c for _, c in self.split.val])] if self.split.val else []
        if self.pairs.drop_test_overlap and self.has_test_split():
            held.append(self._test_signatures)
        return held

    def _setup_fit(self) -> None:
        self.split = split_pairs(
            self.pairs,
            seed=self.seed,
            synthetic=self.synthesis.used,
            test_signatures=lambda: self._test_signatures,
        )
        real = None
        if self.split.train:
            real = PairedDataset(
                self.split.train,
                patch_size=self.patch_size,
                augment=True,
                rotate90=self.rotate90,
                seed=self.seed,
            )
        self.pool = synthetic_pool(self.synthesis, donors=real, held=self._held_signatures())
        self.train_set = self._train_set(real)
        self.val_set = self._val_set()

    def _train_set(self, real: PairedDataset | None) -> Dataset:
        """The real pairs ``pairs.repeat`` times, then the synthetic samples."""
        syn, pool = self.synthesis, self.pool
        parts: list[Dataset] = [real] * self.pairs.repeat if real is not None else []
        if pool.photos:
            parts.append(
                SyntheticRainDataset(
                    pool.photos,
                    length=syn.length or syn.AUTO_LENGTH,
                    patch_size=self.patch_size,
                    synthesis=syn,
                    pair_layers=pool.pair_layers,
                    pair_layer_weights=pool.pair_layer_weights,
                    rendered_layers=pool.rendered_layers,
                    rendered_layer_weights=pool.rendered_layer_weights,
                    rendered_layer_real=pool.rendered_layer_real,
                    seed=self.seed,
                    rotate90=self.rotate90,
                )
            )
        elif syn.rain_free_prob > 0:
            log.warning(
                "synthesis.rain_free_prob has no effect: there are no synthetic samples (no clean photos)"
            )
        if not parts:
            raise DataError("no training samples: the training folders hold no pairs after exclusion")
        train_set = parts[0] if len(parts) == 1 else ConcatDataset(parts)
        if len(train_set) < self.batch_size:
            raise DataError(
                f"only {len(train_set)} training samples for batch_size {self.batch_size} (the last "
                "incomplete batch is dropped); lower batch_size, raise pairs.repeat or synthesis.length"
            )
        return train_set

    def _val_set(self) -> Dataset | None:
        """The validation pairs (full images), else fixed synthetic crops, else none."""
        syn, val = self.synthesis, self.split.val
        if val:
            return PairedDataset(val, patch_size=None, augment=False, sets=[pair_set(p) for p in val])
        if not self.pool.photos or syn.val_length == 0:
            return None
        # the procedural rain training renders (its composite and styles), in the workers, never rain-free
        procedural = dataclasses.replace(syn, transplant_prob=0.0, rain_free_prob=0.0, render_on_device=False)
        return SyntheticRainDataset(
            self.pool.photos,
            length=syn.val_length,
            patch_size=self.VAL_PATCH,
            synthesis=procedural,
            seed=self.seed + 1_000_003,
            fixed=True,
        )

    @functools.cached_property
    def _test_signatures(self) -> np.ndarray:
        """Content signatures of the test split's clean images, read once for both content checks."""
        return signatures([c for folder in self.pairs.test_folders() for _, c in find_pairs(folder)])

    def has_test_split(self) -> bool:
        """Whether there are test pairs to score (``root/test`` or ``pairs.test_dirs``)."""
        return bool(self.pairs.test_folders())

    def _setup_test(self) -> None:
        folders = self.pairs.test_folders()
        if not folders:
            raise DataError("no test data: set pairs.root (with ROOT/test/{rain,norain}/) or pairs.test_dirs")
        self.test_pairs = [p for folder in folders for p in find_pairs(folder)]
        check_pairs(self.test_pairs)
        self.test_set = PairedDataset(self.test_pairs, patch_size=None, augment=False)

    def setup(self, stage: str | None = None) -> None:
        """Find, check and split the pairs; build the datasets. Idempotent: repeated calls do nothing."""
        if stage in (None, "fit", "validate") and self.train_set is None:
            self._setup_fit()
        if stage in (None, "test") and self.test_set is None and (stage is not None or self.has_test_split()):
            self._setup_test()

    # -- on the device -------------------------------------------------------------------------------------

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Render the deferred procedural rain of a training batch where the batch is (``render_on_device``)."""
        render = batch.get("render") if isinstance(batch, dict) else None
        if render is None or not bool(render.any()):
            return batch
        if self._batch_rain is None:
            styles = tuple(RAIN_STYLES[name] for name in self.synthesis.procedural_styles)
            self._batch_rain = BatchRain(styles, beta=self.synthesis.composite_beta)
        rainy = self._batch_rain(batch["clean"][render])
        batch["rain"][render] = torch.round(rainy * 255) / 255  # 8 bits, as the workers' samples are
        return batch

    # -- loaders -------------------------------------------------------------------------------------------

    def _loader(self, dataset: Dataset, *, batch_size: int, train: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=train,
            drop_last=train,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            worker_init_fn=functools.partial(
                seed_worker, rank=self.trainer.global_rank if self.trainer else 0
            ),
        )

    def train_dataloader(self) -> DataLoader:
        if self.train_set is None:
            self.setup("fit")
        assert self.train_set is not None
        return self._loader(self.train_set, batch_size=self.batch_size, train=True)

    def val_dataloader(self) -> DataLoader | list:
        if self.train_set is None:
            self.setup("validate")
        if self.val_set is None:
            return []
        return self._loader(self.val_set, batch_size=1, train=False)

    def test_dataloader(self) -> DataLoader:
        if self.test_set is None:
            self.setup("test")
        assert self.test_set is not None
        return self._loader(self.test_set, batch_size=1, train=False)

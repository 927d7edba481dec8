"""Which clean images show the same photo: content signatures that survive re-encoding, flips and 90° turns.

Training must never see a test (or validation) background: ``DerainDataModule`` drops the training pairs and the
clean photos whose clean image shows one (``derain.data.split``); :func:`find_overlap` lists them for two folders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from derain.io import ImageReadError, natural_key, read_rgb
from derain.pairing import DataError, find_pairs, pair_name

__all__ = ["OVERLAP_RMS", "SIGNATURE_SIDE", "content_signature", "find_overlap", "shows_any", "signatures"]

SIGNATURE_SIDE = 32
"""Content signatures are grey thumbnails of this side (any aspect ratio is squeezed to a square)."""

OVERLAP_RMS = 6.0
"""Two clean images show the same photo when their signatures differ by less than this RMS, in 8-bit levels."""


def content_signature(image: np.ndarray) -> np.ndarray:
    """A grey ``SIGNATURE_SIDE``² thumbnail (float32, 0–255) of a uint8 RGB image: equal for re-encodings.

    A flip or 90° turn of the image flips or turns its signature the same way, so one signature per image and
    the 8 turned versions of the other side's find the same photo in any orientation.
    """
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, (SIGNATURE_SIDE, SIGNATURE_SIDE), interpolation=cv2.INTER_AREA).astype(np.float32)


def signatures(paths: Sequence[Path]) -> np.ndarray:
    """The flattened ``content_signature`` of each image file (n, ``SIGNATURE_SIDE``²); a ``DataError`` naming a
    file that cannot be read."""
    try:
        return np.stack([content_signature(read_rgb(p)).ravel() for p in paths])
    except ImageReadError as err:
        raise DataError(str(err)) from None


def shows_any(candidates: np.ndarray, references: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """Which candidate signatures show one of the reference signatures, flipped or turned or not.

    Args:
        candidates: (n, SIGNATURE_SIDE²) signatures (``content_signature``, flattened).
        references: (m, SIGNATURE_SIDE²) signatures.
        chunk: candidates compared per matrix product (bounds memory on large sets).

    Returns:
        bool (n,): RMS difference below ``OVERLAP_RMS`` to some orientation of some reference.
    """
    if len(candidates) == 0 or len(references) == 0:
        return np.zeros(len(candidates), bool)
    side = SIGNATURE_SIDE
    square = references.reshape(-1, side, side)
    turned = np.stack([np.rot90(r if k < 4 else r[:, ::-1], k % 4).ravel() for r in square for k in range(8)])
    turned = turned.astype(np.float32)
    ref_sq = (turned**2).sum(1)[None, :]
    hits = []
    for start in range(0, len(candidates), chunk):
        block = candidates[start : start + chunk].astype(np.float32)
        sq = (block**2).sum(1)[:, None] + ref_sq - 2.0 * block @ turned.T
        hits.append(np.sqrt(np.maximum(sq, 0.0) / block.shape[1]).min(axis=1) < OVERLAP_RMS)
    return np.concatenate(hits)


def overlapping(train_cleans: Sequence[Path], test_cleans: Sequence[Path]) -> list[int]:
    """Indices of ``train_cleans`` whose image is one of ``test_cleans``, flipped or turned or not.

    Matrix products compare every training signature with the 8 orientations of every test signature
    (1800 × 100 images: about 15 s on 2 cores, most of it reading the files; ``benchmarks/overlap.py``).
    """
    if not train_cleans or not test_cleans:
        return []
    return np.flatnonzero(shows_any(signatures(train_cleans), signatures(test_cleans))).tolist()


def find_overlap(train_dir: str | os.PathLike, test_dir: str | os.PathLike) -> list[str]:
    """Names of the training pairs whose clean image shows a test pair's clean image (by content).

    ``DerainDataModule`` drops these by itself (``pairs.drop_test_overlap``); this lists them, e.g. for Rain100H
    (546 RainTrainH pairs share a background with the test set).
    """
    train = find_pairs(train_dir)
    hits = overlapping([c for _, c in train], [c for _, c in find_pairs(test_dir)])
    return sorted((pair_name(train[i][1]) for i in hits), key=natural_key)

"""Which clean images show the same photo: content signatures that survive re-encoding, flips and 90° turns.

Training must never see a test (or validation) background: :func:`leave_out_shown` leaves out the training pairs
(``derain.data.split``) and the clean photos (``derain.data.pool``) whose image shows one; :func:`find_overlap`
lists them for two folders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import cv2
import numpy as np

from derain.io import ImageReadError, natural_key, read_rgb
from derain.pairing import DataError, find_pairs, pair_name

__all__ = [
    "OVERLAP_RMS",
    "SIGNATURE_SIDE",
    "content_signature",
    "find_overlap",
    "leave_out_shown",
    "shows_any",
    "signatures",
]

Item = TypeVar("Item")

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


def leave_out_shown(
    items: Sequence[Item], candidates: np.ndarray, references: Sequence[np.ndarray]
) -> tuple[list[Item], list[Item]]:
    """Split ``items`` into those that show none of the held-out images and those that show one.

    The one rule for what training must not see: a training pair or a clean photo whose image shows a held-out
    (validation or test) image, flipped or turned or not (``shows_any``).

    Args:
        items: anything, one per row of ``candidates`` (pairs, photos).
        candidates: (len(items), SIGNATURE_SIDE²) signatures of the items' (clean) images.
        references: signature arrays (m, SIGNATURE_SIDE²) of the held-out images, one per held-out set; none
            leaves nothing out.

    Returns:
        (kept, left out), each in the order of ``items``.
    """
    if len(candidates) != len(items):
        raise ValueError(
            f"leave_out_shown: {len(candidates)} signatures for {len(items)} items; give one an item"
        )
    if not items or not references:
        return list(items), []
    shown = shows_any(candidates, np.concatenate(references))
    kept = [item for item, hit in zip(items, shown, strict=True) if not hit]
    return kept, [item for item, hit in zip(items, shown, strict=True) if hit]


def find_overlap(train_dir: str | os.PathLike, test_dir: str | os.PathLike) -> list[str]:
    """Names of the training pairs whose clean image shows a test pair's clean image (by content).

    ``DerainDataModule`` drops these by itself (``pairs.drop_test_overlap``); this lists them, e.g. for Rain100H
    (546 RainTrainH pairs share a background with the test set).
    """
    train, test = find_pairs(train_dir), find_pairs(test_dir)
    if not train or not test:
        return []
    cleans = [c for _, c in train]
    _, shown = leave_out_shown(cleans, signatures(cleans), [signatures([c for _, c in test])])
    return sorted((pair_name(c) for c in shown), key=natural_key)

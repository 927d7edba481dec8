"""Training, validation and test data: real pairs, content-checked against the test split, plus synthetic rain.

- ``options``: ``PairSources`` and ``Synthesis``, the ``--data.*`` options, checked once;
- ``overlap``: content signatures, which clean images show the same photo;
- ``split``: ``split_pairs``, where every real pair goes (train, validation, left out);
- ``transforms``: the crop path and the loader workers' random streams;
- ``datasets``: ``PairedDataset``, ``SyntheticRainDataset``;
- ``pool``: ``synthetic_pool``, the photos and rain layers synthetic rain is made of;
- ``module``: ``DerainDataModule``, the one Lightning piece.

Pairing rules and folder layouts are ``derain.pairing``'s (the evaluator pairs files by them too). The names
load on first use, so ``derain.data.split`` or ``derain.data.options`` do not import Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DATA_VARIABLE": "options",
    "PairSources": "options",
    "Synthesis": "options",
    "content_signature": "overlap",
    "find_overlap": "overlap",
    "Split": "split",
    "split_pairs": "split",
    "crop_transform": "transforms",
    "seed_worker": "transforms",
    "PairedDataset": "datasets",
    "SyntheticRainDataset": "datasets",
    "SyntheticPool": "pool",
    "synthetic_pool": "pool",
    "DerainDataModule": "module",
}
_PAIRING = ("DataError", "LAYOUTS", "Pair", "check_pairs", "find_pairs", "pair_name", "read_name_list")

__all__ = sorted([*_LAZY, *_PAIRING])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    if name in _PAIRING:
        return getattr(importlib.import_module("derain.pairing"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

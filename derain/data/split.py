"""Where every real pair goes: training, validation, or left out; one function of the options, ``split_pairs``.

The steps, in order: find and check the pairs of every training folder; drop those ``exclude_list`` names; drop
those whose clean image shows a test clean image; hold out the validation pairs; drop the training pairs whose
clean image shows a validation clean image (another rain on the same background would leak it into training).
Nothing here is random but the seeded hold-out, and nothing is kept between calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from derain.pairing import DataError, Pair, canonical_name, check_pairs, find_pairs, pair_name, read_name_list

from .options import PairSources
from .overlap import leave_out_shown, signatures

__all__ = ["Split", "indices_from", "seeded_share", "split_pairs"]

log = logging.getLogger(__name__)


@dataclass
class Split:
    """The real pairs of one set-up: what trains and validates, and what was left out and why."""

    train: list[Pair] = field(default_factory=list)
    val: list[Pair] = field(default_factory=list)
    excluded: list[Pair] = field(default_factory=list)
    """Named by ``exclude_list``."""
    test_overlap: list[Pair] = field(default_factory=list)
    """Their clean image shows a test clean image (``drop_test_overlap``)."""
    val_background: list[Pair] = field(default_factory=list)
    """Their clean image shows a validation clean image."""


def split_pairs(
    pairs: PairSources, *, seed: int, synthetic: bool, test_signatures: Callable[[], np.ndarray]
) -> Split:
    """Split the real pairs of ``pairs`` (see the module docstring).

    Args:
        pairs: where the pairs are and how to split them.
        seed: the hold-out's seed.
        synthetic: synthetic samples will train too, so holding out every real pair is allowed.
        test_signatures: the content signatures of the test split's clean images, called only if needed.

    Raises:
        DataError: a folder, a listed name or the hold-out that does not fit (the message says what would).
    """
    split = Split()
    per_folder = [find_pairs(folder) for folder in pairs.train_folders()]
    check_pairs([p for ps in per_folder for p in ps])
    kept, split.excluded = _drop_listed(pairs, per_folder)
    if pairs.drop_test_overlap and pairs.test_folders() and kept:
        kept, split.test_overlap = _leave_out_shown(kept, test_signatures())
        message = (
            f"dropped {len(split.test_overlap)} of {len(kept) + len(split.test_overlap)} training pairs whose clean "
            "image shows a test image (compared by content, flips and 90° turns included); "
            "pairs.drop_test_overlap false keeps them"
        )
        (log.warning if split.test_overlap else log.info)(message)
    train, split.val = _hold_out(pairs, kept, seed, synthetic=synthetic)
    if split.val and train:
        split.train, split.val_background = _leave_out_shown(train, signatures([c for _, c in split.val]))
        if split.val_background:
            log.warning(
                "dropped %d of %d training pairs whose clean image shows a validation image (by content): %s",
                len(split.val_background),
                len(train),
                ", ".join(str(r) for r, _ in split.val_background),
            )
    else:
        split.train = train
    return split


def seeded_share(n: int, fraction: float, seed: int) -> list[int]:
    """The indices (of ``n``) a hold-out of ``fraction`` (at least 1) takes with ``seed``."""
    if n == 0:
        return []
    return np.random.default_rng(seed).permutation(n)[: max(1, round(fraction * n))].tolist()


def indices_from(pairs: Sequence[Pair], folders: Sequence[str], option: str) -> list[int]:
    """Indices of the ``pairs`` that ``find_pairs`` finds in ``folders``; a ``DataError`` if none are."""
    wanted = {rain.resolve() for folder in folders for rain, _ in find_pairs(folder)}
    found = [i for i, (rain, _) in enumerate(pairs) if rain.resolve() in wanted]
    if not found:
        raise DataError(
            f"{option} {list(folders)}: none of these folders' pairs are among the training pairs: list folders "
            "that are also in root/train or train_dirs, whose pairs were not all excluded, dropped as test "
            "overlap or held out"
        )
    return found


def _drop_listed(sources: PairSources, per_folder: list[list[Pair]]) -> tuple[list[Pair], list[Pair]]:
    """The pairs ``exclude_list`` does not name, and those it does, each name only in its own folder."""
    if sources.exclude_list is None:
        return [p for ps in per_folder for p in ps], []
    entries = read_name_list(sources.exclude_list)
    listed = _listed(entries, sources.train_folders(), sources.exclude_list)
    kept: list[Pair] = []
    excluded: list[Pair] = []
    for folder, names, pairs in zip(sources.train_folders(), listed, per_folder, strict=True):
        for pair in pairs:
            (excluded if canonical_name(pair_name(pair[1])) in names else kept).append(pair)
        unmatched = names - {canonical_name(pair_name(c)) for _, c in pairs}
        if unmatched:
            log.warning("exclude_list: no pair named %s in %s", ", ".join(sorted(unmatched)), folder)
    log.info("excluded %d training pairs listed in %s", len(excluded), sources.exclude_list)
    return kept, excluded


def _listed(
    entries: list[tuple[tuple[str, ...], str]], folders: Sequence[Path], list_path: str
) -> list[set[str]]:
    """Per training folder, the canonical names the list scopes to it."""
    if any(not parts for parts, _ in entries) and len(folders) > 1:
        raise DataError(
            f"exclude_list {list_path} has bare pair names but there are {len(folders)} training folders "
            f"({', '.join(map(str, folders))}); write FOLDER/NAME so each name reaches only its own folder"
        )
    resolved = [f.resolve().parts for f in folders]
    names: list[set[str]] = [set() for _ in folders]
    for parts, name in entries:
        hits = [i for i, f in enumerate(resolved) if not parts or f[-len(parts) :] == parts]
        if not hits:
            raise DataError(f"exclude_list {list_path}: {'/'.join(parts)}/{name} names no training folder")
        if len(hits) > 1:
            raise DataError(
                f"exclude_list {list_path}: {'/'.join(parts)} fits several training folders; give more of its path"
            )
        names[hits[0]].add(name)
    return names


def _leave_out_shown(pairs: list[Pair], references: np.ndarray) -> tuple[list[Pair], list[Pair]]:
    """The pairs whose clean image shows none of the ``references`` (signatures), and those that show one."""
    return leave_out_shown(pairs, signatures([c for _, c in pairs]), [references])


def _hold_out(
    sources: PairSources, pairs: list[Pair], seed: int, *, synthetic: bool
) -> tuple[list[Pair], list[Pair]]:
    """The training pairs left and the validation pairs: ``val_dirs``, a seeded share of ``pairs``, or both when
    ``val_from`` is set beside ``val_dirs``."""
    explicit = [p for folder in sources.val_dirs for p in find_pairs(folder)]
    check_pairs(explicit)
    if (explicit and not sources.val_from) or not pairs or sources.val_fraction == 0:
        return pairs, explicit
    # one pool of all training pairs, or each val_from folder its own seeded share; a val_from folder that
    # does not train gives its share to validation and nothing else (the same pairs as when it trains)
    training = {folder.resolve() for folder in sources.train_folders()}
    pools = [list(range(len(pairs)))]
    if sources.val_from:
        pools = []
        for folder in sources.val_from:
            if Path(folder).resolve() in training:
                pools.append(indices_from(pairs, (folder,), "val_from"))
            else:
                own = find_pairs(folder)
                explicit += [own[j] for j in seeded_share(len(own), sources.val_fraction, seed)]
    held = {pool[j] for pool in pools for j in seeded_share(len(pool), sources.val_fraction, seed)}
    if len(held) >= len(pairs) and not synthetic:
        raise DataError(
            f"only {len(pairs)} training pair(s): holding out {len(held)} for validation leaves none to "
            "train on; add pairs, set val_dirs, or val_fraction: 0"
        )
    val = explicit + [p for i, p in enumerate(pairs) if i in held]
    return [p for i, p in enumerate(pairs) if i not in held], val

"""The data module's options, checked once where they are made: real pairs (``PairSources``) and synthetic rain
(``Synthesis``), as ``--data.pairs.*`` and ``--data.synthesis.*`` on the command line.

Folder options may use the one documented variable ``$DERAIN_DATA`` (e.g. ``$DERAIN_DATA/rain100h-train-mini``):
it is expanded when the options are made, and an unset variable is an error that names it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derain.pairing import DataError
from derain.synth import ANY_STYLES, COMPOSITE_BETA, RAIN_STYLES, LayerAugment

__all__ = ["DATA_VARIABLE", "PairSources", "Synthesis"]

DATA_VARIABLE = "DERAIN_DATA"
"""The one environment variable folder options may use: where the data sets are (``$DERAIN_DATA/...``)."""


def check_probability(name: str, value: float) -> None:
    """A ``DataError`` naming the option unless ``value`` is a probability."""
    if not 0.0 <= value <= 1.0:
        raise DataError(f"{name} must be in [0, 1], got {value}")


def check_styles(name: str, styles: Sequence[str]) -> tuple[str, ...]:
    """``styles`` as a tuple; a ``DataError`` naming the option unless it lists known rain styles."""
    styles = (styles,) if isinstance(styles, str) else tuple(styles)
    unknown = [s for s in styles if s not in RAIN_STYLES]
    if not styles or unknown:
        raise DataError(
            f"{name} must name one or more of {', '.join(RAIN_STYLES)}; got {list(styles)}"
            + (f" ({', '.join(map(repr, unknown))} unknown)" if unknown else "")
        )
    return styles


def _expand(name: str, folder: str) -> str:
    """``folder`` with ``$DERAIN_DATA`` (or ``${DERAIN_DATA}``) expanded; an unset variable names itself."""
    expanded = os.path.expandvars(str(folder))
    left = re.search(r"\$\{?(\w+)", expanded)
    if left:
        raise DataError(
            f"{name}: {folder} uses ${left.group(1)}, which is not set; set it to the folder that holds the data "
            f"sets, e.g. {DATA_VARIABLE}=../shared/data derain fit ..."
        )
    return expanded


def _expand_all(options: Any, names: Iterable[str]) -> None:
    for name in names:
        value = getattr(options, name)
        if isinstance(value, str):
            raise DataError(f"{name} must be a list of folders, got the string {value!r}")
        object.__setattr__(options, name, tuple(_expand(name, v) for v in value))


@dataclass(frozen=True)
class PairSources:
    """Real rainy/clean pairs: where they are, what is left out of training, and how validation is split.

    Attributes:
        root: a folder with ``train/`` and ``test/`` pair folders, e.g. ``datasets/Rain100H``.
        train_dirs: more pair folders for training.
        val_dirs: explicit validation pair folders (their pairs are not trained on unless also in training).
        test_dirs: more test pair folders.
        val_fraction: share of the real training pairs held out for validation (at least 1): without
            ``val_dirs``, or with ``val_dirs`` when ``val_from`` is set (then validation is both).
        val_from: folders (among the training folders) the ``val_fraction`` hold-out draws from, each its own
            seeded share (18 and 200 pairs at 0.2: 4 and 40); default one share of all training pairs. A folder
            that is not a training folder gives its share to validation only (the same pairs as if it trained). Set
            together with ``val_dirs``, validation is the ``val_dirs`` pairs plus this hold-out. Training pairs
            whose clean image shows a validation clean image are dropped (by content) and logged.
        exclude_list: text file of pairs dropped from training: ``FOLDER/NAME`` a line (``FOLDER`` the training
            folder's name, or as many trailing parts of its path as tell it apart); a bare ``NAME`` only when
            there is one training folder. ``#`` starts a comment.
        drop_test_overlap: when there is a test split (``root/test`` or ``test_dirs``), drop the training pairs
            whose clean image shows a test clean image (compared by content, also flipped or turned by 90°),
            and log how many. ``false`` keeps them.
        repeat: how many times the real training pairs appear per epoch (so synthetic samples do not drown them).
    """

    root: str | None = None
    train_dirs: tuple[str, ...] = ()
    val_dirs: tuple[str, ...] = ()
    test_dirs: tuple[str, ...] = ()
    val_fraction: float = 0.1
    val_from: tuple[str, ...] = ()
    exclude_list: str | None = None
    drop_test_overlap: bool = True
    repeat: int = 1

    def __post_init__(self) -> None:
        _expand_all(self, ("train_dirs", "val_dirs", "test_dirs", "val_from"))
        for name in ("root", "exclude_list"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _expand(name, getattr(self, name)))
        if self.root is not None and not (Path(self.root) / "train").is_dir():
            what = "does not exist" if not Path(self.root).exists() else "has no train/ folder"
            raise DataError(
                f"data root {self.root} {what}; expected ROOT/train/{{rain,norain}}/ and ROOT/test/{{rain,norain}}/ "
                "(see datasets/README.md for Rain100H), or train with no data on disk: "
                "derain fit --config configs/synthetic.yaml"
            )
        if self.exclude_list is not None and not Path(self.exclude_list).is_file():
            raise DataError(
                f"exclude_list {self.exclude_list} does not exist; expected a text file of pair names"
            )
        if not 0.0 <= self.val_fraction < 1.0:
            raise DataError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.repeat < 1:
            raise DataError(f"repeat must be at least 1, got {self.repeat}")

    def train_folders(self) -> list[Path]:
        return ([Path(self.root) / "train"] if self.root is not None else []) + [
            Path(d) for d in self.train_dirs
        ]

    def test_folders(self) -> list[Path]:
        root_test = Path(self.root) / "test" if self.root is not None else None
        own = [root_test] if root_test is not None and root_test.is_dir() else []
        return own + [Path(d) for d in self.test_dirs]


@dataclass(frozen=True)
class Synthesis:
    """Synthetic rain rendered on clean photos: procedural streaks, or real rain layers transplanted.

    Attributes:
        builtin_photos: also use the photos that ship with scikit-image (no data on disk needed).
        clean_dirs: folders of clean photos (searched recursively).
        length: synthetic pairs per epoch; 0 means 1000.
        transplant_prob: share of synthetic samples that get a real rain layer from a training pair.
        transplant_from: folders (among the training folders) whose pairs give their rain layers; default all.
            Held-out validation pairs never give theirs.
        transplant_shares: with ``transplant_from``, the share of the pairs' transplanted layers each of its
            folders gives (one a folder, summing to 1; e.g. ``[0.75, 0.25]`` for heavy and light donors whatever
            their counts); default: every donor layer equally likely.
        layer_dirs: folders of rendered rain layers (bright streaks on black, grey or RGB images, e.g. Garg &
            Nayar's streak database), transplanted like the pairs' layers.
        layer_share: share of the transplanted samples whose layer comes from ``layer_dirs`` when the pairs
            give layers too (the rest take a pair's layer).
        layer_shares: the share of those rendered layers each of ``layer_dirs`` gives (one a folder, summing to
            1), as ``transplant_shares`` does for the pairs'; default: every layer equally likely.
        real_layer_dirs: those of ``layer_dirs`` whose layers are a real photo's rain, veil included (e.g.
            ``tools/teacher_pairs.py --layers``): the samples that carry one are marked ``real_rain``, which
            ``DerainLitModule(rain_left_real=True)`` weighs apart.
        layer_augment: random gain, resizing and turn of each transplanted layer, and the chance of a second
            one on top (``derain.synth.LayerAugment``; the default changes nothing).
        composite_beta: how rain is put on a photo, ``clean + layer · (1 − β · clean)`` (``derain.synth.
            composite``), for transplanted and procedural rain alike; the pairs' layers are recovered under
            the same model (``derain.synth.recover_layer``). Default ``COMPOSITE_BETA`` (0.62), fitted to
            Rain100H; 0 is plain addition, with ``clip(rainy − clean)`` layers.
        rain_free_prob: share of synthetic samples left without rain (input = target), so the network learns to
            leave rain-free content, its brightness included, as it is.
        procedural_styles: the procedural rain's styles, names of ``derain.synth.RAIN_STYLES``, one drawn per
            sample (default ``light``, ``medium``, ``heavy``).
        val_length: size of the fixed synthetic validation set when there are no validation pairs (procedural
            rain as training renders it: ``composite_beta``, ``procedural_styles``).
        render_on_device: render the procedural rain on the training device, a batch at a time
            (``derain.synth.BatchRain``), instead of in the loader workers: for GPUs, whose steps
            outrun CPU workers. Off by default: on a CPU the workers' numpy path is the faster one
            (``benchmarks/train.py``).
    """

    builtin_photos: bool = False
    clean_dirs: tuple[str, ...] = ()
    length: int = 0
    transplant_prob: float = 0.5
    transplant_from: tuple[str, ...] = ()
    transplant_shares: tuple[float, ...] = ()
    layer_dirs: tuple[str, ...] = ()
    layer_share: float = 0.5
    layer_shares: tuple[float, ...] = ()
    real_layer_dirs: tuple[str, ...] = ()
    layer_augment: LayerAugment = field(default_factory=LayerAugment)
    composite_beta: float = COMPOSITE_BETA
    rain_free_prob: float = 0.0
    procedural_styles: tuple[str, ...] = ANY_STYLES
    val_length: int = 8
    render_on_device: bool = False

    AUTO_LENGTH = 1000

    def __post_init__(self) -> None:
        _expand_all(self, ("clean_dirs", "transplant_from", "layer_dirs", "real_layer_dirs"))
        for option, what in (("clean_dirs", "clean photo"), ("layer_dirs", "rain layer")):
            for folder in getattr(self, option):
                if not Path(folder).is_dir():
                    raise DataError(f"{what} folder {folder} ({option}) does not exist")
        check_probability("transplant_prob", self.transplant_prob)
        for option, folders in (("transplant_shares", "transplant_from"), ("layer_shares", "layer_dirs")):
            self._check_shares(option, folders)
        check_probability("layer_share", self.layer_share)
        known = {os.path.normpath(d) for d in self.layer_dirs}
        stray = [d for d in self.real_layer_dirs if os.path.normpath(d) not in known]
        if stray:
            raise DataError(
                f"real_layer_dirs names {stray[0]}, which is not one of layer_dirs {list(self.layer_dirs)}"
            )
        check_probability("composite_beta", self.composite_beta)
        check_probability("rain_free_prob", self.rain_free_prob)
        object.__setattr__(
            self, "procedural_styles", check_styles("procedural_styles", self.procedural_styles)
        )
        if self.length < 0 or self.val_length < 0:
            raise DataError(f"length and val_length must be >= 0, got {self.length} and {self.val_length}")

    def _check_shares(self, option: str, folders: str) -> None:
        """``option`` (``transplant_shares``, ``layer_shares``): empty, or one share a folder of ``folders``, in
        [0, 1], summing to 1 (stored as floats)."""
        if not getattr(self, option):
            return
        shares = tuple(float(x) for x in getattr(self, option))
        object.__setattr__(self, option, shares)
        count = len(getattr(self, folders))
        if len(shares) != count or any(not 0 <= x <= 1 for x in shares):
            raise DataError(
                f"{option} {list(shares)} must give one share in [0, 1] for each of the {count} {folders} folders"
            )
        if abs(sum(shares) - 1.0) > 1e-6:
            raise DataError(f"{option} {list(shares)} must sum to 1, got {sum(shares):g}")

    @property
    def used(self) -> bool:
        return self.builtin_photos or bool(self.clean_dirs)

    def holds_real_rain(self, layer_dir: str) -> bool:
        """Whether ``layer_dir`` (one of ``layer_dirs``) is one of ``real_layer_dirs`` (paths compared normalised)."""
        return os.path.normpath(layer_dir) in {os.path.normpath(d) for d in self.real_layer_dirs}

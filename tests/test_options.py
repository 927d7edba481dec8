"""The ``--data.*`` options (``PairSources``, ``Synthesis``): checked once, where they are made, with errors that name
the option and what would fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_helpers import make_pairs

from derain.data import PairSources, Synthesis
from derain.pairing import DataError


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (dict(synthesis=Synthesis, transplant_prob=1.5), r"transplant_prob must be in \[0, 1\], got 1.5"),
        (dict(synthesis=Synthesis, rain_free_prob=2), r"rain_free_prob must be in \[0, 1\], got 2"),
        (dict(synthesis=Synthesis, length=-1), r"length and val_length must be >= 0, got -1"),
        (dict(synthesis=PairSources, val_fraction=1.0), r"val_fraction must be in \[0, 1\), got 1.0"),
        (dict(synthesis=PairSources, repeat=0), r"repeat must be at least 1, got 0"),
        (dict(synthesis=PairSources, train_dirs="a/b"), r"train_dirs must be a list of folders"),
    ],
)
def test_options_out_of_range_name_the_option_and_its_range(options: dict, match: str) -> None:
    group = options.pop("synthesis")
    with pytest.raises(DataError, match=match):
        group(**options)


def test_the_data_variable_is_expanded_and_an_unset_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_pairs(tmp_path / "a", ["1.png"], ["1.png"])
    monkeypatch.setenv("DERAIN_DATA", str(tmp_path))
    assert PairSources(train_dirs=("$DERAIN_DATA/a",)).train_folders() == [tmp_path / "a"]
    monkeypatch.delenv("DERAIN_DATA")
    with pytest.raises(DataError, match=r"train_dirs: \$DERAIN_DATA/a uses \$DERAIN_DATA, which is not set"):
        PairSources(train_dirs=("$DERAIN_DATA/a",))


def test_missing_root_says_the_layout_and_the_synthetic_config(tmp_path: Path) -> None:
    missing = tmp_path / "datasets" / "Rain100H"
    with pytest.raises(
        DataError,
        match=r"(?s)Rain100H does not exist.*ROOT/train/\{rain,norain\}/.*ROOT/test/\{rain,norain\}/"
        r".*configs/synthetic\.yaml",
    ):
        PairSources(root=str(missing))


def test_root_without_train_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"has no train/ folder"):
        PairSources(root=str(tmp_path))


def test_the_synthesis_checks_its_layer_options(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"layer_share must be in \[0, 1\], got 1.5"):
        Synthesis(layer_share=1.5)
    with pytest.raises(DataError, match=r"rain layer folder .*nowhere \(layer_dirs\) does not exist"):
        Synthesis(layer_dirs=(str(tmp_path / "nowhere"),))


def test_procedural_styles_are_checked() -> None:
    with pytest.raises(
        DataError,
        match=r"procedural_styles must name one or more of light, medium, heavy, rain100h, layered, drizzle; got \['hail'\] \('hail' unknown\)",
    ):
        Synthesis(procedural_styles=("hail",))
    with pytest.raises(DataError, match=r"procedural_styles must name one or more"):
        Synthesis(procedural_styles=())
    assert Synthesis(procedural_styles="heavy").procedural_styles == ("heavy",)  # one name: a tuple of one


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        ((1.0,), r"transplant_shares \[1.0\] must give one share in \[0, 1\] for each of the 2"),
        ((0.5, 0.6), r"transplant_shares \[0.5, 0.6\] must sum to 1, got 1.1"),
        ((1.5, -0.5), r"must give one share in \[0, 1\]"),
    ],
)
def test_transplant_shares_out_of_range_name_the_option(tmp_path: Path, shares, message) -> None:
    with pytest.raises(DataError, match=message):
        Synthesis(transplant_from=(str(tmp_path / "a"), str(tmp_path / "b")), transplant_shares=shares)


def test_layer_shares_give_one_share_a_layer_folder(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    folders = (str(tmp_path / "a"), str(tmp_path / "b"))
    assert Synthesis(layer_dirs=folders, layer_shares=[1, 0]).layer_shares == (1.0, 0.0)
    with pytest.raises(
        DataError, match=r"layer_shares \[1.0\] must give one share .* each of the 2 layer_dirs"
    ):
        Synthesis(layer_dirs=folders, layer_shares=(1.0,))
    with pytest.raises(DataError, match=r"layer_shares \[0.5, 0.6\] must sum to 1"):
        Synthesis(layer_dirs=folders, layer_shares=(0.5, 0.6))
    real = Synthesis(layer_dirs=folders, real_layer_dirs=(folders[1] + "/",))  # paths compared normalised
    assert real.holds_real_rain(folders[1]) and not real.holds_real_rain(folders[0])
    with pytest.raises(DataError, match=r"real_layer_dirs names .*c, which is not one of layer_dirs"):
        Synthesis(layer_dirs=folders, real_layer_dirs=(str(tmp_path / "c"),))

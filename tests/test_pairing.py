"""Pairing: every folder layout found and paired by name; unmatched, stray, unreadable and mismatched files named;
name lists."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_helpers import make_pairs, noise, write

from derain.pairing import DataError, check_pairs, find_pairs, match_by_name, read_name_list


@pytest.mark.parametrize(
    ("rain", "clean", "sub"),
    [
        (["1.png", "2.png", "10.png"], ["1.png", "2.png", "10.png"], ("rain", "norain")),
        (["a.png", "b.jpg"], ["a.png", "b.jpg"], ("input", "target")),
        (
            ["rain-1.png", "rain-2.png", "rain-10.png"],
            ["norain-1.png", "norain-2.png", "norain-10.png"],
            None,
        ),
        (["norain-1.png", "norain-2.png"], ["norain-1.png", "norain-2.png"], ("rain", "norain")),  # RCDNet
        (
            ["rain-1.png", "rain-2.png"],
            ["norain-1.png", "norain-2.png"],
            ("rain", "norain"),
        ),  # PReNet in folders
        (
            ["norain-1x2.png", "norain-2x2.png"],
            ["norain-1.png", "norain-2.png"],
            ("rain/X2", "norain"),
        ),  # JORDER
    ],
    ids=["rain-norain", "input-target", "prenet-flat", "rcdnet", "prenet-subfolders", "jorder-x2"],
)
def test_every_layout_is_found_and_paired_by_name(tmp_path: Path, rain, clean, sub) -> None:
    make_pairs(tmp_path, rain, clean, sub=sub)
    (tmp_path / "notes.txt").write_text("not an image")  # ignored
    pairs = find_pairs(tmp_path)
    assert [(r.name, c.name) for r, c in pairs] == list(
        zip(rain, clean, strict=True)
    )  # natural order: 2 < 10


def test_unmatched_files_are_all_named(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png", "2.png"], ["1.png", "2.png"])
    write(tmp_path / "rain" / "3.png", noise())
    write(tmp_path / "norain" / "4.png", noise())
    with pytest.raises(DataError, match=r"(?s)2 unmatched.*rain/3\.png \(no clean partner\).*norain/4\.png"):
        find_pairs(tmp_path)


def test_missing_folder_names_the_expected_layouts(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match=r"(?s)nowhere does not exist.*DIR/rain/NAME.*DIR/input/NAME.*rain-NAME"
    ):
        find_pairs(tmp_path / "nowhere")


def test_empty_folder_names_the_expected_layouts(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("no images")
    with pytest.raises(DataError, match=r"no image pairs in .*expected one of the layouts"):
        find_pairs(tmp_path)


def test_root_folder_passed_as_pair_folder_gets_a_hint(tmp_path: Path) -> None:
    make_pairs(tmp_path / "train", ["1.png"], ["1.png"])
    with pytest.raises(DataError, match=r"train/ or test/ sub-folders: pass .*train"):
        find_pairs(tmp_path)


def test_flat_folder_with_stray_images_names_them(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["rain-1.png"], ["norain-1.png"], sub=None)
    write(tmp_path / "photo.png", noise())
    with pytest.raises(DataError, match=r"(?s)fit no pair.*photo\.png"):
        find_pairs(tmp_path)


def test_size_mismatch_is_named(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png"], ["1.png"])
    write(tmp_path / "rain" / "2.png", noise(24, 32))
    write(tmp_path / "norain" / "2.png", noise(20, 32))
    with pytest.raises(
        DataError, match=r"rain/2\.png is 32x24 but its clean partner .*norain/2\.png is 32x20"
    ):
        check_pairs(find_pairs(tmp_path))


def test_unreadable_image_is_named(tmp_path: Path) -> None:
    make_pairs(tmp_path, ["1.png", "2.png"], ["1.png", "2.png"])
    (tmp_path / "norain" / "2.png").write_bytes(b"\x89PNG truncated")
    with pytest.raises(DataError, match=r"cannot read image .*norain/2\.png"):
        check_pairs(find_pairs(tmp_path))
    assert check_pairs(find_pairs(tmp_path)[:1]) == [(24, 32)]


def test_name_list_ignores_comments_prefixes_and_zero_padding(tmp_path: Path) -> None:
    listing = tmp_path / "names.txt"
    listing.write_text("# header\nnorain-1.png\n  train/rain-010  # trailing comment\n\n0007.png\nx/y/abc\n")
    assert read_name_list(listing) == [((), "1"), (("train",), "10"), ((), "7"), (("x", "y"), "abc")]


def test_matching_by_name_keeps_the_files_without_a_partner_apart() -> None:
    matching = match_by_name(
        [Path("r/rain-2.png"), Path("r/rain-10.png"), Path("r/rain-3.png")],
        [Path("c/norain-10.png"), Path("c/norain-2.png"), Path("c/norain-4.png")],
    )
    assert [(r.name, c.name) for r, c in matching.pairs] == [
        ("rain-2.png", "norain-2.png"),
        ("rain-10.png", "norain-10.png"),
    ]
    assert matching.rain_only == [Path("r/rain-3.png")] and matching.clean_only == [Path("c/norain-4.png")]
    with pytest.raises(DataError, match=r"same pair name:\n  a/1\.png and a/rain-1\.png"):
        match_by_name([Path("a/1.png"), Path("a/rain-1.png")], [])

"""``split_pairs``, a function: where every real pair goes (training, validation, left out and why), and the one
rule for leaving out what shows a held-out image (``leave_out_shown``, ``find_overlap``)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from data_helpers import make_pairs, noise, numbered, photo, write

from derain.data import PairSources, Split, find_overlap, split_pairs
from derain.data.overlap import content_signature, leave_out_shown, signatures
from derain.pairing import DataError, find_pairs


def split(sources: PairSources, *, seed: int = 0, synthetic: bool = True) -> Split:
    """``split_pairs`` with the test split's signatures read from ``sources``' test folders."""

    def test_signatures() -> np.ndarray:
        return signatures([c for folder in sources.test_folders() for _, c in find_pairs(folder)])

    return split_pairs(sources, seed=seed, synthetic=synthetic, test_signatures=test_signatures)


def folders_and_names(pairs: list[tuple[Path, Path]]) -> list[tuple[str, str]]:
    return sorted((rain.parent.parent.name, rain.name) for rain, _ in pairs)


def test_root_train_test_split_drops_the_listed_and_the_test_overlap(tmp_path: Path) -> None:
    for i in range(1, 11):  # test 1-3 have the backgrounds of train 1-3
        for part in ("train", "test") if i <= 3 else ("train",):
            clean = noise(seed=i) // 2
            write(tmp_path / "root" / part / "norain" / f"{i}.png", clean)
            write(tmp_path / "root" / part / "rain" / f"{i}.png", clean + 40)
    exclude = tmp_path / "overlap.txt"
    exclude.write_text("# by hand\n0004\n")
    pairs = dict(root=str(tmp_path / "root"), exclude_list=str(exclude), val_fraction=0.2)
    result = split(PairSources(**pairs))
    assert [p[0].name for p in result.excluded] == ["4.png"]
    assert [p[0].name for p in result.test_overlap] == ["1.png", "2.png", "3.png"]  # found by content
    assert len(result.val) == 1 and len(result.train) == 5 and result.val_background == []
    assert not {p[0] for p in result.val} & {p[0] for p in result.train}
    assert split(PairSources(**pairs)) == result  # seeded: the same split every time
    kept = split(PairSources(**pairs, drop_test_overlap=False))
    assert kept.test_overlap == [] and len(kept.train) + len(kept.val) == 9


def test_the_test_split_is_read_only_when_it_is_needed(tmp_path: Path) -> None:
    make_pairs(tmp_path / "a", numbered(3), numbered(3))

    def unread() -> np.ndarray:
        raise AssertionError("the test signatures were read without a test split")

    sources = PairSources(train_dirs=(str(tmp_path / "a"),), val_fraction=0.0)
    result = split_pairs(sources, seed=0, synthetic=False, test_signatures=unread)
    assert len(result.train) == 3 and result.val == []


def test_excluded_names_reach_only_their_own_folder(tmp_path: Path) -> None:
    names = numbered(3, start=1)
    for folder in ("a/train", "b/train", "extra"):
        make_pairs(tmp_path / folder, names, names)
    listing = tmp_path / "exclude.txt"
    listing.write_text("extra/1\na/train/2\n")
    folders = tuple(str(tmp_path / f) for f in ("a/train", "b/train", "extra"))
    sources = dict(train_dirs=folders, val_fraction=0.0, exclude_list=str(listing))
    result = split(PairSources(**sources))
    dropped = sorted(str(clean.relative_to(tmp_path)) for _, clean in result.excluded)
    assert dropped == ["a/train/norain/2.png", "extra/norain/1.png"] and len(result.train) == 9 - 2
    for text, match in [
        ("1\n", "bare pair names but there are 3"),
        ("train/1\n", "fits several"),
        ("zz/1\n", "names no"),
    ]:
        listing.write_text(text)
        with pytest.raises(DataError, match=match):
            split(PairSources(**sources))


def test_exclude_list_names_that_match_nothing_are_reported(tmp_path: Path, caplog) -> None:
    make_pairs(tmp_path / "a", numbered(2, start=1), numbered(2, start=1))
    (tmp_path / "exclude.txt").write_text("a/1\na/7\n")
    sources = PairSources(
        train_dirs=(str(tmp_path / "a"),), val_fraction=0.0, exclude_list=str(tmp_path / "exclude.txt")
    )
    with caplog.at_level("WARNING"):
        result = split(sources)
    assert len(result.excluded) == 1 and "no pair named 7" in caplog.text


def test_val_dirs_beside_val_from_validate_on_both(tmp_path: Path) -> None:
    make_pairs(tmp_path / "a", numbered(5, start=1), numbered(5, start=1))
    make_pairs(tmp_path / "v", numbered(2, start=1), numbered(2, start=1))  # other backgrounds than a's
    a, v = str(tmp_path / "a"), str(tmp_path / "v")
    both = split(PairSources(train_dirs=(a,), val_dirs=(v,), val_from=(a,), val_fraction=0.4))
    assert [f for f, _ in folders_and_names(both.val)] == ["a", "a", "v", "v"]
    assert len(both.train) == 5 - 2  # the hold-out left training; the val_dirs pairs never joined
    alone = split(PairSources(train_dirs=(a,), val_dirs=(v,)))
    # val_dirs without val_from: those pairs only, every training pair trains
    assert folders_and_names(alone.val) == [("v", "1.png"), ("v", "2.png")] and len(alone.train) == 5


def test_val_from_holds_out_a_seeded_share_of_each_folder(tmp_path: Path) -> None:
    make_pairs(tmp_path / "heavy", numbered(10), numbered(10))
    make_pairs(tmp_path / "light", numbered(20), numbered(20))
    folders = tuple(str(tmp_path / f) for f in ("heavy", "light"))
    both = split(PairSources(train_dirs=folders, val_from=folders, val_fraction=0.2))
    held = folders_and_names(both.val)
    assert [f for f, _ in held].count("heavy") == 2 and [f for f, _ in held].count("light") == 4
    assert not {r for r, _ in both.val} & {r for r, _ in both.train}
    assert len(both.train) == 30 - 6
    # a val_from folder that does not train gives the same share to validation, and nothing to training
    heavy_only = split(PairSources(train_dirs=folders[:1], val_from=folders, val_fraction=0.2))
    assert folders_and_names(heavy_only.val) == held
    assert {r.parent.parent.name for r, _ in heavy_only.train} == {"heavy"}
    other_seed = split(PairSources(train_dirs=folders, val_from=folders, val_fraction=0.2), seed=1)
    assert folders_and_names(other_seed.val) != held


def test_training_pairs_showing_a_validation_background_leave_training(tmp_path: Path, caplog) -> None:
    make_pairs(tmp_path / "a", numbered(5), numbered(5), seed=0)
    make_pairs(
        tmp_path / "b", numbered(5), numbered(5), seed=0
    )  # b/N shows a/N's background under other rain
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with caplog.at_level("WARNING"):
        result = split(PairSources(train_dirs=(a, b), val_from=(a,), val_fraction=0.4))
    held = sorted(r.name for r, _ in result.val)
    assert len(held) == 2 and sorted(r.name for r, _ in result.val_background) == held
    assert {r.parent.parent.name for r, _ in result.val_background} == {"b"}
    assert len(result.train) == 10 - 2 - 2
    assert "dropped 2 of 8 training pairs whose clean image shows a validation image" in caplog.text


def test_a_hold_out_that_leaves_nothing_to_train_is_an_error_unless_synthetic_rain_trains(
    tmp_path: Path,
) -> None:
    make_pairs(tmp_path / "a", numbered(1), numbered(1))
    sources = PairSources(train_dirs=(str(tmp_path / "a"),), val_fraction=0.5)
    with pytest.raises(
        DataError, match=r"only 1 training pair\(s\): holding out 1 for validation leaves none"
    ):
        split(sources, synthetic=False)
    result = split(sources, synthetic=True)
    assert result.train == [] and len(result.val) == 1


def test_leave_out_shown_keeps_the_order_and_leaves_out_any_orientation() -> None:
    images = [photo(1), photo(2), np.ascontiguousarray(np.rot90(photo(3))), photo(4)]
    candidates = np.stack([content_signature(im).ravel() for im in images])
    held = [np.stack([content_signature(photo(3)).ravel()]), np.stack([content_signature(photo(1)).ravel()])]
    kept, left_out = leave_out_shown(["1", "2", "3", "4"], candidates, held)
    assert kept == ["2", "4"] and left_out == ["1", "3"]
    assert leave_out_shown(["1", "2", "3", "4"], candidates, []) == (["1", "2", "3", "4"], [])
    with pytest.raises(ValueError, match="3 signatures for 4 items"):
        leave_out_shown(["1", "2", "3", "4"], candidates[:3], held)


def test_find_overlap_finds_test_backgrounds_by_content_in_any_orientation(tmp_path: Path) -> None:
    tests = {f"norain-{i:03d}.png": photo(i) for i in range(1, 5)}
    for name, image in tests.items():
        write(tmp_path / "test" / name, image)
        write(tmp_path / "test" / name.replace("norain", "rain"), cv2.add(image, 30))
    train = {
        "1": tests["norain-001.png"],  # identical
        "2": np.ascontiguousarray(tests["norain-002.png"][:, ::-1]),  # flipped
        "3": np.ascontiguousarray(np.rot90(tests["norain-003.png"])),  # turned by 90°: another shape
        "4": cv2.imdecode(
            cv2.imencode(".jpg", tests["norain-004.png"], [cv2.IMWRITE_JPEG_QUALITY, 80])[1], 1
        ),
        "5": photo(50),
        "6": photo(60, 64, 48),
    }
    for name, image in train.items():
        write(tmp_path / "train" / "norain" / f"{name}.png", image)
        write(tmp_path / "train" / "rain" / f"{name}.png", cv2.add(image, 30))
    assert find_overlap(tmp_path / "train", tmp_path / "test") == ["1", "2", "3", "4"]

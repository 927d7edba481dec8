"""``synthetic_pool``, a function: the clean photos synthetic rain is rendered on (none that shows a held-out image),
the donor pairs' rain layers and their chances, the rendered layers of ``layer_dirs``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_helpers import make_pairs, numbered, photo, write

from derain.data import PairedDataset, Synthesis, synthetic_pool
from derain.data.overlap import signatures
from derain.pairing import DataError, find_pairs


def test_photos_that_show_a_held_out_image_are_left_out(tmp_path: Path, caplog) -> None:
    for i in (1, 2, 9):  # turned copies of the held-out backgrounds, and two others
        write(tmp_path / "clean" / f"{i}.png", np.ascontiguousarray(np.rot90(photo(i))))
    write(tmp_path / "clean" / "other.png", photo(77))
    write(tmp_path / "clean" / "sub" / "another.png", photo(78))
    for i in (1, 2, 9):
        write(tmp_path / "held" / f"{i}.png", photo(i))
    val = signatures([tmp_path / "held" / "1.png", tmp_path / "held" / "2.png"])
    test = signatures([tmp_path / "held" / "9.png"])
    synthesis = Synthesis(clean_dirs=(str(tmp_path / "clean"),))
    with caplog.at_level("WARNING"):
        pool = synthetic_pool(synthesis, donors=None, held=[val, test])
    assert pool.dropped_photos == 3 and len(pool.photos) == 2
    assert "dropped 3 of 5 clean photos that show a validation or test image" in caplog.text
    kept = sorted(im.tobytes() for im in pool.photos)  # read as RGB: written as cv2's BGR
    assert kept == sorted(np.ascontiguousarray(photo(s)[..., ::-1]).tobytes() for s in (77, 78))
    everything = synthetic_pool(synthesis, donors=None, held=[])
    assert everything.dropped_photos == 0 and len(everything.photos) == 5
    assert all(im.dtype == np.uint8 and im.shape in ((48, 64, 3), (64, 48, 3)) for im in pool.photos)


def test_builtin_photos_join_the_folders_and_no_photos_make_an_empty_pool(tmp_path: Path) -> None:
    write(tmp_path / "clean" / "1.png", photo(1))
    both = synthetic_pool(
        Synthesis(clean_dirs=(str(tmp_path / "clean"),), builtin_photos=True), donors=None, held=[]
    )
    builtin = synthetic_pool(Synthesis(builtin_photos=True), donors=None, held=[])
    assert len(both.photos) == len(builtin.photos) + 1 and len(builtin.photos) >= 1
    make_pairs(tmp_path / "a", numbered(2), numbered(2))
    donors = PairedDataset(find_pairs(tmp_path / "a"))
    empty = synthetic_pool(Synthesis(transplant_prob=1.0), donors=donors, held=[])
    assert empty.photos == [] and empty.pair_layers == [] and empty.rendered_layers == []
    (tmp_path / "nothing").mkdir()
    with pytest.raises(DataError, match=r"clean photo folder .*nothing \(clean_dirs\) holds no images"):
        synthetic_pool(Synthesis(clean_dirs=(str(tmp_path / "nothing"),)), donors=None, held=[])


def test_donor_layers_are_the_pairs_rain_under_the_composite(tmp_path: Path) -> None:
    make_pairs(tmp_path / "a", numbered(3), numbered(3))  # rainy = clean + 40 (saturating where clean > 215)
    donors = PairedDataset(find_pairs(tmp_path / "a"))
    synthesis = dict(builtin_photos=True, transplant_prob=1.0)
    added = synthetic_pool(Synthesis(**synthesis, composite_beta=0.0), donors=donors, held=[])
    assert len(added.pair_layers) == 3 and added.pair_layer_weights is None
    for layer, i in zip(added.pair_layers, range(3), strict=True):
        rain, clean = donors.load(i)
        assert layer.dtype == np.uint8 and np.array_equal(layer, rain - clean)  # clip(rainy − clean)
    recovered = synthetic_pool(Synthesis(**synthesis), donors=donors, held=[])
    assert all(layer.dtype == np.float32 and layer.max() <= 1 for layer in recovered.pair_layers)
    none = synthetic_pool(Synthesis(builtin_photos=True, transplant_prob=0.0), donors=donors, held=[])
    assert none.pair_layers == []


def test_transplant_shares_give_each_donor_folder_its_share(tmp_path: Path) -> None:
    make_pairs(tmp_path / "heavy", numbered(2, start=1), numbered(2, start=1))
    make_pairs(tmp_path / "light", numbered(6), numbered(6))
    folders = (str(tmp_path / "heavy"), str(tmp_path / "light"))
    donors = PairedDataset([p for f in folders for p in find_pairs(f)])
    synthesis = Synthesis(
        builtin_photos=True, transplant_from=folders, transplant_shares=(0.75, 0.25), transplant_prob=1.0
    )
    pool = synthetic_pool(synthesis, donors=donors, held=[])
    np.testing.assert_allclose(pool.pair_layer_weights, [0.375] * 2 + [0.25 / 6] * 6)
    # the draws follow the weights: heavy layers three times in four
    rng = np.random.default_rng(0)
    picks = [rng.choice(len(pool.pair_layers), p=pool.pair_layer_weights) for _ in range(4000)]
    assert abs(np.mean(np.asarray(picks) < 2) - 0.75) < 0.03
    only_heavy = synthetic_pool(
        Synthesis(builtin_photos=True, transplant_from=folders[:1], transplant_prob=1.0),
        donors=donors,
        held=[],
    )
    assert len(only_heavy.pair_layers) == 2
    make_pairs(tmp_path / "c", numbered(1), numbered(1))  # pairs, but not donors
    other = Synthesis(builtin_photos=True, transplant_from=(str(tmp_path / "c"),), transplant_prob=1.0)
    with pytest.raises(DataError, match=r"transplant_from .*/c'\]: none of these folders"):
        synthetic_pool(other, donors=donors, held=[])


def test_layer_shares_give_each_layer_folder_its_share(tmp_path: Path) -> None:
    streaks = np.zeros((40, 40), np.uint8)
    streaks[:, ::5] = 80
    for i in range(3):
        write(tmp_path / "garg" / f"{i}.png", streaks)
    write(tmp_path / "teacher" / "t.png", np.dstack([streaks] * 3))
    folders = (str(tmp_path / "garg"), str(tmp_path / "teacher"))
    synthesis = Synthesis(
        builtin_photos=True, layer_dirs=folders, layer_shares=(0.4, 0.6), transplant_prob=1.0
    )
    pool = synthetic_pool(synthesis, donors=None, held=[])
    assert [layer.shape[2] for layer in pool.rendered_layers] == [1, 1, 1, 3]
    np.testing.assert_allclose(pool.rendered_layer_weights, [0.4 / 3] * 3 + [0.6])
    equal = synthetic_pool(
        Synthesis(builtin_photos=True, layer_dirs=folders, transplant_prob=1.0), donors=None, held=[]
    )
    assert equal.rendered_layer_weights is None  # no shares: every layer equally likely


def test_layer_dirs_are_read_grey_or_colour_and_checked(tmp_path: Path, caplog) -> None:
    streaks = np.zeros((60, 70), np.uint8)
    streaks[:, ::7] = 90
    write(tmp_path / "layers" / "1-4.png", streaks)
    write(tmp_path / "layers" / "sub" / "2-4.png", np.dstack([streaks] * 3))
    synthesis = dict(builtin_photos=True, layer_dirs=(str(tmp_path / "layers"),))
    with caplog.at_level("INFO"):
        pool = synthetic_pool(Synthesis(**synthesis, transplant_prob=1.0), donors=None, held=[])
    assert [layer.shape for layer in pool.rendered_layers] == [(60, 70, 1), (60, 70, 3)]
    assert (
        np.array_equal(pool.rendered_layers[0][..., 0], streaks) and "2 rendered rain layers" in caplog.text
    )
    unused = synthetic_pool(Synthesis(**synthesis, transplant_prob=0.0), donors=None, held=[])
    assert unused.rendered_layers == []  # nothing is transplanted: the folders are not read
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"rain layer folder .*empty \(layer_dirs\) holds no images"):
        synthetic_pool(
            Synthesis(builtin_photos=True, layer_dirs=(str(tmp_path / "empty"),)), donors=None, held=[]
        )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "1.png").write_bytes(b"\x89PNG truncated")
    with pytest.raises(DataError, match=r"cannot read image .*broken/1\.png"):
        synthetic_pool(
            Synthesis(builtin_photos=True, layer_dirs=(str(tmp_path / "broken"),)), donors=None, held=[]
        )

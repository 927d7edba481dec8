"""Shipped weights by name: ``load_model("derain-small")``, ``--weights derain-small``, and ``derain models``
listing them; a path still works wherever a name does, and a name that is neither is one line listing the names."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from derain.cli import main
from derain.inference import load_model
from derain.weights import WeightsNotFoundError, packaged_weights, resolve
from derain.weights.shipped import DEFAULT_NAME, SHIPPED

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_name_loads_the_same_network_as_its_file() -> None:
    by_name = load_model("derain-small", device="cpu")
    by_path = load_model(packaged_weights(), device="cpu")
    assert by_name.init_args == by_path.init_args
    named, pathed = by_name.state_dict(), by_path.state_dict()
    assert named.keys() == pathed.keys()
    assert all(torch.equal(named[key], pathed[key]) for key in named)


def test_every_name_is_a_file_in_the_package() -> None:
    assert DEFAULT_NAME in SHIPPED
    for name, net in SHIPPED.items():
        assert resolve(name).name == net.file
        assert resolve(name).parent == packaged_weights().parent


def test_an_unknown_name_is_one_line_listing_the_names() -> None:
    with pytest.raises(
        WeightsNotFoundError, match=r"derain-bse does not exist.*their names: derain-small"
    ) as err:
        load_model("derain-bse")
    assert "\n" not in str(err.value)


def test_a_file_of_that_name_wins_over_the_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "derain-small").write_bytes(b"my own file")
    assert resolve("derain-small") == Path("derain-small")


def test_derain_models_lists_each_name_with_its_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    count = sum(p.numel() for p in load_model("derain-small", device="cpu").parameters())
    assert out.startswith("derain-small (the default)\n")
    assert f"  parameters: {count:,} ({count / 1e6:.2f} M)" in out
    shipped = SHIPPED["derain-small"]
    assert (
        f"  speed: {shipped.yardsticks:g} yardsticks a 321×481 photo, one pass (measured by {shipped.measured}"
        in out
    )
    assert "    heavy200/psnr_y: 24.5" in out  # from the file's provenance
    assert f"  file: {packaged_weights()}" in out


def test_infer_takes_a_name_for_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rainy = tmp_path / "rainy.png"
    cv2.imwrite(str(rainy), np.random.default_rng(0).integers(0, 256, (24, 40, 3), dtype=np.uint8))
    out = tmp_path / "clean.png"
    assert main(["infer", str(rainy), str(out), "--weights", "derain-small", "--device", "cpu"]) == 0
    assert cv2.imread(str(out)).shape == (24, 40, 3)
    assert main(["infer", str(rainy), str(tmp_path / "x.png"), "--weights", "derain-bse"]) == 2
    assert "error: weights file derain-bse does not exist" in capsys.readouterr().err

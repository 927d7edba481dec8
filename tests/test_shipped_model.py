"""The shipped model's quality (the weights format is ``test_weights.py``'s): the shipped weights really derain, on
rain rendered over a photo that ships with scikit-image (always), and on real pairs the weights never trained on
(when ``../shared/data`` is present; see MODEL_CARD.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import SHARED_DATA, need_shared_data

from derain.data import DerainDataModule, PairSources, Synthesis
from derain.evaluate import evaluate, score_pair, summarize
from derain.inference import load_model, restore
from derain.models import DerainNet
from derain.pairing import pair_name
from derain.synth import add_rain, builtin_clean_images

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs" / "derain-small" / "stage1.yaml"
# The Rain100H pairs that the recipe holds out (seeded); MODEL_CARD.md scores the model on them.
HELD_OUT = {"0004", "0005", "0013", "0015"}


@pytest.fixture(scope="module")
def shipped() -> DerainNet:
    return load_model(device="cpu")


@pytest.mark.parametrize(("style", "gain"), [("light", 0.0), ("heavy", 2.0)])
def test_shipped_weights_derain_a_builtin_photo(shipped: DerainNet, style: str, gain: float) -> None:
    clean = builtin_clean_images()[0][128:384, 128:384]  # the astronaut, 256×256
    rainy = np.round(add_rain(clean, np.random.default_rng(1), style, beta=0.0) * 255).astype(np.uint8)
    before, after = score_pair(rainy, clean)["psnr_y"], score_pair(restore(shipped, rainy), clean)["psnr_y"]
    assert after > before + gain, f"{style} rain: PSNR-Y {before:.2f} -> {after:.2f} dB"


@pytest.mark.data
def test_the_model_card_hold_out_is_what_the_recipe_holds_out(monkeypatch: pytest.MonkeyPatch) -> None:
    need_shared_data()
    monkeypatch.setenv("DERAIN_DATA", str(SHARED_DATA))
    data = yaml.safe_load(RECIPE.read_text())["data"]
    synthesis = Synthesis(**{**data["synthesis"], "length": 8, "transplant_prob": 0.0})
    dm = DerainDataModule(pairs=PairSources(**data["pairs"]), synthesis=synthesis, num_workers=0)
    dm.setup("fit")
    assert {pair_name(clean) for _, clean in dm.split.val} == HELD_OUT
    assert not HELD_OUT & {pair_name(clean) for _, clean in dm.split.train}


@pytest.mark.data
@pytest.mark.parametrize(
    ("folder", "names", "gain"),
    [
        ("rain100h-train-mini", HELD_OUT, 8.0),  # heavy rain, held out of training
        ("rain200l-samples", None, 0.0),  # light rain, never trained on: no harm
        ("spa-samples", None, 2.0),  # real rain, never trained on
    ],
)
@pytest.mark.slow
def test_shipped_weights_on_unseen_real_pairs(
    shipped: DerainNet, folder: str, names: set[str] | None, gain: float
) -> None:
    need_shared_data()
    rows, _, problems = evaluate(
        SHARED_DATA / folder / "rain", SHARED_DATA / folder / "norain", model=shipped, names=names
    )
    assert not problems and rows
    mean = summarize(rows)
    assert mean["psnr_y"] > mean["input_psnr_y"] + gain, f"{folder}: {mean}"

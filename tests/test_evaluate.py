"""``python -m derain.evaluate``: scores against numbers computed by hand, pairing by name, CSV and JSON."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from derain.evaluate import main, pair_files, score_pair, spread
from derain.inference import load_model, restore
from derain.io import read_rgb

# Flat gray clean images at level 100, predictions at level 110 (every channel +10):
#   RGB:  MSE = 10² = 100                      -> PSNR = 10·log10(255² / 100) = 28.1308 dB
#   Y:    Y = round(16 + 219·v/255): 102 vs 110 -> MSE = 64 -> PSNR = 10·log10(255² / 64) = 30.0034 dB
#   SSIM of flat images is the luminance term (2·μx·μy + C1) / (μx² + μy² + C1), C1 = 0.01², μ on [0, 1]
#   (torchmetrics computes it in float32 as E[x²] - μ², which moves it by ~1.3e-4: hence SSIM_TOL).
PSNR_RGB = 10 * math.log10(255**2 / 100)
PSNR_Y = 10 * math.log10(255**2 / 64)
SSIM_TOL = 5e-4


def flat_ssim(a: float, b: float) -> float:
    x, y, c1 = a / 255, b / 255, 0.01**2
    return (2 * x * y + c1) / (x * x + y * y + c1)


def flat(path: Path, level: int, size: tuple[int, int] = (24, 32)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((*size, 3), level, np.uint8))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    pred, clean = tmp_path / "pred", tmp_path / "clean"
    for name in ("a.png", "b.png"):
        flat(pred / name, 110)
        flat(clean / name, 100)
    flat(pred / "c.png", 110)  # stem match: c.png vs c.bmp
    flat(clean / "c.bmp", 100)
    flat(pred / "rain-007.png", 110)  # JORDER/PReNet naming
    flat(clean / "norain-007.png", 100)
    return pred, clean


def test_pairing_by_name_stem_and_rain_prefix(folders: tuple[Path, Path]) -> None:
    pred, clean = folders
    flat(pred / "lonely.png", 110)
    flat(clean / "orphan.png", 100)
    pairing = pair_files(pred, clean)
    assert [(p.name, c.name) for p, c in pairing.pairs] == [  # by pair name, naturally sorted
        ("rain-007.png", "norain-007.png"),
        ("a.png", "a.png"),
        ("b.png", "b.png"),
        ("c.png", "c.bmp"),
    ]
    assert [p.name for p in pairing.rain_only] == ["lonely.png"]
    assert [p.name for p in pairing.clean_only] == ["orphan.png"]


def test_scores_match_hand_computed_values(
    folders: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pred, clean = folders
    status = main(["--pred", str(pred), "--clean", str(clean), "--json", "--csv", str(tmp_path / "s.csv")])
    assert status == 0
    result = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert result["count"] == 4
    assert result["psnr"] == pytest.approx(PSNR_RGB, abs=1e-3)
    assert result["psnr_y"] == pytest.approx(PSNR_Y, abs=1e-3)
    assert result["ssim"] == pytest.approx(flat_ssim(100, 110), abs=SSIM_TOL)
    assert result["ssim_y"] == pytest.approx(flat_ssim(102, 110), abs=SSIM_TOL)
    assert result["bias_y"] == pytest.approx(110 - 102)  # Y levels: brighter than the clean image
    assert result["rain_only"] == [] and result["clean_only"] == [] and result["failed"] == 0
    psnr_spread = result["spread"]["psnr_y"]  # four equal images: no spread
    assert psnr_spread["min"] == pytest.approx(PSNR_Y, abs=1e-3) and psnr_spread["std"] == pytest.approx(0)
    assert psnr_spread["ci95"] == pytest.approx([psnr_spread["min"]] * 2)

    with (tmp_path / "s.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == ["rain-007.png", "a.png", "b.png", "c.png"]
    assert rows[3]["clean"] == "c.bmp"
    assert float(rows[0]["psnr"]) == pytest.approx(PSNR_RGB, abs=1e-3)


def test_table_output_and_missing_files(
    folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pred, clean = folders
    flat(pred / "lonely.png", 110)
    flat(pred / "small.png", 110, size=(10, 10))
    flat(clean / "small.png", 100)
    status = main(["--pred", str(pred), "--clean", str(clean)])
    out, err = capsys.readouterr()
    assert status == 1  # scored what it could, but something was missing
    assert f"missing: no clean image in {clean} for lonely.png" in err
    assert "failed: size 10x10 of" in err and "differs from 32x24" in err
    assert out.splitlines()[0].split() == ["name", "psnr_y", "ssim_y", "psnr", "ssim", "bias_y"]
    lines = out.splitlines()
    mean = lines[-4].split()
    assert mean[0] == "mean" and float(mean[3]) == pytest.approx(PSNR_RGB, abs=1e-3)
    assert lines[-3] == "4 image(s)"
    assert lines[-2].startswith("psnr_y: min ") and "95% bootstrap interval of the mean [" in lines[-2]
    assert lines[-1].startswith("ssim_y: min ")


def test_rain_mode_runs_the_model_and_reports_input_psnr(
    folders: tuple[Path, Path], tiny_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rain, clean = folders
    weights = tiny_weights
    status = main(["--rain", str(rain), "--clean", str(clean), "--weights", str(weights), "--json"])
    assert status == 0
    result = json.loads(capsys.readouterr().out)
    assert result["count"] == 4
    assert result["input_psnr"] == pytest.approx(PSNR_RGB, abs=1e-3)
    assert result["input_psnr_y"] == pytest.approx(PSNR_Y, abs=1e-3)
    assert math.isfinite(result["psnr_y"]) and 0 < result["ssim"] <= 1


def test_ensemble_flag_reaches_restore(
    folders: tuple[Path, Path], tiny_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rain, clean = folders
    weights = tiny_weights
    model = load_model(weights, device="cpu")
    scores = {}
    for n in (1, 2):
        assert (
            main(
                [
                    "--rain",
                    str(rain),
                    "--clean",
                    str(clean),
                    "--weights",
                    str(weights),
                    "--json",
                    "--ensemble",
                    str(n),
                ]
            )
            == 0
        )
        scores[n] = json.loads(capsys.readouterr().out)["psnr"]
        rows = [
            score_pair(restore(model, read_rgb(r), ensemble=n), read_rgb(c))["psnr"]
            for r, c in pair_files(rain, clean).pairs
        ]
        assert scores[n] == pytest.approx(float(np.mean(rows)), abs=1e-4)
    assert scores[1] != scores[2]


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["--pred", str(tmp_path / "nowhere"), "--clean", str(tmp_path)]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["--pred", str(tmp_path / "empty"), "--clean", str(tmp_path / "empty")]) == 2
    assert "no image pairs" in capsys.readouterr().err
    assert main(["--rain", str(tmp_path), "--clean", str(tmp_path), "--weights", "gone.safetensors"]) == 2
    assert "gone.safetensors does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--pred", str(tmp_path), "--rain", str(tmp_path), "--clean", str(tmp_path)])


def test_names_scores_only_a_subset_and_rejects_unknown_names(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for sub in ("pred", "clean"):
        (tmp_path / sub).mkdir()
    for name in ("a", "b", "c"):
        img = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        cv2.imwrite(str(tmp_path / "clean" / f"{name}.png"), img)
        cv2.imwrite(str(tmp_path / "pred" / f"{name}.png"), img if name != "c" else 255 - img)
    args = ["--pred", str(tmp_path / "pred"), "--clean", str(tmp_path / "clean"), "--json"]
    assert main([*args, "--names", "a,b.png"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 2 and out["psnr"] is None  # identical images only: infinite PSNR
    assert main([*args, "--names", "a,zzz"]) == 2
    assert "zzz" in capsys.readouterr().err


def test_spread_reports_range_deviation_and_a_bootstrap_interval() -> None:
    rows = [{"name": f"{i}", "clean": f"{i}", "psnr_y": v} for i, v in enumerate([20.0, 22.0, 24.0, 26.0])]
    sp = spread(rows, "psnr_y")
    assert (sp["min"], sp["max"]) == (20.0, 26.0)
    assert sp["std"] == pytest.approx(2.5820, abs=1e-4)
    low, high = sp["ci95"]
    assert 20.0 <= low < 23.0 < high <= 26.0 and high - low > 2  # four images: a wide interval
    assert spread(rows, "psnr_y") == sp  # seeded
    wider = spread(rows[:2], "psnr_y")["ci95"]
    assert wider[0] == 20.0 and wider[1] == 22.0  # two images: the means lie between them
    assert spread(rows[:1], "psnr_y") == {"min": 20.0, "max": 20.0, "std": 0.0, "ci95": [20.0, 20.0]}

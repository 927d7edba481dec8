"""Measuring weights where there is no clean image, and the held-out heavy set: ``derain.synth.heldout`` and the
research tools that compare weights (``tools/gallery.py``, ``tools/real_rain.py``, ``tools/heavy_val.py``) or
distil one on real photos (``tools/teacher_pairs.py``)."""

import importlib.util
import json
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from helpers import SHARED_DATA, need_shared_data, tiny_net

from derain.evaluate import score_pair
from derain.pairing import find_pairs
from derain.synth.heldout import heldout_pairs
from derain.weights import save_net

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def tool(name: str):
    """A research tool imported as a module (they are scripts, not part of the package; they import their shared
    ``research`` and ``gallery`` from beside them, as a script's own folder is first on ``sys.path``)."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(f"tool_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_gallery = tool("gallery")
change_levels, gallery = _gallery.change_levels, _gallery.gallery


def test_heldout_pairs_put_each_layer_on_the_photo_by_plain_addition():
    rng = np.random.default_rng(0)
    layers = [rng.integers(0, 120, (6, 8, 3), dtype=np.uint8) for _ in range(3)]
    photos = [
        rng.integers(0, 255, (6, 8, 3), dtype=np.uint8),
        rng.integers(0, 255, (8, 6, 3), dtype=np.uint8),
    ]
    pairs = heldout_pairs(layers, photos, beta=0.0, per_photo=2, seed=3)
    assert len(pairs) == 4 and [p.photo for p in pairs] == [0, 0, 1, 1]
    assert len({p.layer for p in pairs[:2]}) == 2  # distinct layers on one photo
    for pair in pairs:
        layer = layers[pair.layer][:, ::-1] if pair.flip else layers[pair.layer]
        expected = np.clip(pair.clean.astype(int) + np.roll(layer, pair.shift, axis=1), 0, 255)
        np.testing.assert_array_equal(pair.rainy, expected)
    # the portrait photo is turned to the layers' landscape orientation, its content unchanged
    np.testing.assert_array_equal(pairs[2].clean, np.rot90(photos[1]))
    again = heldout_pairs(layers, photos, beta=0.0, per_photo=2, seed=3)
    assert all(np.array_equal(a.rainy, b.rainy) for a, b in zip(pairs, again, strict=True))


def test_heldout_pairs_refuse_more_layers_a_photo_than_there_are():
    layer = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match=r"per_photo must be in \[1, 1\]"):
        heldout_pairs([layer], [layer], beta=0.0, per_photo=2)
    with pytest.raises(ValueError, match="needs rain layers and photos"):
        heldout_pairs([], [layer], beta=0.0)


def test_change_levels_is_the_mean_absolute_change_in_8_bit_levels():
    before = np.zeros((2, 2, 3), np.uint8)
    after = before.copy()
    after[0, 0] = 12  # 3 of 12 values change by 12: mean 3
    assert change_levels(before, after) == 3.0
    assert change_levels(after, before) == 3.0  # no uint8 wrap-around
    with pytest.raises(ValueError, match="shapes differ"):
        change_levels(before, before[:1])


def test_gallery_scales_every_image_to_one_height_and_pads_rows_to_one_width():
    wide, tall = np.zeros((50, 100, 3), np.uint8), np.zeros((100, 50, 3), np.uint8)
    out = gallery([[wide, wide], [tall]], height=40, headers=["rainy", "A"], captions=["one", "two"], gap=2)
    assert out.dtype == np.uint8 and out.ndim == 3
    assert out.shape[1] == 2 * (80 + 2)  # the widest row: two 80-px images and their gaps
    with pytest.raises(ValueError, match="at least one row"):
        gallery([])


def write_data(root: Path) -> None:
    """A fake ``$DERAIN_DATA`` with the folders ``real_rain.py`` reads, photos of every mode and one broken file."""
    rng = np.random.default_rng(0)
    rain = root / "real-rainy" / "rain"
    rain.mkdir(parents=True)
    cv2.imwrite(str(rain / "grey.png"), rng.integers(0, 255, (40, 56), dtype=np.uint8))
    cv2.imwrite(str(rain / "rgba.png"), rng.integers(0, 255, (36, 48, 4), dtype=np.uint8))
    cv2.imwrite(str(rain / "deep.png"), rng.integers(0, 65535, (32, 40, 3), dtype=np.uint16))
    (rain / "broken.png").write_bytes(b"not an image")
    for sub in ("spa-samples/rain", "gtrain-webcam-pairs/rain", "clean/urban100-subset", "clean/kodak24"):
        (root / sub).mkdir(parents=True)
        cv2.imwrite(str(root / sub / "a.jpg"), rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))


def test_real_rain_compares_weights_skips_unreadable_photos_and_writes_a_gallery(
    tmp_path, tiny_weights, capsys
):
    write_data(tmp_path / "data")
    out = tmp_path / "out" / "gallery.png"
    args = [
        "--weights",
        str(tiny_weights),
        str(tiny_weights),
        "--names",
        "A",
        "B",
        "--data",
        str(tmp_path / "data"),
    ]
    assert tool("real_rain").main([*args, "--gallery", str(out), "--height", "32"]) == 0
    printed = capsys.readouterr()
    assert "broken.png" in printed.err  # named and skipped
    assert "all real" in printed.out and "rain-free kept" in printed.out
    assert "paired vs first +0.00" in printed.out  # the same weights twice: no difference
    image = cv2.imread(str(out))
    assert image is not None and image.shape[1] > 3 * 32  # rainy | A | B
    assert not list(out.parent.glob(".*"))  # nothing half-written left beside it
    cropped = tmp_path / "out" / "crops.png"
    assert tool("real_rain").main([*args, "--gallery", str(cropped), "--crop", "16"]) == 0
    rows = 3 + 1 + 1 + 2  # the 3 readable real-rainy photos, SPA's, the webcam's, then two rain-free
    assert cv2.imread(str(cropped)).shape[1] == 3 * (16 + 4)  # rainy | A | B at 1:1, each 16 px and its gap
    assert cv2.imread(str(cropped)).shape[0] >= rows * (16 + 4)


def test_real_rain_names_a_weights_file_that_does_not_load_and_a_folder_without_images(
    tmp_path, tiny_weights
):
    write_data(tmp_path / "data")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage")
    bench = tool("real_rain")
    with pytest.raises(SystemExit, match=r"weights .*bad\.safetensors do not load"):
        bench.main(["--weights", str(tiny_weights), str(bad), "--data", str(tmp_path / "data")])
    for path in (tmp_path / "data" / "spa-samples" / "rain").iterdir():
        path.unlink()
    with pytest.raises(SystemExit, match=r"spa-samples/rain holds no images"):
        bench.main(["--weights", str(tiny_weights), "--data", str(tmp_path / "data")])


def test_real_rain_measures_at_a_strength(tmp_path, tiny_weights, capsys):
    write_data(tmp_path / "data")
    args = ["--weights", str(tiny_weights), "--data", str(tmp_path / "data"), "--strength"]
    assert tool("real_rain").main([*args, "1", "--json", str(tmp_path / "real.json")]) == 0
    assert '"removed_0": 0.0' not in capsys.readouterr().out  # the network does change the photos
    free = json.loads((tmp_path / "real.json").read_text())["per_photo"]["rain_free"]
    assert len(free["changed"][0]) == len(free["fine"][0]) == 2  # the two rain-free crops, read like the rain
    assert min(free["changed"][0]) > 0
    assert tool("real_rain").main([*args, "0"]) == 0
    printed = capsys.readouterr().out
    assert "strength 0" in printed and '"removed_0": 0.0' in printed  # strength 0: nothing removed
    assert "changed 0.00, fine 0.00" in printed  # nor anything changed on the rain-free crops
    assert tool("real_rain").main([*args, "0", "1.5"]) == 0  # one column a strength, side by side
    printed = capsys.readouterr().out
    assert "strength 0, 1.5" in printed and "tiny.safetensors s1.5" in printed
    with pytest.raises(SystemExit) as exit_:
        tool("real_rain").main([*args, "2.5"])
    assert exit_.value.code == 2 and "strength should be between 0 and 2, got 2.5" in capsys.readouterr().err


def test_a_tool_without_data_names_the_option_and_the_variable(tmp_path, tiny_weights, monkeypatch, capsys):
    monkeypatch.delenv("DERAIN_DATA", raising=False)
    with pytest.raises(SystemExit) as exit_:
        tool("real_rain").main(["--weights", str(tiny_weights)])
    assert exit_.value.code == 2 and "--data" in capsys.readouterr().err
    monkeypatch.setenv("DERAIN_DATA", str(tmp_path / "data"))
    write_data(tmp_path / "data")
    assert tool("real_rain").main(["--weights", str(tiny_weights)]) == 0  # the variable is the default


def test_heavy_val_holds_out_the_recipes_validation_layers_and_photos_no_pair_shows():
    need_shared_data(SHARED_DATA / "rain100h-train-mini")
    bench = tool("heavy_val")
    donors = bench.heldout_heavy_pairs(SHARED_DATA)
    names = [f"{rain.parent.parent.name}/{rain.name}" for rain, _ in donors]
    assert sorted(names[:4]) == [f"rain100h-train-mini/{n}.png" for n in ("0004", "0005", "0013", "0015")]
    assert names[4:] == [f"rain200h-test-samples/{n}.png" for n in (1, 2, 3)]


def test_real_rain_reads_the_photos_held_out_of_a_distillation_apart(tmp_path, tiny_weights, capsys):
    write_data(tmp_path / "data")
    (tmp_path / "held.txt").write_text("# the held-out photos\ngrey.png \n\n")
    args = [
        "--weights",
        str(tiny_weights),
        "--data",
        str(tmp_path / "data"),
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert tool("real_rain").main([*args, "--held-out", str(tmp_path / "held.txt")]) == 0
    assert "held out (3 photos)" in capsys.readouterr().out  # grey.png, SPA's and the webcam's
    result = json.loads((tmp_path / "r.json").read_text())
    every = result["per_photo"]["removed"]
    names = result["per_photo"]["names"]["real-rainy"]
    grey = every["real-rainy"][0][names.index("grey.png")]
    # grey.png, then SPA's and the webcam's frames; the other real-rainy photos (distilled) are out
    assert every["held out"][0] == [grey, *every["spa"][0], *every["webcam"][0]]
    for part in ("darkened", "fine"):  # the same photos read apart
        per = result["per_photo"][part]
        assert per["held out"][0] == [
            per["real-rainy"][0][names.index("grey.png")],
            *per["spa"][0],
            *per["webcam"][0],
        ]
        assert len(result[part]["all real"]) == 1 and len(per["all real"][0]) == len(every["all real"][0])
    with pytest.raises(SystemExit) as exit_:
        tool("real_rain").main([*args, "--held-out", str(tmp_path / "missing.txt")])
    assert exit_.value.code == 2 and "missing.txt" in capsys.readouterr().err
    (tmp_path / "held.txt").write_text("grey.png\nmanifest.csv\n")  # a wrong list is not read as a short one
    with pytest.raises(SystemExit, match="real-rainy does not hold: manifest.csv"):
        tool("real_rain").main([*args, "--held-out", str(tmp_path / "held.txt")])


def test_teacher_pairs_split_each_source_and_keep_the_photo_where_the_teacher_brightens():
    teacher = tool("teacher_pairs")
    files = [Path(f"a_src-{i}.jpg") for i in range(5)] + [
        Path("b_src-x.png"),
        Path("c-1.png"),
        Path("c-2.png"),
    ]
    distilled, held = teacher.split_photos(files, 0.5, seed=0)
    assert sorted(distilled + held) == sorted(files) and not set(distilled) & set(held)
    assert sum(f.name.startswith("a_src") for f in distilled) == 2  # half of 5, rounded down
    assert Path("b_src-x.png") in held  # a source of one photo is all held out
    assert sum(f.name.startswith("c-") for f in distilled) == 1
    assert teacher.split_photos(files, 0.5, seed=0) == (distilled, held)  # seeded
    many = [Path(f"s-{i}.png") for i in range(20)]
    assert teacher.split_photos(many, 0.5, seed=0) != teacher.split_photos(many, 0.5, seed=1)
    rainy = np.array([[[200, 10, 50]]], np.uint8)
    derained = np.array([[[120, 30, 50]]], np.uint8)
    np.testing.assert_array_equal(teacher.teacher_target(rainy, derained), [[[120, 10, 50]]])
    covered = np.zeros((700, 300), bool)
    for y, x, h, w in teacher.tiles(700, 300, 512):
        assert (h, w) == (512, 300)
        covered[y : y + h, x : x + w] = True
    assert covered.all()


def test_teacher_pairs_write_a_pair_folder_and_the_held_out_list(tmp_path, tiny_weights, capsys):
    rng = np.random.default_rng(0)
    rain = tmp_path / "data" / "real-rainy" / "rain"
    rain.mkdir(parents=True)
    for name in ("s-1.png", "s-2.png", "t-1.png"):
        cv2.imwrite(str(rain / name), rng.integers(0, 255, (80, 100, 3), dtype=np.uint8))
    out = tmp_path / "pairs"
    argv = [str(out), "--data", str(tmp_path / "data"), "--teacher", str(tiny_weights), "--tile", "64"]
    assert tool("teacher_pairs").main(argv) == 0
    assert "4 tiles of 1 photos" in capsys.readouterr().out  # one of s's two; 80x100 in 64² tiles: 2x2
    pairs = find_pairs(out)
    assert len(pairs) == 4
    for rainy, target in pairs:
        a, b = cv2.imread(str(rainy)), cv2.imread(str(target))
        assert a.shape == b.shape == (64, 64, 3) and (b <= a).all()  # the target never brightens
        assert (b < a).any()  # the teacher did take something away
    manifest = (out / "manifest.csv").read_text().splitlines()
    assert manifest[0] == "name,photo,top,left" and len(manifest) == 5
    assert main_again_refused(tool("teacher_pairs"), argv, capsys)
    held = (out / "held-out.txt").read_text().splitlines()
    assert "t-1.png" in held and len(held) == 2
    for photo in rain.iterdir():
        photo.unlink()
    assert tool("teacher_pairs").main([str(tmp_path / "other"), *argv[1:]]) == 2
    assert "holds no images" in capsys.readouterr().err


def main_again_refused(teacher, argv, capsys) -> bool:
    """A second run into the same folder is refused, and the folder is left as it was."""
    before = sorted(p.name for p in Path(argv[0]).rglob("*"))
    refused = teacher.main(argv) == 2 and "exists; remove it" in capsys.readouterr().err
    return refused and sorted(p.name for p in Path(argv[0]).rglob("*")) == before


def test_teacher_layers_are_what_the_teacher_takes_away(tmp_path, tiny_weights, capsys):
    rng = np.random.default_rng(1)
    rain = tmp_path / "data" / "real-rainy" / "rain"
    rain.mkdir(parents=True)
    for name in ("s-1.png", "s-2.png"):
        cv2.imwrite(str(rain / name), rng.integers(0, 255, (80, 100, 3), dtype=np.uint8))
    common = ["--data", str(tmp_path / "data"), "--teacher", str(tiny_weights), "--tile", "64"]
    assert tool("teacher_pairs").main([str(tmp_path / "pairs"), *common]) == 0
    assert tool("teacher_pairs").main([str(tmp_path / "layers"), *common, "--layers"]) == 0
    assert "4 layer tiles of 1 photos" in capsys.readouterr().out.splitlines()[-1]
    assert not (tmp_path / "layers" / "rain").exists()
    names = sorted(p.name for p in (tmp_path / "layers" / "layers").iterdir())
    assert names == sorted(
        p.name for p in (tmp_path / "pairs" / "rain").iterdir()
    )  # the same split and tiles
    for name in names:
        rainy, target = (cv2.imread(str(tmp_path / "pairs" / d / name)) for d in ("rain", "norain"))
        layer = cv2.imread(str(tmp_path / "layers" / "layers" / name))
        assert np.array_equal(layer, rainy - target) and layer.any()


def test_paired_scores_the_real_pairs_against_their_clean_frames(tmp_path, tiny_weights, capsys) -> None:
    for folder in (
        "gtrain-webcam-pairs",
        "spa-samples",
        "raintrainl",
        "rain100h-train-mini",
    ):  # set_parts reads them
        need_shared_data(SHARED_DATA / folder)
    paired = tool("paired")
    parts = paired.set_parts(SHARED_DATA, tmp_path / "no-heavy-val")
    assert tuple(parts) == paired.SETS  # every set can be asked for by name
    out = tmp_path / "paired.json"
    args = ["--weights", str(tiny_weights), str(tiny_weights), "--data", str(SHARED_DATA), "--json", str(out)]
    assert paired.main([*args, "--sets", "spa"]) == 0
    result = json.loads(out.read_text())
    assert len(result["per_image"]["spa"][0]) == 2 and result["spa"][1]["paired"]["mean"] == 0.0  # same twice
    assert result["spa"][1]["paired_debiased"]["mean"] == 0.0 and {"bias_y", "psnr_y_debiased"} <= set(
        result["per_image"]["spa"][0][0]
    )
    assert (
        "spa (2 pairs)" in capsys.readouterr().out and torch.is_grad_enabled()
    )  # the caller's autograd kept
    [(webcam, names)] = parts["webcam"]
    assert names is None and len(find_pairs(webcam)) == 35  # every frame, each with its scene's clean frame


def test_change_parts_tell_streaks_taken_from_light_lowered() -> None:
    clean, rainy, relit = streaked_frame()
    streaks = _gallery.change_parts(rainy, relit)  # the streaks taken, nothing else
    darker = _gallery.change_parts(relit, relit - np.uint8(5))  # the light lowered, no streak
    assert streaks["fine"] > 2 and streaks["darkened"] == pytest.approx(change_levels(rainy, relit), rel=0.01)
    assert darker["fine"] < 0.01 and darker["darkened"] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="shapes differ"):
        _gallery.change_parts(rainy, rainy[:8])


def test_paired_reads_psnr_apart_from_a_brightness_shift() -> None:
    debiased_psnr = tool("paired").debiased_psnr
    rng = np.random.default_rng(0)
    clean = rng.uniform(40, 200, (48, 64, 3)).round().astype(np.uint8)
    noisy = np.clip(clean + rng.normal(0, 3, clean.shape), 0, 255).round().astype(np.uint8)
    preds = {"shift": clean - np.uint8(6), "noise": noisy, "noise, shifted": noisy - np.uint8(6)}
    scores = {k: score_pair(pred, clean) for k, pred in preds.items()}
    debiased = {k: debiased_psnr(r["psnr_y"], r["bias_y"]) for k, r in scores.items()}
    assert scores["shift"]["bias_y"] < -4 and debiased["shift"] > scores["shift"]["psnr_y"] + 20
    assert abs(scores["noise"]["bias_y"]) < 0.2 and debiased["noise"] == pytest.approx(
        scores["noise"]["psnr_y"], abs=0.01
    )
    shifted = scores["noise, shifted"]  # darker by 6 RGB levels: most of its error is the shift, taken out
    assert shifted["psnr_y"] < scores["noise"]["psnr_y"] - 3
    assert debiased["noise, shifted"] == pytest.approx(debiased["noise"], abs=0.3)


def streaked_frame(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A clean frame, the same frame in another light with thin bright streaks, and that relit frame alone."""
    rng = np.random.default_rng(seed)
    clean = cv2.GaussianBlur(rng.uniform(60, 160, (64, 80, 3)).astype(np.float32), (0, 0), 4)
    relit = clean + np.linspace(0, 25, 80, dtype=np.float32)[None, :, None]  # the light of another moment
    streaks = np.zeros((64, 80), np.float32)
    for x in range(4, 80, 16):
        streaks[5:60, x] = 50.0  # one pixel wide, bright
    rainy = relit + streaks[..., None]
    return tuple(np.clip(a, 0, 255).round().astype(np.uint8) for a in (clean, rainy, relit))


def test_rain_change_tells_rain_taken_from_change_elsewhere() -> None:
    readings = tool("rain_change").readings
    clean, rainy, relit = streaked_frame()
    oracle = readings(rainy, clean, relit)  # takes the streaks away and nothing else
    assert oracle["taken"] > 0.95 and oracle["on rain"] > 20 and oracle["elsewhere"] < 0.05
    kept = readings(rainy, clean, rainy)  # changes nothing
    assert kept == {"taken": 0.0, "on rain": 0.0, "elsewhere": 0.0, "change": 0.0}
    noise = np.random.default_rng(1).normal(
        0, 4, rainy.shape
    )  # changes everything, the rain no more than the rest
    fiddled = readings(rainy, clean, np.clip(rainy + noise, 0, 255).round().astype(np.uint8))
    assert fiddled["taken"] < 0.1 and fiddled["elsewhere"] > 1.5 and fiddled["change"] > oracle["change"] / 2
    darker = readings(rainy, clean, rainy - np.uint8(5))  # the whole frame's light shifted: no rain taken
    assert darker["taken"] < 0.01 and darker["elsewhere"] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="shapes differ"):
        readings(rainy, clean[:8], rainy)


def test_rain_change_compares_weights_on_the_frames_with_clean_ones(tmp_path, tiny_weights, capsys) -> None:
    data = tmp_path / "data"
    for sub in ("gtrain-webcam-pairs", "spa-samples"):
        for i in range(2):
            clean, rainy, _ = streaked_frame(i)
            for part, image in (("rain", rainy), ("norain", clean)):
                (data / sub / part).mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(data / sub / part / f"{i}.png"), image)
    other = save_net(tiny_net(seed=5), tmp_path / "other.safetensors")
    out = tmp_path / "change.json"
    args = ["--weights", str(tiny_weights), str(other), "--names", "A", "B", "--data", str(data)]
    assert tool("rain_change").main([*args, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "webcam (2 frames)" in printed and "spa (2 frames)" in printed and "RESULT " in printed
    result = json.loads(out.read_text())
    assert result["weights"] == ["A", "B"] and len(result["per_frame"]["spa"][1]) == 2
    for key in (
        "taken",
        "elsewhere",
        "change",
    ):  # B's paired difference is B's frames minus A's, frame by frame
        a, b = ([row[key] for row in rows] for rows in result["per_frame"]["webcam"])
        assert "paired" not in result["webcam"][0][key] and a != b
        assert result["webcam"][1][key]["paired"]["mean"] == pytest.approx(np.mean(b) - np.mean(a))
    assert torch.is_grad_enabled()  # restore's inference mode did not leak
    with pytest.raises(SystemExit, match="has no rain/ folder"):
        tool("rain_change").main([*args, "--data", str(tmp_path / "nowhere"), "--sets", "spa"])

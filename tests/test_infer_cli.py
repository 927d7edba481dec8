"""``python -m derain.infer IN_DIR OUT_DIR``: a folder with good, odd and broken files, re-runs and shards."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from derain import arguments
from derain.infer import main, parse_shard, plan_outputs, select_inputs
from derain.inference import load_model, read_image, restore

REPO = Path(__file__).resolve().parents[1]


def write(path: Path, image: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA)
    assert cv2.imwrite(str(path), image)


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """good.png, photo.jpg, gray.png, rgba.png, deep.png (16-bit), sub/inner.png, plus broken and other files."""
    rng = np.random.default_rng(0)
    d = tmp_path / "rainy"
    write(d / "good.png", rng.integers(0, 256, (24, 40, 3), dtype=np.uint8))
    write(d / "photo.jpg", rng.integers(0, 256, (32, 24, 3), dtype=np.uint8))
    write(d / "gray.png", rng.integers(0, 256, (20, 28), dtype=np.uint8))
    write(d / "rgba.png", rng.integers(0, 256, (20, 28, 4), dtype=np.uint8))
    write(d / "deep.png", rng.integers(0, 65536, (20, 28, 3), dtype=np.uint16))
    write(d / "sub" / "inner.png", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
    (d / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    (d / "empty.jpg").write_bytes(b"")
    (d / "notes.txt").write_text("not an image")
    return d


def test_folder_with_good_and_broken_files(
    photos: Path, tmp_path: Path, tiny_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "clean"
    status = main([str(photos), str(out), "--weights", str(tiny_weights), "--device", "cpu"])
    captured = capsys.readouterr()
    assert status == 1  # some files failed
    assert "ok 5, skipped 0, failed 2," in captured.out and "images/s" in captured.out
    assert (
        f"failed: {photos / 'corrupt.png'}: not a decodable image (corrupt or unsupported format)\n"
        in captured.err
    )
    assert f"failed: {photos / 'empty.jpg'}: the file is empty\n" in captured.err  # the path once
    assert "ignoring 1 file(s) without an image or video suffix" in captured.err
    assert sorted(p.name for p in out.iterdir()) == [
        "deep.png",
        "good.png",
        "gray.png",
        "photo.png",
        "rgba.png",
    ]

    assert read_image(out / "good.png").shape == (24, 40, 3)
    assert read_image(out / "photo.png").shape == (32, 24, 3)
    assert read_image(out / "gray.png").shape == (20, 28)
    rgba_in, rgba_out = read_image(photos / "rgba.png"), read_image(out / "rgba.png")
    assert rgba_out.shape == (20, 28, 4)
    np.testing.assert_array_equal(rgba_out[:, :, 3], rgba_in[:, :, 3])
    assert read_image(out / "deep.png").dtype == np.uint16
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files

    # A re-run skips what is done and retries only the broken files.
    stamp = (out / "good.png").stat().st_mtime_ns
    status = main([str(photos), str(out), "--weights", str(tiny_weights), "--device", "cpu"])
    assert status == 1
    assert "ok 0, skipped 5, failed 2," in capsys.readouterr().out
    assert (out / "good.png").stat().st_mtime_ns == stamp

    # Once the broken files are gone, a re-run with --overwrite redoes everything and succeeds.
    (photos / "corrupt.png").unlink()
    (photos / "empty.jpg").unlink()
    status = main([str(photos), str(out), "--weights", str(tiny_weights), "--device", "cpu", "--overwrite"])
    assert status == 0
    assert "ok 5, skipped 0, failed 0," in capsys.readouterr().out


def test_recursive_mirrors_subfolders_and_format(photos: Path, tmp_path: Path, tiny_weights: Path) -> None:
    (photos / "corrupt.png").unlink()
    (photos / "empty.jpg").unlink()
    out = tmp_path / "clean"
    weights = ["--weights", str(tiny_weights)]
    argv = [
        str(photos),
        str(out),
        *weights,
        "--recursive",
        "--format",
        "jpg",
        "--tile",
        "16",
        "--overlap",
        "4",
    ]
    assert main(argv) == 0
    assert (out / "sub" / "inner.jpg").is_file()
    assert read_image(out / "rgba.jpg").shape == (20, 28, 3)  # no alpha in JPEG
    assert read_image(out / "deep.jpg").dtype == np.uint8
    out_same = tmp_path / "same"
    assert main([str(photos), str(out_same), "--weights", str(tiny_weights), "--format", "same"]) == 0
    assert (out_same / "photo.jpg").is_file() and (out_same / "good.png").is_file()


def test_ensemble_flag_reaches_restore(photos: Path, tmp_path: Path, tiny_weights: Path) -> None:
    model = load_model(tiny_weights, device="cpu")
    image = read_image(photos / "good.png")
    for n in (1, 4):
        out = tmp_path / f"out{n}"
        argv = [str(photos), str(out), "--weights", str(tiny_weights), "--ensemble", str(n)]
        assert main(argv) == 1  # the two broken files in the folder
        np.testing.assert_array_equal(read_image(out / "good.png"), restore(model, image, ensemble=n))
    assert not np.array_equal(read_image(tmp_path / "out1/good.png"), read_image(tmp_path / "out4/good.png"))


def test_strength_flag_reaches_restore(
    photos: Path, tmp_path: Path, tiny_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = load_model(tiny_weights, device="cpu")
    image = read_image(photos / "good.png")
    for s in ("0", "1.5"):
        out = tmp_path / f"good-s{s}.png"
        argv = [str(photos / "good.png"), str(out), "--weights", str(tiny_weights), "--strength", s]
        assert main(argv) == 0
        np.testing.assert_array_equal(read_image(out), restore(model, image, strength=float(s)))
    np.testing.assert_array_equal(read_image(tmp_path / "good-s0.png"), image)  # strength 0: the photo
    argv = [str(photos), str(tmp_path / "o"), "--weights", str(tiny_weights), "--strength", "2.5"]
    assert main(argv) == 2
    assert "error: strength should be between 0 and 2, got 2.5" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_shards_split_the_sorted_list(photos: Path, tmp_path: Path, tiny_weights: Path) -> None:
    (photos / "corrupt.png").unlink()
    (photos / "empty.jpg").unlink()
    out = tmp_path / "clean"
    names = []
    for i in range(3):
        before = set(p.name for p in out.glob("*")) if out.exists() else set()
        assert main([str(photos), str(out), "--weights", str(tiny_weights), "--shard", f"{i}/3"]) == 0
        names.append(sorted(set(p.name for p in out.glob("*")) - before))
    # sorted inputs: deep, good, gray, photo, rgba -> shard 0: deep, photo; 1: good, rgba; 2: gray
    assert names == [["deep.png", "photo.png"], ["good.png", "rgba.png"], ["gray.png"]]


def test_the_plan_pairs_inputs_with_outputs_before_anything_runs(tmp_path: Path) -> None:
    """``plan_outputs`` is the whole decision: outputs by relative path and --format, outputs that exist skipped,
    two inputs that would write one output refused (the second, naming the first)."""
    src, out = tmp_path / "in", tmp_path / "out"
    for name in ("a.png", "a.jpg", "b.png", "sub/c.tif"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(b"")
    (out).mkdir()
    (out / "b.png").write_bytes(b"done")
    inputs, ignored = select_inputs(src, recursive=True, shard=None)
    assert [p.relative_to(src).as_posix() for p in inputs] == ["a.jpg", "a.png", "b.png", "sub/c.tif"]
    plan = plan_outputs(inputs, src, out, fmt="png", overwrite=False)
    assert plan.todo == [(src / "a.jpg", out / "a.png"), (src / "sub/c.tif", out / "sub/c.png")]
    assert plan.skipped == 1 and plan.clashes == [(src / "a.png", out / "a.png", src / "a.jpg")]
    same = plan_outputs(inputs, src, out, fmt="same", overwrite=True)
    assert [o.name for _, o in same.todo] == ["a.jpg", "a.png", "b.png", "c.tif"] and not same.clashes
    one = plan_outputs([src / "b.png"], src / "b.png", out, fmt="png", overwrite=True, out_file=out / "x.jpg")
    assert one.todo == [(src / "b.png", out / "x.jpg")]
    assert select_inputs(src, recursive=False, shard=(1, 2))[0] == [src / "a.png"]


def test_only_the_device_is_reported_as_a_bad_device(
    photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RuntimeError while loading is not a bad --device: it is raised as it is."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("out of memory while loading")

    monkeypatch.setattr(arguments, "load_model", broken)
    with pytest.raises(RuntimeError, match="out of memory while loading"):
        main([str(photos), str(tmp_path / "o"), "--device", "cpu"])
    with pytest.raises(arguments.UsageError, match="cannot use --device 'nonsense'"):
        arguments.check_device("nonsense")


def test_parse_shard() -> None:
    assert parse_shard("2/4") == (2, 4)
    for bad in ["4/4", "-1/2", "1", "a/b"]:
        with pytest.raises(argparse.ArgumentTypeError, match="--shard"):
            parse_shard(bad)


def test_usage_errors_exit_2(photos: Path, tiny_weights: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(photos), str(photos / "out"), "--weights", str(tiny_weights)]) == 2
    assert "is inside IN " in capsys.readouterr().err
    assert main([str(photos), str(photos), "--weights", str(tiny_weights)]) == 2
    assert main([str(photos / "nowhere"), str(photos.parent / "o"), "--weights", str(tiny_weights)]) == 2
    assert "nowhere is neither a folder nor a file" in capsys.readouterr().err
    assert main([str(photos), str(photos.parent / "o"), "--weights", str(photos / "none.safetensors")]) == 2
    assert "none.safetensors does not exist" in capsys.readouterr().err
    assert main([str(photos), str(photos.parent / "o"), "--tile", "16", "--overlap", "16"]) == 2
    assert "0 <= overlap < tile, got tile=16, overlap=16" in capsys.readouterr().err
    assert not (photos.parent / "o").exists()
    good = photos / "good.png"
    before = good.read_bytes()
    assert main([str(good), str(good), "--weights", str(tiny_weights)]) == 2  # one file onto itself
    assert "would overwrite IN" in capsys.readouterr().err
    assert good.read_bytes() == before


def test_module_entry_without_weights_gives_clear_message(photos: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "derain.infer",
            str(photos),
            str(tmp_path / "o"),
            "--weights",
            "missing.safetensors",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "error: weights file missing.safetensors does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_infer_and_the_scorer_list_files_in_one_order(tmp_path: Path) -> None:
    """One lister (``derain.io.list_files``): natural order, hidden files and folders left out, other files
    counted; ``derain infer`` and ``list_images`` (evaluate, pairing) read a folder alike."""
    from derain.io import list_images

    for name in ("10.png", "2.png", "sub/1.jpg", ".hidden.png", ".cache/x.png", "notes.txt", "clip.mp4"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    inputs, ignored = select_inputs(tmp_path, recursive=True, shard=None)
    assert [p.relative_to(tmp_path).as_posix() for p in inputs] == [
        "2.png",
        "10.png",
        "clip.mp4",
        "sub/1.jpg",
    ]
    assert ignored == 1  # notes.txt; the hidden ones are not counted
    images = list_images(tmp_path, recursive=True)
    assert images == [p for p in inputs if p.suffix != ".mp4"]

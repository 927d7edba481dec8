"""Without the extras (``derain[onnx]``: onnx, onnxscript, onnxruntime; ``derain[video]``: PyAV), photos,
training, evaluation and the web page work, and asking for ONNX or a video is one line that names the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import TINY_NET

from derain.extras import EXTRAS

pytestmark = pytest.mark.slow  # every test runs the commands in a fresh interpreter

BLOCKED = sorted(module for modules in EXTRAS.values() for module in modules)

# An interpreter in which the extras' modules cannot be imported, as in an install without them: `import av`
# raises ImportError and importlib.util.find_spec("av") is None.
WITHOUT_EXTRAS = f"import sys\nsys.modules.update(dict.fromkeys({BLOCKED!r}))\n"


def without_extras(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS + code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def derain(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``derain ARGS`` without the extras."""
    return without_extras("from derain.cli import main\nraise SystemExit(main(sys.argv[1:]))", *args, cwd=cwd)


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.png", "b.png"):
        cv2.imwrite(
            str(folder / name), np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
        )
    return folder


def test_the_blocker_blocks() -> None:
    proc = without_extras("import importlib.util\nassert importlib.util.find_spec('onnx') is None\nimport av")
    assert proc.returncode == 1 and "import of av halted" in proc.stderr, proc.stderr


def test_photos_and_evaluation_without_extras(photos: Path, tmp_path: Path, tiny_weights: Path) -> None:
    out = tmp_path / "out"
    proc = derain("infer", str(photos), str(out), "--weights", str(tiny_weights), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "b.png"]
    proc = derain("evaluate", "--pred", str(out), "--clean", str(photos), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"count": 2' in proc.stdout


def test_a_video_without_the_video_extra_is_one_line(
    photos: Path, tmp_path: Path, tiny_weights: Path
) -> None:
    clip = photos / "clip.mp4"
    clip.write_bytes(b"not looked at: the extra is missing first")
    proc = derain("infer", str(clip), str(tmp_path / "o.mp4"), "--weights", str(tiny_weights))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: reading and writing videos needs derain[video]: pip install 'derain[video]'"
    )
    # in a folder, the photos are derained and the videos are one line
    proc = derain("infer", str(photos), str(tmp_path / "out"), "--weights", str(tiny_weights))
    assert proc.returncode == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.png", "b.png"]
    lines = [line for line in proc.stderr.splitlines() if "derain[video]" in line]
    assert lines == [
        "failed: 1 video(s): reading and writing videos needs derain[video]: pip install 'derain[video]'"
    ]


def test_onnx_without_the_onnx_extra_is_one_line(photos: Path, tmp_path: Path, tiny_weights: Path) -> None:
    proc = derain("export", str(tiny_weights), str(tmp_path / "x.onnx"))
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "error: ONNX export needs derain[onnx]: pip install 'derain[onnx]'",
    )
    assert not (tmp_path / "x.onnx").exists()
    proc = derain(
        "infer",
        str(photos),
        str(tmp_path / "out"),
        "--weights",
        str(tiny_weights),
        "--backend",
        "onnxruntime",
    )
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "error: the onnxruntime backend needs derain[onnx]: pip install 'derain[onnx]'",
    )


def test_the_web_page_without_extras() -> None:
    code = (
        "from helpers import tiny_net\n"
        "from derain import app\n"
        "demo = app.build_app(tiny_net())\n"
        "print(type(demo).__name__)\n"
    )
    proc = without_extras(code, cwd=Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("Blocks")


def test_training_without_extras(tmp_path: Path) -> None:
    args = ["fit", "--config", "synthetic.yaml", *TINY_NET, "--trainer.fast_dev_run=true"]
    args += ["--trainer.callbacks=[]", "--data.num_workers=0", "--data.synthesis.length=4"]
    args += ["--data.synthesis.val_length=1", "--data.batch_size=2", "--data.patch_size=32", "--export=false"]
    proc = derain(*args, f"--trainer.default_root_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

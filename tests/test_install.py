"""After a plain (non-editable) install, from an empty folder, the three uses work: training with a bundled
config name, the batch command with the shipped weights, and the web page with its example photos."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import TINY_NET
from ports import PORT_TAKEN, on_a_free_port

pytestmark = pytest.mark.slow  # a wheel is built, then it trains and serves the page

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The wheel built from a copy of the checkout (with one config added, ``derain-small/stage9.yaml``),
    unpacked into a site folder as pip would install it; the environment that puts it first on the path."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    for name in ("derain", "configs", "datasets/examples"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "configs" / "derain-small" / "stage9.yaml").write_text("trainer:\n  max_steps: 9\n")
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp / "dist"),
    ]
    proc = subprocess.run([*build, str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("derain-*.whl")
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "NO_ALBUMENTATIONS_UPDATE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    return site, env


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def test_the_wheel_ships_every_config_and_an_install_finds_them(installed, tmp_path) -> None:
    site, env = installed
    shipped = {p.relative_to(REPO / "configs").as_posix() for p in (REPO / "configs").rglob("*.yaml")}
    installed_configs = {
        p.relative_to(site / "derain/configs").as_posix() for p in (site / "derain/configs").rglob("*.yaml")
    }
    assert shipped and installed_configs == shipped | {"derain-small/stage9.yaml"}
    code = "import derain.fit_configs as f; print(*f.resolve_config_args(['--config', 'rain100h.yaml', '--config=derain-small/stage9.yaml']))"
    proc = run(["-c", code], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [
        "--config",
        str(site / "derain/configs/rain100h.yaml"),
        f"--config={site / 'derain/configs/derain-small/stage9.yaml'}",
    ]


def test_training_with_a_bundled_config_name(installed, tmp_path) -> None:
    site, env = installed
    proc = run(["-m", "derain.fit", "--config", "rain100h.yaml", "--print_config"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "root: datasets/Rain100H" in proc.stdout
    args = [
        "-m",
        "derain.fit",
        "--config",
        "synthetic.yaml",
        *TINY_NET,
        "--trainer.max_steps=2",
        "--data.num_workers=0",
    ]
    args += [
        "--data.synthesis.length=4",
        "--data.synthesis.val_length=1",
        "--data.patch_size=32",
        "--data.batch_size=2",
    ]
    proc = run([*args, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "runs" / "synthetic" / "model.safetensors").is_file()
    assert str(site / "derain") in run(["-c", "import derain; print(derain.__file__)"], tmp_path, env).stdout


def test_the_batch_command_with_the_shipped_weights(installed, tmp_path) -> None:
    _, env = installed
    (tmp_path / "in").mkdir()
    photo = np.random.default_rng(0).integers(0, 256, (40, 56, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "in" / "rainy.png"), photo)
    proc = run(["-m", "derain.infer", "in", "out", "--device", "cpu"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cv2.imread(str(tmp_path / "out" / "rainy.png")).shape == (40, 56, 3)


START_S = 300
"""How long the installed page may take to answer: imports, the shipped weights, and the start-up speed reading
(four passes of the network), on a CPU that may be busy with other work."""


def serve_page(port: int, cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """``python -m derain.app --port PORT`` and its ``/config`` once it answers.

    Raises:
        OSError: the server could not bind ``port`` (taken since it was chosen): ``ports.on_a_free_port`` tries
            another.
    """
    server = subprocess.Popen(
        [sys.executable, "-m", "derain.app", "--port", str(port), "--device", "cpu"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=5) as response:
                page = response.read().decode()
        except OSError:
            time.sleep(1)
            continue
        if server.poll() is None:  # still running: it bound the port, so the answer is its own
            return server, page
    if server.poll() is None:
        server.kill()
    err = server.stderr.read() if server.stderr else ""
    server.wait(timeout=30)
    if PORT_TAKEN in err:
        raise OSError(err[-2000:])
    raise AssertionError(f"the page did not start within {START_S} s: {err[-2000:]}")


def test_the_web_page_with_its_example_photos(installed, tmp_path) -> None:
    site, env = installed
    _, (server, page) = on_a_free_port(lambda port: serve_page(port, tmp_path, env))
    try:
        assert "Derain" in page and "chelsea-rain.jpg" in page  # the page, with the packaged examples
        code = "from derain.app import EXAMPLES_DIR; print(EXAMPLES_DIR)"
        assert run(["-c", code], tmp_path, env).stdout.strip() == str(site / "derain" / "examples")
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_wheel_declares_the_derain_command_and_the_extras(installed, tmp_path) -> None:
    """``derain`` is a console script; onnx, onnxscript, onnxruntime and av are the extras ``onnx`` and ``video``
    (``dev`` pulls both), not dependencies of a plain install."""
    site, env = installed
    (info,) = site.glob("derain-*.dist-info")
    assert "derain = derain.cli:main" in (info / "entry_points.txt").read_text()
    metadata = (info / "METADATA").read_text().splitlines()
    requires = [
        line.removeprefix("Requires-Dist: ") for line in metadata if line.startswith("Requires-Dist: ")
    ]
    plain = {
        r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip()
        for r in requires
        if "extra ==" not in r
    }
    assert plain and not plain & {"onnx", "onnxscript", "onnxruntime", "av"}
    assert {"Provides-Extra: onnx", "Provides-Extra: video", "Provides-Extra: dev"} <= set(metadata)
    assert any(r.startswith("av") and 'extra == "video"' in r for r in requires)
    assert any(r.startswith("onnxruntime") and 'extra == "onnx"' in r for r in requires)
    proc = run(["-m", "derain", "infer", "--help"], tmp_path, env)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: derain infer"), proc.stderr[-2000:]

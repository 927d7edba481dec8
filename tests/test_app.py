"""The web page through its API, as ``gradio_client`` users call it: ``predict(..., api_name="/derain")``."""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import pytest
import torch
from gradio_client import Client, handle_file

from derain.inference import load_image
from derain.models import DerainNet

REPO = Path(__file__).resolve().parents[1]
TINY = {"dim": 8, "blocks": (1, 1), "heads": (1, 1), "mixers": (("tksa",), ("agent",))}


def load_app_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("derain_app", REPO / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app = load_app_module()
    torch.manual_seed(0)
    demo = app.build_app(DerainNet(**TINY).eval(), max_megapixels=0.05, tile=64, overlap=16, ensemble=2)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture(scope="module")
def client(server: str) -> Client:
    return Client(server, verbose=False)


def test_derain_endpoint_returns_before_after_and_png(client: Client, tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (90, 130, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "rainy.png"), rgb)
    (before, after), png, status = client.predict(
        handle_file(str(tmp_path / "rainy.png")), api_name="/derain"
    )
    assert Path(png).name == "rainy-derained.png"
    result = load_image(png)
    assert result.shape == (90, 130, 3) and result.dtype == np.uint8  # full resolution, tiled (tile=64)
    assert cv2.imread(before).shape == cv2.imread(after).shape == (90, 130, 3)  # slider previews
    assert status.startswith("Derained 130×90 pixels in") and status.endswith("(self-ensemble of 2 passes).")


def test_examples_are_small_rainy_photos() -> None:
    examples = sorted((REPO / "datasets" / "examples").glob("*.jpg"))
    assert len(examples) >= 3
    for path in examples:
        assert path.stat().st_size < 200_000
        assert load_image(path).shape[2] == 3


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("notes.txt", b"hello", "notes.txt is not an image this page can read"),
        ("broken.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "broken.png is not an image this page can read"),
    ],
    ids=["text", "corrupt-png"],
)
def test_non_images_get_a_clear_message(
    client: Client, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(Exception, match=message):
        client.predict(handle_file(str(tmp_path / name)), api_name="/derain")


def test_too_large_photos_are_refused(client: Client, tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "big.png"), np.zeros((300, 300, 3), np.uint8))  # 0.09 MP > 0.05 MP limit
    with pytest.raises(Exception, match=r"0\.1 megapixels; the limit here is 0\.05"):
        client.predict(handle_file(str(tmp_path / "big.png")), api_name="/derain")


def test_app_without_weights_exits_with_the_load_model_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = load_app_module()
    assert app.main(["--weights", str(tmp_path / "none.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "none.safetensors does not exist" in err and "--random-weights" in err

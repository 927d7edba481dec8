"""The web page through its API, as ``gradio_client`` users call it: ``predict(..., api_name="/derain")``."""

from __future__ import annotations

import contextlib
import importlib
import re
import resource
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2
import gradio as gr
import numpy as np
import pytest
import torch
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from helpers import make_clip, tiny_net
from PIL import Image
from torch import Tensor, nn

from derain.inference import read_image, restore
from derain.inference.video import probe

REPO = Path(__file__).resolve().parents[1]


def load_app_module() -> ModuleType:
    return importlib.import_module("derain.app")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched(demo: gr.Blocks) -> Iterator[str]:
    """Serve ``demo`` on a free local port (in this process) and give its URL."""
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture(scope="module")
def app() -> ModuleType:
    return load_app_module()


@pytest.fixture(scope="module")
def server(app: ModuleType) -> Iterator[str]:
    torch.manual_seed(0)
    demo = app.build_app(tiny_net(), max_megapixels=0.05, tile=64, overlap=16, ensemble=2, quality="best")
    with launched(demo) as url:
        yield url


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
    result = read_image(png)
    assert result.shape == (90, 130, 3) and result.dtype == np.uint8  # full resolution, tiled (tile=64)
    assert cv2.imread(before).shape == cv2.imread(after).shape == (90, 130, 3)  # slider previews
    assert status.startswith("Derained 130×90 pixels in")
    assert status.endswith("(Best: self-ensemble of 2 passes).")  # the page's default here
    *_, fast = client.predict(handle_file(str(tmp_path / "rainy.png")), "fast", api_name="/derain")
    assert fast.endswith("(Fast: one pass).")
    with pytest.raises(AppError, match="Quality should be fast or best, got 'slow'"):
        client.predict(handle_file(str(tmp_path / "rainy.png")), "slow", api_name="/derain")


def test_the_page_says_what_fast_and_best_will_take(client: Client, tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "rainy.png"), np.zeros((90, 130, 3), np.uint8))
    text = client.predict(handle_file(str(tmp_path / "rainy.png")), api_name="/expected")
    fast, best = (float(x) for x in re.findall(r"\*\*([0-9.]+) s\*\*", text))
    assert text.startswith("0.012 megapixels: expected about") and "with Fast" in text and "with Best" in text
    assert best == pytest.approx(2 * fast, abs=0.11)  # Best: 2 passes in this app


@pytest.mark.parametrize(("limit", "default"), [(1e9, "best"), (0.0, "fast")])
def test_auto_quality_picks_best_only_when_it_is_quick_at_one_megapixel(
    app: ModuleType, monkeypatch: pytest.MonkeyPatch, limit: float, default: str
) -> None:
    monkeypatch.setattr(app, "BEST_DEFAULT_MAX_S", limit)
    demo = app.build_app(tiny_net())
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "quality")
    assert radio.value == default and [v for _, v in radio.choices] == ["fast", "best"]
    assert "Best: flip ensemble of 4" in radio.choices[1][0]


def test_bad_quality_options_are_refused_at_start_up(app: ModuleType) -> None:
    with pytest.raises(ValueError, match="quality should be one of auto, fast, best, got 'good'"):
        app.build_app(tiny_net(), quality="good")
    with pytest.raises(ValueError, match="Best quality's number of passes: 2 or 4, got 1"):
        app.build_app(tiny_net(), ensemble=1)


def test_video_tab_derains_a_clip_with_its_audio(client: Client, tmp_path: Path) -> None:
    make_clip(tmp_path / "rainy.mp4", frames=6, size=(48, 64), fps=10)
    result, status = client.predict(handle_file(str(tmp_path / "rainy.mp4")), api_name="/derain_video")
    path = Path(result["video"] if isinstance(result, dict) else result)
    assert path.name == "rainy-derained.mp4"
    info = probe(path)
    assert (info.frames, info.width, info.height, info.fps, info.audio) == (6, 64, 48, 10.0, "aac")
    assert status.startswith("Derained 6 frames of 64×48 in") and status.endswith("audio kept (aac).")


def test_video_tab_refuses_long_clips_and_non_videos(client: Client, tmp_path: Path) -> None:
    make_clip(tmp_path / "long.mp4", frames=12, size=(32, 32), fps=1, audio=False)  # 12 s > 10 s
    with pytest.raises(Exception, match="This clip is 12.0 s long; the limit here is 10 s"):
        client.predict(handle_file(str(tmp_path / "long.mp4")), api_name="/derain_video")
    (tmp_path / "fake.mp4").write_bytes(b"not a video")
    with pytest.raises(Exception, match="fake.mp4 is not a video this page can read"):
        client.predict(handle_file(str(tmp_path / "fake.mp4")), api_name="/derain_video")


def test_examples_are_small_rainy_photos() -> None:
    examples = sorted((REPO / "datasets" / "examples").glob("*.jpg"))
    assert len(examples) >= 3
    for path in examples:
        assert path.stat().st_size < 200_000
        assert read_image(path).shape[2] == 3


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


def test_decompression_bombs_are_refused_before_decoding(
    client: Client, app: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cv2.imwrite(str(tmp_path / "bomb.png"), np.zeros((200, 200, 3), np.uint8))  # 40,000 pixels
    monkeypatch.setattr(
        Image, "MAX_IMAGE_PIXELS", 10_000
    )  # PIL's guard now refuses headers over 20,000 pixels
    decoded: list[Any] = []
    monkeypatch.setattr(app, "read_image", lambda path: decoded.append(path) or read_image(path))
    with pytest.raises(Exception, match="over 0.02 megapixels, more than this page decodes"):
        client.predict(handle_file(str(tmp_path / "bomb.png")), api_name="/derain")
    assert decoded == []


# ------------------------------------------------------------------------------------------- under load


class Counting(nn.Module):
    """A network that records how many forward passes run at once (the server runs in this process)."""

    def __init__(self, net: nn.Module, delay: float = 0.0) -> None:
        super().__init__()
        self.net, self.delay = net, delay
        self.running = self.most = 0
        self.lock = threading.Lock()

    def forward(self, x: Tensor) -> Tensor:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.delay)
            return self.net(x)
        finally:
            with self.lock:
                self.running -= 1


def photo(i: int) -> np.ndarray:
    """Photo ``i`` of a burst: its own colour, its own noise, 40×56 pixels."""
    colour = np.array([37 * i % 256, (91 * i + 60) % 256, (173 * i + 120) % 256])
    noise = np.random.default_rng(i).integers(0, 48, (40, 56, 3))
    return np.clip(colour + noise - 24, 0, 255).astype(np.uint8)


def burst(url: str, files: list[Path]) -> list[Any]:
    """One client per file, all pressing *Derain* at the same moment; each one's result or exception."""
    ready = threading.Barrier(len(files))

    def one(path: Path) -> Any:
        client = Client(url, verbose=False)
        ready.wait()
        try:
            return client.predict(handle_file(str(path)), api_name="/derain")
        except Exception as err:  # what this user sees instead of a result
            return err

    with ThreadPoolExecutor(len(files)) as pool:
        return list(pool.map(one, files))


def test_sixteen_clients_at_once_each_get_their_own_photo_derained(app: ModuleType, tmp_path: Path) -> None:
    photos = [photo(i) for i in range(16)]
    for i, rgb in enumerate(photos):
        cv2.imwrite(str(tmp_path / f"photo-{i:02d}.png"), rgb[:, :, ::-1])
    (tmp_path / "notes.txt").write_bytes(b"not a photo")
    cv2.imwrite(str(tmp_path / "huge.png"), np.zeros((300, 300, 3), np.uint8))  # 0.09 MP > 0.02 MP
    files = [tmp_path / f"photo-{i:02d}.png" for i in range(16)] + [
        tmp_path / "notes.txt",
        tmp_path / "huge.png",
    ]
    torch.manual_seed(0)
    net = Counting(tiny_net())
    expected = [restore(net.net, rgb) for rgb in photos]
    for a, b in zip(
        expected, expected[1:], strict=False
    ):  # so a swapped result cannot pass for the right one
        assert np.abs(a.astype(int) - b).mean() > 10
    demo = app.build_app(net, max_megapixels=0.02, quality="fast")  # default concurrency (1) and queue size
    with launched(demo) as url:
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        results = burst(url, files)
        growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    for i, result in enumerate(results[:16]):
        assert not isinstance(result, Exception), f"photo-{i:02d}: {result}"
        (before, after), png, status = result
        assert Path(png).name == f"photo-{i:02d}-derained.png"
        np.testing.assert_array_equal(cv2.imread(before)[:, :, ::-1], photos[i])
        assert np.abs(read_image(png).astype(int) - expected[i]).max() <= 1
        assert status.startswith("Derained 56×40 pixels")
    assert "notes.txt is not an image this page can read" in str(results[16])
    assert "0.1 megapixels; the limit here is 0.02" in str(results[17])
    assert net.most == 1  # queued: one photo derained at a time
    assert growth_mib < 500, f"peak RSS grew by {growth_mib:.0f} MiB serving 18 tiny requests"


def test_a_full_queue_turns_requests_away_with_a_try_again_message(app: ModuleType, tmp_path: Path) -> None:
    files = []
    for i in range(8):
        cv2.imwrite(str(tmp_path / f"photo-{i}.png"), photo(i))
        files.append(tmp_path / f"photo-{i}.png")
    torch.manual_seed(0)
    net = Counting(tiny_net(), delay=1.5)  # slow: the burst arrives while the first one runs
    with launched(app.build_app(net, max_queue=2)) as url:
        results = burst(url, files)
    served = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(served) >= 3  # one being derained and two waiting
    assert refused, "8 requests at once fit in a queue of 2"
    for err in refused:
        assert "Queue is full! Please try again." in str(err)
    for result, path in zip(results, files, strict=True):
        if not isinstance(result, Exception):
            assert Path(result[1]).name == f"{path.stem}-derained.png"


def test_app_without_weights_exits_with_the_load_model_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = load_app_module()
    assert app.main(["--weights", str(tmp_path / "none.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "none.safetensors does not exist" in err and "--random-weights" in err

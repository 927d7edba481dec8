"""The web page: its settings, its request handlers called directly (no server), and the page served, as
``gradio_client`` users call it (``predict(..., api_name="/derain")``) and under load."""

from __future__ import annotations

import dataclasses
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
import ports
import pytest
import torch
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from helpers import make_clip, tiny_net
from PIL import Image
from ports import free_port, launched
from torch import Tensor, nn

from derain import arguments, page
from derain.inference import read_image, restore
from derain.inference.timing import SpeedEstimate
from derain.inference.video import probe
from derain.page import PageHandlers, PageSettings, RequestError

REPO = Path(__file__).resolve().parents[1]


def load_app_module() -> ModuleType:
    return importlib.import_module("derain.app")


def upload(path: Path) -> dict[str, str]:
    """What Gradio hands the photo handler for an uploaded file (``preprocess=False``)."""
    return {"path": str(path), "orig_name": path.name}


@pytest.fixture(scope="module")
def app() -> ModuleType:
    return load_app_module()


@pytest.fixture
def handlers() -> PageHandlers:
    """The requests of a page with a 0.05-megapixel limit, Best = 2 passes, 100 s a megapixel said at start-up."""
    settings = PageSettings(max_megapixels=0.05, tile=64, overlap=16, ensemble=2, quality="best")
    return PageHandlers(tiny_net(), settings, SpeedEstimate(100.0))


# ------------------------------------------------------------------------------------------------ settings


def test_bad_options_are_refused_once_in_the_settings() -> None:
    with pytest.raises(ValueError, match="quality should be one of auto, fast, best, got 'good'"):
        PageSettings(quality="good")
    with pytest.raises(ValueError, match="Best quality's number of passes: 2 or 4, got 1"):
        PageSettings(ensemble=1)
    with pytest.raises(ValueError, match="ensemble should be one of"):
        PageSettings(ensemble=3)
    with pytest.raises(ValueError, match="max_queue and concurrency should be >= 1, got 0 and 1"):
        PageSettings(max_queue=0)
    assert PageSettings(max_megapixels=0.05).max_pixels == 50_000


def test_the_page_options_are_its_settings_fields(app: ModuleType) -> None:
    """``derain app``'s options are derived from ``PageSettings`` (declared once): every field but the warning is
    an option, and the parsed command line is the settings."""
    argv = ["--tile", "64", "--overlap", "8", "--max-megapixels", "2.5", "--concurrency", "2", "--max-queue"]
    argv += ["3", "--ensemble", "2", "--quality", "fast", "--max-video-seconds", "4"]
    args = app.build_parser().parse_args(argv)
    settings = arguments.settings_from_args(PageSettings, args, warning="w")
    assert settings == PageSettings(
        tile=64,
        overlap=8,
        max_megapixels=2.5,
        concurrency=2,
        max_queue=3,
        ensemble=2,
        quality="fast",
        max_video_seconds=4.0,
        warning="w",
    )
    defaults = arguments.settings_from_args(PageSettings, app.build_parser().parse_args([]))
    assert defaults == PageSettings()
    fields = {f.name for f in dataclasses.fields(PageSettings)} - {"warning"}
    assert fields <= set(vars(args))
    with pytest.raises(arguments.UsageError, match="max_queue and concurrency should be >= 1, got 0 and 1"):
        arguments.settings_from_args(PageSettings, app.build_parser().parse_args(["--max-queue", "0"]))


def test_auto_quality_is_best_only_within_the_limit_at_one_megapixel() -> None:
    """The page's policy (``derain.page``; the estimate only measures)."""
    assert page.BEST_DEFAULT_MAX_S == 3.0
    assert page.auto_quality(SpeedEstimate(0.75), 4) == "best"  # 3 s for 4 passes
    assert page.auto_quality(SpeedEstimate(0.76), 4) == "fast"
    assert page.auto_quality(SpeedEstimate(1.5), 2) == "best"


def test_the_handlers_measure_their_own_estimate_unless_given_one() -> None:
    settings = PageSettings(quality="auto")
    handlers = PageHandlers(tiny_net(), settings)
    assert handlers.speed.per_megapixel > 0
    assert handlers.default_quality == page.auto_quality(handlers.speed, settings.ensemble)


@pytest.mark.parametrize(("per_megapixel", "default"), [(0.5, "best"), (1.0, "fast")])
def test_auto_quality_picks_best_only_when_it_is_quick_at_one_megapixel(
    app: ModuleType, per_megapixel: float, default: str
) -> None:
    """Best (4 passes) at 1 MP: 2 s with 0.5 s a pass, within BEST_DEFAULT_MAX_S (3 s); 4 s with 1 s, not."""
    demo = app.build_app(tiny_net(), speed=SpeedEstimate(per_megapixel))
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "quality")
    assert radio.value == default and [v for _, v in radio.choices] == ["fast", "best"]
    assert (
        radio.choices[1][0] == f"Best: flip ensemble of 4 (about {4 * per_megapixel:.1f} s a megapixel here)"
    )


def test_the_strength_slider_runs_from_0_to_2_and_feeds_photos_and_videos(app: ModuleType) -> None:
    demo = app.build_app(tiny_net(), speed=SpeedEstimate(1.0))
    slider = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "strength")
    assert (slider.minimum, slider.maximum, slider.value) == (0, 2, 1.0)
    fns = {fn.api_name: fn for fn in demo.fns.values()}
    assert [b.elem_id for b in fns["derain"].inputs] == ["photo", "quality", "strength"]
    assert [b.elem_id for b in fns["derain_video"].inputs] == ["clip", "quality", "strength"]


def test_after_each_photo_the_page_relabels_the_qualities(app: ModuleType) -> None:
    """The layout's wiring: once a photo is derained, the Quality labels are drawn again from the estimate."""
    speed = SpeedEstimate(1.0)
    demo = app.build_app(tiny_net(), speed=speed)
    fns = {fn.api_name: fn for fn in demo.fns.values()}
    relabel = next(fn for fn in fns.values() if [b.elem_id for b in fn.outputs] == ["quality"])
    assert relabel.trigger_after == fns["derain"]._id and relabel.trigger_only_on_success
    speed.update(10**6, 1, 2.0)  # a photo took 2 s a megapixel
    assert relabel.fn().constructor_args["choices"][0][0] == "Fast: one pass (about 2.0 s a megapixel here)"


# ------------------------------------------------------------------------------------------------ requests


def test_the_page_says_what_fast_and_best_will_take(handlers: PageHandlers, tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "rainy.png"), np.zeros((90, 130, 3), np.uint8))  # 11,700 pixels
    text = handlers.expected(upload(tmp_path / "rainy.png"))
    assert text == "0.012 megapixels: expected about **1.2 s** with Fast, **2.3 s** with Best."
    assert handlers.expected(None) == "" and handlers.expected(str(tmp_path / "rainy.png")) == text


def test_derain_gives_previews_the_full_png_and_a_status(handlers: PageHandlers, tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (90, 130, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "upload.png"), rgb[:, :, ::-1])
    photo = {"path": str(tmp_path / "upload.png"), "orig_name": "rainy.png"}
    (before, after), png, status = handlers.derain(photo)  # the page's default here: Best
    assert Path(png).name == "rainy-derained.png"  # named after the visitor's file, not the upload cache
    np.testing.assert_array_equal(read_image(png), after)  # full resolution, tiled (tile=64)
    np.testing.assert_array_equal(before, rgb)
    assert re.fullmatch(
        r"Derained 130×90 pixels in \*\*[0-9.]+ s\*\* \(Best: self-ensemble of 2 passes\)\.", status
    )
    *_, fast = handlers.derain(photo, "fast")
    assert fast.endswith("(Fast: one pass).")
    with pytest.raises(RequestError, match="Quality should be fast or best, got 'slow'"):
        handlers.derain(photo, "slow")
    with pytest.raises(RequestError, match="Upload a rainy photo first"):
        handlers.derain(None)


def test_the_strength_is_in_the_png_and_its_name(handlers: PageHandlers, tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (90, 130, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "rainy.png"), rgb[:, :, ::-1])
    (before, after), png, status = handlers.derain(upload(tmp_path / "rainy.png"), "fast", 1.5)
    assert Path(png).name == "rainy-derained-s1.5.png"
    options = handlers.settings.restore_options(1, strength=1.5)
    np.testing.assert_array_equal(read_image(png), restore(handlers.model, rgb, options=options))
    assert status.endswith("(Fast: one pass, strength 1.5).")
    (before, after), png, _ = handlers.derain(upload(tmp_path / "rainy.png"), "fast", 0)
    assert Path(png).name == "rainy-derained-s0.png"
    np.testing.assert_array_equal(after, before)  # strength 0: nothing taken away
    with pytest.raises(RequestError, match=r"^Strength should be between 0 and 2, got 2\.5\.$"):
        handlers.derain(upload(tmp_path / "rainy.png"), "fast", 2.5)


def test_the_labels_follow_the_photos_derained(tmp_path: Path) -> None:
    """Started at 10,000 s a megapixel (say, a start-up on a busy CPU), the labels say what the photos took since."""
    handlers = PageHandlers(tiny_net(), PageSettings(ensemble=2), SpeedEstimate(10_000.0))
    assert handlers.quality_choices()[0] == ("Fast: one pass (about 166.7 min a megapixel here)", "fast")
    cv2.imwrite(str(tmp_path / "rainy.png"), np.full((90, 130, 3), 99, np.uint8))
    handlers.derain(upload(tmp_path / "rainy.png"), "fast")
    measured = handlers.speed.per_megapixel
    assert measured < 10_000.0

    def duration(seconds: float) -> str:
        return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"

    (fast, _), (best, _) = handlers.quality_choices()
    assert fast == f"Fast: one pass (about {duration(measured)} a megapixel here)"
    assert best == f"Best: flip ensemble of 2 (about {duration(2 * measured)} a megapixel here)"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("notes.txt", b"hello", r"notes.txt is not an image this page can read \(not a decodable image"),
        ("broken.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "broken.png is not an image this page can read"),
        ("empty.png", b"", r"empty.png is not an image this page can read \(the file is empty\)\.$"),
    ],
    ids=["text", "corrupt-png", "empty"],
)
def test_non_images_get_a_clear_message(
    handlers: PageHandlers, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(RequestError, match=message):
        handlers.derain(upload(tmp_path / name))


def test_too_large_photos_are_refused(handlers: PageHandlers, tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "big.png"), np.zeros((300, 300, 3), np.uint8))  # 0.09 MP > 0.05 MP limit
    with pytest.raises(RequestError, match=r"0\.1 megapixels; the limit here is 0\.05\. Use `derain infer`"):
        handlers.derain(upload(tmp_path / "big.png"))


def test_decompression_bombs_are_refused_before_decoding(
    handlers: PageHandlers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cv2.imwrite(str(tmp_path / "bomb.png"), np.zeros((200, 200, 3), np.uint8))  # 40,000 pixels
    monkeypatch.setattr(
        Image, "MAX_IMAGE_PIXELS", 10_000
    )  # PIL's guard now refuses headers over 20,000 pixels
    decoded: list[Any] = []
    monkeypatch.setattr(page, "read_image", lambda path: decoded.append(path) or read_image(path))
    with pytest.raises(RequestError, match="over 0.02 megapixels, more than this page decodes"):
        handlers.derain(upload(tmp_path / "bomb.png"))
    with pytest.raises(RequestError, match="over 0.02 megapixels"):
        handlers.expected(upload(tmp_path / "bomb.png"))
    assert decoded == []


def test_video_handler_derains_a_clip_and_reports_progress(handlers: PageHandlers, tmp_path: Path) -> None:
    make_clip(tmp_path / "rainy.mp4", frames=6, size=(48, 64), fps=10)
    progress: list[tuple[int, int]] = []
    path, status = handlers.derain_clip(str(tmp_path / "rainy.mp4"), "fast", lambda *p: progress.append(p))
    assert Path(path).name == "rainy-derained.mp4"
    assert probe(path).frames == 6 and progress == [(i, 6) for i in range(1, 7)]
    assert status.startswith("Derained 6 frames of 64×48 in") and status.endswith("audio kept (aac).")
    path, _ = handlers.derain_clip(str(tmp_path / "rainy.mp4"), "fast", strength=0.5)
    assert Path(path).name == "rainy-derained-s0.5.mp4" and probe(path).frames == 6


def test_video_handler_refuses_long_clips_large_frames_and_non_videos(
    handlers: PageHandlers, tmp_path: Path
) -> None:
    make_clip(tmp_path / "long.mp4", frames=12, size=(32, 32), fps=1, audio=False)  # 12 s > 10 s
    with pytest.raises(
        RequestError, match=r"This clip is 12.0 s long; the limit here is 10 s\. Use `derain infer"
    ):
        handlers.derain_clip(str(tmp_path / "long.mp4"))
    make_clip(tmp_path / "wide.mp4", frames=2, size=(240, 320), fps=10, audio=False)  # 0.077 MP > 0.05 MP
    with pytest.raises(RequestError, match="This clip's frames have 0.1 megapixels; the limit here is 0.05"):
        handlers.derain_clip(str(tmp_path / "wide.mp4"))
    (tmp_path / "fake.mp4").write_bytes(b"not a video")
    with pytest.raises(RequestError, match="fake.mp4 is not a video this page can read"):
        handlers.derain_clip(str(tmp_path / "fake.mp4"))
    with pytest.raises(RequestError, match="Upload a short rainy video first"):
        handlers.derain_clip(None)


def test_examples_are_small_rainy_photos() -> None:
    examples = sorted((REPO / "datasets" / "examples").glob("*.jpg"))
    assert len(examples) >= 3
    for path in examples:
        assert path.stat().st_size < 200_000
        assert read_image(path).shape[2] == 3


# ------------------------------------------------------------------------------------------------ served


@pytest.fixture(scope="module")
def client(app: ModuleType) -> Iterator[Client]:
    settings = PageSettings(max_megapixels=0.05, tile=64, overlap=16, ensemble=2, quality="best")
    with launched(app.build_app(tiny_net(), settings)) as url:
        yield Client(url, verbose=False)


def test_a_port_taken_between_choosing_and_binding_is_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ports.launched`` moves to another port when the one it chose was taken before the server bound it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        chosen = iter([taken.getsockname()[1]])
        monkeypatch.setattr(ports, "free_port", lambda: next(chosen, None) or free_port())
        with gr.Blocks() as demo:
            gr.Markdown("derain")
        with launched(demo) as url:
            assert url != f"http://127.0.0.1:{taken.getsockname()[1]}/"
            assert Client(url, verbose=False).view_api(print_info=False, return_format="dict") is not None


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
    _, png, strong = client.predict(handle_file(str(tmp_path / "rainy.png")), "fast", 1.5, api_name="/derain")
    assert Path(png).name == "rainy-derained-s1.5.png" and strong.endswith("(Fast: one pass, strength 1.5).")
    with pytest.raises(AppError, match="Strength should be between 0 and 2, got 2.5"):
        client.predict(handle_file(str(tmp_path / "rainy.png")), "fast", 2.5, api_name="/derain")
    # a handler's RequestError reaches the visitor as the page's message
    with pytest.raises(AppError, match="Quality should be fast or best, got 'slow'"):
        client.predict(handle_file(str(tmp_path / "rainy.png")), "slow", api_name="/derain")
    text = client.predict(handle_file(str(tmp_path / "rainy.png")), api_name="/expected")
    assert text.startswith("0.012 megapixels: expected about")


def test_video_endpoint_derains_a_clip_with_its_audio(client: Client, tmp_path: Path) -> None:
    make_clip(tmp_path / "rainy.mp4", frames=6, size=(48, 64), fps=10)
    result, status = client.predict(handle_file(str(tmp_path / "rainy.mp4")), api_name="/derain_video")
    path = Path(result["video"] if isinstance(result, dict) else result)
    assert path.name == "rainy-derained.mp4"
    info = probe(path)
    assert (info.frames, info.width, info.height, info.fps, info.audio) == (6, 64, 48, 10.0, "aac")
    assert status.startswith("Derained 6 frames of 64×48 in") and status.endswith("audio kept (aac).")
    (tmp_path / "fake.mp4").write_bytes(b"not a video")
    with pytest.raises(AppError, match="fake.mp4 is not a video this page can read"):
        client.predict(handle_file(str(tmp_path / "fake.mp4")), api_name="/derain_video")


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
    demo = app.build_app(net, PageSettings(max_megapixels=0.02, quality="fast"))  # concurrency 1, queue 32
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
    with launched(app.build_app(net, PageSettings(max_queue=2), speed=SpeedEstimate(1.0))) as url:
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

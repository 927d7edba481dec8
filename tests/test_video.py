"""Videos: ``derain.inference.video.derain_video`` and ``python -m derain.infer`` on clips (order, size, rate, audio,
atomic output, broken files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_clip, read_frames, tiny_net

from derain.infer import main
from derain.inference import restore
from derain.inference.video import VideoError, derain_video, probe, video_output_suffix
from derain.models import DerainNet

av = pytest.importorskip(
    "av", reason="PyAV is derain[video]'s (tests/test_extras.py covers an install without it)"
)


@pytest.fixture(scope="module")
def net() -> DerainNet:
    return tiny_net()


class Invert(torch.nn.Module):
    """A stand-in network whose output is easy to recognise after lossy coding: the negative image."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1.0 - x


def test_frames_in_order_same_size_rate_and_audio(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "clip.mp4", frames=9)
    seen = []
    net = Invert()
    result = derain_video(net, src, tmp_path / "out" / "clip.mp4", on_frame=seen.append)
    assert seen == list(range(1, 10))
    assert (result.frames, result.width, result.height, result.fps) == (9, 96, 64, 10.0)
    assert result.audio == "kept (aac)"
    info = probe(tmp_path / "out" / "clip.mp4")
    assert (info.frames, info.width, info.height, info.fps, info.audio) == (9, 96, 64, 10.0, "aac")
    assert info.seconds == pytest.approx(0.9, abs=0.05)
    # each output frame is the network's output for its input frame (up to H.264's loss), in order
    inputs, outputs = read_frames(src), read_frames(tmp_path / "out" / "clip.mp4")
    assert len(outputs) == len(inputs)
    for k, rainy in enumerate(inputs):
        expected = restore(net, rainy).astype(int)
        errors = [np.abs(expected - other.astype(int)).mean() for other in outputs]
        assert int(np.argmin(errors)) == k, f"frame {k} is out of place"
        assert errors[k] < 3.0
    with av.open(str(tmp_path / "out" / "clip.mp4")) as container:
        assert sum(1 for _ in container.decode(audio=0)) > 0


def test_odd_size_kept_without_audio(tmp_path: Path, net: DerainNet) -> None:
    src = make_clip(tmp_path / "odd.mp4", frames=3, size=(33, 47), audio=False)
    result = derain_video(net, src, tmp_path / "odd-out.mkv")
    assert (result.width, result.height, result.audio) == (47, 33, "none")
    assert read_frames(tmp_path / "odd-out.mkv")[0].shape == (33, 47, 3)


def test_interrupted_write_leaves_nothing(tmp_path: Path, net: DerainNet) -> None:
    src = make_clip(tmp_path / "clip.mp4", frames=6)
    out = tmp_path / "out"

    def stop(done: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        derain_video(net, src, out / "clip.mp4", on_frame=stop)
    assert list(out.iterdir()) == []


def test_bad_inputs_are_named(tmp_path: Path, net: DerainNet) -> None:
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video at all")
    with pytest.raises(VideoError, match="broken.mp4"):
        derain_video(net, broken, tmp_path / "x.mp4")
    src = make_clip(tmp_path / "clip.mp4", frames=6, audio=False)
    with pytest.raises(VideoError, match="6 frames .* more than the 4 allowed"):
        derain_video(net, src, tmp_path / "x.mp4", max_frames=4)
    with pytest.raises(VideoError, match="should end in one of"):
        derain_video(net, src, tmp_path / "x.gif")
    assert not (tmp_path / "x.mp4").exists()
    assert video_output_suffix("a.webm") == ".mp4" and video_output_suffix("a.MOV") == ".mov"


def test_infer_folder_with_videos_photos_and_a_broken_clip(
    tmp_path: Path, net: DerainNet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr("derain.arguments.model_from_args", lambda *a, **k: net)
    src = tmp_path / "in"
    src.mkdir()
    make_clip(src / "a.mp4", frames=4)
    make_clip(src / "b.avi", frames=3, audio=False)
    (src / "c.mp4").write_bytes(b"\x00" * 100)
    Image = pytest.importorskip("PIL.Image")
    Image.fromarray(np.full((40, 50, 3), 120, np.uint8)).save(src / "d.png")
    assert main([str(src), str(tmp_path / "out"), "--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert "ok 3, skipped 0, failed 1, 7 video frames" in captured.out
    assert "failed: " in captured.err and "c.mp4" in captured.err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.mp4", "b.mp4", "d.png"]
    assert probe(tmp_path / "out" / "b.mp4").frames == 3
    # a re-run redoes only what is not finished: here the broken clip, which fails again
    assert main([str(src), str(tmp_path / "out"), "--device", "cpu"]) == 1
    assert "ok 0, skipped 3, failed 1" in capsys.readouterr().out


def test_infer_strength_reaches_every_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("derain.arguments.model_from_args", lambda *a, **k: Invert())
    src = make_clip(tmp_path / "clip.mp4", frames=3, audio=False)
    for s in ("0", "0.5"):
        assert main([str(src), str(tmp_path / f"s{s}.mp4"), "--device", "cpu", "--strength", s]) == 0
    rainy = read_frames(src)
    untouched, halfway = read_frames(tmp_path / "s0.mp4"), read_frames(tmp_path / "s0.5.mp4")
    assert len(untouched) == len(halfway) == 3
    for k, frame in enumerate(rainy):  # up to H.264's loss: the frame itself, then halfway to its negative
        assert np.abs(untouched[k].astype(int) - frame).mean() < 3.0
        assert np.abs(halfway[k].astype(int) - restore(Invert(), frame, strength=0.5)).mean() < 3.0
    assert np.abs(halfway[0].astype(int) - 128).max() < 10  # halfway between 90 or 200 and its negative


def test_infer_one_video_to_a_named_file(
    tmp_path: Path, net: DerainNet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr("derain.arguments.model_from_args", lambda *a, **k: net)
    src = make_clip(tmp_path / "clip.mp4", frames=3)
    assert main([str(src), str(tmp_path / "derained.mp4"), "--device", "cpu"]) == 0
    assert probe(tmp_path / "derained.mp4").frames == 3
    assert main([str(src), str(tmp_path / "derained.png"), "--device", "cpu"]) == 2
    assert "should name a video file" in capsys.readouterr().err
    assert main([str(src), str(tmp_path / "folder"), "--device", "cpu"]) == 0
    assert (tmp_path / "folder" / "clip.mp4").is_file()

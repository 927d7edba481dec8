"""The tiny network, assertions and data locations shared by the test modules (importable: pytest puts tests/ on
sys.path). ``conftest.py`` makes fixtures of the network and its weights file."""

import json
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from derain.models import DerainNet

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""The development data beside the checkout (``../shared/data``); absent in a user's fresh clone."""


TINY = {"dim": 8, "blocks": (1, 1), "heads": (1, 1), "mixers": (("tksa",), ("agent",)), "agents": 4}
"""The tests' one tiny network: a two-level, 8-channel ``DerainNet`` with both mixers, agent biases and the
depthwise conv of V, top-k (every op the shipped network has), which runs in milliseconds."""

TINY_NET = ["--model.net.class_path=derain.models.DerainNet"] + [
    f"--model.net.init_args.{key}={json.dumps(value)}" for key, value in TINY.items()
]
"""``TINY`` as ``derain.fit`` arguments: training runs in tests take seconds."""


def tiny_net(seed: int = 0) -> DerainNet:
    """``DerainNet(**TINY)`` in eval mode, its random init seeded (the same weights for the same ``seed``)."""
    torch.manual_seed(seed)
    return DerainNet(**TINY).eval()


def three_level_net(**options) -> DerainNet:
    """A three-level ``DerainNet`` with both mixers on the middle level and 9 agents, for the research options;
    ``options`` override its arguments."""
    config = dict(dim=8, blocks=(1, 2, 1), heads=(1, 2, 2), mixers=(("agent",), ("tksa", "agent"), ("tksa",)))
    return DerainNet(**{"agents": 9, **config, **options})


def need_shared_data(folder: Path = SHARED_DATA) -> None:
    """Skip the calling test, with the reason, when ``folder`` of the shared data is not on this machine."""
    if not folder.is_dir():
        pytest.skip(f"real data not present: {folder} (only on machines with ../shared/data)")


def grads_finite(module: nn.Module, x: Tensor, *, zero_ok: tuple[str, ...] = ()) -> Tensor:
    """Run ``module`` on ``x`` (which requires grad): same shape out, and a finite gradient for ``x`` and for every
    trainable parameter, not zero everywhere (a branch whose output is dropped gets none; one multiplied away
    gets zeros).

    Args:
        module: the module to run.
        x: its input, with ``requires_grad``.
        zero_ok: parameters whose gradient may be all zeros here (say why where it is used).
    """
    y = module(x)
    assert y.shape == x.shape
    y.square().mean().backward()
    assert x.grad.isfinite().all()
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue  # frozen on purpose (e.g. ChannelAttention's single ratio weight)
        assert p.grad is not None, f"{name}: no gradient (its branch does not reach the output)"
        assert p.grad.isfinite().all(), f"{name}: non-finite gradient"
        assert name in zero_ok or p.grad.any(), f"{name}: gradient zero everywhere (a dead branch?)"
    return y


def make_clip(
    path: Path, *, frames: int = 8, size: tuple[int, int] = (64, 96), fps: int = 10, audio: bool = True
):
    """Write a small H.264 video (a bright bar moving over grey) with, by default, an AAC tone as audio."""
    import av
    import numpy as np

    h, w = size
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height = w, h
        video.pix_fmt = "yuv420p" if h % 2 == 0 and w % 2 == 0 else "yuv444p"
        sound = container.add_stream("aac", rate=16000) if audio else None
        if sound is not None:
            sound.layout = "mono"
        for i in range(frames):
            image = np.full((h, w, 3), 90, np.uint8)
            image[:, (i * 5) % w : (i * 5) % w + 10] = 200
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = i
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        if sound is not None:
            samples = 16000 * frames // fps
            tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(samples) / 16000)).astype(np.float32)[None]
            for start in range(0, samples, 1024):
                chunk = av.AudioFrame.from_ndarray(
                    tone[:, start : start + 1024], format="fltp", layout="mono"
                )
                chunk.sample_rate, chunk.pts = 16000, start
                container.mux(sound.encode(chunk))
            container.mux(sound.encode(None))
    return path


def read_frames(path: Path):
    """Every frame of a video as RGB uint8 arrays, in order."""
    import av

    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]

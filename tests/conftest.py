"""The fixtures every test module may use: the tiny network (``helpers.TINY``) and one weights file of it."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture
def tiny_net():
    """``helpers.tiny_net()``: a fresh ``DerainNet(**TINY)`` for every test, always with the same weights."""
    from helpers import tiny_net

    return tiny_net()


@pytest.fixture(scope="session")
def tiny_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_net``'s weights as a ``.safetensors`` file, written once a session (tests only read it)."""
    from helpers import tiny_net

    from derain.weights import save_net

    return save_net(tiny_net(), tmp_path_factory.mktemp("weights") / "tiny.safetensors")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster, and far faster on a CPU shared with other work (a module
    takes it with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

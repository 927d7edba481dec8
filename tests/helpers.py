"""Assertions and data locations shared by the test modules (importable: pytest puts tests/ on sys.path)."""

from pathlib import Path

import pytest
from torch import Tensor, nn

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""The development data beside the checkout (``../shared/data``); absent in a user's fresh clone."""


def need_shared_data(folder: Path = SHARED_DATA) -> None:
    """Skip the calling test, with the reason, when ``folder`` of the shared data is not on this machine."""
    if not folder.is_dir():
        pytest.skip(f"real data not present: {folder} (only on machines with ../shared/data)")


def grads_finite(module: nn.Module, x: Tensor) -> Tensor:
    """Run ``module`` on ``x`` (which requires grad): same shape out, finite gradients for x and every parameter."""
    y = module(x)
    assert y.shape == x.shape
    y.square().mean().backward()
    assert x.grad.isfinite().all()
    for name, p in module.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.isfinite().all(), name
    return y

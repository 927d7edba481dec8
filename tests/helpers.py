"""Assertions shared by the test modules (importable because pytest puts tests/ on sys.path)."""

from torch import Tensor, nn


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

"""``CompileTraining``: the compiled training step computes what the eager one does, and trains through derain.fit.

The shared tiny network (``helpers.TINY``: every op the shipped network has) is compiled, here and in the fit run on
the same batch shape, so inductor's cache under ``$TORCHINDUCTOR_CACHE_DIR`` serves its graph to both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import TINY_NET, tiny_net
from safetensors.torch import load_file

from derain.fit import main as fit_main
from derain.train import CompileTraining, DerainLitModule, callbacks, charbonnier_loss

REPO = Path(__file__).resolve().parents[1]

needs_compiler = pytest.mark.skipif(
    callbacks.cpp_compiler() is None, reason="torch.compile on a CPU needs a C++ compiler (g++ or clang++)"
)


def step_grads(module: torch.nn.Module, params, x, y):
    out = module(x)
    loss = charbonnier_loss(out, y)
    grads = torch.autograd.grad(loss, params)
    return out.detach(), loss.detach(), grads


@pytest.mark.slow
@needs_compiler
def test_the_compiled_step_matches_eager_outputs_and_gradients():
    eager = tiny_net().train()
    compiled = tiny_net().train()
    compiled.load_state_dict(eager.state_dict())
    module = DerainLitModule(compiled)  # puts the network in channels-last, as training does
    eager.to(memory_format=torch.channels_last)
    keys = set(module.state_dict())
    CompileTraining().on_fit_start(None, module)
    fast = module.train_forward
    assert fast is not None and fast is not compiled.forward
    # the compiled forward is not a submodule: the checkpoint's keys are the network's own
    assert set(module.state_dict()) == keys and all(k.startswith("net.") for k in keys)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):  # two batches through the same graph
        x = torch.rand(2, 3, 32, 32, generator=g).contiguous(memory_format=torch.channels_last)
        y = torch.rand(2, 3, 32, 32, generator=g)
        out_e, loss_e, grads_e = step_grads(eager, list(eager.parameters()), x, y)
        out_c, loss_c, grads_c = step_grads(fast, list(compiled.parameters()), x, y)
        torch.testing.assert_close(out_c, out_e, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
        names = [n for n, _ in eager.named_parameters()]
        assert len(grads_c) == len(grads_e) == len(names)
        for name, gc, ge in zip(names, grads_c, grads_e, strict=True):
            scale = ge.abs().max().clamp_min(1e-8)
            err = ((gc - ge).abs().max() / scale).item()
            assert err < 1e-3, f"{name}: compiled gradient differs by {err:.2e} of its largest value"


@pytest.mark.slow
@needs_compiler
def test_a_run_with_compile_trains_validates_and_exports(tmp_path):
    args = [
        "--config",
        str(REPO / "configs/synthetic.yaml"),
        *TINY_NET,
        "--trainer.enable_progress_bar=false",
        "--trainer.logger=false",
        "--trainer.enable_model_summary=false",
        "--trainer.max_steps=3",
        "--trainer.limit_val_batches=1",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.callbacks+=derain.train.CompileTraining",
        "--data.num_workers=0",
        "--data.synthesis.length=6",
        "--data.synthesis.val_length=1",
        "--data.batch_size=2",
        "--data.patch_size=32",
        "--test=false",
    ]
    assert fit_main(args) == 0
    weights = load_file(tmp_path / "model.safetensors")
    assert weights and not any("_orig_mod" in k for k in weights)


def test_compile_without_a_cpp_compiler_is_refused_before_training(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    module = DerainLitModule(tiny_net().train())
    with pytest.raises(RuntimeError, match=r"CompileTraining needs a C\+\+ compiler"):
        CompileTraining().on_fit_start(None, module)
    assert module.train_forward is None

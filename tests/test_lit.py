"""``DerainLitModule``: the loss, the schedule, the moving average, starting weights, validation per data set."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from helpers import TINY, tiny_net
from torch.utils.data import DataLoader
from training_helpers import make_folder

from derain.data import PairedDataset
from derain.inference import WeightsError, load_model
from derain.io import read_rgb, to_tensor
from derain.metrics import DerainMetrics
from derain.models import DerainNet, network_record
from derain.pairing import find_pairs
from derain.train import DerainLitModule, NonFiniteLossError, charbonnier_loss
from derain.weights import read_checkpoint_net, save_net


def test_charbonnier_is_smooth_l1():
    a, b = torch.zeros(4), torch.tensor([0.0, 1.0, -2.0, 0.5])
    assert charbonnier_loss(a, b, eps=0).item() == pytest.approx(b.abs().mean().item())
    assert charbonnier_loss(a, a, eps=1e-3).item() == pytest.approx(1e-3)


def test_nan_loss_message_names_the_step():
    module = DerainLitModule(tiny_net())
    batch = {"rain": torch.full((1, 3, 8, 8), float("nan")), "clean": torch.zeros(1, 3, 8, 8)}
    module.log = lambda *a, **k: None
    with pytest.raises(NonFiniteLossError, match="at step 0"):
        module.training_step(batch, 0)


def test_init_weights_starts_from_a_weights_file(tmp_path):
    def tiny(dim: int = 8, seed: int = 0) -> DerainNet:
        torch.manual_seed(seed)
        return DerainNet(**{**TINY, "dim": dim})

    source = save_net(tiny(seed=1), tmp_path / "source.safetensors")
    module = DerainLitModule(tiny(seed=2), init_weights=str(source))
    expected = load_model(source, device="cpu").state_dict()
    got = module.net.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    assert not torch.equal(tiny(seed=2).state_dict()["embed.1.weight"], expected["embed.1.weight"])

    with pytest.raises(
        WeightsError, match=r"source\.safetensors.*do not fit.*dim: 16 configured, 8 in the file"
    ):
        DerainLitModule(tiny(dim=16), init_weights=str(source))
    # a setting that holds no weights may differ
    torch.manual_seed(2)
    other = DerainNet(**TINY, grad_checkpoint=True)
    module = DerainLitModule(other, init_weights=str(source))
    assert torch.equal(module.net.state_dict()["embed.1.weight"], expected["embed.1.weight"])


def test_init_weights_packaged_fine_tunes_the_shipped_model(monkeypatch, tmp_path):
    import derain.weights

    shipped = save_net(tiny_net(seed=3), tmp_path / "s.safetensors")
    monkeypatch.setattr(derain.weights, "packaged_weights", lambda: shipped)
    module = DerainLitModule(tiny_net(seed=4), init_weights="packaged")
    expected = load_model(shipped, device="cpu").state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in module.net.state_dict().items())


def test_ema_averages_weights_and_is_what_validation_and_export_use(tmp_path):
    module = DerainLitModule(tiny_net(), ema_decay=0.9)
    start = {k: v.clone() for k, v in module.ema.state_dict().items()}
    with torch.no_grad():
        for p in module.net.parameters():
            p.add_(1.0)
    module.update_ema(step=1000)  # decay min(0.9, 1001/1010) = 0.9
    for k, v in module.ema.state_dict().items():
        torch.testing.assert_close(v, start[k] + 0.1 if v.is_floating_point() else start[k])
    module.update_ema(step=0)  # warm-up: decay 1/10, the average jumps most of the way
    weight = module.ema.state_dict()["embed.1.weight"]
    torch.testing.assert_close(
        weight, 0.1 * (start["embed.1.weight"] + 0.1) + 0.9 * (start["embed.1.weight"] + 1)
    )

    # validation runs the average, not the raw weights
    module.log = lambda *a, **k: None
    batch = {"rain": torch.rand(1, 3, 16, 16), "clean": torch.rand(1, 3, 16, 16)}
    with torch.no_grad():
        module.eval()  # as Lightning sets it for validation
        pred = module.step(batch, "val")
        torch.testing.assert_close(pred, module.ema(batch["rain"]))
        assert not torch.allclose(pred, module.net(batch["rain"]))
        module.train()  # training steps run the raw weights
        torch.testing.assert_close(module(batch["rain"]), module.net(batch["rain"]))

    # a checkpoint with both exports the average
    state = {f"net.{k}": v for k, v in module.net.state_dict().items()}
    state |= {f"ema.{k}": v for k, v in module.ema.state_dict().items()}
    torch.save({"state_dict": state, "derain_net": network_record(module.net)}, tmp_path / "both.ckpt")
    exported, _ = read_checkpoint_net(tmp_path / "both.ckpt")
    assert torch.equal(exported["embed.1.weight"], module.ema.state_dict()["embed.1.weight"])
    with pytest.raises(ValueError, match="ema_decay"):
        DerainLitModule(tiny_net(), ema_decay=1.0)


def test_load_from_checkpoint_across_an_ema_decay_change(tmp_path):
    net = tiny_net
    plain = DerainLitModule(net())
    ckpt = tmp_path / "plain.ckpt"
    torch.save({"state_dict": plain.state_dict(), "pytorch-lightning_version": "2.6.0"}, ckpt)
    averaged = DerainLitModule.load_from_checkpoint(ckpt, net=net(), ema_decay=0.9, weights_only=True)
    for key, value in plain.net.state_dict().items():
        torch.testing.assert_close(averaged.ema.state_dict()[key], value)
    torch.save({"state_dict": averaged.state_dict(), "pytorch-lightning_version": "2.6.0"}, ckpt)
    again = DerainLitModule.load_from_checkpoint(ckpt, net=net(), ema_decay=0.0, weights_only=True)
    assert again.ema is None


def test_schedule_steps_sets_the_cosine_length_independently_of_the_run():
    net = tiny_net()
    module = DerainLitModule(net, lr=1.0, warmup_steps=10, min_lr_ratio=0.0, schedule_steps=110)
    schedule = module.configure_optimizers()["lr_scheduler"]["scheduler"].lr_lambdas[0]
    assert schedule(0) == pytest.approx(0.01) and schedule(10) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.5) and schedule(110) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="schedule_steps should be at least 1, got 0"):
        DerainLitModule(net, schedule_steps=0)


def test_the_schedule_keeps_the_warm_up_and_cosine_formula():
    def formula(step: int, warmup_steps: int, total: int, min_lr_ratio: float) -> float:
        warmup = min(warmup_steps, max(0, total - 1))
        if step < warmup:
            return 0.01 + 0.99 * step / max(1, warmup)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    net = tiny_net()
    for warmup, total, min_ratio in [(10, 110, 0.0), (0, 7, 0.01), (200, 50, 0.1), (3, 1, 0.5)]:
        module = DerainLitModule(
            net, lr=0.5, warmup_steps=warmup, min_lr_ratio=min_ratio, schedule_steps=total
        )
        scheduler = module.configure_optimizers()["lr_scheduler"]["scheduler"]
        for step in range(total + 20):  # past the end it stays at the minimum
            for group in scheduler.optimizer.param_groups:
                assert group["lr"] == pytest.approx(0.5 * formula(step, warmup, total, min_ratio), rel=1e-12)
            scheduler.optimizer.step()
            scheduler.step()


def test_ema_updates_once_per_optimizer_step_with_gradient_accumulation(tmp_path):
    net = tiny_net().train()
    module = DerainLitModule(net, lr=0.01, warmup_steps=0, ema_decay=0.5, sample_images=0)
    start = {k: v.detach().clone() for k, v in module.net.named_parameters()}

    class WeightsPerStep(L.Callback):
        """The raw weights after each optimizer step (global_step counts them)."""

        def __init__(self):
            self.weights: dict[int, dict[str, torch.Tensor]] = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.weights[trainer.global_step] = {
                k: v.detach().clone() for k, v in pl_module.net.named_parameters()
            }

    seen = WeightsPerStep()
    batches = [{"rain": torch.rand(3, 16, 16), "clean": torch.rand(3, 16, 16)} for _ in range(6)]
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[seen],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=1))
    assert trainer.global_step == 3 and sorted(seen.weights) == [0, 1, 2, 3]  # 6 batches, 3 optimizer steps
    expected = start
    for step in (1, 2, 3):  # one update per optimizer step, with the decay of that step
        decay = min(0.5, (1 + step) / (10 + step))
        expected = {k: decay * v + (1 - decay) * seen.weights[step][k] for k, v in expected.items()}
    for name, averaged in module.ema.named_parameters():
        torch.testing.assert_close(averaged, expected[name], rtol=0, atol=1e-6, msg=name)


def test_validation_reports_each_data_set_apart(tmp_path):
    heavy, light = make_folder(tmp_path / "heavy", n=2), make_folder(tmp_path / "light", n=3, seed=1)
    pairs = find_pairs(heavy) + find_pairs(light)
    sets = ["heavy"] * 2 + ["light"] * 3
    loader = DataLoader(PairedDataset(pairs, sets=sets), batch_size=1)
    net = tiny_net()
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (logged,) = trainer.validate(DerainLitModule(net, sample_images=0), loader, verbose=False)
    expected = {}
    for name, group in (("heavy", pairs[:2]), ("light", pairs[2:])):
        metrics = DerainMetrics()
        with torch.no_grad():
            for rain_path, clean_path in group:
                rain, clean = (to_tensor(read_rgb(p))[None] for p in (rain_path, clean_path))
                metrics.update(net(rain).clamp(0, 1), clean)
        expected[name] = {k: float(v) for k, v in metrics.compute().items()}
    for name in ("heavy", "light"):
        assert logged[f"val/{name}/psnr_y"] == pytest.approx(expected[name]["psnr_y"], abs=1e-3)
        assert logged[f"val/{name}/ssim_y"] == pytest.approx(expected[name]["ssim_y"], abs=1e-4)
    assert "val/psnr_y" in logged  # and the whole validation

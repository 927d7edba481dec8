"""``DerainLitModule``: the loss, the schedule, starting weights, weight averaging with Lightning's callback, sample
images, validation per data set, metrics that move with the module."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from helpers import TINY, tiny_net
from lightning.pytorch.callbacks import EMAWeightAveraging
from torch.utils.data import DataLoader
from torchmetrics import Metric
from training_helpers import make_folder

from derain.data import PairedDataset
from derain.inference import WeightsError, load_model
from derain.io import read_rgb, to_tensor
from derain.metrics import DerainMetrics
from derain.models import DerainNet, network_record
from derain.pairing import find_pairs
from derain.train import (
    DerainLitModule,
    LastCheckpoint,
    NonFiniteLossError,
    SampleImages,
    charbonnier_loss,
    load_init_weights,
)
from derain.train.lit import FFT_WEIGHT, charbonnier_fft_loss, fine_rain_left_term, rain_left_weight
from derain.weights import STARTED_KEY, read_checkpoint_net, save_net, tensors_sha256


def test_charbonnier_is_smooth_l1():
    a, b = torch.zeros(4), torch.tensor([0.0, 1.0, -2.0, 0.5])
    assert charbonnier_loss(a, b, eps=0).item() == pytest.approx(b.abs().mean().item())
    assert charbonnier_loss(a, a, eps=1e-3).item() == pytest.approx(1e-3)


def test_the_fft_loss_adds_the_l1_of_the_spectra_difference():
    # a constant c on 2×2 against zeros: one non-zero coefficient (DC = 4c) of 2×2 complex ones (8 real numbers)
    c = 0.5
    loss = charbonnier_fft_loss(torch.zeros(1, 1, 2, 2), torch.full((1, 1, 2, 2), c))
    assert loss.item() == pytest.approx(math.sqrt(c * c + 1e-6) + FFT_WEIGHT * 4 * c / 8)
    same = torch.rand(2, 3, 8, 8)
    assert charbonnier_fft_loss(same, same).item() == pytest.approx(1e-3)


def test_rain_left_is_weighted_and_a_clean_input_is_not():
    clean = torch.tensor([0.2, 0.2, 0.2, 0.5])
    rain = torch.tensor([0.8, 0.8, 0.8, 0.5])  # three rainy elements, one clean
    pred = torch.tensor([0.5, 0.0, 0.2, 0.6])  # rain left, over-removed, exact, changed a clean element
    assert rain_left_weight(pred, clean, rain, 3.0).tolist() == [3.0, 1.0, 1.0, 1.0]
    weighted = charbonnier_loss(pred, clean, eps=0, weight=rain_left_weight(pred, clean, rain, 3.0))
    assert weighted.item() == pytest.approx((3 * 0.3 + 0.2 + 0 + 0.1) / 6)
    # darker rain (rain below clean) is left when the prediction stays below too
    assert rain_left_weight(torch.tensor([0.1]), torch.tensor([0.2]), torch.tensor([0.0]), 2.0).item() == 2.0


def streaks_and_veil(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A clean batch, its rainy version (thin bright streaks over a uniform veil) and a prediction that took the
    veil away and left half of each streak."""
    gen = torch.Generator().manual_seed(seed)
    clean = 0.2 + 0.5 * torch.rand(1, 3, 48, 48, generator=gen)
    streaks = torch.zeros(1, 1, 48, 48)
    streaks[..., 4:44, ::8] = 0.3
    return clean, clean + streaks + 0.1, clean + streaks / 2


def test_the_fine_removal_weight_cannot_be_paid_for_by_lowering_the_light():
    clean, rain, pred = streaks_and_veil()
    term = fine_rain_left_term(pred, clean, rain, 3.0, 2.0)
    assert term.item() > 0.01 and fine_rain_left_term(clean, clean, rain, 3.0, 2.0).item() == 0.0
    assert fine_rain_left_term(pred - 0.05, clean, rain, 3.0, 2.0).item() == pytest.approx(
        term.item(), rel=1e-3
    )
    assert fine_rain_left_term(pred, clean, rain, 1.0, 2.0).item() == 0.0  # weight 1: nothing added
    small = fine_rain_left_term(pred[..., :16, :16], clean[..., :16, :16], rain[..., :16, :16], 3.0, 8.0)
    assert small.item() > 0  # a 49-tap kernel on a 16² image: its borders replicated, not reflected
    with torch.autocast("cpu", dtype=torch.bfloat16):  # computed in float32 all the same
        assert fine_rain_left_term(pred, clean, rain, 3.0, 2.0).dtype == torch.float32
    # what a shift of the whole prediction's light earns: the whole-error weight pays for darkening; the fine
    # term's part of the gradient is nil (the unweighted loss's pull is the median's)
    shift = torch.zeros((), requires_grad=True)
    whole = charbonnier_loss(pred + shift, clean, weight=rain_left_weight(pred + shift, clean, rain, 3.0))
    (pull,) = torch.autograd.grad(whole, shift)
    shift = torch.zeros((), requires_grad=True)
    (fine_pull,) = torch.autograd.grad(fine_rain_left_term(pred + shift, clean, rain, 3.0, 2.0), shift)
    assert pull.item() > 0.1 and abs(fine_pull.item()) < 1e-3 * pull.item()  # the loss rises with the light


def test_the_rain_left_weight_is_the_modules_loss_and_needs_charbonnier():
    module = DerainLitModule(tiny_net(), loss="charbonnier+fft", rain_left_weight=3.0, warmup_steps=1)
    batch = {"rain": torch.rand(1, 3, 16, 16), "clean": torch.rand(1, 3, 16, 16)}
    module.log = lambda *a, **k: None
    _, loss = module.shared_step(batch, "train")
    pred = module.net(batch["rain"])
    weight = rain_left_weight(pred, batch["clean"], batch["rain"], 3.0)
    assert loss.item() == pytest.approx(charbonnier_fft_loss(pred, batch["clean"], weight=weight).item())
    assert loss.item() != pytest.approx(charbonnier_fft_loss(pred, batch["clean"]).item())
    fine = DerainLitModule(tiny_net(), rain_left_weight=3.0, rain_left_sigma=2.0, warmup_steps=1)
    fine.log = module.log
    _, loss = fine.shared_step(batch, "train")
    pred = fine.net(batch["rain"])
    term = fine_rain_left_term(pred, batch["clean"], batch["rain"], 3.0, 2.0)
    assert term.item() > 0 and loss.item() == pytest.approx(
        (charbonnier_loss(pred, batch["clean"]) + term).item()
    )
    _, val_loss = fine.shared_step(batch, "val")  # validation reads the same loss
    assert val_loss.item() == pytest.approx(loss.item())
    with pytest.raises(ValueError, match="rain_left_sigma should be 0 or above"):
        DerainLitModule(tiny_net(), rain_left_weight=3.0, rain_left_sigma=-1.0)
    for weight in (1.0, 0.5):  # the term adds the weight's extra: none, or a reward for leaving rain
        with pytest.raises(ValueError, match="rain_left_weight should be above 1"):
            DerainLitModule(tiny_net(), rain_left_weight=weight, rain_left_sigma=8.0)
    with pytest.raises(ValueError, match="needs a Charbonnier loss"):
        DerainLitModule(tiny_net(), loss="l1", rain_left_weight=2.0)
    with pytest.raises(ValueError, match="rain_left_real weighs the real rain's items apart"):
        DerainLitModule(tiny_net(), rain_left_weight=3.0, rain_left_real=True)
    with pytest.raises(ValueError, match="rain_left_weight should be above 0"):
        DerainLitModule(tiny_net(), rain_left_weight=0.0)


def test_the_fft_loss_option_trains(tmp_path):
    module = DerainLitModule(tiny_net(), loss="charbonnier+fft", warmup_steps=1)
    before = [p.detach().clone() for p in module.net.parameters()]
    fit_tiny(module, tmp_path, [], steps=2)
    assert module.loss_fn is charbonnier_fft_loss
    assert any(not torch.equal(a, b) for a, b in zip(before, module.net.parameters(), strict=True))


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
    net = tiny(seed=2)
    load_init_weights(net, source)
    expected = load_model(source, device="cpu").state_dict()
    got = net.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    assert not torch.equal(tiny(seed=2).state_dict()["embed.1.weight"], expected["embed.1.weight"])

    with pytest.raises(
        WeightsError, match=r"source\.safetensors.*do not fit.*dim: 16 configured, 8 in the file"
    ):
        load_init_weights(tiny(dim=16), source)
    # a setting that holds no weights may differ
    torch.manual_seed(2)
    other = DerainNet(**TINY, grad_checkpoint=True)
    load_init_weights(other, str(source))
    assert torch.equal(other.state_dict()["embed.1.weight"], expected["embed.1.weight"])


def test_init_weights_packaged_fine_tunes_the_shipped_model(monkeypatch, tmp_path):
    import derain.weights

    shipped = save_net(tiny_net(seed=3), tmp_path / "s.safetensors")
    monkeypatch.setattr(derain.weights, "packaged_weights", lambda: shipped)
    net = tiny_net(seed=4)
    started = load_init_weights(net, "packaged")
    expected = load_model(shipped, device="cpu").state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in net.state_dict().items())
    assert started == {"file": "packaged", "tensors_sha256": tensors_sha256(shipped)}


def test_what_a_run_started_from_is_kept_in_its_checkpoints() -> None:
    module, checkpoint = DerainLitModule(tiny_net()), {}
    module.on_save_checkpoint(checkpoint)
    assert STARTED_KEY not in checkpoint  # a run from scratch records nothing
    module.started_from = {"file": "w.safetensors", "tensors_sha256": "ab" * 32}
    module.on_save_checkpoint(checkpoint)
    resumed = DerainLitModule(tiny_net())
    resumed.on_load_checkpoint(checkpoint)
    assert resumed.started_from == module.started_from == checkpoint[STARTED_KEY]


def fit_tiny(module: L.LightningModule, tmp_path, callbacks: list, steps: int = 4, **options) -> L.Trainer:
    """``steps`` optimizer steps of ``module`` on random 16² batches, validating on one of them, no logger."""
    g = torch.Generator().manual_seed(0)
    batches = [{"rain": torch.rand(3, 16, 16, generator=g), "clean": torch.rand(3, 16, 16, generator=g)}]
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=any(isinstance(c, LastCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        default_root_dir=tmp_path,
        **{"limit_val_batches": 0, **options},
    )
    loader = DataLoader(batches * steps * 2, batch_size=1)
    trainer.fit(module, train_dataloaders=loader, val_dataloaders=DataLoader(batches, batch_size=1))
    return trainer


def test_checkpoints_of_an_averaged_run_export_the_average(tmp_path):
    module = DerainLitModule(tiny_net(), lr=0.05, warmup_steps=0)
    ema = EMAWeightAveraging(decay=0.5)
    raw = {}

    class KeepRaw(L.Callback):  # the trained weights after each step
        def on_train_batch_end(self, trainer, pl_module, *args):
            raw.update({k: v.detach().clone() for k, v in pl_module.net.state_dict().items()})

    last = tmp_path / "last.ckpt"  # written after the validation at step 4, the last step
    fit_tiny(
        module, tmp_path, [KeepRaw(), ema, LastCheckpoint(last)], limit_val_batches=1, val_check_interval=2
    )
    average = {k.removeprefix("module.net."): v for k, v in ema._average_model.state_dict().items()}
    assert not torch.allclose(average["embed.1.weight"], raw["embed.1.weight"])
    saved = torch.load(last, weights_only=True)
    assert torch.equal(saved["current_model_state"]["net.embed.1.weight"], raw["embed.1.weight"])  # to resume
    exported, _ = read_checkpoint_net(last)
    assert torch.equal(exported["embed.1.weight"], average["embed.1.weight"])

    # a checkpoint of the old hand-written average (ema.* beside net.*) exports the average too
    state = {f"net.{k}": v for k, v in raw.items()} | {f"ema.{k}": v for k, v in average.items()}
    old = {
        "state_dict": state,
        "derain_net": network_record(module.net),
        "pytorch-lightning_version": "2.6.6",
    }
    torch.save(old, tmp_path / "old.ckpt")
    exported, _ = read_checkpoint_net(tmp_path / "old.ckpt")
    assert torch.equal(exported["embed.1.weight"], average["embed.1.weight"])
    # ... but does not load into the module: one line saying why and what to do
    with pytest.raises(WeightsError, match=r"old model\.ema_decay \(ema\.\* weights\).*derain\.export"):
        DerainLitModule.load_from_checkpoint(tmp_path / "old.ckpt", net=tiny_net(), weights_only=True)


def test_validation_scores_the_averaged_weights_and_samples_show_them(tmp_path):
    module = DerainLitModule(tiny_net(), lr=0.05, warmup_steps=0)
    ema = EMAWeightAveraging(decay=0.5)
    seen = {}

    class AtValidation(
        L.Callback
    ):  # after EMAWeightAveraging (callbacks run in order) swapped the average in
        def on_validation_epoch_start(self, trainer, pl_module):
            seen["validated"] = pl_module.net.state_dict()["embed.1.weight"].clone()
            seen["raw"] = ema._average_model.module.net.state_dict()["embed.1.weight"].clone()

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, *args):
            seen["pred"] = pl_module.net(batch["rain"]).detach()

        def on_validation_epoch_end(self, trainer, pl_module):
            seen["after"] = ema._average_model.module.net.state_dict()["embed.1.weight"].clone()

    samples = SampleImages(count=1)
    fit_tiny(
        module, tmp_path, [ema, AtValidation(), samples], steps=2, limit_val_batches=1, val_check_interval=2
    )
    # swapped: the module validates the average while the callback holds the raw weights, then back
    assert not torch.equal(seen["validated"], seen["raw"]) and torch.equal(seen["after"], seen["validated"])
    (png,) = (tmp_path / "samples").glob("*.png")
    assert png.name == "step0000002_0_0.png"
    row = to_tensor(read_rgb(png))  # rainy | derained | clean, the derained third from the averaged weights
    torch.testing.assert_close(row[:, :, 16:32], seen["pred"][0].clamp(0, 1), atol=1 / 255, rtol=0)


def test_metrics_are_submodules_that_move_with_the_module(tmp_path):
    heavy, light = make_folder(tmp_path / "heavy", n=1), make_folder(tmp_path / "light.v2", n=1, seed=1)
    sets = ["train", "light.v2"]  # names that cannot be a submodule's
    loader = DataLoader(PairedDataset(find_pairs(heavy) + find_pairs(light), sets=sets))
    module = DerainLitModule(tiny_net())
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (logged,) = trainer.validate(module, loader, verbose=False)
    assert {"val/train/psnr_y", "val/light.v2/psnr_y", "val/psnr_y", "val/bias_y"} <= logged.keys()
    names = {name for name, _ in module.named_modules()}
    assert {"metrics.val", "metrics.test", "set_metrics.set0", "set_metrics.set1"} <= names
    module.to("meta")  # .to() reaches every metric (as it does a GPU), the per-set ones included
    metrics = [m for m in module.modules() if isinstance(m, Metric)]
    assert len(metrics) == 5 * 5 and all(m.device.type == "meta" for m in metrics)
    assert not any(k.startswith(("metrics.", "set_metrics.")) for k in module.state_dict())  # keys: the net's


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


def test_validation_reports_each_data_set_apart(tmp_path):
    heavy, light = make_folder(tmp_path / "heavy", n=2), make_folder(tmp_path / "light", n=3, seed=1)
    pairs = find_pairs(heavy) + find_pairs(light)
    sets = ["heavy"] * 2 + ["light"] * 3
    loader = DataLoader(PairedDataset(pairs, sets=sets), batch_size=1)
    net = tiny_net()
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (logged,) = trainer.validate(DerainLitModule(net), loader, verbose=False)
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


def test_real_rain_items_take_the_removal_weight_on_the_whole_error() -> None:
    """With ``rain_left_real``, items marked ``real_rain`` take the weight on the whole error (as sigma 0), the
    others on the fine part only (as ``rain_left_sigma`` alone); without it the marks change nothing."""
    torch.manual_seed(0)
    rain, clean = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 16, 16)
    module = DerainLitModule(
        tiny_net(), rain_left_weight=3.0, rain_left_sigma=2.0, rain_left_real=True, warmup_steps=1
    )
    module.log = lambda *a, **k: None
    pred = module.net(rain)
    whole = charbonnier_loss(pred, clean, weight=rain_left_weight(pred, clean, rain, 3.0))
    fine = charbonnier_loss(pred, clean) + fine_rain_left_term(pred, clean, rain, 3.0, 2.0)
    assert whole.item() != pytest.approx(fine.item())
    for flags, expected in (([True, True], whole), ([False, False], fine)):
        _, loss = module.shared_step(
            {"rain": rain, "clean": clean, "real_rain": torch.tensor(flags)}, "train"
        )
        assert loss.item() == pytest.approx(expected.item())
    plain = DerainLitModule(tiny_net(), rain_left_weight=3.0, rain_left_sigma=2.0, warmup_steps=1)
    plain.net.load_state_dict(module.net.state_dict())
    plain.log = module.log
    _, loss = plain.shared_step(
        {"rain": rain, "clean": clean, "real_rain": torch.tensor([True, True])}, "train"
    )
    assert loss.item() == pytest.approx(fine.item())  # the marks are read only with rain_left_real
    # the fine term of the unmarked items alone: item 1's own term, its mean taken over the whole batch
    only = fine_rain_left_term(pred, clean, rain, 3.0, 2.0, items=torch.tensor([False, True]))
    alone = fine_rain_left_term(pred[1:], clean[1:], rain[1:], 3.0, 2.0)
    assert only.item() == pytest.approx(alone.item() / 2)
    # a mixed batch: the weighted Charbonnier's mean is over the weights' sum S, so each item's terms keep their
    # own kind's balance when the others' fine term is scaled by elements / S
    _, mixed = module.shared_step(
        {"rain": rain, "clean": clean, "real_rain": torch.tensor([True, False])}, "train"
    )
    c = torch.sqrt((pred - clean).square() + 1e-6)
    w = torch.ones_like(c)
    w[:1] = rain_left_weight(pred[:1], clean[:1], rain[:1], 3.0)
    total = w.sum()
    assert total > w.numel()  # item 0 leaves rain somewhere: the scale is not 1
    expected = ((w * c).sum() + w.numel() * only) / total
    assert mixed.item() == pytest.approx(expected.item())
    with pytest.raises(KeyError, match="rain_left_real needs batches that mark real rain"):
        module.shared_step({"rain": rain, "clean": clean}, "train")


def test_real_rain_apart_warns_when_no_training_batch_holds_real_rain(caplog) -> None:
    module = DerainLitModule(
        tiny_net(), rain_left_weight=3.0, rain_left_sigma=2.0, rain_left_real=True, warmup_steps=1
    )
    module.log = lambda *a, **k: None
    batch = {
        "rain": torch.rand(1, 3, 8, 8),
        "clean": torch.rand(1, 3, 8, 8),
        "real_rain": torch.tensor([False]),
    }
    with caplog.at_level("WARNING", logger="derain.train.lit"):
        for _ in range(199):
            module.shared_step(batch, "train")
        assert "real_layer_dirs" not in caplog.text
        module.shared_step(batch, "train")
    assert "none of the first 200 training batches held real rain" in caplog.text

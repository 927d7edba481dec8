"""Training throughput of DerainNet() on this machine, and whether data loading keeps up.

    python benchmarks/train.py                 # 128x128 patches, batch 8, 20 timed steps
    python benchmarks/train.py --steps 5 --quick
    python benchmarks/train.py --steps 4 --quick --no-compile --dims 32 40 48   # widths: float32 vs bf16

Side by side in one run: a training step (forward, Charbonnier loss, backward, AdamW) in channels-last and in
NCHW memory format, and the time the DataLoader needs to produce one batch of synthetic rain with transplant
(the embedded default's data path) in the main process, plain and with the rain-layer augmentation of
configs/derain-small/stage2-augment.yaml (gain, resize, turn in one warp; a second layer for some), and procedural
rain for a batch, numpy per image (loader workers) against ``derain.synth.BatchRain`` (kornia, on the batch's
device; here the CPU), and a training step eager against ``CompileTraining`` (``torch.compile``) at the batch
shapes of configs/rain100h.yaml and of the shipped recipe (derain-small, stage 3 on), timed alternately, with
the one-off compile time. Prints a table
and one ``RESULT {...}`` JSON line with steps/s, peak memory growth, the loader/step ratio (target: loader < 10%
of a step, i.e. workers keep up) and the augmented/plain loader ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from common import report, reset_peak, status_kb, yardstick
from torch import Tensor

from derain.data import Synthesis, SyntheticRainDataset
from derain.models import DerainNet
from derain.synth import BatchRain, LayerAugment, add_rain, builtin_clean_images, rain_residual
from derain.train import charbonnier_loss
from derain.train.callbacks import compile_forward
from derain.train.precision import auto_precision

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
AUGMENT_RECIPE = CONFIGS / "derain-small" / "stage2-augment.yaml"
COMPILE_SHAPES = {"rain100h": "rain100h.yaml", "shipped recipe": "derain-small/stage3-large-patch.yaml"}
"""Where the batch shapes of the compile comparison come from (data.batch_size, data.patch_size)."""


def recipe_augment() -> LayerAugment:
    """The rain-layer augmentation of the augment stage's config."""
    return LayerAugment(**yaml.safe_load(AUGMENT_RECIPE.read_text())["data"]["synthesis"]["layer_augment"])


def train_step(fwd: torch.nn.Module, opt: torch.optim.Optimizer, x: Tensor, y: Tensor) -> Tensor:
    """One training step (forward, Charbonnier loss, backward, AdamW); returns the detached output."""
    out = fwd(x)
    loss = charbonnier_loss(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return out.detach()


def step_times(batch: int, patch: int, steps: int, channels_last: bool) -> tuple[float, float]:
    """Median seconds per training step and peak RSS growth (MB) over the timed steps."""
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = DerainNet().to(memory_format=fmt)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.rand(batch, 3, patch, patch).contiguous(memory_format=fmt)
    y = torch.rand(batch, 3, patch, patch)

    def step() -> None:
        train_step(net, opt, x, y)

    step()  # warm-up (allocations, oneDNN kernels)
    base = reset_peak()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times), (status_kb("VmHWM") - base) / 1024


def alternately(step, steps: int) -> tuple[float, float]:
    """Median seconds of ``step(0)`` and ``step(1)``, timed in turn ``steps`` times each (noise hits both alike)."""
    times: list[list[float]] = [[], []]
    for _ in range(steps):
        for i in (0, 1):
            t = time.perf_counter()
            step(i)
            times[i].append(time.perf_counter() - t)
    first, second = (statistics.median(ts) for ts in times)
    return first, second


def precision_step_times(batch: int, patch: int, steps: int, dim: int = 24) -> dict[str, float]:
    """A training step of ``DerainNet(dim=dim)`` in float32 and under CPU bf16 autocast (what ``--trainer.precision
    bf16-mixed`` runs: the loss and the residual add stay float32), same start, timed alternately (medians,
    seconds), and how far the two outputs of the first step lie apart."""
    torch.manual_seed(0)
    nets = [DerainNet(dim=dim).to(memory_format=torch.channels_last) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opts = [torch.optim.AdamW(net.parameters(), lr=1e-4) for net in nets]
    x = torch.rand(batch, 3, patch, patch).contiguous(memory_format=torch.channels_last)
    y = torch.rand(batch, 3, patch, patch)

    def step(i: int) -> Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=i == 1):
            out = nets[i](x)
            loss = charbonnier_loss(out.float(), y)
        opts[i].zero_grad(set_to_none=True)
        loss.backward()
        opts[i].step()
        return out.detach().float()

    diff = (step(0) - step(1)).abs().max().item()  # also the warm-up
    fp32, bf16 = alternately(step, steps)
    return {"fp32_s": fp32, "bf16_s": bf16, "first_step_max_abs_diff": diff}


def precision_cell(times: dict[str, float], unit: float) -> str:
    """``precision_step_times``' two steps in yardsticks and bf16's gain, as the table prints them."""
    return (
        f"{times['fp32_s'] / unit:.2f} vs {times['bf16_s'] / unit:.2f} yardsticks "
        f"({times['fp32_s'] / times['bf16_s']:.2f}x)"
    )


def config_shape(name: str) -> tuple[int, int]:
    """``(batch_size, patch_size)`` of a bundled config."""
    data = yaml.safe_load((CONFIGS / name).read_text())["data"]
    return data["batch_size"], data["patch_size"]


def compiled_step_times(batch: int, patch: int, steps: int) -> dict[str, float]:
    """A training step of ``DerainNet()`` eager and through ``compile_forward`` (what ``CompileTraining`` runs),
    timed alternately (medians, seconds), the first compiled step's time (the compile), and the outputs' largest
    difference."""
    torch.manual_seed(0)
    nets = [DerainNet(), DerainNet()]
    nets[1].load_state_dict(nets[0].state_dict())
    nets = [net.to(memory_format=torch.channels_last) for net in nets]  # as DerainLitModule trains them
    fwds = [nets[0], compile_forward(nets[1])]
    opts = [torch.optim.AdamW(net.parameters(), lr=1e-4) for net in nets]
    x = torch.rand(batch, 3, patch, patch).contiguous(memory_format=torch.channels_last)
    y = torch.rand(batch, 3, patch, patch)

    def step(i: int) -> Tensor:
        return train_step(fwds[i], opts[i], x, y)

    first = step(0)
    t = time.perf_counter()
    diff = (step(1) - first).abs().max().item()
    compile_s = time.perf_counter() - t
    eager, fast = alternately(step, steps)
    return {"eager_s": eager, "compiled_s": fast, "compile_s": compile_s, "max_abs_diff": diff}


def loader_time(batch: int, patch: int, batches: int, augment: LayerAugment | None = None) -> float:
    """Median seconds to build one batch of the synthetic-rain dataset in this process."""
    rng = np.random.default_rng(0)
    clean = builtin_clean_images()
    residuals = [rain_residual(add_rain(img, rng, "heavy", beta=0.0), img) for img in clean[:3]]
    residuals = [(r * 255).round().astype(np.uint8) if r.dtype != np.uint8 else r for r in residuals]
    ds = SyntheticRainDataset(
        clean,
        length=batch * batches,
        patch_size=patch,
        pair_layers=residuals,
        # clip(rainy − clean) layers are added (β = 0)
        synthesis=Synthesis(transplant_prob=0.5, layer_augment=augment or LayerAugment(), composite_beta=0.0),
        seed=0,
    )
    times = []
    for b in range(batches):
        t = time.perf_counter()
        items = [ds[b * batch + i] for i in range(batch)]
        torch.stack([it["rain"] for it in items])
        torch.stack([it["clean"] for it in items])
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def procedural_times(batch: int, patch: int, batches: int) -> tuple[float, float]:
    """Median seconds for one batch of procedural rain: numpy per image (the loader workers' path) and
    ``BatchRain`` on the whole batch (the ``render_on_device`` path), both on this CPU."""
    rng = np.random.default_rng(0)
    crops = [img[:patch, :patch] for img in builtin_clean_images()]
    clean = (
        torch.stack([torch.from_numpy(crops[i % len(crops)]).permute(2, 0, 1) for i in range(batch)]) / 255
    )
    rain = BatchRain()
    rain(clean)  # warm-up
    numpy_t, batch_t = [], []
    for b in range(batches):
        t = time.perf_counter()
        for i in range(batch):
            add_rain(crops[(b + i) % len(crops)], rng)
        numpy_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        rain(clean)
        batch_t.append(time.perf_counter() - t)
    return statistics.median(numpy_t), statistics.median(batch_t)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--patch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="skip the (slow) NCHW comparison")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="skip the torch.compile comparison (it compiles DerainNet twice: minutes on a CPU)",
    )
    parser.add_argument("--compile-steps", type=int, default=8, help="timed steps per side (default 8)")
    parser.add_argument(
        "--dims",
        type=int,
        nargs="*",
        default=[],
        help="also time the float32 vs bf16 step of DerainNet(dim=D) for each D (wider networks, where bf16 "
        "pays more), in yardsticks and against the shipped width's float32 step",
    )
    args = parser.parse_args()

    unit = yardstick()
    t_cl, mem_cl = step_times(args.batch, args.patch, args.steps, channels_last=True)
    prec = precision_step_times(args.batch, args.patch, args.steps)
    auto, why = auto_precision("cpu")  # what --trainer.precision auto trains these CPU steps in
    widths = {d: precision_step_times(args.batch, args.patch, args.steps, dim=d) for d in args.dims}
    batches = max(5, args.steps // 2)
    t_load = loader_time(args.batch, args.patch, batches)
    t_aug = loader_time(args.batch, args.patch, batches, recipe_augment())
    t_numpy, t_batch = procedural_times(args.batch, args.patch, batches)
    result = {
        "batch": args.batch,
        "patch": args.patch,
        "threads": torch.get_num_threads(),
        "steps_per_s": 1 / t_cl,
        "step_ms": t_cl * 1e3,
        "peak_mb": mem_cl,
        "loader_ms_per_batch": t_load * 1e3,
        "loader_over_step": t_load / t_cl,
        "augmented_loader_ms_per_batch": t_aug * 1e3,
        "augmented_over_plain_loader": t_aug / t_load,
        "procedural_numpy_ms": t_numpy * 1e3,
        "procedural_batch_rain_cpu_ms": t_batch * 1e3,
        "batch_rain_over_numpy_cpu": t_batch / t_numpy,
        "yardstick_s": unit,
        "step_yardsticks": t_cl / unit,
        "fp32_step_yardsticks": prec["fp32_s"] / unit,
        "bf16_step_yardsticks": prec["bf16_s"] / unit,
        "bf16_speedup": prec["fp32_s"] / prec["bf16_s"],
        "bf16_first_step_max_abs_diff": prec["first_step_max_abs_diff"],
        "auto_precision": auto,
        "widths": {
            d: {"fp32_step_yardsticks": w["fp32_s"] / unit, "bf16_step_yardsticks": w["bf16_s"] / unit}
            for d, w in widths.items()
        },
    }
    rows = [
        (
            f"train step, batch {args.batch}, {args.patch}x{args.patch}, channels-last",
            f"{t_cl * 1e3:.0f} ms = {1 / t_cl:.2f} steps/s = {t_cl / unit:.2f} yardsticks, peak +{mem_cl:.0f} MB",
        ),
        (
            "the same step, float32 vs bf16 autocast (--trainer.precision bf16-mixed), alternately",
            f"{prec['fp32_s'] * 1e3:.0f} vs {prec['bf16_s'] * 1e3:.0f} ms = {precision_cell(prec, unit)}; first "
            f"outputs differ by {prec['first_step_max_abs_diff']:.1e}",
        ),
        ("what --trainer.precision auto trains in on this CPU", f"{auto}: {why}"),
        ("yardstick (10 convs 48->48 3x3 on 321x481, forward)", f"{unit * 1e3:.0f} ms"),
        (
            "one batch of synthetic rain + transplant (1 process)",
            f"{t_load * 1e3:.0f} ms = {100 * t_load / t_cl:.0f}% of a step",
        ),
        (
            "the same with the augment stage's rain-layer augmentation",
            f"{t_aug * 1e3:.0f} ms = {t_aug / t_load:.2f}x plain, {100 * t_aug / t_cl:.0f}% of a step",
        ),
        (
            "procedural rain for a batch: numpy per image vs BatchRain (kornia) on this CPU",
            f"{t_numpy * 1e3:.0f} vs {t_batch * 1e3:.0f} ms ({t_batch / t_numpy:.1f}x): on a CPU the workers' "
            "path stays the default",
        ),
    ]
    for d, w in widths.items():
        rows.append(
            (
                f"DerainNet(dim={d}) step, float32 vs bf16 autocast",
                f"{precision_cell(w, unit)}; bf16 = {w['bf16_s'] / prec['fp32_s']:.2f}x the dim-24 float32 step",
            )
        )
    if not args.quick:
        t_nchw, mem_nchw = step_times(args.batch, args.patch, max(3, args.steps // 4), channels_last=False)
        result.update(nchw_step_ms=t_nchw * 1e3, nchw_over_channels_last=t_nchw / t_cl)
        rows.append(
            (
                "same step in NCHW",
                f"{t_nchw * 1e3:.0f} ms ({t_nchw / t_cl:.1f}x the channels-last "
                f"time), peak +{mem_nchw:.0f} MB",
            )
        )
    if not args.no_compile:
        for label, config in COMPILE_SHAPES.items():
            batch, patch = config_shape(config)
            c = compiled_step_times(batch, patch, args.compile_steps)
            key = label.replace(" ", "_")
            result[f"compile_{key}"] = {"batch": batch, "patch": patch, **c}
            result[f"compile_{key}_speedup"] = c["eager_s"] / c["compiled_s"]
            rows.append(
                (
                    f"train step of {label} (batch {batch}, {patch}x{patch}): eager vs compiled",
                    f"{c['eager_s'] * 1e3:.0f} vs {c['compiled_s'] * 1e3:.0f} ms "
                    f"({c['eager_s'] / c['compiled_s']:.2f}x); compile {c['compile_s']:.0f} s; "
                    f"outputs differ by {c['max_abs_diff']:.1e}",
                )
            )
    report(rows, result)


if __name__ == "__main__":
    main()

"""Ablation of DerainNet's attention choices: each variant trained for the same short budget, one table.

    python tools/ablation.py                      # 7 variants, ~20 minutes on a 2-core CPU
    python tools/ablation.py --variants hybrid agent-no-bias agent-no-dwc --steps 400 --minutes 4
    python tools/ablation.py --quick              # smoke test: 3 steps per variant on 64 px patches

Every variant sees the same training batches in the same order (drawn once from ``DerainDataModule``: real
Rain100H pairs plus synthetic rain on clean photos, seeded) and starts from the same seed. Training is a plain
loop: AdamW, Charbonnier loss, short linear warm-up, gradient clipping; it stops at ``--steps`` or after
``--minutes``, whichever comes first (the table says how many steps each variant got: on a shared CPU the
step budget is the fair one). Validation: full held-out pairs (``val_from``/``val_fraction``), PSNR/SSIM on
MATLAB Y of 8-bit predictions (``DerainMetrics``). Cost columns: parameters, GMACs (multiply-accumulates of
convolutions and matrix products, ``FlopCounterMode`` / 2) and CPU milliseconds per image, both at 321×481.

Short budgets rank variants by how fast they learn, not by where they end; confirm a finding with a full run
(``python -m derain.fit --config derain-small/stage1.yaml --model.net.init_args.agent_bias false``).
Prints the table and one JSON line (``RESULT {...}``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from derain.data import DerainDataModule, PairSources, Synthesis
from derain.metrics import DerainMetrics
from derain.models import DerainNet
from derain.pairing import DataError
from derain.train import charbonnier_loss

BLOCKS = (1, 2, 2, 2)  # DerainNet's default blocks per level


def uniform(kind: str) -> tuple[tuple[str, ...], ...]:
    """The same mixer in every block of the default layout."""
    return tuple((kind,) * n for n in BLOCKS)


VARIANTS: dict[str, dict[str, Any]] = {
    "hybrid": {},  # the default DerainNet(): agent + TKSA, four ratios
    "tksa-only": {"mixers": uniform("tksa")},
    "agent-only": {"mixers": uniform("agent")},
    "channel": {"mixers": uniform("channel")},  # Restormer's dense channel attention
    "agent-no-bias": {"agent_bias": False},
    "agent-no-dwc": {"agent_dwc": False},
    "ratio-1/2": {"topk_ratios": (0.5,)},  # one top-k ratio instead of four
    "agent-learned": {"agent_source": "learned"},
    "ratio-softmax": {"ratio_weighting": "softmax"},
    "agents-per-level": {"agents": (9, 16, 49, 49)},
}
DEFAULT_VARIANTS = (
    "hybrid",
    "tksa-only",
    "agent-only",
    "channel",
    "agent-no-bias",
    "agent-no-dwc",
    "ratio-1/2",
)
SIZE = (321, 481)  # Rain100H test images (H×W, or W×H)


class SameBatches:
    """The training batches, drawn once from the data module and replayed in the same order for every variant.

    Stored as uint8 (the pairs are 8-bit already), drawn lazily: the first variant that needs batch i draws it.
    """

    def __init__(self, data: DerainDataModule, seed: int):
        torch.manual_seed(seed)  # the loader's shuffle order
        self.data = data
        self.loader = iter(data.train_dataloader())
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        while len(self.batches) <= i:
            try:
                batch = next(self.loader)
            except StopIteration:  # an epoch is over: the next one (reshuffled, deterministic given the seed)
                self.loader = iter(self.data.train_dataloader())
                batch = next(self.loader)
            self.batches.append(tuple((batch[k] * 255).round().to(torch.uint8) for k in ("rain", "clean")))
        return tuple(t.float() / 255 for t in self.batches[i])


def gmacs(net: DerainNet) -> float:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        net(torch.rand(1, 3, *SIZE))
    return counter.get_total_flops() / 2 / 1e9


def ms_per_image(net: DerainNet, repeat: int) -> float:
    x = torch.rand(1, 3, *SIZE)
    times = []
    with torch.no_grad():
        net(x)  # warm-up
        for _ in range(repeat):
            t = time.perf_counter()
            net(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def train(
    net: DerainNet, batches: SameBatches, steps: int, seconds: float, lr: float
) -> tuple[int, float, float]:
    """Train until ``steps`` or ``seconds``; return the steps done, the seconds and the mean of the last 20 losses."""
    net.train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    warmup = max(1, min(50, steps // 10))
    losses: list[float] = []
    elapsed, step = 0.0, 0
    while step < steps and elapsed < seconds:
        rain, clean = batches[step]  # drawing a batch the first time is not charged to the variant
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup)
        loss = charbonnier_loss(net(rain.contiguous(memory_format=torch.channels_last)), clean)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        optimizer.step()
        losses.append(loss.item())
        elapsed += time.perf_counter() - start
        step += 1
    return step, elapsed, statistics.fmean(losses[-20:]) if losses else float("nan")


def validate(net: DerainNet, data: DerainDataModule) -> dict[str, float]:
    net.eval()
    metrics = DerainMetrics()
    with torch.no_grad():
        for batch in data.val_dataloader():
            metrics.update(net(batch["rain"]).clamp(0, 1), batch["clean"])
    return {k: float(v) for k, v in metrics.compute().items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=300, help="training steps per variant (upper bound)")
    parser.add_argument("--minutes", type=float, default=2.0, help="training time per variant (upper bound)")
    parser.add_argument(
        "--data",
        nargs="+",
        default=["$DERAIN_DATA/rain100h-train-mini"],
        help="pair folders ($DERAIN_DATA expanded)",
    )
    parser.add_argument(
        "--clean", nargs="*", default=["$DERAIN_DATA/clean"], help="clean photos (synthetic rain)"
    )
    parser.add_argument("--val-fraction", type=float, default=0.2, help="share of --data pairs held out")
    parser.add_argument("--patch", type=int, default=96)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--repeat", type=int, default=3, help="timed forward passes per variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="3 steps, 64 px patches, 1 val pair, 1 timing")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.patch, args.batch, args.val_fraction, args.repeat = 3, 64, 2, 0.05, 1

    if args.threads:
        torch.set_num_threads(args.threads)
    try:  # the folders' $DERAIN_DATA is expanded here; unset, the error names it
        pairs = PairSources(
            train_dirs=tuple(args.data), val_from=tuple(args.data), val_fraction=args.val_fraction
        )
        synthesis = Synthesis(clean_dirs=tuple(args.clean), transplant_prob=0.8)
    except DataError as err:
        parser.error(str(err))
    data = DerainDataModule(
        pairs=pairs,
        synthesis=synthesis,
        patch_size=args.patch,
        batch_size=args.batch,
        num_workers=0,
        seed=args.seed,
    )
    data.setup("fit")
    batches = SameBatches(data, args.seed)
    print(
        f"{len(data.split.train)} training pairs + synthetic rain on {len(data.pool.photos)} photos, "
        f"{len(data.split.val)} validation pairs; budget {args.steps} steps or {args.minutes} min per variant, "
        f"batch {args.batch}×{args.patch}², {torch.get_num_threads()} threads",
        flush=True,
    )

    rows = []
    for name in args.variants:
        torch.manual_seed(args.seed)
        net = DerainNet(**VARIANTS[name]).to(memory_format=torch.channels_last)
        row: dict[str, Any] = {
            "variant": name,
            "params_m": sum(p.numel() for p in net.parameters()) / 1e6,
            "gmacs": gmacs(net.eval()),
        }
        row["steps"], row["train_s"], row["loss"] = train(
            net, batches, args.steps, args.minutes * 60, args.lr
        )
        row.update(validate(net, data))
        row["ms_per_image"] = ms_per_image(net.eval(), args.repeat)
        rows.append(row)
        print(f"  {name}: {row['steps']} steps, PSNR-Y {row['psnr_y']:.2f} dB", flush=True)

    header = (
        f"{'variant':<17}{'params':>8}{'GMACs':>8}{'ms/img':>9}{'steps':>7}{'train s':>9}{'loss':>8}"
        f"{'PSNR-Y':>8}{'SSIM-Y':>8}"
    )
    print(f"\n{header}\n{'-' * len(header)}")
    for r in rows:
        print(
            f"{r['variant']:<17}{r['params_m']:>7.3f}M{r['gmacs']:>8.2f}{r['ms_per_image']:>9.0f}{r['steps']:>7}"
            f"{r['train_s']:>9.0f}{r['loss']:>8.4f}{r['psnr_y']:>8.2f}{r['ssim_y']:>8.4f}"
        )
    print(
        f"(GMACs and ms/img at {SIZE[0]}×{SIZE[1]}; PSNR/SSIM on MATLAB Y of {len(data.split.val)} held-out pairs)"
    )
    print("RESULT " + json.dumps({"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()

"""Which network learns rain best for the same data and steps? Arms of DerainNet trained from scratch, one table.

    DERAIN_DATA=../shared/data python tools/architectures.py runs/architectures                    # every arm
    python tools/architectures.py runs/arch --data ../shared/data --arms base stride1-d16 fullres --jobs 3
    python tools/architectures.py runs/arch-quick --quick                  # smoke test: 2 arms, 3 steps, 32 px
    python tools/architectures.py runs/arch-heavy --rain heavy             # generated heavy rain, 21 real pairs

Every arm (``ARMS``: DerainNet ``init_args`` and a loss) trains from scratch through ``python -m derain.fit`` with
one budget: ``--steps`` of ``--batch`` × ``--patch``², seed 0, lr 8e-4 after 100 warm-up steps, ``--precision``,
``trainer.accelerator: auto`` (a GPU where there is one). The data are the recipe's light rain: RainTrainL's
training split (``$DERAIN_DATA/raintrainl``; its seeded 20 % hold-out, 40 pairs, data seed 0, stays out) as pairs,
and its training rain layers transplanted onto the BSDS500 photos (``clean/bsds500-leakfree``; photos showing a
held-out background leave the pool, by content, in the data module). With ``--rain heavy`` the data are
``tools/generators.py``'s generated heavy rain instead (its ``rain100h+layered`` arm: styles ``rain100h`` and
``layered``, one drawn a sample, no real pair or layer) on the BSDS photos that show none of the 21 real heavy
pairs' backgrounds. Each arm validates and keeps a checkpoint at every quarter of the budget.

Scores, full images, per pair (MATLAB-Y PSNR of 8-bit outputs, ``derain.evaluate``), and paired differences arm −
first arm with a 95 % bootstrap interval: RainTrainL's held-out 40 and Rain200L's 3 pairs (``rain200l-samples``);
with ``--rain heavy`` the 21 real heavy pairs (Rain100H's 18, Rain200H's 3: none seen in training). Costs:
parameters; inference yardsticks (one forward of a 321×481 photo on the CPU, 2 threads, divided by the yardstick:
10 convs 48→48 3×3 on a 321×481 map, timed beside it); step yardsticks (a training forward + backward of 8×3×128²
on the CPU, 2 threads); seconds a step of the arm's own run (from the training seconds its quarter checkpoints'
Lightning ``Timer`` counted: steps between the first and the last quarter, with their validations, a resumed run's
time away left out; with ``--jobs`` the arms share the machine; an ``OUT`` made before arms had a ``Timer`` holds
another config and is refused: use a new one). **Equal CPU time**: each arm's score on the first set (RainTrainL's
40, or the 21 heavy pairs) at the last quarter checkpoint whose CPU cost (steps × step yardsticks) does not exceed
the first arm's full budget (the step used is shown).

An arm's folder ``OUT/ARM`` holds its config, its Lightning run, ``scores.json`` and ``costs.json``; a finished arm
is not trained again, an interrupted one resumes from its last quarter. Prints the table (also ``OUT/table.md``)
and one ``RESULT {...}`` JSON line; ``OUT/summary.json`` has the same (written atomically). One ``OUT`` holds one
budget and one ``--rain``: an arm's folder made under another stops the tool with one line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from research import (
    HEAVY,
    PHOTOS,
    add_data_argument,
    generated_heavy_data,
    held_out,
    load_weights,
    paired_difference,
    photo_folder,
    train_run,
    write_result,
)

from derain.evaluate import evaluate
from derain.inference.timing import yardstick
from derain.io import atomic_output, list_images
from derain.models import DerainNet
from derain.pairing import find_pairs
from derain.train.lit import LOSSES
from derain.train.precision import auto_precision
from derain.weights import export_checkpoint, load_checkpoint

LIGHT, RAIN200L = "raintrainl", "rain200l-samples"
SIZE = (321, 481)  # a Rain100H/BSDS photo (H×W)
STEP_SHAPE = (8, 3, 128, 128)  # the step yardstick's batch
THREADS = 2
BLOCKS_2444 = {
    "blocks": (2, 4, 4, 4),
    "mixers": (("agent", "agent"),) + (("tksa", "agent", "tksa", "agent"),) * 3,
}
ARMS: dict[str, dict[str, Any]] = {
    "base": {},  # today's DerainNet(): embed_stride 2, dim 24
    "stride1-d16": {"net": {"embed_stride": 1, "dim": 16}},
    "stride1-d24": {"net": {"embed_stride": 1}},
    "fullres": {"net": {"full_res_mixers": ("tksa",), "full_res_dim": 16}},
    "fullres2": {"net": {"full_res_mixers": ("tksa", "agent"), "full_res_dim": 16}},
    "d32": {"net": {"dim": 32}},
    "d48": {"net": {"dim": 48}},
    "blocks2444": {"net": BLOCKS_2444},
    # today's network, Charbonnier + 0.05 × L1 of the FFT difference (the issue's "frequency or edge term": the
    # frequency one; the arm was named loss-edge until session 33)
    "loss-fft": {"loss": "charbonnier+fft"},
}
QUICK_ARMS = ("base", "loss-fft")
GENERATED = ("rain100h", "layered")
"""The generated heavy rain of ``--rain heavy``: tools/generators.py's ``rain100h+layered`` arm."""
SETS: dict[str, dict[str, tuple[str, ...]]] = {
    "light": {"raintrainl40": (LIGHT,), "rain200l3": (RAIN200L,)},
    "heavy": {"heavy21": HEAVY},
}
"""The scored sets of each ``--rain``, by label: their folders under ``$DERAIN_DATA`` (RainTrainL: its held-out 40
only). The first set is the one paired over for the equal-CPU-time column."""


def net_args(arm: str) -> dict[str, Any]:
    return dict(ARMS[arm].get("net", {}))


def jsonable(value: Any) -> Any:
    """Tuples as lists, so the config is plain YAML."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


# Lightning's Timer, counting only (no duration); its interval given as text, since the saved config cannot
# represent the default's enum
TIMER = {"class_path": "lightning.pytorch.callbacks.Timer", "init_args": {"interval": "step"}}


def quarter(steps: int) -> int:
    """Steps between the saved checkpoints: a quarter of the budget (1 under 4 steps)."""
    return max(1, steps // 4)


def arm_config(arm: str, data: Path, run: Path, args: argparse.Namespace) -> dict:
    """The LightningCLI config of one arm (see the module docstring)."""
    light = str(data / LIGHT)
    every = quarter(args.steps)
    pairs: dict[str, Any] = {
        "train_dirs": [light],
        "val_from": [light],
        "val_fraction": 0.2,
        "val_dirs": [str(data / RAIN200L)],
    }
    synthesis: dict[str, Any] = {
        "clean_dirs": [str(data / PHOTOS)],
        "length": 1000,
        "transplant_prob": 1.0,
        "transplant_from": [light],
    }
    if args.rain == "heavy":  # generated rain only, on the photos that show no heavy pair's background
        pairs, synthesis = generated_heavy_data(data, photo_folder(data, run.parent)[0], GENERATED)
    return {
        "seed_everything": 0,
        "trainer": {
            "default_root_dir": str(run),
            "accelerator": "auto",
            "devices": 1,
            "max_steps": args.steps,
            "val_check_interval": every,
            "check_val_every_n_epoch": None,
            "log_every_n_steps": min(50, every),
            "gradient_clip_val": 0.5,
            "precision": args.precision,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "num_sanity_val_steps": 0,
            "callbacks": [TIMER],  # its training seconds, resumed too
        },
        "model": {
            "net": {"class_path": "derain.models.DerainNet", "init_args": jsonable(net_args(arm))},
            "loss": ARMS[arm].get("loss", "charbonnier"),
            "lr": 0.0008,
            "warmup_steps": 100,
        },
        "data": {
            "pairs": pairs,
            "synthesis": synthesis,
            "patch_size": args.patch,
            "batch_size": args.batch,
            "num_workers": args.workers,
            "seed": 0,  # the recipe's hold-out
        },
        "checkpoint": {"save_top_k": -1},  # every quarter's checkpoint stays (best-STEP.ckpt)
        "export_from": "last",
        "test": False,
    }


def train(arm: str, data: Path, out: Path, args: argparse.Namespace) -> Path:
    """Train one arm (resuming an interrupted run); returns its exported weights."""
    return train_run(out / arm, arm_config(arm, data, out / arm, args), arm)


def checkpoints(run: Path) -> dict[int, Path]:
    """The quarter checkpoints of a run, by step."""
    found = {}
    for path in (run / "checkpoints").glob("best-*.ckpt"):
        step = path.stem.removeprefix("best-")
        if step.isdigit():
            found[int(step)] = path
    return found


def training_seconds(ckpt: Path) -> float | None:
    """The training seconds a checkpoint's Lightning ``Timer`` had counted (an interrupted run's resumed count
    leaves out the time it was not running); None when the run had no ``Timer``."""
    timer = load_checkpoint(ckpt, mmap=True).get("callbacks", {}).get("Timer")
    return None if timer is None else float(timer["time_elapsed"]["train"])


def seconds_a_step(run: Path) -> float | None:
    """Seconds a step between the first and the last quarter checkpoint, by their ``Timer`` counts."""
    saved = checkpoints(run)
    if len(saved) < 2:
        return None
    first, last = min(saved), max(saved)
    start, end = training_seconds(saved[first]), training_seconds(saved[last])
    return None if start is None or end is None else (end - start) / (last - first)


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def score_weights(weights: Path, data: Path, rain: str) -> list[dict]:
    """Per-pair PSNR-Y/SSIM-Y of weights on the sets of ``rain`` (``SETS``), each row labelled with its set."""
    (model,) = load_weights([str(weights)])
    model = model.to(device())
    rows = []
    for label, folders in SETS[rain].items():
        for name in folders:
            folder = data / name
            names = {r.name for r, _ in held_out(folder)} if name == LIGHT else None
            with torch.inference_mode():
                found, _, problems = evaluate(folder / "rain", folder / "norain", model=model, names=names)
            if problems:
                raise SystemExit(f"error: {folder}: {'; '.join(problems)}")
            rows += [
                {"set": label, "pair": f"{name}/{r['name']}", "psnr_y": r["psnr_y"], "ssim_y": r["ssim_y"]}
                for r in found
            ]
    return rows


def cached(path: Path, compute) -> Any:
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(value, indent=1))
    return value


def run_arm(arm: str, data: Path, out: Path, args: argparse.Namespace) -> dict:
    """Train and score one arm: its per-pair scores, its quarter steps and its seconds a step."""
    weights = train(arm, data, out, args)
    rows = cached(weights.parent / "scores.json", lambda: score_weights(weights, data, args.rain))
    for step in sorted(checkpoints(weights.parent))[:-1]:  # scored now: a run stopped later keeps them
        score_at(arm, step, data, out, args.rain)
    print(f"[{arm}] scored {len(rows)} pairs, and its earlier checkpoints", flush=True)
    return {
        "rows": rows,
        "steps": sorted(checkpoints(weights.parent)),
        "s_per_step": seconds_a_step(weights.parent),
    }


def score_at(arm: str, step: int, data: Path, out: Path, rain: str) -> list[dict]:
    """Per-pair scores of an arm's quarter checkpoint (exported beside it once; cached)."""
    run = out / arm
    weights = run / f"step-{step}.safetensors"
    if not weights.is_file():
        with atomic_output(weights) as tmp:
            export_checkpoint(checkpoints(run)[step], tmp)
    return cached(run / f"scores-step-{step}.json", lambda: score_weights(weights, data, rain))


# costs, measured in this process on the CPU


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def costs(arm: str, repeats: int) -> dict:
    """Parameters, inference and training-step yardsticks of an arm (CPU, ``THREADS`` threads)."""
    torch.manual_seed(0)
    net = DerainNet(**net_args(arm)).to(memory_format=torch.channels_last)
    loss_fn = LOSSES[ARMS[arm].get("loss", "charbonnier")]
    photo = torch.rand(1, 3, *SIZE).contiguous(memory_format=torch.channels_last)
    rain, clean = (
        torch.rand(*STEP_SHAPE).contiguous(memory_format=torch.channels_last),
        torch.rand(*STEP_SHAPE),
    )

    def infer():
        with torch.inference_mode():
            net.eval()(photo)

    def step():
        net.train()
        net.zero_grad(set_to_none=True)
        loss_fn(net(rain), clean).backward()

    unit = yardstick(repeats)
    infer_s, step_s = median_seconds(infer, repeats), median_seconds(step, repeats)
    unit = (unit + yardstick(repeats)) / 2  # timed before and after: a shared machine's load cancels
    return {
        "params": sum(p.numel() for p in net.parameters()),
        "infer_yd": infer_s / unit,
        "step_yd": step_s / unit,
        "yardstick_s": unit,
    }


def measure_costs(arms: list[str], out: Path, repeats: int) -> dict[str, dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        yardstick(3)  # warm-up: a process's first convolutions ran 2x slower here, and the first arm paid it
        return {arm: cached(out / arm / "costs.json", lambda arm=arm: costs(arm, repeats)) for arm in arms}
    finally:
        torch.set_num_threads(threads)


# the table


def mean(rows: list[dict], name: str) -> float:
    values = [r["psnr_y"] for r in rows if r["set"] == name]
    if not values:  # scores cached by an older version of this tool, under other labels
        raise SystemExit(f"error: no scores of {name} in an arm's cache; delete OUT/*/scores*.json and rerun")
    return float(np.mean(values))


def paired(rows: list[dict], base: list[dict], name: str) -> dict:
    kept = [(r, b) for r, b in zip(rows, base, strict=True) if r["set"] == name]
    if any(r["pair"] != b["pair"] for r, b in kept):
        raise SystemExit("error: the arms' scores list different pairs; delete OUT/*/scores*.json and rerun")
    return paired_difference([r["psnr_y"] for r, _ in kept], [b["psnr_y"] for _, b in kept]) | {
        "n": len(kept)
    }


def equal_cpu_step(steps: list[int], arm_yd: float, base_budget_yd: float) -> int | None:
    """The last saved step whose CPU cost (steps × step yardsticks) does not exceed the first arm's budget."""
    fitting = [s for s in steps if s * arm_yd <= base_budget_yd * (1 + 1e-9)]
    return max(fitting) if fitting else None


def summarise(
    results: dict[str, dict], cost: dict[str, dict], data: Path, out: Path, budget: int, rain: str
) -> dict:
    """Each arm's means per set (``SETS[rain]``'s labels), paired differences (``d_LABEL``), costs, and its first
    set's score at equal CPU time."""
    first = next(iter(results))
    base_rows = results[first]["rows"]
    primary = next(iter(SETS[rain]))
    summary = {}
    for arm, result in results.items():
        rows = result["rows"]
        entry: dict[str, Any] = {label: mean(rows, label) for label in SETS[rain]}
        entry |= {"s_per_step": result["s_per_step"], "saved_steps": result["steps"]}
        if arm != first:
            entry |= {f"d_{label}": paired(rows, base_rows, label) for label in SETS[rain]}
        if arm in cost:
            entry |= cost[arm]
            if first in cost:
                step = equal_cpu_step(result["steps"], cost[arm]["step_yd"], budget * cost[first]["step_yd"])
                entry["equal_cpu_step"] = step
                if step is not None:
                    at = rows if step == budget else score_at(arm, step, data, out, rain)
                    entry["equal_cpu"] = mean(at, primary)
        summary[arm] = entry
    return summary


def interval(d: dict | None) -> str:
    if d is None:
        return "—"
    return f"{d['mean']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]"


def table(summary: dict, budget: int, rain: str) -> str:
    first, labels = next(iter(summary)), list(SETS[rain])
    data = (
        "RainTrainL's training split" if rain == "light" else f"generated heavy rain ({'+'.join(GENERATED)})"
    )
    lines = [
        f"Arms trained {budget} steps from scratch on {data}; Δ = arm − {first} "
        "(paired, 95 % bootstrap interval); PSNR-Y in dB; yd = yardsticks (CPU, 2 threads).",
        "",
        "| arm | params | infer yd | step yd | s/step (run) | "
        + " | ".join(f"{label} | Δ" for label in labels)
        + f" | equal CPU time: {labels[0]} | at step |",
        "|---|---:|---:|---:|---:|" + "---:|---|" * len(labels) + "---:|---:|",
    ]

    def num(value, fmt):
        return "—" if value is None else format(value, fmt)

    for arm, s in summary.items():
        sets = " | ".join(f"{s[label]:.2f} | {interval(s.get(f'd_{label}'))}" for label in labels)
        lines.append(
            f"| {arm} | {num(s.get('params'), ',')} | {num(s.get('infer_yd'), '.2f')} | "
            f"{num(s.get('step_yd'), '.2f')} | {num(s['s_per_step'], '.3f')} | {sets} | "
            f"{num(s.get('equal_cpu'), '.2f')} | {num(s.get('equal_cpu_step'), 'd')} |"
        )
    return "\n".join(lines) + "\n"


# the command line


def quick_data(data: Path, out: Path, rain: str) -> Path:
    """``OUT/quick-data-RAIN``: links to 12 BSDS photos and 10 RainTrainL pairs and 1 Rain200L pair, or with
    ``rain`` heavy 2 pairs of each heavy folder (made once)."""
    folder = out / f"quick-data-{rain}"
    if folder.is_dir():
        return folder
    tmp = out / f".quick-data-{rain}.partial"
    counts = ((LIGHT, 10), (RAIN200L, 1)) if rain == "light" else tuple((name, 2) for name in HEAVY)
    for name, count in counts:
        for rain, clean in find_pairs(data / name)[:count]:
            for path, kind in ((rain, "rain"), (clean, "norain")):
                link = tmp / name / kind / path.name
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.exists():
                    link.symlink_to(path.resolve())
    for photo in list_images(data / PHOTOS, recursive=True)[:12]:
        link = tmp / PHOTOS / photo.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(photo.resolve())
    tmp.rename(folder)
    return folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the arms' runs and the summary")
    add_data_argument(parser, required=False)
    parser.add_argument(
        "--arms", nargs="+", default=None, help=f"arms, the first the reference: {list(ARMS)}"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps (a multiple of 4; default 800)"
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--patch", type=int, default=None, help="training patch side (default 128)")
    parser.add_argument(
        "--precision",
        default=None,
        help="the trainer's precision (default: what precision: auto picks here, derain.train.precision)",
    )
    parser.add_argument(
        "--rain",
        choices=tuple(SETS),
        default="light",
        help="light: RainTrainL's pairs and layers, scored on its 40 and Rain200L's 3 (default); heavy: "
        "generated heavy rain only, scored on the 21 real heavy pairs",
    )
    parser.add_argument("--workers", type=int, default=2, help="data loader workers of each arm's run")
    parser.add_argument("--jobs", type=int, default=1, help="arms trained at once (subprocesses)")
    parser.add_argument("--no-costs", action="store_true", help="skip the CPU cost measurements")
    parser.add_argument(
        "--quick", action="store_true", help=f"smoke test: arms {list(QUICK_ARMS)}, 3 steps, 32 px, 10 pairs"
    )
    args = parser.parse_args(argv)
    args.arms = args.arms or list(QUICK_ARMS if args.quick else ARMS)
    args.steps = args.steps or (3 if args.quick else 800)
    args.patch = args.patch or (32 if args.quick else 128)
    args.precision = args.precision or auto_precision()[0]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}: expected some of {list(ARMS)}")
    if len(set(args.arms)) != len(args.arms):
        parser.error(f"an arm is named twice: {args.arms}")
    if args.steps < 1 or (args.steps >= 4 and args.steps % 4) or args.batch < 1 or args.patch < 32:
        parser.error(
            f"--steps must be under 4 or a multiple of 4, --batch >= 1 and --patch >= 32; got {args.steps}, "
            f"{args.batch}, {args.patch}"
        )
    if args.jobs < 1 or args.workers < 0:
        parser.error(f"--jobs must be >= 1 and --workers >= 0, got {args.jobs}, {args.workers}")
    if args.data is None:
        parser.error(
            "set --data or $DERAIN_DATA to the folder that holds the data sets (e.g. ../shared/data)"
        )
    needed = (LIGHT, RAIN200L, PHOTOS) if args.rain == "light" else (*HEAVY, PHOTOS)
    for name in needed:
        if not (args.data / name).is_dir():
            parser.error(f"{args.data / name} is missing (--data {args.data}): the arms need {name}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data = quick_data(args.data, args.out, args.rain) if args.quick else args.data
    if args.rain == "heavy":
        photo_folder(data, args.out)  # made once, before the arms' threads each look for it
    lock = threading.Lock()
    results: dict[str, dict] = {}

    def one(arm: str) -> None:
        result = run_arm(arm, data, args.out, args)
        with lock:
            results[arm] = result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(one, arm) for arm in args.arms]
        # the costs are timed meanwhile, each beside the yardstick, on the CPU
        cost = {} if args.no_costs else measure_costs(args.arms, args.out, 1 if args.quick else 3)
        for future in futures:
            future.result()
    ordered = {arm: results[arm] for arm in args.arms}
    summary = summarise(ordered, cost, data, args.out, args.steps, args.rain)
    text = table(summary, args.steps, args.rain)
    print(text)
    with atomic_output(args.out / "table.md") as tmp:
        tmp.write_text(text)
    result = {k: getattr(args, k) for k in ("rain", "steps", "batch", "patch", "precision", "jobs", "quick")}
    result |= {"device": device(), "arms": summary}
    write_result(args.out / "summary.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

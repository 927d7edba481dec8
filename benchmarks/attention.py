"""Attention and network benchmark: fast vs naive, side by side in one run, printed as ratios.

    python benchmarks/attention.py            # full run, a few minutes on a 2-core CPU
    python benchmarks/attention.py --quick    # smaller sizes, for a smoke check

Prints a table and one JSON line (``RESULT {...}``). Peak memory is the growth of the process's resident set size
over its baseline (inputs already allocated): Linux's high-water mark is reset through ``/proc/self/clear_refs``
just before the measured call, so every intermediate tensor counts.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from common import peak_mb, report
from torch.utils._python_dispatch import TorchDispatchMode

from derain.models import DerainNet, agent_attention, topk_channel_attention
from derain.models.attention import reference_topk_channel_attention

RATIOS = (1 / 2, 2 / 3, 3 / 4, 4 / 5)


def timeit(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op produces (to show no N×N attention matrix is formed)."""

    def __init__(self):
        super().__init__()
        self.numel, self.shape, self.op = 0, (), ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.shape, self.op = t.numel(), tuple(t.shape), str(func)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    args = parser.parse_args()
    torch.manual_seed(0)
    repeat = 3 if args.quick else 5
    rows: list[tuple[str, str]] = []
    result: dict[str, float | int | str] = {"threads": torch.get_num_threads()}

    # 1. TKSA: fast vs naive, forward + backward
    c, n_tok = 48, (64 * 64 if args.quick else 128 * 128)
    q, k, v = (torch.randn(1, 1, c, n_tok, requires_grad=True) for _ in range(3))
    w = torch.rand(4, requires_grad=True)

    def fwd_bwd(fn):
        return lambda: fn(q, k, v, RATIOS, w).sum().backward()

    with torch.no_grad():
        err = (
            (
                topk_channel_attention(q, k, v, RATIOS, w)
                - reference_topk_channel_attention(q, k, v, RATIOS, w)
            )
            .abs()
            .max()
            .item()
        )
    t_fast, t_naive = (
        timeit(fwd_bwd(topk_channel_attention), repeat),
        timeit(fwd_bwd(reference_topk_channel_attention), repeat),
    )
    result.update(
        tksa_fast_ms=t_fast * 1e3,
        tksa_naive_ms=t_naive * 1e3,
        tksa_speedup=t_naive / t_fast,
        tksa_max_abs_diff=err,
    )
    rows += [
        (f"TKSA fwd+bwd, c={c}, N={n_tok}: fast / naive", f"{t_fast * 1e3:.2f} ms / {t_naive * 1e3:.2f} ms"),
        ("TKSA speed-up (naive / fast)", f"{t_naive / t_fast:.2f}x  (max |diff| {err:.1e})"),
    ]

    # 2. Agent attention vs full softmax attention over the same tokens
    d, n_agents = 32, 49
    sides = (32, 64) if args.quick else (64, 128)
    for side in sides:
        n = side * side
        q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
        agents = F.adaptive_avg_pool2d(q.reshape(1, side, side, d).permute(0, 3, 1, 2), 7)
        agents = agents.flatten(2).transpose(1, 2).unsqueeze(1)
        with torch.inference_mode():
            t_agent = timeit(lambda q=q, k=k, v=v, a=agents: agent_attention(q, k, v, a, d**-0.5), repeat)
            t_sdpa = timeit(
                lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v), max(1, repeat // 2)
            )
        result[f"agent_ms_{n}"], result[f"sdpa_ms_{n}"] = t_agent * 1e3, t_sdpa * 1e3
        result[f"agent_vs_sdpa_{n}"] = t_sdpa / t_agent
        rows.append(
            (
                f"N={n}, d={d}: agent (n={n_agents}) / SDPA",
                f"{t_agent * 1e3:.2f} ms / {t_sdpa * 1e3:.1f} ms = {t_sdpa / t_agent:.0f}x faster",
            )
        )

    # 3. Agent attention growth with N: time and peak memory
    sides = (32, 64, 128) if args.quick else (64, 128, 256)
    times, mems = [], []
    for side in sides:
        n = side * side
        q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
        agents = torch.randn(1, 1, n_agents, d)
        with torch.inference_mode():
            times.append(timeit(lambda q=q, k=k, v=v, a=agents: agent_attention(q, k, v, a, d**-0.5), repeat))
        with torch.inference_mode():
            mems.append(peak_mb(lambda q=q, k=k, v=v, a=agents: agent_attention(q, k, v, a, d**-0.5)))
        rows.append((f"agent attention N={n}", f"{times[-1] * 1e3:.2f} ms, peak +{mems[-1]:.1f} MB"))
    growth = [times[i + 1] / times[i] for i in range(len(times) - 1)]
    exponent = math.log(times[-1] / times[0]) / math.log(4 ** (len(times) - 1))
    result.update(agent_time_growth_per_4x=max(growth), agent_time_exponent=exponent)
    rows.append(
        (
            "agent time growth per 4x tokens",
            " / ".join(f"{g:.2f}x" for g in growth) + f"  (exponent {exponent:.2f})",
        )
    )

    # 4. DerainNet(): parameters, inference time, peak memory, largest tensor
    h, w = (161, 241) if args.quick else (321, 481)
    net = DerainNet().eval()
    params = sum(p.numel() for p in net.parameters())
    x = torch.rand(1, 3, h, w)
    with torch.inference_mode():
        t_net = timeit(lambda: net(x), repeat)
        spy = LargestTensor()
        with spy:
            net(x)
        mem = peak_mb(lambda: net(x))
    tokens0 = (h // 2) * (w // 2)
    result.update(
        net_params=params,
        net_ms=t_net * 1e3,
        net_peak_mb=mem,
        net_largest_tensor=spy.numel,
        net_tokens_level0=tokens0,
    )
    rows += [
        ("DerainNet() parameters", f"{params / 1e6:.3f} M"),
        (f"DerainNet() inference 3x{h}x{w}", f"{t_net * 1e3:.0f} ms, peak +{mem:.0f} MB"),
        (
            "largest tensor in that forward",
            f"{spy.numel:,} elements {spy.shape} ({spy.op}); N x N at level 0 would be {tokens0**2:,}",
        ),
    ]

    report(rows, result)


if __name__ == "__main__":
    main()

"""A lent GPU machine in one short look, before a leg is spent on it (tools/gpu_leg.sh).

    python tools/gpu_check.py          # versions, the precision `auto` picks, procedural rain and a training step

Prints the packages derain trains with (and exits 1 naming a missing one), what ``precision: auto`` resolves to,
renders a batch of every procedural rain style on the GPU (``BatchRain``, as ``render_on_device`` does), and
times training steps of derain-base's network (16 × 256², bf16 autocast, AdamW) after a warm-up.
"""

from __future__ import annotations

import importlib
import sys
import time

PACKAGES = ("torch", "lightning", "kornia", "albumentations", "jsonargparse", "torchmetrics", "cv2", "einops")


def main() -> int:
    for name in PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            print(f"missing: {name} ({err})")
            return 1
        print(f"{name} {getattr(module, '__version__', '?')}")
    import torch

    from derain.models import DerainNet, grow
    from derain.synth import RAIN_STYLES, BatchRain
    from derain.train.precision import auto_precision

    print("precision auto ->", auto_precision())
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev))
    styles = ("light", "medium", "heavy", "rain100h", "layered")
    rain = BatchRain(tuple(RAIN_STYLES[s] for s in styles)).to(dev)
    clean = torch.rand(16, 3, 256, 256, device=dev)
    rainy = rain(clean)
    print(f"BatchRain on {dev}: {tuple(rainy.shape)}, mean change {float((rainy - clean).abs().mean()):.4f}")
    net = grow(DerainNet(), blocks=(2, 4, 4, 4), full_res_mixers=("tksa",)).to(dev).train()
    net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for i in range(30):
        if i == 10:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = (net(rainy) - clean).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print(
        f"training step, 16 x 256², bf16: {(time.perf_counter() - start) / 20:.4f} s (loss {float(loss):.4f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Render the README figures from the shipped weights (or ``--weights``) into docs/.

    python docs/make_figures.py

- ``docs/results.png``: rainy | derained | clean for the example photos in ``datasets/examples`` (synthetic rain
  on scikit-image photos whose clean originals ship with scikit-image).
- ``docs/agent_attention.png``: for one photo, where four agents of the first agent-attention layer look: the
  broadcast weights ``softmax(Q·Aᵀ·s + B2)`` of each agent over the pixels, as heat maps over the image.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
import torch
from skimage import data as skdata

from derain.inference import load_model, read_image, restore
from derain.io import write_image_atomic
from derain.models.attention import AgentAttention
from derain.models.probes import watch_agents

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [("astronaut", skdata.astronaut), ("coffee", skdata.coffee), ("chelsea", skdata.chelsea)]


def label(image: np.ndarray, text: str) -> np.ndarray:
    out = image.copy()
    cv2.rectangle(out, (0, 0), (8 + 9 * len(text), 22), (0, 0, 0), -1)
    cv2.putText(out, text, (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    return out


def fit_height(image: np.ndarray, height: int) -> np.ndarray:
    scale = height / image.shape[0]
    return cv2.resize(image, (round(image.shape[1] * scale), height), interpolation=cv2.INTER_AREA)


def results_figure(model: torch.nn.Module, height: int = 240) -> np.ndarray:
    rows = []
    for name, original in EXAMPLES:
        rainy = read_image(ROOT / "datasets" / "examples" / f"{name}-rain.jpg")
        derained = restore(model, rainy)
        clean = original()
        row = [
            label(fit_height(img, height), text)
            for img, text in ((rainy, "rainy"), (derained, "derained"), (clean, "clean"))
        ]
        rows.append(np.concatenate(row, axis=1))
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 4), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    return np.concatenate(rows, axis=0)


def attention_figure(model: torch.nn.Module, name: str = "astronaut", shown: int = 4) -> np.ndarray:
    """Input, then the ``shown`` agents of the first agent-attention layer whose maps vary most over the image."""
    layer = next(m for m in model.modules() if isinstance(m, AgentAttention))
    rainy = read_image(ROOT / "datasets" / "examples" / f"{name}-rain.jpg")
    seen = []
    with watch_agents(layer, lambda _name, weights, size: seen.append((weights, size))):
        restore(model, rainy, tile=0)
    weights, (h, w) = seen[-1]
    maps = weights[0].mean(0).float().cpu().numpy()  # heads averaged: (H·W, n)
    panels = [label(rainy, "input")]
    spread = maps.std(0) / np.maximum(maps.mean(0), 1e-12)
    for j in np.argsort(-spread)[:shown]:
        m = maps[:, j].reshape(h, w)
        lo, hi = np.percentile(m, (2, 98))
        m = np.clip((m - lo) / max(float(hi - lo), 1e-12), 0, 1)
        m = cv2.resize(m, (rainy.shape[1], rainy.shape[0]), interpolation=cv2.INTER_LINEAR)
        heat = cv2.cvtColor(
            cv2.applyColorMap((m * 255).astype(np.uint8), cv2.COLORMAP_INFERNO), cv2.COLOR_BGR2RGB
        )
        blend = (0.45 * rainy.astype(np.float32) + 0.55 * heat.astype(np.float32)).astype(np.uint8)
        panels.append(label(blend, f"agent {j}"))
    return np.concatenate([fit_height(p, 200) for p in panels], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--weights", default=None, help="weights file (default: the shipped weights)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    model = load_model(args.weights, device="cpu")
    write_image_atomic(args.out / "results.png", results_figure(model))
    write_image_atomic(args.out / "agent_attention.png", attention_figure(model))
    print(f"wrote {args.out / 'results.png'} and {args.out / 'agent_attention.png'}")


if __name__ == "__main__":
    main()

"""The networks that ship inside the package, by name: ``load_model("derain-small")``, ``--weights derain-small``.

A name stands for a file of this folder (``derain/weights/``); :func:`derain.weights.resolve` turns a name into
that file's path, and a path works wherever a name does. A network ships with one entry of :data:`SHIPPED` once
its file lies in this folder (the package data takes ``weights/*.safetensors``). ``derain models`` lists them.

Example:
    >>> SHIPPED["derain-small"].file
    'derain-small.safetensors'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_NAME", "SHIPPED", "ShippedNet"]


@dataclass(frozen=True)
class ShippedNet:
    """A network that ships: its name, its file, and its speed as measured once (not at every call).

    Args:
        name: what ``load_model`` and ``--weights`` accept.
        file: its weights file's name in ``derain/weights/``.
        yardsticks: one pass of ``restore`` on a 321×481 photo (float32, CPU), in yardsticks: the time of 10
            convolutions 48→48 3×3 on a 321×481 map, forward, timed in the same rounds (``benchmarks/common.py``),
            so the figure compares across machines (``benchmarks/infer.py`` reports it as
            ``restore_321x481_yardsticks``).
        measured: where and how ``yardsticks`` was measured.
    """

    name: str
    file: str
    yardsticks: float
    measured: str


SHIPPED: dict[str, ShippedNet] = {
    net.name: net
    for net in (
        ShippedNet(
            "derain-small",
            "derain-small.safetensors",
            0.45,
            "benchmarks/infer.py --weights derain-small --no-onnx --images 4 --rounds 2, 2026-12-04, a 2-core "
            "Xeon with AVX512-BF16/AMX (yardstick 0.56 s; an AVX2 EPYC read 0.28)",
        ),
    )
}
"""The shipped networks by name, in the order ``derain models`` lists them."""

DEFAULT_NAME = "derain-small"
"""The network ``load_model()`` and the commands use without ``--weights``."""

"""Reading what agent attention does without changing how it runs: forward hooks that hand each agent layer's
broadcast weights to a function, for collapse monitoring (``derain.train.AttentionMonitor``) and attention maps
(``docs/make_figures.py``).

Example:
    >>> from derain.models import DerainNet
    >>> from derain.models.probes import watch_agents
    >>> net, seen = DerainNet(dim=8, blocks=(1,), heads=(1,), mixers=(("agent",),), agents=4).eval(), []
    >>> with watch_agents(net, lambda name, weights, size: seen.append((name, tuple(weights.shape), size))):
    ...     _ = net(torch.rand(1, 3, 16, 16))
    >>> seen
    [('bottleneck.0.attn', (1, 1, 64, 4), (8, 8))]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from .attention import AgentAttention

__all__ = ["watch_agents"]

Watcher = Callable[[str, Tensor, tuple[int, int]], None]
"""Called with the layer's qualified name, its broadcast weights ``(B, heads, H·W, n)`` and the map size (H, W)."""


@contextlib.contextmanager
def watch_agents(net: nn.Module, watcher: Watcher) -> Iterator[dict[str, AgentAttention]]:
    """While inside, every forward of an ``AgentAttention`` layer of ``net`` also gives ``watcher`` its broadcast
    weights (``AgentAttention.broadcast_weights`` of the layer's input, computed again without gradients: one
    more projection per layer and forward). The layers' outputs are unchanged; the hooks are removed on leaving.

    Yields:
        The watched layers by qualified name.
    """
    layers = {name: m for name, m in net.named_modules() if isinstance(m, AgentAttention)}
    handles = []
    for name, layer in layers.items():

        def hook(module: AgentAttention, args: tuple, output: Tensor, name: str = name) -> None:
            x = args[0]
            with torch.no_grad():
                watcher(name, module.broadcast_weights(x).detach(), (int(x.shape[-2]), int(x.shape[-1])))

        handles.append(layer.register_forward_hook(hook))
    try:
        yield layers
    finally:
        for handle in handles:
            handle.remove()

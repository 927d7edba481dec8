"""Attention health during training: agent-collapse entropy and TKSA ratio weights, as a Lightning callback.

Agent attention can *collapse*: if the broadcast weights ``softmax(Q·Aᵀ·s + B2)`` become uniform over the n
agents, every pixel reads the same average of the agents and the global branch carries no spatial information.
The normalised entropy of those weights (mean over pixels, heads and images, divided by ``log n``) measures it:
1.0 is uniform (collapsed), lower is more selective. It is read by forward hooks (``agent_entropies``, through
``derain.models.probes.watch_agents``) that cost one more projection per agent layer; the callback holds them
only while validating.

Register the callback in a config::

    trainer:
      callbacks:
        - class_path: derain.train.AttentionMonitor
          init_args: {threshold: 0.95, patience: 3}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from derain.models.attention import AgentAttention, ChannelAttention, TopKSparseAttention, normalized_entropy
from derain.models.probes import watch_agents

__all__ = ["AttentionMonitor", "agent_entropies", "agent_layers", "ratio_weight_logs", "tksa_layers"]


def _network(module: nn.Module) -> nn.Module:
    """The plain network inside a LightningModule (``.net``; with weight averaging, validation swaps the average
    into it), else the module itself. Names stay short (relative to that network)."""
    net = getattr(module, "net", None)
    return net if isinstance(net, nn.Module) else module


def agent_layers(module: nn.Module) -> dict[str, AgentAttention]:
    """Every agent-attention layer of ``module`` (or of the network it validates), by qualified name."""
    return {name: m for name, m in _network(module).named_modules() if isinstance(m, AgentAttention)}


def tksa_layers(module: nn.Module) -> dict[str, TopKSparseAttention]:
    """Every TKSA layer with learnable ratio weights (dense ``ChannelAttention`` excluded), by name."""
    return {
        name: m
        for name, m in _network(module).named_modules()
        if isinstance(m, TopKSparseAttention) and not isinstance(m, ChannelAttention)
    }


@contextlib.contextmanager
def agent_entropies(module: nn.Module) -> Iterator[dict[str, list[float]]]:
    """While inside, each forward of an agent-attention layer of ``module`` (or of the network it validates)
    appends the layer's normalised broadcast entropy (1.0: every pixel reads all agents alike) to the yielded
    dict, by qualified name. Outputs are unchanged; nothing is recorded outside the block.

    Example:
        >>> with agent_entropies(net) as entropies:            # doctest: +SKIP
        ...     net(batch)
        >>> {name: values[-1] for name, values in entropies.items()}  # doctest: +SKIP
    """
    entropies: dict[str, list[float]] = {}

    def record(name: str, weights: Any, size: tuple[int, int]) -> None:
        entropies.setdefault(name, []).append(float(normalized_entropy(weights.float())))

    with watch_agents(_network(module), record):
        yield entropies


def ratio_weight_logs(module: nn.Module, prefix: str = "attn/tksa_ratio_weights") -> dict[str, float]:
    """``{prefix/<layer>/<ratio>: weight}`` for every TKSA layer, the weights as the attention uses them."""
    logs = {}
    for name, layer in tksa_layers(module).items():
        for ratio, w in zip(layer.ratios, layer.mixing_weights().detach().tolist(), strict=True):
            logs[f"{prefix}/{name}/{ratio:.3g}"] = float(w)
    return logs


class AttentionMonitor(L.Callback):
    """Logs agent-attention entropy and TKSA ratio weights at every validation; warns on agent collapse.

    Logged per validation run:

    - ``attn/agent_entropy/<layer>``: the layer's normalised broadcast entropy, mean over validation batches
      (1.0 = uniform over the agents = collapsed);
    - ``attn/tksa_ratio_weights/<layer>/<ratio>``: each TKSA layer's mixing weight per top-k ratio (after the
      softmax with ``ratio_weighting="softmax"``).

    A layer whose entropy stays above ``threshold`` for ``patience`` validation runs in a row is named in a
    warning (once, until it recovers). The sanity-check validation is not counted, nor are validations before
    ``min_step``: agents start out uniform (entropy ≈ 1) by construction, so early warnings would say nothing.

    Args:
        threshold: normalised entropy above which a layer counts as collapsed.
        patience: validation runs in a row above the threshold before warning.
        min_step: training steps before validations start to count towards a warning.
    """

    def __init__(self, threshold: float = 0.95, patience: int = 3, min_step: int = 1000):
        super().__init__()
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold should be in (0, 1], got {threshold}")
        if patience < 1:
            raise ValueError(f"patience should be at least 1, got {patience}")
        self.threshold = threshold
        self.patience = patience
        self.min_step = min_step
        self.streaks: dict[str, int] = {}
        self._watching = contextlib.ExitStack()
        self._entropies: dict[str, list[float]] = {}

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._watching.close()  # a validation that ended in an exception left its hooks
        self._entropies = self._watching.enter_context(agent_entropies(pl_module))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._watching.close()
        entropies = {name: sum(values) / len(values) for name, values in self._entropies.items() if values}
        logs = {f"attn/agent_entropy/{name}": value for name, value in entropies.items()}
        logs.update(ratio_weight_logs(pl_module))
        if logs:
            pl_module.log_dict(logs, sync_dist=True)
        if not trainer.sanity_checking and trainer.global_step >= self.min_step:
            self.update(entropies)

    def update(self, entropies: dict[str, float]) -> list[str]:
        """Count one validation run's entropies; warn for, and return, layers that have just collapsed."""
        collapsed = []
        for name, value in entropies.items():
            self.streaks[name] = self.streaks.get(name, 0) + 1 if value > self.threshold else 0
            if self.streaks[name] == self.patience:
                collapsed.append(name)
                rank_zero_warn(
                    f"agent attention {name} looks collapsed: normalised broadcast entropy {value:.3f} > "
                    f"{self.threshold} for {self.patience} validation runs in a row (1.0 = every pixel reads "
                    "all agents alike)"
                )
        return collapsed

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._watching.close()

    def state_dict(self) -> dict[str, Any]:
        return {"streaks": dict(self.streaks)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.streaks = dict(state_dict.get("streaks", {}))

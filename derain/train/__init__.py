"""Training: the LightningModule that trains an injected network, the attention monitor, and ``last.ckpt``.

- ``lit``: ``DerainLitModule`` (loss, AdamW, warm-up + cosine, metrics, moving average, compile);
- ``monitor``: ``AttentionMonitor``, agent-collapse entropy and TKSA ratio weights at every validation;
- ``checkpoints``: ``LastCheckpoint``, the checkpoint a run resumes from.

Lightning lives here and in ``derain.data.module``; the network (``derain.models``) knows nothing of it.
"""

from .checkpoints import LastCheckpoint, last_checkpoint
from .lit import DerainLitModule, NonFiniteLossError, WarmupCosine, charbonnier_loss, load_initial_weights
from .monitor import AttentionMonitor

__all__ = [
    "AttentionMonitor",
    "DerainLitModule",
    "LastCheckpoint",
    "NonFiniteLossError",
    "WarmupCosine",
    "charbonnier_loss",
    "last_checkpoint",
    "load_initial_weights",
]

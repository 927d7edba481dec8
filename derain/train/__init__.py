"""Training: the LightningModule that trains an injected network, its callbacks, starting weights and ``last.ckpt``.

- ``lit``: ``DerainLitModule`` (the network, loss, AdamW, warm-up + cosine, metrics);
- ``schedule``: ``WarmupCosine``, the learning rate per step;
- ``callbacks``: ``SampleImages`` (validation triplets as PNGs), ``CompileTraining`` (``torch.compile``);
- ``monitor``: ``AttentionMonitor``, agent-collapse entropy and TKSA ratio weights at every validation;
- ``init_weights``: ``load_init_weights``, the weights a run starts from;
- ``checkpoints``: ``LastCheckpoint``, the checkpoint a run resumes from;
- ``precision``: ``precision: auto`` (bf16 where the machine computes it in hardware) and ``DerainTrainer``;
- ``export``: the checkpoint a finished run exports, and the provenance of its weights.

Weight averaging is Lightning's own ``EMAWeightAveraging`` callback. Lightning lives here and in
``derain.data.module``; the network (``derain.models``) knows nothing of it.
"""

from .callbacks import CompileTraining, SampleImages, TimeBudget
from .checkpoints import LastCheckpoint, last_checkpoint
from .init_weights import load_init_weights
from .lit import DerainLitModule, NonFiniteLossError, charbonnier_loss
from .monitor import AttentionMonitor
from .schedule import WarmupCosine

__all__ = [
    "AttentionMonitor",
    "CompileTraining",
    "TimeBudget",
    "DerainLitModule",
    "LastCheckpoint",
    "NonFiniteLossError",
    "SampleImages",
    "WarmupCosine",
    "charbonnier_loss",
    "last_checkpoint",
    "load_init_weights",
]

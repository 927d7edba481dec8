"""The old home of ``AttentionMonitor`` (now ``derain.train.monitor``), kept for the configs that name it:
``class_path: derain.monitor.AttentionMonitor`` in run folders' ``config.yaml`` written before the move."""

from derain.train.monitor import AttentionMonitor

__all__ = ["AttentionMonitor"]

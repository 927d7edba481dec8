"""What the end of a run exports: the checkpoint ``--export_from`` names, and the provenance its weights file records
(the weights file itself is written by ``derain.weights.export_checkpoint``)."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch import Trainer

from derain.weights import WeightsNotFoundError
from derain.weights.provenance import best_entry, checkpoint_provenance, provenance_metadata

__all__ = ["export_provenance", "export_source"]


def export_source(chosen: str, best: str, last: Path) -> str:
    """The checkpoint ``--export_from`` names: ``best`` (the best one, ``""`` when there is none), ``last``, or a
    file name in the checkpoints folder (``best-885.ckpt``).

    Raises:
        WeightsNotFoundError: the named checkpoint does not exist; the message lists those that do.
    """
    if chosen == "best":
        return best
    path = last if chosen == "last" else last.parent / chosen
    if not path.is_file():
        there = ", ".join(sorted(p.name for p in last.parent.glob("*.ckpt"))) or "none"
        raise WeightsNotFoundError(
            f"--export_from {chosen}: no checkpoint {path} (there: {there}); re-run with --export_from NAME"
        )
    return str(path)


def export_provenance(
    config: dict, trainer: Trainer, checkpoint: str | Path, commit: str | None = None
) -> dict[str, str]:
    """The provenance metadata of the weights exported from ``checkpoint`` at the end of a run: the resolved
    config, the commit (``commit``, the code's when the run started; default the checkout's now), the data
    manifest, the checkpoint's step, the validation scores (the last validation's, and the monitored best) and,
    for a run that started from ``--init_weights``, ``started_from`` (the file as named and its tensors' sha256).

    Args:
        config: the run's resolved config, as plain data (what ``derain fit --print_config`` prints).
        trainer: the trainer that ran, for its validation scores and best checkpoint.
        checkpoint: the checkpoint the weights are exported from.
    """
    metrics = trainer.callback_metrics
    validation: dict = {"last": {k: round(float(v), 4) for k, v in metrics.items() if k.startswith("val")}}
    callback = trainer.checkpoint_callback
    if callback is not None and callback.best_model_score is not None:
        validation["best"] = best_entry(callback.monitor, callback.best_model_score, callback.best_model_path)
    prov = checkpoint_provenance(checkpoint, config=config, validation=validation, commit=commit)
    return provenance_metadata(prov)

"""Starting weights: copy a weights file into a network before training (``derain.fit --init_weights FILE``)."""

from __future__ import annotations

import os

from torch import nn

from derain.weights import WeightsError, load_net
from derain.weights.provenance import weights_ref

__all__ = ["load_init_weights"]


def load_init_weights(net: nn.Module, path: str | os.PathLike) -> dict[str, str]:
    """Copy the weights stored in ``path`` (safetensors, Lightning checkpoint, or ``"packaged"``) into ``net``.

    The tensors must fit ``net`` exactly (names and shapes); settings that hold no weights (``grad_checkpoint``,
    top-k ratios) may differ.

    Returns:
        what the run started from, for its checkpoints and provenance (``weights_ref``: the file as named and
        the sha256 of its tensors as stored, a float16 file's of its float16 tensors).

    Raises:
        WeightsError: the file is missing or unreadable, or its weights do not fit ``net`` (the message names the
            file and the recorded settings that differ).
    """
    try:
        source = load_net(None if str(path) == "packaged" else path)
    except WeightsError as err:
        raise type(err)(f"init_weights {path}: {err}") from None
    try:
        net.load_state_dict(source.state_dict(), strict=True)
    except RuntimeError as err:
        why = " ".join(str(err).strip().splitlines()[:2])
        mine, theirs = (getattr(n, "init_args", None) or {} for n in (net, source))
        changed = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if type(net) is not type(source):
            why = f"{type(net).__name__} configured, {type(source).__name__} in the file"
        elif changed:
            why = "; ".join(
                f"{k}: {mine.get(k)!r} configured, {theirs.get(k)!r} in the file" for k in changed
            )
        raise WeightsError(
            f"init_weights {path}: the weights do not fit the configured network ({why})"
        ) from None
    return weights_ref(path)

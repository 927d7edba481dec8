"""How a weights file was made: its provenance, one JSON entry of the safetensors metadata.

A weights file that :func:`provenance_metadata` went into says, under :data:`PROVENANCE_KEY`, what made it: the
resolved training config, the commit of the code (when trained in a git checkout), a manifest hash of the training
data (every file of the folders the config names, by relative path and size), the step count, the validation
scores and, for a run from ``--init_weights``, what it started from (``started_from``: :func:`weights_ref`); a
network grown from trained weights (``derain grow``) records what it grew from instead
(:func:`growth_provenance`). ``derain info`` prints it. Nothing here imports Lightning: the training command
collects the values and passes them in; ``derain export`` reads them from a checkpoint and the config its run saved
(:func:`checkpoint_provenance`).

Example:
    >>> prov = provenance(config=config, steps=500, validation={"val/psnr_y": 24.5})   # doctest: +SKIP
    >>> export_checkpoint("last.ckpt", "model.safetensors", extra=provenance_metadata(prov))  # doctest: +SKIP
    >>> read_provenance("model.safetensors")["steps"]                                 # doctest: +SKIP
    500
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from derain.weights import (
    STARTED_KEY,
    WeightsError,
    load_checkpoint,
    read_safetensors,
    resolve,
    save_tensors,
    tensors_sha256,
)

__all__ = [
    "PROVENANCE_KEY",
    "best_entry",
    "checkpoint_provenance",
    "config_folders",
    "data_manifest",
    "git_commit",
    "growth_provenance",
    "weights_ref",
    "provenance",
    "provenance_metadata",
    "read_provenance",
    "saved_config",
    "yaml_file",
    "write_provenance",
]

PROVENANCE_KEY = "provenance"
"""The metadata entry of a weights file that holds its provenance (JSON)."""


def git_commit(where: str | os.PathLike | None = None) -> str | None:
    """The commit of the code at ``where`` (``+dirty`` appended when tracked files differ from it), or None outside
    a git checkout (or without git). ``$DERAIN_COMMIT``, where set, is the answer: a copy of a working tree whose
    git metadata is not its own (a lent GPU machine's, ``tools/gpu_leg.sh``) names the commit it was sent as.

    Args:
        where: a folder of the checkout; default this package's own source, and then only when it is a tracked file
            of that checkout (an installed copy of derain inside some other repository has no commit).
    """
    if os.environ.get("DERAIN_COMMIT"):
        return os.environ["DERAIN_COMMIT"]
    own = where is None
    where = Path(__file__).resolve().parent if own else Path(where)
    try:
        head = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
        )
        tracked = subprocess.run(
            ["git", "-C", str(where), "ls-files", "--error-unmatch", Path(__file__).name],
            capture_output=True,
            timeout=30,
        )
        if head.returncode != 0 or (own and tracked.returncode != 0):
            return None
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def config_folders(data_config: Any) -> list[str]:
    """The folders and files a resolved ``data`` config names, as spelled there (``$DERAIN_DATA/...`` kept), in
    order, once each: every string in it that names an existing path once ``$DERAIN_DATA`` is expanded."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, str) and value not in found and Path(os.path.expandvars(value)).exists():
            found.append(value)

    walk(data_config)
    return found


def data_manifest(folders: Iterable[str]) -> dict[str, Any]:
    """A manifest hash of the data in ``folders``: the sha256 of every file's relative path and size.

    Each folder is hashed under its name as given (``$DERAIN_DATA/clean``), so the hash does not depend on where the
    data sets lie on a machine, only on which files they hold and how large those are (not their bytes: reading
    265 MB at every export is not worth it; a re-encoded image changes size).

    Returns:
        ``sha256``, ``files`` (count), ``bytes`` (total) and ``folders`` (the names, in order).
    """
    digest = hashlib.sha256()
    names, count, total = [], 0, 0
    for name in folders:
        root = Path(os.path.expandvars(name))
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        digest.update(f"{name}\n".encode())
        for path in files:
            size = path.stat().st_size
            rel = path.name if path == root else path.relative_to(root).as_posix()
            digest.update(f"{rel}\t{size}\n".encode())
            count, total = count + 1, total + size
        names.append(name)
    return {"sha256": digest.hexdigest(), "files": count, "bytes": total, "folders": names}


def provenance(
    *,
    config: Mapping[str, Any],
    steps: int,
    validation: Mapping[str, Any],
    commit: str | None = None,
    data: Mapping[str, Any] | None = None,
    **more: Any,
) -> dict[str, Any]:
    """A weights file's provenance.

    Args:
        config: the resolved training config (what ``derain fit --print_config`` prints).
        steps: the training steps of the exported weights (the checkpoint's ``global_step``).
        validation: the validation scores (``val/psnr_y``, ...), as the caller labels them.
        commit: the code's commit; default :func:`git_commit` of the working directory.
        data: the data manifest; default :func:`data_manifest` of the folders ``config["data"]`` names.
        **more: further entries (``lineage_steps``, ``recorded``, ...).
    """
    return {
        "config": dict(config),
        "commit": git_commit() if commit is None else commit,
        "data": dict(data_manifest(config_folders(config.get("data", {}))) if data is None else data),
        "steps": int(steps),
        "validation": dict(validation),
        **more,
    }


def checkpoint_provenance(
    checkpoint: str | os.PathLike,
    *,
    config: Mapping[str, Any] | None = None,
    validation: Mapping[str, Any] | None = None,
    commit: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The provenance of weights exported from ``checkpoint``, a Lightning checkpoint that ``derain.fit`` wrote: its
    step, its name and what the run started from (``started_from``, for a run from ``--init_weights``), with the
    config and scores given. ``derain.fit`` gives the ones it ran with, at the end of its run (and the commit is
    the code's that trained). Without a config (``derain export`` of a checkpoint, later) the rest is what the run
    left: the config LightningCLI saved beside it (:func:`saved_config`; else the checkpoint's own
    hyperparameters, and ``config_source`` says which), the best score its ``ModelCheckpoint`` state records; the
    commit is then unknown (``commit`` null; ``export_commit`` is the exporting code's).

    Args:
        checkpoint: the checkpoint (read with the safe loader).
        config: the resolved config the run trained with.
        validation: the scores; default the best that the checkpoint's ``ModelCheckpoint`` state records.
        commit: with ``config``, the commit of the code that trained (default :func:`git_commit` now).
        **more: further entries.

    Raises:
        WeightsError: the checkpoint is missing or not a checkpoint, or its run's saved config is not YAML (the
            message names the file).
    """
    path = Path(checkpoint)
    saved = load_checkpoint(path, mmap=True)  # its small entries only: the weights are read by the export
    later = config is None
    if later:
        found = saved_config(path)
        if found is not None:
            config, source = yaml_file(found), str(found)
        else:
            config = {
                "model": saved.get("hyper_parameters", {}),
                "data": saved.get("datamodule_hyper_parameters", {}),
            }
            source = "the checkpoint's hyperparameters (no config its run saved was found)"
        more = {"config_source": source, "export_commit": git_commit(), **more}
    started = {"started_from": saved[STARTED_KEY]} if STARTED_KEY in saved else {}
    prov = provenance(
        config=config,
        steps=saved.get("global_step", 0),
        validation=_best_score(saved) if validation is None else validation,
        commit="" if later else commit,  # "" skips the git call; null below
        checkpoint=path.name,
        **started,
        **more,
    )
    if later:
        prov["commit"] = None  # not known: the checkpoint does not record it
    return prov


def saved_config(checkpoint: str | os.PathLike) -> Path | None:
    """The config LightningCLI saved for the run that wrote ``checkpoint``, or None where none is found.

    It looks where a run saves it, in the folder above the checkpoints' (``RUN/lightning_logs/version_*/config.yaml``,
    or ``RUN/config.yaml`` without a logger), and takes only a config whose checkpoint folder
    (``checkpoint.dirpath``, by default ``trainer.default_root_dir/checkpoints``; a relative one read as the tail
    of the checkpoint's folder) is the checkpoint's; of those, the newest not written after the checkpoint (a
    resumed run saves its config in a new version folder).
    """
    path = Path(checkpoint).resolve()
    written = path.stat().st_mtime
    run = path.parent.parent
    found = []
    for candidate in [run / "config.yaml", *run.glob("lightning_logs/version_*/config.yaml")]:
        if not candidate.is_file() or candidate.stat().st_mtime > written:
            continue
        config = yaml_file(candidate)
        if isinstance(config, dict) and _names_folder(config, path.parent):
            version = candidate.parent.name.removeprefix("version_")
            found.append((candidate.stat().st_mtime, int(version) if version.isdigit() else -1, candidate))
    return max(found)[2] if found else None


def yaml_file(path: Path) -> Any:
    """A YAML file's content.

    Raises:
        WeightsError: it is not YAML (the message names it).
    """
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise WeightsError(f"{path}: not a readable YAML config ({err})") from None


def _names_folder(config: Mapping[str, Any], folder: Path) -> bool:
    """Whether a run's config keeps its checkpoints in ``folder`` (resolved); a relative path in the config names
    it by its tail (the run's working folder is not recorded)."""
    dirpath = (config.get("checkpoint") or {}).get("dirpath")
    root = (config.get("trainer") or {}).get("default_root_dir") or "."
    named = Path(os.path.normpath(dirpath or Path(root) / "checkpoints"))
    if named.is_absolute():
        return named.resolve() == folder
    tail = [part for part in named.parts if part != "."]
    return ".." not in tail and list(folder.parts[len(folder.parts) - len(tail) :]) == tail


def _best_score(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The best validation score a checkpoint's ``ModelCheckpoint`` state records, as ``derain.fit`` labels it."""
    for key, state in (saved.get("callbacks") or {}).items():
        if str(key).startswith("ModelCheckpoint") and state.get("best_model_score") is not None:
            return {
                "best": best_entry(
                    state["monitor"], state["best_model_score"], state.get("best_model_path", "")
                )
            }
    return {}


def best_entry(monitor: str, score: Any, checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The best validation score as provenance records it: the monitored value (4 decimals) and its checkpoint."""
    return {monitor: round(float(score), 4), "checkpoint": Path(checkpoint).name}


def weights_ref(weights: str | os.PathLike) -> dict[str, str]:
    """Weights as provenance names them: ``file`` as given and the ``tensors_sha256`` of what it holds (``"packaged"``
    names the packaged weights).

    Raises:
        WeightsError: the file is missing or not a readable weights file.
    """
    return {
        "file": str(weights),
        "tensors_sha256": tensors_sha256(resolve(None if str(weights) == "packaged" else weights)),
    }


def growth_provenance(
    parent: str | os.PathLike, options: Mapping[str, Any], *, commit: str | None = None
) -> dict[str, Any]:
    """The provenance of a network grown from the weights file ``parent`` (``derain grow``): under ``grown_from``
    the parent as named, the sha256 of its tensors, the growth options and the parent's own provenance (None when it
    records none); beside it the commit of the code that grew it.

    Args:
        parent: the parent's weights file (``.safetensors`` or ``.ckpt``).
        options: the growth options (``dim``, ``blocks``, ``full_res_mixers``, ``noise``, ``seed``, ...).
        commit: the code's commit; default :func:`git_commit`.

    Raises:
        WeightsError: ``parent`` is missing or not a readable weights file.
    """
    path = resolve(parent)
    return {
        "grown_from": {
            **weights_ref(parent),
            "options": dict(options),
            "provenance": read_provenance(path) if path.suffix == ".safetensors" else None,
        },
        "commit": git_commit() if commit is None else commit,
    }


def provenance_metadata(prov: Mapping[str, Any]) -> dict[str, str]:
    """The metadata entry that carries ``prov`` in a weights file (``export_checkpoint(..., extra=...)``)."""
    return {PROVENANCE_KEY: json.dumps(prov, default=str)}


def read_provenance(weights: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The provenance a ``.safetensors`` weights file records (the packaged weights for None), or None if it has
    none.

    Raises:
        WeightsError: the file is missing or unreadable, or its provenance is not JSON (the message names it).
    """
    path = resolve(weights)
    meta = read_safetensors(path)[0]
    if PROVENANCE_KEY not in meta:
        return None
    try:
        return json.loads(meta[PROVENANCE_KEY])
    except json.JSONDecodeError as err:
        raise WeightsError(f"{path}: metadata {PROVENANCE_KEY!r} is not JSON ({err})") from None


def write_provenance(
    weights: str | os.PathLike, prov: Mapping[str, Any], out: str | os.PathLike | None = None
) -> Path:
    """Write ``weights``' tensors and metadata with ``prov`` as its provenance to ``out`` (default: in place),
    atomically. The tensors are unchanged, so :func:`~derain.weights.tensors_sha256` is too (checked).

    Raises:
        WeightsError: ``weights`` is not a readable safetensors file, or the written tensors differ.
    """
    path = resolve(weights)
    out = path if out is None else Path(out)
    meta, state = read_safetensors(path)
    before = tensors_sha256(state)
    save_tensors(state, out, {**meta, **provenance_metadata(prov)})
    after = tensors_sha256(out)
    if after != before:
        raise WeightsError(f"{out}: tensors sha256 {after} after writing, {before} before")
    return out

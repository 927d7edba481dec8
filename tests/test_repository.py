"""A lean repository (design.md, "Weights and recipes"): no git-tracked file over 25 MB, and no tracked weights file
outside the package's ``derain/weights/`` except the one continuation file a recipe names. A run that spans
sessions continues from one committed float16 file that each leg replaces; candidates that do not ship leave the
tree (git history keeps them). The continuation is named in one place: the ``continuation`` key of
``configs/derain-base/recipe.yaml`` (a path, or a mapping with ``path``); no such file or key: none is allowed."""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MAX_BYTES = 25 * 10**6
WEIGHTS_SUFFIXES = {".safetensors", ".ckpt", ".onnx", ".pt", ".pth"}
PACKAGED = PurePosixPath("derain/weights")
CONTINUATION_RECIPE = REPO / "configs" / "derain-base" / "recipe.yaml"


def git(*args: str, stdin: bytes | None = None) -> bytes:
    """``git ARGS`` in the checkout; skips the test when there is no git or this is not a git checkout's root."""
    try:
        proc = subprocess.run(["git", "-C", str(REPO), *args], input=stdin, capture_output=True)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if proc.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout (git {args[0]}: {proc.stderr.decode().strip()[:200]})")
    return proc.stdout


def tracked_files() -> dict[PurePosixPath, int]:
    """Each git-tracked file and its size in bytes: the staged blob's, or the working copy's when larger."""
    top = git("rev-parse", "--show-toplevel").decode().strip()
    if Path(top).resolve() != REPO:
        pytest.skip(f"{REPO} is not the root of a git checkout (it is inside {top})")
    entries = []
    for line in git("ls-files", "-z", "--stage").decode().split("\0"):
        if line:
            info, path = line.split("\t", 1)
            mode, blob = info.split()[:2]
            if mode != "160000":  # a submodule: a commit, not a file
                entries.append((PurePosixPath(path), blob))
    sizes = git(
        "cat-file", "--batch-check=%(objectsize)", stdin="\n".join(b for _, b in entries).encode()
    ).split()
    files = {}
    for (path, _), size in zip(entries, sizes, strict=True):
        working = REPO / path
        files[path] = max(int(size), working.stat().st_size if working.is_file() else 0)
    return files


def allowed_continuation() -> set[PurePosixPath]:
    """The one continuation file the recipe names (``continuation``), or none."""
    if not CONTINUATION_RECIPE.is_file():
        return set()
    entry = (yaml.safe_load(CONTINUATION_RECIPE.read_text()) or {}).get("continuation")
    if isinstance(entry, dict):
        entry = entry.get("path")
    if entry is None:
        return set()
    assert isinstance(entry, str), f"{CONTINUATION_RECIPE}: 'continuation' names one file, got {entry!r}"
    return {PurePosixPath(entry)}


def test_no_tracked_file_is_over_25_mb() -> None:
    big = {str(p): size for p, size in tracked_files().items() if size > MAX_BYTES}
    assert not big, f"git-tracked files over {MAX_BYTES / 1e6:.0f} MB (keep them out of the tree): {big}"


def test_no_tracked_weights_outside_the_package_but_the_one_continuation() -> None:
    allowed = allowed_continuation()
    stray = sorted(
        str(p)
        for p in tracked_files()
        if p.suffix.lower() in WEIGHTS_SUFFIXES and PACKAGED not in p.parents and p not in allowed
    )
    assert not stray, (
        f"weights files tracked outside {PACKAGED}/ (candidates that do not ship leave the tree; git history keeps "
        f"them; the one continuation file allowed is what {CONTINUATION_RECIPE.relative_to(REPO)} names under "
        f"'continuation': {sorted(map(str, allowed)) or 'none'}): {stray}"
    )

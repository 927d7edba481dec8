"""Folders of the source tree that ship inside the package (setuptools ``package-dir`` maps them there)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_folder"]


def shipped_folder(name: str, source: str) -> Path:
    """``derain/<name>`` in an installed wheel, else ``<source>`` beside the package (a source checkout,
    installed editable or not), e.g. ``shipped_folder("configs", "configs")``."""
    here = Path(__file__).resolve().parent
    installed = here / name
    return installed if installed.is_dir() else here.parent / source

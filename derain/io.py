"""Image files in and out: 8-bit RGB arrays, errors that name the file, atomic writes."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ImageReadError",
    "IMAGE_SUFFIXES",
    "list_images",
    "pair_name",
    "natural_key",
    "read_rgb",
    "write_image_atomic",
    "to_tensor",
    "to_uint8",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


_PREFIX = re.compile(r"^(no)?rain(y)?[-_]", re.IGNORECASE)
_JORDER_SUFFIX = re.compile(r"(?<=\d)x2$", re.IGNORECASE)  # rain/X2/norain-12x2.png pairs with norain-12.png


def natural_key(text: str) -> list[Any]:
    """Sort key that orders embedded numbers by value (``2`` before ``10``)."""
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", text)]


def pair_name(path: str | os.PathLike) -> str:
    """The name that pairs a file with its partner: the stem without ``rain-``/``rainy-``/``norain-`` and
    JORDER's ``x2``."""
    return _JORDER_SUFFIX.sub("", _PREFIX.sub("", Path(path).stem))


def list_images(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """Image files in ``folder`` (by suffix, hidden files skipped), naturally sorted."""
    folder = Path(folder)
    files = folder.rglob("*") if recursive else folder.iterdir()
    images = [
        p for p in files if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    ]
    return sorted(images, key=lambda p: natural_key(str(p.relative_to(folder))))


class ImageReadError(ValueError):
    """An image file that is missing, empty, or cannot be decoded."""


def read_rgb(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as 8-bit RGB, shape (H, W, 3), EXIF orientation applied.

    Grayscale is repeated to three channels, alpha dropped, 16-bit scaled to 8 bits.

    Raises:
        ImageReadError: naming ``path`` when it is missing, empty or not a decodable image.
    """
    path = Path(path)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as err:
        raise ImageReadError(f"cannot read image {path}: {err.strerror or err}") from None
    if data.size == 0:
        raise ImageReadError(f"cannot read image {path}: the file is empty")
    img = cv2.imdecode(data, cv2.IMREAD_COLOR)  # applies EXIF orientation, drops alpha, 16-bit -> 8-bit
    if img is None:
        raise ImageReadError(
            f"cannot read image {path}: not a decodable image (corrupt or unsupported format)"
        )
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def write_image_atomic(
    path: str | os.PathLike, image: np.ndarray, *, params: list[int] | None = None
) -> None:
    """Write an RGB(A) uint8/uint16 array to ``path`` through a temporary file and a rename.

    An interrupted write never leaves a half-written file under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA)
    ok, buf = cv2.imencode(path.suffix or ".png", image, params or [])
    if not ok:
        raise ValueError(f"cannot encode an image for {path} (suffix {path.suffix!r})")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, default_file_mode())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(buf.tobytes())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file (0666 minus the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def to_tensor(image: np.ndarray) -> Tensor:
    """uint8 (H, W, 3) -> float32 (3, H, W) in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)


def to_uint8(t: Tensor) -> np.ndarray:
    """float (3, H, W) -> uint8 (H, W, 3), clamped and rounded."""
    return t.detach().clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).cpu().numpy()

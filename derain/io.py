"""Image files in and out: one reader (any depth, EXIF-upright), 8-bit RGB, named errors, atomic writes."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from PIL import ExifTags, Image, ImageOps
from torch import Tensor

__all__ = [
    "ImageReadError",
    "IMAGE_SUFFIXES",
    "exif_orientation",
    "exif_transpose",
    "image_size",
    "list_files",
    "list_images",
    "natural_key",
    "read_image",
    "read_rgb",
    "to_8bit",
    "to_rgb8",
    "write_image_atomic",
    "to_tensor",
    "to_uint8",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def natural_key(text: str) -> list[Any]:
    """Sort key that orders embedded numbers by value (``2`` before ``10``)."""
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", text)]


def list_files(
    folder: str | os.PathLike, suffixes: tuple[str, ...] = IMAGE_SUFFIXES, *, recursive: bool = False
) -> tuple[list[Path], int]:
    """The package's one file lister: the files in ``folder`` whose suffix is one of ``suffixes`` (any case), in
    natural order of their path under ``folder`` (``2.png`` before ``10.png``), and the count of other files.

    Hidden files, and with ``recursive`` everything in hidden folders (``.ipynb_checkpoints/``, macOS ``._x.jpg``),
    are left out and not counted.
    """
    folder = Path(folder)
    found, others = [], 0
    for path in folder.rglob("*") if recursive else folder.iterdir():
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if path.suffix.lower() in suffixes:
            found.append(path)
        else:
            others += 1
    return sorted(found, key=lambda p: natural_key(p.relative_to(folder).as_posix())), others


def list_images(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """Image files in ``folder`` (by suffix, hidden files skipped), naturally sorted (:func:`list_files`)."""
    return list_files(folder, IMAGE_SUFFIXES, recursive=recursive)[0]


class ImageReadError(ValueError):
    """An image file that is missing, empty, or cannot be decoded: ``cannot read image <path>: <reason>``.

    Args:
        path: the file.
        reason: what is wrong with it, for a message of the caller's own (``the file is empty``).
    """

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"cannot read image {path}: {reason}")
        self.path, self.reason = Path(path), reason

    def __reduce__(self) -> tuple[type, tuple[Path, str]]:  # pickles (to worker processes) with both fields
        return type(self), (self.path, self.reason)


def exif_orientation(image: Image.Image) -> int:
    """The EXIF orientation (1-8; 1 when untagged) of an opened image, from its header alone.

    PIL's reading: EXIF in JPEG, PNG, WebP and TIFF, or ``tiff:Orientation`` in XMP. A PNG's EXIF is taken
    from the chunks before the pixel data, where the PNG specification and OpenCV put it
    (``PngImageFile.getexif`` would decode the whole file to look behind the pixels as well).
    """
    try:
        orientation = Image.Image.getexif(image).get(ExifTags.Base.Orientation, 1)
    except Exception:  # a broken EXIF block: leave the pixels as stored
        return 1
    return orientation if orientation in range(1, 9) else 1


def exif_transpose(image: np.ndarray, orientation: int) -> np.ndarray:
    """Turn stored pixels upright for an EXIF ``orientation`` with PIL's own ``ImageOps.exif_transpose``.

    PIL has no 16-bit colour mode, so the transpose is applied to each channel as its own PIL image (mode
    ``L`` for uint8, ``I;16`` for uint16): any depth and any number of channels come through unchanged.

    Args:
        image: (H, W) or (H, W, C) array of a dtype PIL holds in one channel (uint8, uint16).
        orientation: the EXIF orientation tag, 1-8 (see :func:`exif_orientation`).

    Returns:
        The upright array: (W, H[, C]) for orientations 5-8, which turn the picture by 90°.
    """
    if orientation == 1:
        return image
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    tag = exif.tobytes()
    planes = []
    for plane in np.moveaxis(image, -1, 0) if image.ndim == 3 else [image]:
        pil = Image.fromarray(np.ascontiguousarray(plane))
        pil.info["exif"] = tag  # what exif_transpose reads
        planes.append(np.asarray(ImageOps.exif_transpose(pil)))
    return np.stack(planes, axis=2) if image.ndim == 3 else planes[0]


def read_image(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as stored (gray, RGB or RGBA; 8 or 16 bit), turned upright by its EXIF orientation.

    The one image reader of the package: :func:`read_rgb` and ``derain.inference.read_image`` (the same function) build on it.
    OpenCV decodes the pixels (keeping depth and alpha); PIL reads the orientation from the header and turns
    the pixels (:func:`exif_orientation`, :func:`exif_transpose`), except in TIFF files, which OpenCV turns
    upright itself.

    Args:
        path: an image file (anything OpenCV decodes: PNG, JPEG, TIFF, WebP, BMP, ...).

    Returns:
        ``uint8`` or ``uint16`` array, (H, W) for grayscale, (H, W, 3) RGB or (H, W, 4) RGBA.

    Raises:
        ImageReadError: naming ``path`` when it is missing, empty, not decodable, or of an unsupported depth.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ImageReadError(path, str(err.strerror or err)) from None
    if not data:
        raise ImageReadError(path, "the file is empty")
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)  # keeps depth/alpha, ignores EXIF
    if img is None:
        raise ImageReadError(path, "not a decodable image (corrupt or unsupported format)")
    if img.dtype not in (np.uint8, np.uint16):
        raise ImageReadError(path, f"{img.dtype} pixels; expected 8- or 16-bit integers")
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    elif img.ndim == 3 and img.shape[2] == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    elif img.ndim == 3 and img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGBA)
    elif img.ndim != 2:
        raise ImageReadError(path, f"unsupported shape {img.shape}")
    return np.ascontiguousarray(exif_transpose(img, _orientation_left(data)))


def _orientation_left(data: bytes) -> int:
    """The EXIF orientation still to apply to what ``cv2.imdecode(data, IMREAD_UNCHANGED)`` gave."""
    try:
        with Image.open(io.BytesIO(data)) as header:  # reads the header only
            # OpenCV's TIFF decoder applies the TIFF Orientation tag itself, even with IMREAD_UNCHANGED
            return 1 if header.format == "TIFF" else exif_orientation(header)
    except Exception:  # a format PIL does not know, or over PIL's pixel limit: leave the pixels as stored
        return 1


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(H, W) of the image at ``path`` as :func:`read_image` returns it, from the file header alone.

    Raises:
        ImageReadError: naming ``path`` when PIL cannot read the header, including images over PIL's
            decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``; the error's ``__cause__`` is then
            ``PIL.Image.DecompressionBombError``).
    """
    try:
        with Image.open(path) as im:
            w, h = im.size
            if im.format == "TIFF":  # the stored size: newer Pillow reports a TIFF's size already upright
                w, h = im.tag_v2[ExifTags.Base.ImageWidth], im.tag_v2[ExifTags.Base.ImageLength]
            turned = exif_orientation(im) >= 5  # orientations 5-8 turn the picture by 90°
    except (OSError, Image.DecompressionBombError) as err:
        raise ImageReadError(path, str(err)) from err
    return (w, h) if turned else (h, w)


def to_8bit(image: np.ndarray) -> np.ndarray:
    """A uint16 array scaled to uint8 (by 255/65535, rounded); a uint8 one as it is. Channels are kept."""
    return np.rint(image / 257.0).astype(np.uint8) if image.dtype == np.uint16 else image


def to_rgb8(image: np.ndarray) -> np.ndarray:
    """Any :func:`read_image` array -> 8-bit RGB (H, W, 3).

    Gray is repeated to three channels, alpha dropped, 16-bit scaled by 255/65535 and rounded (:func:`to_8bit`).
    """
    image = to_8bit(image)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.shape[2] == 1:
        image = np.repeat(image, 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


def read_rgb(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as 8-bit RGB (H, W, 3), EXIF-upright: :func:`to_rgb8` of :func:`read_image`.

    Raises:
        ImageReadError: naming ``path`` when it is missing, empty or not a decodable image.
    """
    return to_rgb8(read_image(path))


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
    with atomic_output(path) as tmp:
        tmp.write_bytes(buf.tobytes())


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary file beside ``path`` for the block to write; renamed onto ``path`` when the block ends
    normally, removed when it raises. So an interrupted write never leaves a half-written ``path``: at worst a
    hidden ``.NAME.*`` file after a hard kill.

    Args:
        path: the final file; its folder is created.
        suffix: the temporary file's suffix (e.g. ``.partial.mp4`` where a writer picks the format by it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, default_file_mode())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask_from_proc() -> int | None:
    """The process umask as Linux reports it (``Umask:`` in ``/proc/self/status``, since 4.7); None elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


def _umask_at_import() -> int:
    """The umask, read the only portable way (set it and set it back), once, while the package is imported."""
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


_IMPORT_UMASK = _umask_from_proc()
if _IMPORT_UMASK is None:
    _IMPORT_UMASK = _umask_at_import()


def default_file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file (0666 minus the umask).

    The umask is read without changing it (Linux's ``/proc/self/status``); elsewhere it is the umask at import.
    Setting it and setting it back on every call would give any file or folder that another thread makes in
    between the modes 0666 or 0777 (the web page derains in worker threads).
    """
    umask = _umask_from_proc()
    return 0o666 & ~(_IMPORT_UMASK if umask is None else umask)


def to_tensor(image: np.ndarray) -> Tensor:
    """uint8 (H, W, 3) -> float32 (3, H, W) in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)


def to_uint8(t: Tensor) -> np.ndarray:
    """float (3, H, W) -> uint8 (H, W, 3), clamped and rounded."""
    return t.detach().clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).cpu().numpy()

"""Pack data folders small enough to travel to a lent GPU machine, and unpack them there.

    python tools/pack_data.py pack ../shared/data .devdata rain100h-train-mini raintrainl clean ...
    python tools/pack_data.py unpack .devdata /tmp/data          # on the GPU machine: the same folder layout

A lent machine takes at most 64 MiB of working tree a call and reaches no network, so the data must shrink
about 3x. What is kept exactly and what is not:

- JPEG files travel as their bytes (exact).
- A rainy image of a pair (``rain/NAME`` with a ``norain/`` partner) travels as its rain layer, ``rainy - clean``
  against the clean image *as unpacked*, in a lossless PNG (8-bit when the layer is never negative, else
  16-bit with an offset of 256): the pair's rain is exact, and the layer compresses far better than the photo.
- Every other PNG (clean photos, clean halves of pairs, rain-streak layers) travels as a JPEG of quality
  ``--quality`` (95): backgrounds are photos that were JPEGs before, the network learns the rain, and its
  target is whatever clean image the rainy one is made from, so a pair stays consistent.
- Text files travel as they are; a file whose bytes another packed file already has travels as a
  ``NAME.same`` note naming that file (RainTrainL's clean JPEGs are BSDS500 photos of ``clean/``).

Unpacking writes PNGs for what was re-encoded, under the original names, so every config reads the unpacked
folder exactly as it reads ``../shared/data`` (``DERAIN_DATA``).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

LAYER8, LAYER16, PHOTO, SAME = ".layer8.png", ".layer16.png", ".q.jpg", ".same"
PNG = [cv2.IMWRITE_PNG_COMPRESSION, 9]


def _clean_partner(path: Path) -> Path | None:
    """The clean image of a rainy ``DIR/rain/NAME`` (same stem under ``DIR/norain/``), if any."""
    if path.parent.name != "rain":
        return None
    matches = sorted((path.parent.parent / "norain").glob(path.stem + ".*"))
    return matches[0] if matches else None


def _unpacked_clean(packed_root: Path, source_root: Path, clean: Path) -> np.ndarray:
    """The clean image as unpacking will produce it (decoded from what was packed)."""
    if clean.suffix.lower() != ".png":  # travels as its bytes
        return cv2.imread(str(clean), cv2.IMREAD_UNCHANGED)
    rel = clean.relative_to(source_root)
    for candidate in (packed_root / rel, (packed_root / rel).with_name(clean.name + PHOTO)):
        if candidate.is_file():
            return cv2.imread(str(candidate), cv2.IMREAD_UNCHANGED)
    raise FileNotFoundError(f"{clean}: its clean partner is not packed yet")


def pack(source: Path, out: Path, folders: list[str], quality: int) -> None:
    files = sorted(f for name in folders for f in (source / name).rglob("*") if f.is_file())
    rainy = [f for f in files if f.suffix.lower() == ".png" and _clean_partner(f)]
    seen: dict[str, str] = {}
    for f in [
        f for f in files if f not in rainy
    ] + rainy:  # clean halves first: layers are taken against them
        dst = out / f.relative_to(source)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if f.suffix.lower() != ".png":
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            if digest in seen:
                dst.with_name(f.name + SAME).write_text(seen[digest])
            else:
                seen[digest] = f.relative_to(source).as_posix()
                shutil.copyfile(f, dst)
            continue
        image = cv2.imread(str(f), cv2.IMREAD_UNCHANGED)
        if image is None:
            raise ValueError(f"{f}: not a readable image")
        clean = _clean_partner(f)
        if clean is None:
            cv2.imwrite(str(dst.with_name(f.name + PHOTO)), image, [cv2.IMWRITE_JPEG_QUALITY, quality])
            continue
        base = _unpacked_clean(out, source, clean)
        if base.shape != image.shape:
            raise ValueError(f"{f}: shape {image.shape} differs from its clean image's {base.shape}")
        layer = image.astype(np.int16) - base.astype(np.int16)
        if layer.min() >= 0:
            cv2.imwrite(str(dst.with_name(f.name + LAYER8)), layer.astype(np.uint8), PNG)
        else:
            cv2.imwrite(str(dst.with_name(f.name + LAYER16)), (layer + 256).astype(np.uint16), PNG)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"packed {len(files)} files of {', '.join(folders)} into {out}: {size / 2**20:.1f} MiB")


def unpack(packed: Path, out: Path) -> None:
    files = sorted(f for f in packed.rglob("*") if f.is_file())
    same = [f for f in files if f.name.endswith(SAME)]
    layers = [f for f in files if f.name.endswith((LAYER8, LAYER16))]
    for f in [f for f in files if f not in layers and f not in same] + same + layers:
        rel = f.relative_to(packed)
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if f.name.endswith(PHOTO):
            cv2.imwrite(str(dst.with_name(f.name[: -len(PHOTO)])), cv2.imread(str(f), cv2.IMREAD_UNCHANGED))
        elif f in same:
            shutil.copyfile(out / f.read_text(), dst.with_name(f.name[: -len(SAME)]))
        elif f in layers:
            name = f.name[: -len(LAYER8 if f.name.endswith(LAYER8) else LAYER16)]
            clean = _clean_partner(dst.with_name(name))
            if clean is None:
                raise FileNotFoundError(f"{f}: no clean partner unpacked for {name}")
            base = cv2.imread(str(clean), cv2.IMREAD_UNCHANGED).astype(np.int16)
            layer = cv2.imread(str(f), cv2.IMREAD_UNCHANGED).astype(np.int16)
            layer = layer - 256 if f.name.endswith(LAYER16) else layer
            cv2.imwrite(str(dst.with_name(name)), (base + layer).astype(np.uint8))
        else:
            shutil.copyfile(f, dst)
    print(f"unpacked {len(files)} files into {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack")
    p.add_argument("source", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("folders", nargs="+")
    p.add_argument("--quality", type=int, default=95)
    u = commands.add_parser("unpack")
    u.add_argument("packed", type=Path)
    u.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        if args.out.exists():
            parser.error(f"{args.out} exists: pack into a new folder")
        pack(args.source, args.out, args.folders, args.quality)
    else:
        unpack(args.packed, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

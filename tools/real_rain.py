"""Real rain, weights side by side: how much rain each removes, whether rain-free photos stay, and a gallery.

    DERAIN_DATA=../shared/data python tools/real_rain.py --weights runs/stages/stage7.safetensors \
        derain/weights/derain-small.safetensors --names "stage 7" "stage 8" --gallery runs/real.png

Real rainy photos have no clean image, so this measures what a model does (``docs/design.md``, Metrics):
- **rain removed**: mean |rainy − derained| in 8-bit levels, per photo, over each real set (``real-rainy``'s 127
  photos, SPA's 2 and the webcam's 35 rainy frames) and over all of them, with the spread over photos; with
  ``--held-out FILE`` (``tools/teacher_pairs.py``'s ``held-out.txt``) also over the real photos no weights were
  distilled on; beside it **darkened** (the signed mean of rainy − derained: streaks taken count in it, and so does
  light lowered: a model that lowers a whole photo's light by k levels removes k by the first reading) and **fine**
  (the mean absolute change left once the change blurred by σ 8 is taken off: streak-sized detail, not light);
- **rain-free kept**: PSNR-Y (MATLAB Y) of derain(photo) against the photo, on 24 rain-free 512² centre crops
  (the 12 Urban100 photos and the first 12 Kodak24 photos of ``clean/``); a model that blurs removes a lot too;
  beside it the same crops' **changed** and **fine** (``change_levels`` and ``change_parts``' fine, as on the real
  photos): what a model changes where there is no rain, the part of a removal reading that is not rain taken;
- **a gallery** PNG: rainy | each weights' output, a row a photo, for a person to look at before any decision
  (``--gallery-rows`` real photos spread over the sets, then two rain-free ones; ``--crop 320`` shows each
  photo's centre at full resolution, where streaks can be judged, instead of the whole photo scaled).

Every weights file runs on the same photos in one run; the table gives each one's means, its ratio to the first
weights' removal, and paired differences per photo against the first. ``--strength S`` derains at that strength
(``restore(strength=S)``, 0 to 2; default 1): what is removed and kept when the network's rain is scaled. Photos of any size and mode (grey, RGBA,
16-bit, EXIF-turned) are read as 8-bit RGB; an unreadable one is named and skipped. A weights file that does not
load or a folder without images is a one-line error. Prints the table and one ``RESULT {...}`` JSON line;
``--json FILE`` writes the per-photo values. Files are written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from gallery import FINE_SIGMA, change_levels, change_parts, gallery
from research import add_data_argument, add_weights_arguments, load_weights, mean_row, weights_names

from derain.evaluate import score_pair
from derain.inference import RestoreOptions, restore
from derain.io import IMAGE_SUFFIXES, ImageReadError, atomic_output, list_images, read_rgb, write_image_atomic

REAL_SETS = {"real-rainy": "real-rainy/rain", "spa": "spa-samples/rain", "webcam": "gtrain-webcam-pairs/rain"}
RAIN_FREE = (("clean/urban100-subset", 12), ("clean/kodak24", 12))
CROP = 512


def read_folder(folder: Path, limit: int | None = None) -> tuple[list[tuple[str, np.ndarray]], list[str]]:
    """The readable images of ``folder`` (natural order, at most ``limit``) and one message per unreadable one.

    Raises:
        SystemExit: the folder is missing or holds no images (one line naming it).
    """
    files = list_images(folder, recursive=True) if folder.is_dir() else []
    if not files:
        raise SystemExit(f"error: {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    photos, skipped = [], []
    for path in files[:limit]:
        try:
            photos.append((path.name, read_rgb(path)))
        except ImageReadError as err:
            skipped.append(f"skipped {path}: {err}")
    return photos, skipped


def centre_crop(image: np.ndarray, side: int = CROP) -> np.ndarray:
    """The centre ``side``² of ``image`` (all of a side shorter than that), as a contiguous array."""
    h, w = image.shape[:2]
    top, left = max(0, (h - side) // 2), max(0, (w - side) // 2)
    return np.ascontiguousarray(image[top : top + side, left : left + side])


def measure(
    models,
    names,
    data: Path,
    rows_wanted: int,
    options: RestoreOptions | list[RestoreOptions] = RestoreOptions(),
    held_out: set[str] | None = None,
) -> tuple[dict, list[list[np.ndarray]], list[str]]:
    """Each column is a model restored with its options (one ``RestoreOptions`` for all, or one a model).

    With ``held_out`` (names of ``real-rainy`` photos), the result has one more set, ``"held out"``: those photos
    and every SPA and webcam frame, the real photos no weights were distilled on (``tools/teacher_pairs.py``).
    """
    column_options = options if isinstance(options, list) else [options] * len(models)
    removed: dict[str, list[list[float]]] = {}
    parts: dict[str, dict[str, list[list[float]]]] = {"darkened": {}, "fine": {}}  # removed, read apart
    photo_names: dict[str, list[str]] = {}
    skipped: list[str] = []
    picks: list[list[np.ndarray]] = []
    captions: list[str] = []
    real = {key: read_folder(data / sub) for key, sub in REAL_SETS.items()}
    total = sum(len(p) for p, _ in real.values())
    chosen = (
        set(np.linspace(0, total - 1, rows_wanted).round().astype(int).tolist()) if rows_wanted else set()
    )
    index = 0
    for key, (photos, bad) in real.items():
        skipped += bad
        removed[key] = [[] for _ in models]
        for part in parts.values():
            part[key] = [[] for _ in models]
        photo_names[key] = [n for n, _ in photos]
        for name, photo in photos:
            outs = [restore(m, photo, options=o) for m, o in zip(models, column_options, strict=True)]
            for i, out in enumerate(outs):
                removed[key][i].append(change_levels(photo, out))
                for part, value in change_parts(photo, out).items():
                    parts[part][key][i].append(value)
            if index in chosen:
                picks.append([photo, *outs])
                captions.append(f"{key}/{name}")
            index += 1
        print(f"{key}: {len(photos)} photos", file=sys.stderr)
    kept: list[list[float]] = [[] for _ in models]
    free: dict[str, list[list[float]]] = {"changed": [[] for _ in models], "fine": [[] for _ in models]}
    free_rows = []
    for sub, count in RAIN_FREE:
        photos, bad = read_folder(data / sub, count)
        skipped += bad
        for name, photo in photos:
            crop = centre_crop(photo)
            outs = [restore(m, crop, options=o) for m, o in zip(models, column_options, strict=True)]
            for i, out in enumerate(outs):
                kept[i].append(score_pair(out, crop)["psnr_y"])
                free["changed"][i].append(change_levels(crop, out))
                free["fine"][i].append(change_parts(crop, out)["fine"])
            if len(free_rows) < 2 and name == photos[0][0]:
                free_rows.append(([crop, *outs], f"rain-free {Path(sub).name}/{name}"))
    for images, caption in free_rows:
        picks.append(images)
        captions.append(caption)
    unknown = sorted((held_out or set()) - set(photo_names["real-rainy"]))
    if unknown:
        raise SystemExit(f"error: --held-out names photos real-rainy does not hold: {', '.join(unknown[:5])}")
    keep = [k != "real-rainy" or held_out is None or n in held_out for k in REAL_SETS for n in photo_names[k]]
    for reading in (removed, *parts.values()):
        reading["all real"] = [sum((reading[k][i] for k in REAL_SETS), []) for i in range(len(models))]
        if held_out is not None:
            reading["held out"] = [
                [v for v, k in zip(row, keep, strict=True) if k] for row in reading["all real"]
            ]

    def rows(reading: dict[str, list[list[float]]]) -> dict[str, list[dict]]:
        return {
            k: [mean_row(v[i], v[0] if i else None) for i in range(len(models))] for k, v in reading.items()
        }

    result = {
        "weights": names,
        "strength": [o.strength for o in column_options],
        "removed": rows(removed),
        **{part: rows(reading) for part, reading in parts.items()},
        "kept": [mean_row(kept[i], kept[0] if i else None) for i in range(len(models))],
        "rain_free": rows(free),
        "per_photo": {"removed": removed, **parts, "kept": kept, "rain_free": free, "names": photo_names},
        "skipped": skipped,
    }
    return result, picks, captions


def print_table(result: dict) -> None:
    names = result["weights"]
    width = max(len(n) for n in names)
    strengths = ", ".join(f"{s:g}" for s in result["strength"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, strength {strengths}")
    print(
        "rain removed: mean |rainy - derained| (8-bit levels) [95 % CI]; x first: ratio to the first weights; "
        f"beside it: darkened, mean rainy - derained; fine, mean |change - change blurred by sigma {FINE_SIGMA:g}|"
    )
    for key, stats in result["removed"].items():
        print(f"  {key} ({len(result['per_photo']['removed'][key][0])} photos)")
        base = stats[0]["mean"]
        for name, s in zip(names, stats, strict=True):
            paired = (
                f"  paired vs first {s['paired']['mean']:+.2f} [{s['paired']['ci95'][0]:+.2f}, "
                f"{s['paired']['ci95'][1]:+.2f}]"
                if "paired" in s
                else ""
            )
            ratio = f"{s['mean'] / base:5.2f}" if base else "    -"  # strength 0 removes nothing
            print(
                f"    {name:<{width}}  {s['mean']:6.2f} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]  "
                f"x first {ratio}{paired}"
            )
        for name, dark, fine in zip(names, result["darkened"][key], result["fine"][key], strict=True):
            q = fine.get("paired")
            paired = (
                f", paired vs first {q['mean']:+.2f} [{q['ci95'][0]:+.2f}, {q['ci95'][1]:+.2f}]" if q else ""
            )
            print(f"      {name:<{width}}  darkened {dark['mean']:+6.2f}, fine {fine['mean']:.2f}{paired}")
    print(
        f"rain-free kept: PSNR-Y of derain(photo) vs photo, {len(result['per_photo']['kept'][0])} crops (dB)"
    )
    for name, s in zip(names, result["kept"], strict=True):
        paired = f"  paired vs first {s['paired']['mean']:+.2f}" if "paired" in s else ""
        print(f"    {name:<{width}}  {s['mean']:6.2f} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]{paired}")
    print("rain-free changed: mean |photo - derained| and its fine part on the same crops (8-bit levels)")
    for name, changed, fine in zip(
        names, result["rain_free"]["changed"], result["rain_free"]["fine"], strict=True
    ):
        print(f"    {name:<{width}}  changed {changed['mean']:.2f}, fine {fine['mean']:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_weights_arguments(parser)
    add_data_argument(parser)
    parser.add_argument("--gallery", type=Path, help="write the gallery PNG here")
    parser.add_argument("--gallery-rows", type=int, default=14, help="real photos in the gallery")
    parser.add_argument("--height", type=int, default=200, help="gallery row height (pixels)")
    parser.add_argument(
        "--crop",
        type=int,
        help="show each photo's centre CROP² pixels at full resolution instead of all of it",
    )
    parser.add_argument("--json", type=Path, help="write the result, per-photo values included, here")
    parser.add_argument(
        "--held-out",
        type=Path,
        help="a list of real-rainy photos no weights trained on (teacher_pairs.py's held-out.txt): adds a set of "
        "those photos with SPA's and the webcam's",
    )
    parser.add_argument(
        "--strength",
        type=float,
        nargs="+",
        default=[1.0],
        help="derain at this strength, 0 to 2 (default 1); several: a column each weights x strength",
    )
    args = parser.parse_args(argv)
    try:
        strengths = [RestoreOptions(strength=s) for s in args.strength]
    except ValueError as err:
        parser.error(str(err))
    names = weights_names(parser, args)
    held_out = None
    if args.held_out:
        try:
            lines = (line.strip() for line in args.held_out.read_text().splitlines())
            held_out = {line for line in lines if line and not line.startswith("#")}
        except OSError as err:
            parser.error(f"--held-out {args.held_out}: {err.strerror}")
    loaded = load_weights(args.weights)
    models = [m for m in loaded for _ in strengths]
    options = [o for _ in loaded for o in strengths]
    if len(strengths) > 1:
        names = [f"{n} s{o.strength:g}" for n in names for o in strengths]
    result, picks, captions = measure(  # restore() runs in inference mode: autograd is left as it is
        models, names, args.data, args.gallery_rows if args.gallery else 0, options, held_out
    )
    print_table(result)
    for message in result["skipped"]:
        print(message, file=sys.stderr)
    if args.gallery:
        if args.crop:  # the outputs of the whole photos, cut: streaks are judged at 1:1
            picks = [[centre_crop(im, args.crop) for im in row] for row in picks]
        write_image_atomic(
            args.gallery,
            gallery(picks, height=args.crop or args.height, headers=["rainy", *names], captions=captions),
        )
        print(f"gallery: {args.gallery} ({len(picks)} rows)")
    if args.json:
        with atomic_output(args.json) as tmp:
            tmp.write_text(json.dumps(result))
    summary = {f"removed_{i}": s["mean"] for i, s in enumerate(result["removed"]["all real"])}
    summary.update({f"kept_{i}": s["mean"] for i, s in enumerate(result["kept"])})
    print("RESULT " + json.dumps({k: round(v, 3) for k, v in summary.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

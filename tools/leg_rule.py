"""A derain-base leg by its rules, from the two scoring tools' JSON: what each set reads and whether the leg ships
and becomes the run's continuation.

    python tools/real_rain.py --weights derain-small PREVIOUS LEG --names stage9 prev leg --data ../shared/data \\
        --held-out runs/teacher-layers/held-out.txt --json real.json
    python tools/paired.py --weights derain-small LEG --names stage9 leg --data ../shared/data \\
        --heavy-val runs/heavy-val --sets heavy7 light40 rain200l heavy200 --json paired.json
    python tools/leg_rule.py --real real.json --paired paired.json --held-out runs/teacher-layers/held-out.txt \\
        --previous-paired previous-paired.json

``real.json``'s weights are stage 9, the previous leg and the leg, in that order; ``paired.json``'s stage 9 first
and the leg last. Prints real rain removed by subset (the 103 held-out photos, all 164, real-rainy's held-out and
distilled photos, SPA, the webcam) and kept, each with paired 95 % intervals against the previous leg and stage 9;
then the ship rule (docs/history.md, "derain-base, leg 1"; item 3 read on the held-out photos since leg 7) and
the pin rule (since leg 8), each item PASS or FAIL. The gallery (item 5) is for a person to look at: never
PASS here. Exit status 0 whatever the verdict; 2 when a file is missing, is not the tools' JSON, or does not
fit the held-out list (``real_rain.py`` must have been given the same ``--held-out``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from research import paired_difference

HEAVY7_FLOOR = 0.0  # item 1: the 7 heavy pairs' paired interval wholly above this
LIGHT_FLOOR = -0.05  # item 2: Rain200L's and RainTrainL's mean difference against stage 9 at least this (dB)
REMOVED_RATIO = 0.98  # item 3: rain removed on the held-out photos at least this × stage 9's
KEPT_FLOOR = 44.0  # item 4: rain-free photos kept at least this (dB)
PIN_SLACK = 0.2  # pin: heavy 200 against stage 9 not below the previous leg's by more than this (dB)
SETS = ("heavy7", "light40", "rain200l", "heavy200")  # paired.py's sets the rules read


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def difference(values: list[float], base: list[float]) -> dict:
    """``research.paired_difference`` with the count of items (``n``)."""
    return {**paired_difference(values, base), "n": len(values)}


def shown(d: dict) -> str:
    low, high = d["ci95"]
    return f"{d['mean']:+.3f} [{low:+.3f}, {high:+.3f}], more on {d['wins']}/{d['n']}"


def real_subsets(real: dict, held: set[str]) -> dict[str, list[list[float]]]:
    """Per-photo values of each weights by subset: removed (real-rainy split into its held-out and its distilled
    photos by ``held``) and kept."""
    per = real["per_photo"]["removed"]
    if "held out" not in per:
        raise ValueError("real_rain.py's JSON has no 'held out' set: score with --held-out")
    subsets = {key: per[key] for key in ("held out", "all real", "real-rainy", "spa", "webcam") if key in per}
    names = real["per_photo"]["names"]["real-rainy"]
    for label, inside in (("held-out real-rainy", True), ("distilled", False)):
        idx = [i for i, name in enumerate(names) if (name in held) == inside]
        subsets[label] = [[column[i] for i in idx] for column in per["real-rainy"]]
    others = sum(len(per[key][0]) for key in ("spa", "webcam") if key in per)
    if len(subsets["held-out real-rainy"][0]) + others != len(per["held out"][0]):
        raise ValueError(
            f"the held-out list names {len(subsets['held-out real-rainy'][0])} of real-rainy's photos, and with "
            f"SPA's and the webcam's {others} they are not the {len(per['held out'][0])} real_rain.py held out: "
            "give the --held-out file it was given"
        )
    subsets["kept"] = real["per_photo"]["kept"]
    return subsets


def read_held_out(path: Path) -> set[str]:
    """The photo names of a held-out list (teacher_pairs.py's ``held-out.txt``), read as real_rain.py reads it."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def paired_set(paired: dict, key: str) -> dict:
    """The leg (last weights) against stage 9 (first) on one of ``paired.py``'s sets, as it recorded it."""
    last = paired[key][-1]
    if "paired" not in last:
        raise ValueError(f"{key}: one weights only, no paired difference (paired.py scores stage 9 first)")
    return {**last["paired"], "n": last["count"]}


def verdict(
    real: dict, paired: dict, held: set[str], previous_heavy200: float | None
) -> list[tuple[str, bool | None, str]]:
    """The rules' items: (item, passed or None where a person decides, what was read)."""
    subsets = real_subsets(real, held)
    stage9, previous, leg = subsets["held out"]
    heavy7 = paired_set(paired, "heavy7")
    items: list[tuple[str, bool | None, str]] = [
        ("1 heavy 7: interval above 0", heavy7["ci95"][0] > HEAVY7_FLOOR, shown(heavy7))
    ]
    for key in ("rain200l", "light40"):
        d = paired_set(paired, key)
        items.append((f"2 {key}: mean ≥ {LIGHT_FLOOR:+.2f} dB", d["mean"] >= LIGHT_FLOOR, shown(d)))
    ratio = mean(leg) / mean(stage9)
    items.append(
        (
            f"3 removed on the {len(leg)} held out ≥ {REMOVED_RATIO}× stage 9",
            ratio >= REMOVED_RATIO,
            f"{mean(leg):.3f} / {mean(stage9):.3f} = {ratio:.3f}×",
        )
    )
    kept = mean(subsets["kept"][-1])
    items.append((f"4 kept ≥ {KEPT_FLOOR:g} dB", kept >= KEPT_FLOOR, f"{kept:.2f} dB"))
    items.append(("5 a gallery looked at", None, "a person's call"))
    held_out = difference(leg, previous)
    items.append(
        ("pin: held out vs the previous leg, not wholly below 0", held_out["ci95"][1] >= 0, shown(held_out))
    )
    heavy200 = paired_set(paired, "heavy200")
    if previous_heavy200 is None:
        items.append(("pin: heavy 200 vs stage 9", None, f"{shown(heavy200)} (no previous leg's given)"))
    else:
        floor = previous_heavy200 - PIN_SLACK
        items.append(
            (
                f"pin: heavy 200 vs stage 9 ≥ the previous leg's {previous_heavy200:+.3f} − {PIN_SLACK:g}",
                heavy200["mean"] >= floor,
                shown(heavy200),
            )
        )
    return items


def read_apart(real: dict, paired: dict) -> list[str]:
    """Lines read beside the rules, deciding nothing: the held-out photos' removal read apart (``darkened``,
    ``fine``: stage 9, previous leg, leg, with the leg's paired differences) and each paired set's brightness
    error and PSNR-Y at zero bias (stage 9 and the leg), where the tools' JSON holds them."""
    lines = []
    for part in ("darkened", "fine"):
        columns = real["per_photo"].get(part, {}).get("held out")
        if columns:
            means = " / ".join(f"{mean(c):.3f}" for c in columns)
            lines.append(
                f"  held out, {part}: {means}; leg − previous {shown(difference(columns[2], columns[1]))}; "
                f"leg − stage 9 {shown(difference(columns[2], columns[0]))}"
            )
    for key in SETS:
        first, last = paired[key][0], paired[key][-1]
        if "bias_y" in last and "paired_debiased" in last:
            lines.append(
                f"  {key}: bias {first['bias_y']:+.2f} / {last['bias_y']:+.2f} levels; at zero bias "
                f"{first['psnr_y_debiased']:.2f} / {last['psnr_y_debiased']:.2f}, leg − stage 9 "
                f"{shown({**last['paired_debiased'], 'n': last['count']})}"
            )
    return lines


def read_json(path: Path, keys: tuple[str, ...]) -> dict:
    """A tool's JSON, checked for the entries this reads.

    Raises:
        ValueError: the file is missing, not JSON, or lacks one of ``keys`` (the message names it).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: {err}") from None
    missing = [key for key in keys if key not in data]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} (not the JSON of the scoring tool this expects)")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--real", type=Path, required=True, help="real_rain.py --json: stage 9, previous leg, leg"
    )
    parser.add_argument(
        "--paired", type=Path, required=True, help="paired.py --json: stage 9 first, the leg last"
    )
    parser.add_argument("--held-out", type=Path, required=True, help="teacher_pairs.py's held-out.txt")
    parser.add_argument(
        "--previous-paired",
        type=Path,
        help="the previous leg's paired.py --json (its heavy 200, for the pin rule)",
    )
    args = parser.parse_args(argv)
    try:
        real = read_json(args.real, ("weights", "per_photo"))
        paired = read_json(args.paired, ("weights", *SETS))
        previous = read_json(args.previous_paired, ("heavy200",)) if args.previous_paired else None
        held = read_held_out(args.held_out)
        if len(real["weights"]) != 3:
            raise ValueError(
                f"{args.real}: {len(real['weights'])} weights; expected stage 9, the previous leg and the leg"
            )
        subsets = real_subsets(real, held)
        items = verdict(real, paired, held, paired_set(previous, "heavy200")["mean"] if previous else None)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"real rain ({args.real}): {' | '.join(real['weights'])}")
    for label, columns in subsets.items():
        means = " / ".join(f"{mean(c):.3f}" for c in columns)
        print(f"  {label} ({len(columns[0])}): {means}")
        print(f"    leg − previous {shown(difference(columns[2], columns[1]))}")
        print(f"    leg − stage 9  {shown(difference(columns[2], columns[0]))}")
    apart = read_apart(real, paired)
    if apart:
        print("read apart (reported, deciding nothing):")
        print("\n".join(apart))
    print("rules:")
    for item, passed, read in items:
        mark = "look" if passed is None else "PASS" if passed else "FAIL"
        print(f"  {mark}  {item}: {read}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

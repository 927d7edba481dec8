"""tools/leg_rule.py: a derain-base leg read by its ship and pin rules from the scoring tools' JSON."""

from __future__ import annotations

import json

from test_real_rain import tool

leg_rule = tool("leg_rule")


def _real(leg_factor: float, kept: float = 50.0) -> dict:
    """real_rain.py's JSON for stage 9, a previous leg and a leg removing ``leg_factor``× stage 9's rain."""
    rainy = [4.0, 5.0, 6.0, 2.0]
    columns = [rainy, [v * 0.9 for v in rainy], [v * leg_factor for v in rainy]]
    return {
        "weights": ["stage9", "prev", "leg"],
        "per_photo": {
            "removed": {
                "real-rainy": columns,
                "held out": [c[:2] for c in columns],  # the two photos held-out.txt names
                "all real": columns,
            },
            "kept": [[46.0, 47.0], [55.0, 56.0], [kept, kept]],
            "names": {"real-rainy": ["a.png", "b.png", "c.png", "d.png"]},
        },
    }


def _paired(heavy7: tuple[float, float], heavy200: float, rain200l: float = -0.04) -> dict:
    """paired.py's JSON: stage 9 and the leg, the leg's paired differences as the tool records them."""

    def entry(mean: float, ci: tuple[float, float]) -> list[dict]:
        return [{"count": 7}, {"count": 7, "paired": {"mean": mean, "ci95": list(ci), "wins": 5}}]

    return {
        "weights": ["stage9", "leg"],
        "heavy7": entry(sum(heavy7) / 2, heavy7),
        "light40": entry(1.0, (0.8, 1.2)),
        "rain200l": entry(rain200l, (rain200l - 0.5, rain200l + 0.5)),
        "heavy200": entry(heavy200, (heavy200 - 0.1, heavy200 + 0.1)),
    }


def _marks(items) -> dict[str, bool | None]:
    return {name.split(":")[0]: passed for name, passed, _ in items}


def test_a_leg_that_passes_every_measured_item_leaves_the_gallery_to_a_person() -> None:
    items = leg_rule.verdict(_real(1.0), _paired((0.1, 0.9), 0.4), {"a.png", "b.png"}, 0.5)
    marks = _marks(items)
    assert marks["1 heavy 7"] and marks["2 rain200l"] and marks["2 light40"] and marks["4 kept ≥ 44 dB"]
    assert [passed for name, passed, _ in items if name.startswith("3 ")] == [True]
    assert marks["5 a gallery looked at"] is None
    assert all(passed for name, passed, _ in items if name.startswith("pin"))


def test_each_floor_fails_its_item() -> None:
    items = leg_rule.verdict(_real(0.97, kept=43.9), _paired((-0.1, 0.9), 0.19), {"a.png", "b.png"}, 0.4)
    failed = {name.split(" ")[0] + " " + name.split(" ")[1] for name, passed, _ in items if passed is False}
    assert failed == {"1 heavy", "3 removed", "4 kept", "pin: heavy"}
    read = {name[:1]: text for name, _, text in items}
    assert read["3"] == "4.365 / 4.500 = 0.970×"  # on the held-out photos (all four: 4.25)
    # the held-out vs previous-leg pin passes while its interval reaches 0 (0.97 vs 0.9 of stage 9's: above)
    assert [p for n, p, _ in items if n.startswith("pin: held out")] == [True]


def test_the_light_floor_is_inclusive_and_the_held_out_pin_fails_wholly_below() -> None:
    held = {"a.png", "b.png"}
    assert _marks(leg_rule.verdict(_real(1.0), _paired((0.1, 0.9), 0.4, -0.05), held, 0.4))["2 rain200l"]
    items = leg_rule.verdict(_real(0.8), _paired((0.1, 0.9), 0.4, -0.06), held, 0.4)
    marks = _marks(items)
    assert marks["2 rain200l"] is False and marks["2 light40"]
    # the leg removes 0.8× stage 9's where the previous removed 0.9×: below it on every held-out photo
    pins = {name.split(" vs ")[0]: passed for name, passed, _ in items if name.startswith("pin")}
    assert pins == {"pin: held out": False, "pin: heavy 200": True}


def test_real_rainy_is_split_by_the_held_out_list() -> None:
    subsets = leg_rule.real_subsets(_real(1.0), {"b.png", "d.png"})
    assert subsets["held-out real-rainy"][0] == [5.0, 2.0] and subsets["distilled"][0] == [4.0, 6.0]


def test_the_command_reads_the_files_and_refuses_what_it_cannot_read(tmp_path, capsys) -> None:
    real, paired, held = tmp_path / "real.json", tmp_path / "paired.json", tmp_path / "held-out.txt"
    real.write_text(json.dumps(_real(1.0)))
    paired.write_text(json.dumps(_paired((0.1, 0.9), 0.4)))
    held.write_text("# held out\na.png\n\nb.png\n")
    args = ["--real", str(real), "--paired", str(paired), "--held-out", str(held)]
    assert leg_rule.main(args) == 0
    out = capsys.readouterr().out
    assert "PASS  1 heavy 7" in out and "look  pin: heavy 200 vs stage 9" in out
    assert "held-out real-rainy (2): 4.500 / 4.050 / 4.500" in out
    paired.write_text(json.dumps({"weights": ["stage9", "leg"], "heavy7": []}))
    assert leg_rule.main(args) == 2
    assert f"{paired}: no light40, rain200l, heavy200" in capsys.readouterr().err
    short = _real(1.0)
    short["weights"] = ["stage9", "leg"]
    real.write_text(json.dumps(short))
    paired.write_text(json.dumps(_paired((0.1, 0.9), 0.4)))
    assert leg_rule.main(args) == 2
    assert "expected stage 9, the previous leg and the leg" in capsys.readouterr().err


def test_a_held_out_list_that_does_not_fit_the_scores_is_refused(tmp_path, capsys) -> None:
    real, paired, held = tmp_path / "real.json", tmp_path / "paired.json", tmp_path / "held-out.txt"
    real.write_text(json.dumps(_real(1.0)))
    paired.write_text(json.dumps(_paired((0.1, 0.9), 0.4)))
    held.write_text("a.png\nb.png\nc.png\n")  # three named; real_rain.py held out two
    args = ["--real", str(real), "--paired", str(paired), "--held-out", str(held)]
    assert leg_rule.main(args) == 2
    assert "not the 2 real_rain.py held out" in capsys.readouterr().err
    unheld = _real(1.0)
    del unheld["per_photo"]["removed"]["held out"]
    real.write_text(json.dumps(unheld))
    assert leg_rule.main(args) == 2
    assert "score with --held-out" in capsys.readouterr().err


def test_the_readings_apart_are_reported_where_the_tools_wrote_them() -> None:
    real, paired = _real(1.0), _paired((0.1, 0.9), 0.4)
    assert leg_rule.read_apart(real, paired) == []  # JSON of the tools before they read removal apart
    real["per_photo"]["darkened"] = {"held out": [[3.0, 1.0], [2.0, 2.0], [1.0, 0.0]]}
    for key in leg_rule.SETS:
        first, last = paired[key]
        first |= {"bias_y": 2.0, "psnr_y_debiased": 26.5}
        last |= {"bias_y": -4.5, "psnr_y_debiased": 27.6}
        last["paired_debiased"] = {"mean": 1.1, "ci95": [0.8, 1.5], "wins": 7}
    lines = leg_rule.read_apart(real, paired)
    assert lines[0].startswith("  held out, darkened: 2.000 / 2.000 / 0.500; leg − previous -1.500")
    assert (
        "heavy7: bias +2.00 / -4.50 levels; at zero bias 26.50 / 27.60, leg − stage 9 +1.100 [+0.800, +1.500]"
        in (lines[1])
    )
    assert len(lines) == 1 + len(leg_rule.SETS)  # no fine reading given: none printed

"""The shipped weights' recipe (``configs/derain-small/recipe.yaml``, ``derain recipe``): every stage starts from
the previous stage's output, the last one is the packaged file, the plan shows every stage, a stage done is skipped,
and weights that are not the ones the recipe names stop it in one line naming both hashes. The experiments
(``experiments/``) and the other bundled configs still parse."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from helpers import tiny_net

from derain import recipe as recipe_module
from derain import recipe_spec
from derain.fit import main as fit_main
from derain.pin import main as pin
from derain.recipe import main, run_recipe
from derain.recipe_spec import RecipeError, load_recipe
from derain.weights import float16_tensors, packaged_weights, read_safetensors, save_net, tensors_sha256

REPO = Path(__file__).resolve().parents[1]
RECIPE = load_recipe("derain-small")


def stage_config(stage) -> dict:
    return yaml.safe_load(stage.config.read_text())


def test_every_stage_starts_from_the_previous_stages_output() -> None:
    first, *rest = RECIPE.stages
    assert first.input is None and "init_weights" not in stage_config(first)
    for before, stage in zip(RECIPE.stages[:-1], rest, strict=True):
        assert stage.input == before.output, stage.name  # path and sha256
        assert stage_config(stage)["init_weights"] == stage.input.path, stage.name


def test_each_stage_config_is_whole_and_writes_the_recorded_output() -> None:
    for stage in RECIPE.stages:
        config = stage_config(stage)
        assert "packaged" not in str(config.get("init_weights")), stage.name
        assert Path(config["trainer"]["default_root_dir"]) / "model.safetensors" == Path(stage.output.path)
        export = config["export_from"]  # the checkpoint fit exports is the one the history records
        assert stage.checkpoint == ("last.ckpt" if export == "last" else export) or export == "best", (
            stage.name
        )
        assert config["model"]["net"]["class_path"] == "derain.models.DerainNet"  # no layering on other files


def test_each_stage_trains_in_float32_as_its_pinned_output_did() -> None:
    # not precision: auto, which is bf16 on a CPU with it in hardware: a stage trains again as it was made
    assert all(stage_config(stage)["trainer"]["precision"] == "32-true" for stage in RECIPE.stages)


def test_the_last_stage_is_the_packaged_weights() -> None:
    assert (REPO / RECIPE.shipped).resolve() == packaged_weights().resolve()
    assert tensors_sha256(packaged_weights()) == RECIPE.shipped_sha256  # the last output, stored in float16
    assert {t.dtype for t in read_safetensors(packaged_weights())[1].values()} == {torch.float16}
    assert sum(stage.step for stage in RECIPE.stages) == 23462


def test_the_packaged_file_is_the_last_output_in_float16(tmp_path) -> None:
    last = RECIPE.stages[-1]
    proc = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{last.shipped_in}:{RECIPE.shipped}"], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip("not a git checkout with the history")
    (tmp_path / "w.safetensors").write_bytes(proc.stdout)
    meta, state = read_safetensors(tmp_path / "w.safetensors")
    assert tensors_sha256(state) == last.output.sha256  # float32, as trained
    assert tensors_sha256({k: v.half() for k, v in state.items()}) == RECIPE.shipped_sha256
    packaged = read_safetensors(packaged_weights())[
        0
    ]  # its metadata kept: the record, and provenance added since
    assert {k: packaged[k] for k in meta} == meta and "provenance" in packaged


def test_the_recorded_hashes_are_the_shipped_files_of_the_history(tmp_path) -> None:
    for stage in (s for s in RECIPE.stages if s.shipped_in):
        proc = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{stage.shipped_in}:{RECIPE.shipped}"], capture_output=True
        )
        if proc.returncode != 0:
            pytest.skip("not a git checkout with the history")
        (tmp_path / "w.safetensors").write_bytes(proc.stdout)
        assert tensors_sha256(tmp_path / "w.safetensors") == stage.output.sha256, stage.name


def test_the_plan_shows_every_stage_and_trains_nothing(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(recipe_module, "_train", lambda *a: pytest.fail("--plan trained"))
    assert main(["derain-small", "--plan"]) == 0
    out = capsys.readouterr().out
    for stage in RECIPE.stages:
        block = out.split(f"\n{stage.name}\n", 1)[1].split("\nstage", 1)[0]
        assert stage.config.name in block and stage.output.path in block
        assert (stage.output.sha256 or "sha256 not recorded") in block
        assert ("from scratch" if stage.input is None else stage.input.path) in block
    assert (
        f"sha256 {RECIPE.shipped_sha256}, the recipe's shipped_sha256: the last stage's output as stored"
        in out
    )
    assert "prepare heavy-val: runs/heavy-val" in out


def tiny_recipe(tmp_path: Path, second_input_sha: str | None) -> tuple[Path, str]:
    """A two-stage recipe over tiny weights: stage a's output exists (hash recorded), stage b starts from it."""
    out_a = save_net(tiny_net(seed=1), tmp_path / "runs" / "a" / "model.safetensors")
    sha = tensors_sha256(out_a)
    (tmp_path / "a.yaml").write_text("model:\n  lr: 0.001\n")
    (tmp_path / "b.yaml").write_text(f"init_weights: {out_a}\n")
    manifest = {
        "name": "tiny",
        "stages": [
            {"name": "a", "config": "a.yaml", "input": None, "output": {"path": str(out_a), "sha256": sha}},
            {
                "name": "b",
                "config": "b.yaml",
                "input": {"path": str(out_a), "sha256": second_input_sha or sha},
                "output": {"path": str(tmp_path / "runs" / "b" / "model.safetensors"), "sha256": "f" * 64},
            },
        ],
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(manifest))
    return tmp_path / "recipe.yaml", sha


def test_a_stage_done_is_skipped_and_the_next_one_trains(tmp_path, monkeypatch, capsys) -> None:
    file, _ = tiny_recipe(tmp_path, None)
    trained = []
    monkeypatch.setattr(recipe_module, "_train", lambda recipe, stage: trained.append(stage.name) or 1)
    assert run_recipe(load_recipe(str(file))) == 1  # fit's status comes back
    assert trained == ["b"] and "a: " in capsys.readouterr().out


def test_stages_before_a_done_one_are_not_trained(tmp_path, monkeypatch, capsys) -> None:
    file, _ = tiny_recipe(tmp_path, None)
    manifest = yaml.safe_load(file.read_text())
    out_b = save_net(tiny_net(seed=3), tmp_path / "runs" / "b" / "model.safetensors")
    manifest["stages"][1]["output"]["sha256"] = tensors_sha256(out_b)
    file.write_text(yaml.safe_dump(manifest))
    (tmp_path / "runs" / "a" / "model.safetensors").unlink()
    monkeypatch.setattr(recipe_module, "_train", lambda *a: pytest.fail("trained a stage no one needs"))
    assert run_recipe(load_recipe(str(file))) == 0
    assert "is not needed: a later stage's output is done" in capsys.readouterr().out


def test_an_input_with_another_hash_is_one_line_naming_both(tmp_path, monkeypatch, capsys) -> None:
    file, sha = tiny_recipe(tmp_path, "0" * 64)
    monkeypatch.setattr(recipe_module, "_train", lambda *a: pytest.fail("trained from the wrong weights"))
    assert main([str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"tensors sha256 {sha}, the recipe expects {'0' * 64}" in err
    assert "b: input" in err and "model.safetensors" in err
    with pytest.raises(RecipeError):
        run_recipe(load_recipe(str(file)))


def test_a_rebuilt_output_stops_the_recipe_unless_accepted(tmp_path, monkeypatch) -> None:
    file, _ = tiny_recipe(tmp_path, None)
    out_b = tmp_path / "runs" / "b" / "model.safetensors"
    monkeypatch.setattr(recipe_module, "_train", lambda *a: save_net(tiny_net(seed=2), out_b) and 0)
    with pytest.raises(
        RecipeError, match=r"rebuilt .* has tensors sha256 [0-9a-f]{64}, the recipe records f{64}"
    ):
        run_recipe(load_recipe(str(file)))
    with pytest.raises(
        RecipeError, match="--accept-rebuilt"
    ):  # and a second run finds it, not what it expects
        run_recipe(load_recipe(str(file)))
    assert run_recipe(load_recipe(str(file)), accept_rebuilt=True) == 0


def test_a_missing_recipe_or_stage_config_names_it(tmp_path, capsys) -> None:
    assert main([str(tmp_path / "nowhere.yaml")]) == 2
    assert "nowhere.yaml" in capsys.readouterr().err
    (tmp_path / "recipe.yaml").write_text(
        "stages:\n- {name: a, config: gone.yaml, output: {path: x, sha256: null}}\n"
    )
    with pytest.raises(RecipeError, match="a config it names does not exist: .*gone.yaml"):
        load_recipe(str(tmp_path))


EXPERIMENTS = [  # as experiments/README.md lists them: each over a recipe stage
    ["derain-small/stage7-garg-long.yaml", "experiments/derain-small/stage8-arm-mix.yaml"],
    ["derain-small/stage7-garg-long.yaml", "experiments/derain-small/stage8-arm-focused.yaml"],
    [
        "derain-small/stage7-garg-long.yaml",
        "experiments/derain-small/stage8-arm-focused.yaml",
        "experiments/derain-small/stage8-arm-focused-light.yaml",
    ],
    [
        "derain-small/stage7-garg-long.yaml",
        "experiments/derain-small/stage9-base.yaml",
        "experiments/derain-small/stage9-arm-probe.yaml",
    ],
    ["derain-small/stage9-focused.yaml", "experiments/derain-small/stage9-arm-focused-lr.yaml"],
    ["derain-small/stage9-focused.yaml", "experiments/derain-small/stage9-long.yaml"],
    ["derain-small/stage9-focused.yaml", "experiments/derain-small/stage10-arm-generator.yaml"],
    ["derain-small/stage4-rain-free.yaml", "experiments/derain-small/gpu.yaml"],
]
# derain-base's run (configs/derain-base/recipe.yaml): each leg's config layered over those it names; a leg committed
# before it runs (its rule is written first) and not yet a stage of the recipe, over the last stage's stack
BASE = load_recipe("derain-base")
BASE_STACKS = [[f"derain-base/{c.name}" for c in (*s.over, s.config)] for s in BASE.stages]
BASE_STACKS += [
    [*BASE_STACKS[-1], f"derain-base/{p.name}"]
    for p in sorted((REPO / "configs" / "derain-base").glob("leg*.yaml"))
    if p.name not in {s.config.name for s in BASE.stages}
]
CONFIGS = (
    [[f"derain-small/{s.config.name}"] for s in RECIPE.stages]
    + [
        ["rain100h.yaml"],
        ["synthetic.yaml"],
        # the wide candidate (docs/history.md, "Stage 10"), not shipped
        ["derain-wide/stage10a-scratch.yaml"],
        # its continuations, each layered over the stages before it, from the committed weights of the last
        ["derain-wide/stage10a-scratch.yaml", "derain-wide/stage10b-continue.yaml"],
        [
            "derain-wide/stage10a-scratch.yaml",
            "derain-wide/stage10b-continue.yaml",
            "derain-wide/stage10c-continue.yaml",
        ],
    ]
    + BASE_STACKS
)


def test_every_config_is_in_the_recipe_or_an_experiment() -> None:
    listed = {name for stack in CONFIGS + EXPERIMENTS for name in stack}
    configs = {f"{p.relative_to(REPO / 'configs').as_posix()}" for p in (REPO / "configs").rglob("*.yaml")}
    experiments = {p.relative_to(REPO).as_posix() for p in (REPO / "experiments").rglob("*.yaml")}
    assert configs - {"derain-small/recipe.yaml", "derain-base/recipe.yaml"} | experiments == listed
    readme = (REPO / "experiments" / "README.md").read_text()
    assert all(Path(name).name in readme for name in experiments)


@pytest.mark.parametrize("stack", CONFIGS + EXPERIMENTS, ids=lambda s: "+".join(Path(n).stem for n in s))
def test_every_config_parses(stack, capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # experiments/ is a folder of the checkout; bundled names resolve from anywhere
    with pytest.raises(SystemExit) as exit_info:
        fit_main([*(a for name in stack for a in ("--config", name)), "--print_config"])
    assert exit_info.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["data"] is not None and config["model"]["net"]["class_path"].startswith("derain.models")


def test_the_recipe_readme_lists_every_stage() -> None:
    readme = (RECIPE.file.parent / "README.md").read_text()
    assert all(f"`{stage.config.name}`" in readme for stage in RECIPE.stages)


def test_derain_base_is_a_run_in_progress_from_the_grown_stage_9() -> None:
    base = load_recipe("derain-base")
    text = recipe_module.plan(base)
    assert "a run in progress: nothing ships yet" in text
    assert "derain grow derain-small" in text  # its first weights are stage 9 grown, prepared by the recipe
    raw = yaml.safe_load(base.file.read_text())
    assert (REPO / raw["continuation"]["path"]).is_file()  # the one committed file the next leg starts from


def test_the_stored_file_is_the_last_output_in_float16_written_or_checked(
    tmp_path, monkeypatch, capsys
) -> None:
    file, _ = tiny_recipe(tmp_path, None)
    manifest = yaml.safe_load(file.read_text())
    manifest["stages"] = manifest["stages"][:1]  # stage a, done
    target = tmp_path / "continuation.safetensors"
    manifest["continuation"] = {"path": str(target), "sha256": None}
    file.write_text(yaml.safe_dump(manifest))
    monkeypatch.setattr(recipe_module, "_train", lambda *a: pytest.fail("stage a is done"))
    assert run_recipe(load_recipe(str(file))) == 0  # a fresh clone's recipe writes the stored file
    meta, state = read_safetensors(target)
    assert all(v.dtype == torch.float16 for v in state.values() if v.is_floating_point())
    assert meta == read_safetensors(tmp_path / "runs" / "a" / "model.safetensors")[0]  # its provenance kept
    stored = tensors_sha256(target)
    assert f"wrote {target}" in capsys.readouterr().out
    assert run_recipe(load_recipe(str(file))) == 0  # there: checked, not rewritten
    assert f"the last stage's output in float16, sha256 {stored}" in capsys.readouterr().out
    save_net(tiny_net(seed=5), target)  # another network where the stored file should be
    with pytest.raises(RecipeError, match=r"would be [0-9a-f]{64} \(--accept-rebuilt writes it\)"):
        run_recipe(load_recipe(str(file)))
    assert run_recipe(load_recipe(str(file)), accept_rebuilt=True) == 0 and tensors_sha256(target) == stored


def test_a_later_leg_layers_its_config_and_continues_from_the_earlier_output_in_float16(
    tmp_path, monkeypatch, capsys
) -> None:
    file, sha = tiny_recipe(tmp_path, None)
    manifest = yaml.safe_load(file.read_text())
    leg_input = tmp_path / "runs" / "a" / "float16.safetensors"
    f16 = tensors_sha256(float16_tensors(read_safetensors(tmp_path / "runs" / "a" / "model.safetensors")[1]))
    manifest["stages"][1].update(
        over=["a.yaml"], input={"path": str(leg_input), "sha256": f16, "float16_of": "a"}
    )
    file.write_text(yaml.safe_dump(manifest))
    recipe = load_recipe(str(file))
    assert recipe.stages[1].over == (tmp_path / "a.yaml",) and recipe.stages[1].float16_of == "a"
    assert "(a's output in float16)" in recipe_module.plan(recipe)
    calls = []
    monkeypatch.setattr("derain.fit.main", lambda args, prog: calls.append(args) or 3)
    assert run_recipe(recipe) == 3  # fit's status
    assert tensors_sha256(leg_input) == f16 != sha  # written from stage a's output before b trained
    configs = [calls[0][i + 1] for i, a in enumerate(calls[0]) if a == "--config"]
    assert configs == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]  # layered: a under b
    assert calls[0][-2:] == ["--init_weights", str(leg_input)]  # the recipe's input, whatever b.yaml says
    out_a = tmp_path / "runs" / "a" / "model.safetensors"
    save_net(tiny_net(seed=7), out_a)  # stage a trained again: its float16 is another input, written anew
    assert run_recipe(recipe, accept_rebuilt=True) == 3
    assert f"b: input {leg_input}: tensors sha256" in capsys.readouterr().out  # not the pinned one: accepted
    assert tensors_sha256(leg_input) == tensors_sha256(float16_tensors(read_safetensors(out_a)[1]))
    out_a.write_bytes(b"not weights")
    with pytest.raises(RecipeError, match="b: its input, a's output in float16: "):
        run_recipe(recipe, accept_rebuilt=True)
    for key, value, message in (
        ("float16_of", "b", "float16_of 'b' is not a stage before it"),
        ("over", "a.yaml", "expected a list of config file names"),
        ("over", ["gone.yaml"], "does not exist: .*gone.yaml"),
    ):
        stage = yaml.safe_load(file.read_text())["stages"][1]
        (stage["input"] if key == "float16_of" else stage)[key] = value
        broken = yaml.safe_load(file.read_text())
        broken["stages"][1] = stage
        (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
        with pytest.raises(RecipeError, match=message):
            load_recipe(str(tmp_path / "broken.yaml"))


def test_a_trained_leg_is_pinned_as_the_last_stage_and_its_float16_becomes_the_continuation(
    tmp_path, capsys
) -> None:
    file, sha = tiny_recipe(tmp_path, None)
    manifest = yaml.safe_load(file.read_text())
    manifest["stages"] = manifest["stages"][:1]  # stage a, done
    out_a = tmp_path / "runs" / "a" / "model.safetensors"
    target = tmp_path / "continuation.safetensors"
    recipe_module.save_float16(out_a, target)
    manifest["continuation"] = {"path": str(target), "sha256": tensors_sha256(target)}
    manifest["prepare"] = {"extra": {"path": "x", "command": ["tools/x.py"]}}
    file.write_text("# the tiny run\n" + yaml.safe_dump(manifest, sort_keys=False))
    argv = [str(file), "c", "--needs", "extra", "--note", "leg c"]
    assert pin(argv) == 2 and "no config" in capsys.readouterr().err  # c.yaml is not there yet
    (tmp_path / "c.yaml").write_text(f"trainer:\n  default_root_dir: {tmp_path / 'runs' / 'c'}\n")
    assert pin(argv) == 2 and "train the leg first" in capsys.readouterr().err
    out_c = tmp_path / "runs" / "c" / "model.safetensors"
    start = {"file": "other.safetensors", "tensors_sha256": sha}  # started from stage a's float32 output
    for provenance, message in (
        ({"steps": 12}, "records no start from the continuation"),
        ({"steps": 12, "config": {"init_weights": "other.safetensors"}}, "init_weights: other.safetensors"),
        ({"steps": 12, "started_from": start}, f"started from other.safetensors \\(tensors sha256 {sha}\\)"),
    ):
        save_net(tiny_net(seed=9), out_c, extra={"provenance": json.dumps(provenance)})
        assert pin(argv) == 2 and re.search(message, capsys.readouterr().err)
    assert (
        file.read_text().startswith("# the tiny run\n") and "name: c" not in file.read_text()
    )  # nothing written
    start = {"file": str(target), "tensors_sha256": tensors_sha256(target)}
    provenance = {"provenance": json.dumps({"steps": 12, "checkpoint": "last.ckpt", "started_from": start})}
    save_net(tiny_net(seed=9), out_c, extra=provenance)
    assert pin([*argv[:2], "--needs", "nothing"]) == 2 and "does not prepare" in capsys.readouterr().err
    assert pin(argv) == 0 and "pinned c" in capsys.readouterr().out
    recipe = load_recipe(str(file))
    c = recipe.stages[-1]
    assert (c.name, c.step, c.checkpoint, c.needs, c.float16_of) == ("c", 12, "last.ckpt", ("extra",), "a")
    assert c.over == (tmp_path / "a.yaml",) and c.output == recipe_spec.Pinned(
        str(out_c), tensors_sha256(out_c)
    )
    assert c.input.sha256 == tensors_sha256(
        float16_tensors(read_safetensors(out_a)[1])
    )  # what c started from
    assert recipe.continuation.sha256 == tensors_sha256(target) != c.input.sha256  # c's float16 now
    assert tensors_sha256(target) == tensors_sha256(float16_tensors(read_safetensors(out_c)[1]))
    text = file.read_text()
    assert (
        text.startswith("# the tiny run\n") and "- name: c  # leg c\n" in text
    )  # its text and comments stay
    assert pin(argv) == 2 and "already pinned" in capsys.readouterr().err
    # a continuation that is not the file the recipe records stops the pin before anything is written
    (tmp_path / "d.yaml").write_text(f"trainer:\n  default_root_dir: {tmp_path / 'runs' / 'c'}\n")
    save_net(tiny_net(seed=11), target)
    assert pin([str(file), "d"]) == 2 and "the recipe expects" in capsys.readouterr().err
    assert file.read_text() == text
    with pytest.raises(SystemExit):
        main([str(file), "--pin", "d"])  # pinning is derain pin's, not an option of derain recipe


def test_a_pin_edits_only_the_continuation_hash_and_the_end_of_the_stage_list(tmp_path, capsys) -> None:
    out_a = save_net(tiny_net(seed=1), tmp_path / "runs" / "a" / "model.safetensors")
    target = recipe_module.save_float16(out_a, tmp_path / "continuation.safetensors")
    started = tensors_sha256(target)
    (tmp_path / "a.yaml").write_text("model:\n  lr: 0.001\n")
    (tmp_path / "b.yaml").write_text(f"trainer:\n  default_root_dir: {tmp_path / 'runs' / 'b'}\n")
    # exported before provenance recorded started_from: its init_weights path, relative to the repository's root
    # where the recipe runs, names the continuation
    legacy = {
        "provenance": json.dumps({"config": {"init_weights": os.path.relpath(target, recipe_spec.SOURCE)}})
    }
    out_b = save_net(tiny_net(seed=2), tmp_path / "runs" / "b" / "model.safetensors", extra=legacy)
    head = (
        "# a run in progress\n"
        "continuation:  # where the next leg starts\n"
        f"  path: {target}\n"
        "  # the hash, a comment between\n"
        f"  sha256: {started}  # its float16\n"
        "stages:\n"
        "  - name: a  # the first\n"
        "    config: a.yaml\n"
        f"    output: {{path: {out_a}, sha256: {tensors_sha256(out_a)}}}  # a flow mapping\n"
    )
    tail = "\n# the data steps\nprepare: {}\n"
    file = tmp_path / "recipe.yaml"
    file.write_text(head + tail)
    assert pin([str(file), "b"]) == 0, capsys.readouterr().err
    text = file.read_text()
    new_sha = tensors_sha256(float16_tensors(read_safetensors(out_b)[1]))
    assert text.startswith(head.replace(f"{started}  # its", f"{new_sha}  # its"))
    # the stage sits before the next section's comment
    assert text.endswith("  # float32, as exported\n" + tail)
    assert "\n  - name: b\n    config: b.yaml\n    over: [a.yaml]\n" in text  # indented as the list's items
    b = load_recipe(str(file)).stages[-1]
    assert b.input.path == (tmp_path / "runs" / "a" / "float16.safetensors").as_posix() and b.step is None
    no_hash = head.replace(f"  sha256: {started}  # its float16\n", "")
    file.write_text(no_hash + tail)
    assert pin([str(file), "b"]) == 2 and "records no sha256" in capsys.readouterr().err
    file.write_text(head.replace("continuation:", "nothing:") + tail)
    assert pin([str(file), "b"]) == 2 and "no continuation" in capsys.readouterr().err
    file.write_text(text)  # as pinned
    assert pin([str(file), "007"]) == 2 and "a leg is named by" in capsys.readouterr().err
    (tmp_path / "c.yaml").write_text((tmp_path / "b.yaml").read_text())  # b's output again: a stale file
    assert pin([str(file), "c"]) == 2 and "is the output of stage b" in capsys.readouterr().err


def test_a_leg_by_hand_is_the_one_the_recipe_runs_its_configs_start_and_needs(
    tmp_path, monkeypatch, capsys
) -> None:
    file, sha = tiny_recipe(tmp_path, None)
    manifest = yaml.safe_load(file.read_text())
    out_a = tmp_path / "runs" / "a" / "model.safetensors"
    script = tmp_path / "make.py"  # a prepare step: copies its second argument to its first, else writes text
    script.write_text(
        "import shutil, sys, pathlib\n"
        "if len(sys.argv) > 2:\n    shutil.copy(sys.argv[2], sys.argv[1])\n"
        "else:\n    pathlib.Path(sys.argv[1]).write_text('x')\n"
    )
    val, start, layers, dropped = (tmp_path / n for n in ("val", "start.safetensors", "layers", "dropped"))
    manifest["prepare"] = {
        "val": {"path": str(val), "command": [str(script), str(val)]},
        "start": {"path": str(start), "command": [str(script), str(start), str(out_a)]},
        "layers": {"path": str(layers), "command": [str(script), str(layers)]},
        "dropped": {"path": str(dropped), "command": [str(script), str(dropped)]},
    }
    # stage a starts from a prepared file and trains on two sources; b replaces its start and drops a source
    (tmp_path / "a.yaml").write_text(
        yaml.safe_dump({"init_weights": str(start), "data": {"dirs": [str(val), str(dropped)]}})
    )
    (tmp_path / "b.yaml").write_text(
        yaml.safe_dump({"init_weights": str(out_a), "data": {"dirs": [str(val), str(layers / "sub")]}})
    )
    manifest["stages"][0].update(input={"path": str(start), "sha256": sha}, needs=["start", "val", "dropped"])
    manifest["stages"][1].update(over=["a.yaml"], needs=["layers"])
    target = tmp_path / "continuation.safetensors"
    recipe_module.save_float16(out_a, target)
    manifest["continuation"] = {"path": str(target), "sha256": tensors_sha256(target)}
    file.write_text(yaml.safe_dump(manifest))
    (tmp_path / "c.yaml").write_text("model:\n  lr: 0.0001\n")
    recipe = load_recipe(str(file))
    a, b, c = (tmp_path / f"{n}.yaml" for n in "abc")
    assert recipe_spec.leg_configs(recipe, "a") == (a,) and recipe_spec.leg_configs(recipe, "b") == (a, b)
    assert recipe_spec.leg_configs(recipe, "c") == (a, b, c)  # the next leg: over every earlier leg's
    assert recipe_spec.leg_needs(recipe, "a") == ("start", "val", "dropped")
    assert recipe_spec.leg_needs(recipe, "b") == (
        "layers",
        "val",
    )  # not a's start, nor the source b dropped
    assert recipe_spec.leg_needs(recipe, "c") == ("layers", "val")  # what the configs under it still name
    assert recipe_spec.leg_fit_args(recipe, "b") == [
        *("--config", str(a), "--config", str(b)),
        *("--init_weights", str(out_a)),
    ]
    assert main([str(file), "--fit-args", "c"]) == 0  # one a line; the next leg starts from the continuation
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "--config",
        str(a),
        "--config",
        str(b),
        "--config",
        str(c),
        "--init_weights",
        str(target),
    ]
    monkeypatch.setattr(recipe_module, "_train", lambda *x: pytest.fail("--prepare trained"))
    assert main([str(file), "--prepare", "c"]) == 0
    assert val.is_file() and layers.is_file() and not start.exists() and not dropped.exists()
    assert "c: preparing" in capsys.readouterr().out
    assert (
        main([str(file), "--prepare", "c"]) == 0 and "preparing" not in capsys.readouterr().out
    )  # built once
    # a stage whose input a prepare step builds: built before its input is checked, then trained
    manifest["prepare"]["start"]["command"][2] = str(out_a.rename(out_a.with_name("kept.safetensors")))
    file.write_text(yaml.safe_dump(manifest))
    trained = []
    monkeypatch.setattr(recipe_module, "_train", lambda recipe, stage: trained.append(stage.name) or 4)
    assert run_recipe(load_recipe(str(file))) == 4 and trained == ["a"] and tensors_sha256(start) == sha
    for name, message in (
        ("d", "d is not a stage of tiny \\(a, b\\) nor a next leg's config"),
        ("recipe", "recipe is not a stage"),  # the recipe itself is no leg's config
    ):
        assert main([str(file), "--fit-args", name]) == 2
        assert re.search(message, capsys.readouterr().err)
    (tmp_path / "a2.yaml").write_text("{}\n")
    del manifest["continuation"]
    file.write_text(yaml.safe_dump(manifest))
    assert main([str(file), "--fit-args", "a2"]) == 2 and "(a finished recipe)" in capsys.readouterr().err


def test_each_derain_base_leg_layers_over_every_earlier_legs_configs() -> None:
    base = load_recipe("derain-base")
    for earlier, later in zip(base.stages, base.stages[1:], strict=False):
        assert recipe_spec.leg_configs(base, later.name)[:-1] == recipe_spec.leg_configs(base, earlier.name)
    assert "heavy-val" in recipe_spec.leg_needs(base, base.stages[-1].name)  # leg 1's validation set, still
    assert "grown" not in recipe_spec.leg_needs(base, base.stages[-1].name)  # leg 1's start, no later leg's
    assert "teacher-real" not in recipe_spec.leg_needs(base, "leg8")  # leg 8 dropped leg 7's teacher pairs
    assert "teacher-layers" in recipe_spec.leg_needs(base, "leg9")  # and transplants the teacher's layers on

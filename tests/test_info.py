"""``derain info [WEIGHTS]``: how a weights file was made, the packaged weights by default; a file without
provenance says so; a missing file is one line and exit status 2."""

from __future__ import annotations

from helpers import tiny_net

from derain.cli import main
from derain.weights import save_net, tensors_sha256
from derain.weights.provenance import provenance, write_provenance


def test_info_prints_the_provenance(tmp_path, capsys) -> None:
    path = save_net(tiny_net(seed=1), tmp_path / "net.safetensors")
    prov = provenance(
        config={"seed_everything": 9, "trainer": {"max_steps": 30}, "model": {"lr": 0.001}},
        steps=30,
        validation={"val/psnr_y": 22.25},
        commit="0123abc",
        data={"sha256": "feed", "files": 4, "bytes": 400, "folders": ["$DERAIN_DATA/set"]},
    )
    write_provenance(path, prov)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"tensors sha256: {tensors_sha256(path)}" in out
    for line in (
        "commit: 0123abc",
        "steps: 30",
        "data: sha256 feed, 4 files, 400 bytes in $DERAIN_DATA/set",
        "  val/psnr_y: 22.25",
        "config: seed 9, max_steps 30, lr 0.001",
    ):
        assert line in out, line
    assert main(["info", str(path), "--config"]) == 0
    assert "trainer:\n  max_steps: 30" in capsys.readouterr().out


def test_a_file_without_provenance_says_so(tmp_path, capsys) -> None:
    path = save_net(tiny_net(seed=2), tmp_path / "plain.safetensors")
    assert main(["info", str(path)]) == 0
    assert "provenance: none recorded" in capsys.readouterr().out


def test_the_packaged_weights_say_how_they_were_made(capsys) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "tensors sha256: 54dd913f73a7b2cc1e300d039d8022c7558666725432e0fcebb76719308aa0d4" in out
    assert "commit: 88ee037" in out and "steps: 500 (lineage: 23462)" in out
    assert "recorded: at ship time" in out


def test_a_missing_file_is_one_line(tmp_path, capsys) -> None:
    assert main(["info", str(tmp_path / "none.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.safetensors" in err

"""Growth: a trained network made wider (channel duplication), deeper (identity blocks) or given a
full-resolution stage computes what its parent does, on odd image sizes; ``derain grow`` writes it with a record
of its parent that ``derain info`` prints."""

from __future__ import annotations

import pytest
import torch
from helpers import three_level_net

from derain.cli import main
from derain.inference import load_model
from derain.models import DerainNet, add_full_res, deepen, grow, widen
from derain.weights import load_net, save_net, tensors_sha256

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = (37, 53)
"""An odd image size: the networks pad it and crop back."""


def trained(seed: int = 0, **options) -> DerainNet:
    """``three_level_net`` (heads chosen so every TKSA head has 8 channels, whose top-k counts double) with every
    parameter moved off its init, LayerNorms, temperatures, ratio weights, agent biases and the zero-initialised
    convs included, so no part of the network hides behind a trivial value."""
    net = three_level_net(**{"heads": (1, 2, 4), "refine_blocks": 1, **options}).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            spread = p.std().item() * 0.5 if p.numel() > 1 and p.std() > 0 else 0.2
            p.add_(torch.randn(p.shape, generator=g) * spread)
    return net


def outputs(*nets: DerainNet, seed: int = 0) -> list[torch.Tensor]:
    x = torch.rand(2, 3, *SIZE, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return [net.eval()(x) for net in nets]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"agent_source": "learned", "mixers": (("channel",), ("tksa", "agent"), ("agent",))},
        {"full_res_mixers": ("tksa", "agent"), "full_res_dim": 8},
        {"embed_stride": 1, "agent_bias": False, "agent_dwc": False},
    ],
    ids=["default", "learned-agents-channel", "full-res", "stride-1-bare-agents"],
)
def test_a_widened_network_computes_what_its_parent_does(options) -> None:
    parent = trained(**options)
    child = widen(parent)
    assert child.init_args == {**parent.init_args, "dim": 16}
    parent_out, child_out = outputs(parent, child)
    assert (child_out - parent_out).abs().max() < 1e-5
    assert sum(p.numel() for p in child.parameters()) > 3 * sum(p.numel() for p in parent.parameters())


def test_widening_three_times_works_where_the_counts_scale() -> None:
    parent = trained(topk_ratios=(1 / 2, 3 / 4), heads=(1, 2, 2))  # 8 and 16 channels a head
    parent_out, child_out = outputs(parent, widen(parent, 3))
    assert (child_out - parent_out).abs().max() < 1e-5


def test_a_deepened_network_is_exactly_its_parent() -> None:
    parent = trained()
    child = deepen(parent, (2, 3, 3))
    assert child.init_args["blocks"] == [2, 3, 3]
    cycled = [["agent", "agent"], ["tksa", "agent", "tksa"], ["tksa", "tksa", "tksa"]]
    assert child.init_args["mixers"] == cycled
    assert len(child.encoders[1]) == len(child.decoders[1]) == len(child.bottleneck) == 3
    parent_out, child_out = outputs(parent, child)
    assert torch.equal(child_out, parent_out)
    chosen = deepen(parent, (1, 3, 2), (("agent",), ("tksa", "agent", "channel"), ("tksa", "agent")))
    assert chosen.init_args["mixers"][1] == ["tksa", "agent", "channel"]
    assert torch.equal(outputs(chosen)[0], parent_out)


def test_new_blocks_learn_from_the_first_step() -> None:
    child = deepen(trained(), (2, 2, 1)).train()
    x = torch.rand(1, 3, 16, 16)
    child(x).square().mean().backward()
    for block in (child.encoders[0][1], child.decoders[1][1]):
        for out in (block.attn.proj, block.ffn.project_out):
            assert out.weight.grad.abs().sum() > 0


def test_a_full_resolution_stage_added_keeps_the_function_and_every_parent_tensor() -> None:
    parent = trained()
    child = add_full_res(parent, ("tksa",), dim=8)
    assert child.init_args["full_res_mixers"] == ["tksa"] and child.init_args["full_res_dim"] == 8
    state = child.state_dict()
    assert all(torch.equal(state[name], t) for name, t in parent.state_dict().items())
    parent_out, child_out = outputs(parent, child)
    assert torch.equal(child_out, parent_out)
    with pytest.raises(ValueError, match="full-resolution stage already"):
        add_full_res(child, ("agent",))


def test_grow_composes_the_three() -> None:
    parent = trained()
    child = grow(parent, dim=16, blocks=(2, 2, 2), full_res_mixers=("agent",), full_res_dim=4)
    args = child.init_args
    assert (args["dim"], args["blocks"]) == (16, [2, 2, 2])
    assert (args["full_res_mixers"], args["full_res_dim"]) == (["agent"], 4)
    parent_out, child_out = outputs(parent, child)
    assert (child_out - parent_out).abs().max() < 1e-5
    again = grow(parent, dim=16, blocks=(2, 2, 2), full_res_mixers=("agent",), full_res_dim=4)
    assert tensors_sha256(again.state_dict()) == tensors_sha256(child.state_dict())  # seeded


def test_noise_moves_the_copies_apart_and_the_output_a_little() -> None:
    parent = trained()
    exact, noisy = widen(parent), grow(parent, dim=16, noise=1e-3, seed=1)
    name = "encoders.1.0.ffn.project_in.weight"
    assert not torch.equal(noisy.state_dict()[name][0::2], noisy.state_dict()[name][1::2])
    assert torch.equal(exact.state_dict()[name][0::2], exact.state_dict()[name][1::2])
    parent_out, noisy_out = outputs(parent, noisy)
    assert 1e-5 < (noisy_out - parent_out).abs().max() < 0.1


def test_widening_refuses_top_k_counts_that_would_not_scale() -> None:
    net = three_level_net()  # level 2: 16 channels a head; 2/3 of 16 keeps 10, of 32 keeps 21
    with pytest.raises(ValueError, match=r"ratio 0\.6667 .*head size 16"):
        widen(net)
    with pytest.raises(ValueError, match="whole number"):
        widen(net, 1.5)
    with pytest.raises(ValueError, match="multiple of the parent's 8"):
        grow(net, dim=12)
    with pytest.raises(ValueError, match="none below"):
        deepen(net, (1, 1, 1))
    with pytest.raises(ValueError, match="should begin with the parent's"):
        deepen(net, (1, 3, 1), (("agent",), ("agent", "tksa", "tksa"), ("tksa",)))


def test_the_shipped_weights_widened_reproduce_them() -> None:
    parent = load_model()
    assert parent.init_args["dim"] == 24
    child = widen(parent)
    assert child.init_args["dim"] == 48 and child.init_args["heads"] == parent.init_args["heads"]
    noisy = grow(parent, dim=48, noise=1e-3)
    parent_out, child_out, noisy_out = outputs(parent, child, noisy)
    assert (child_out - parent_out).abs().max() < 1e-5
    assert 1e-5 < (noisy_out - parent_out).abs().max() < 0.02


def test_derain_grow_writes_a_grown_file_that_info_describes(tmp_path, capsys) -> None:
    parent = trained()
    parent_file = save_net(parent, tmp_path / "parent.safetensors")
    out = tmp_path / "grown.safetensors"
    options = "--dim 16 --blocks 2,2,1 --full-res tksa,agent --full-res-dim 8 --seed 3".split()
    assert main(["grow", str(parent_file), str(out), *options]) == 0
    assert "wrote" in capsys.readouterr().out
    child = load_net(out)
    assert child.init_args["dim"] == 16 and child.init_args["full_res_mixers"] == ["tksa", "agent"]
    parent_out, child_out = outputs(parent, child)
    assert (child_out - parent_out).abs().max() < 1e-5
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    for line in (
        f"grown from: {parent_file} (tensors sha256 {tensors_sha256(parent_file)})",
        "growth:",
        "  dim: 16",
        "  blocks: 2, 2, 1",
        "  full_res_mixers: tksa, agent",
        "  full_res_dim: 8",
        "  seed: 3",
        "parent provenance: none recorded",
    ):
        assert line in text, line
    again = tmp_path / "deeper.safetensors"
    assert main(["grow", str(out), str(again), "--blocks", "3,2,1"]) == 0
    assert main(["info", str(again)]) == 0
    text = capsys.readouterr().out
    assert f"grown from: {out} (tensors sha256 {tensors_sha256(out)})" in text
    assert "parent provenance:\n  commit: " in text
    assert f"  grown from: {parent_file} (tensors sha256 {tensors_sha256(parent_file)})" in text


def test_derain_grow_errors_are_one_line(tmp_path, capsys) -> None:
    parent_file = save_net(three_level_net(), tmp_path / "parent.safetensors")
    assert main(["grow", str(parent_file), str(tmp_path / "x.safetensors"), "--dim", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "head size 16" in err
    missing = tmp_path / "none.safetensors"
    assert main(["grow", str(missing), str(tmp_path / "x.safetensors"), "--dim", "16"]) == 2
    assert "none.safetensors" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["grow", str(parent_file), str(tmp_path / "x.safetensors")])
    assert exit_info.value.code == 2 and "nothing to grow" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # noise would be recorded and do nothing
        main(
            [
                "grow",
                str(parent_file),
                str(tmp_path / "x.safetensors"),
                "--blocks",
                "1,2,2",
                "--noise",
                "0.001",
            ]
        )
    assert (
        exit_info.value.code == 2
        and "--noise 0.001 only breaks the symmetry of widened copies: it needs --dim"
        in (capsys.readouterr().err)
    )
    assert not (tmp_path / "x.safetensors").exists()

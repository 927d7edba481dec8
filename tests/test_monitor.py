"""The attention monitor: agent-collapse entropy read by forward hooks, TKSA ratio weights, the callback's
warning and logs."""

import lightning as L
import pytest
import torch
from helpers import three_level_net
from lightning.pytorch.callbacks import EMAWeightAveraging
from torch.utils.data import DataLoader

from derain.models import AgentAttention
from derain.models.attention import normalized_entropy
from derain.train import DerainLitModule
from derain.train.monitor import AttentionMonitor, agent_entropies, agent_layers, ratio_weight_logs

pytestmark = pytest.mark.usefixtures("one_thread")
tiny = three_level_net


def test_normalized_entropy_bounds():
    assert torch.allclose(normalized_entropy(torch.full((3, 5, 7), 1 / 7)), torch.tensor(1.0))
    assert normalized_entropy(torch.eye(6)) == 0
    p = torch.randn(4, 10, 9).softmax(-1)
    assert 0 <= normalized_entropy(p) <= 1


def test_agent_entropy_is_one_when_agent_logits_are_equal():
    attn = AgentAttention(16, 2, agents=9, agent_bias=False)
    with torch.no_grad():
        attn.qkv.weight[:16].zero_()  # Q = 0 -> pooled agents = 0 -> all broadcast logits equal
        with agent_entropies(attn) as entropies:
            attn(torch.randn(1, 16, 12, 12))
        attn(torch.randn(1, 16, 12, 12))  # outside the block: nothing recorded
    assert entropies == {"": [pytest.approx(1.0)]}
    net = tiny()
    with torch.no_grad():
        with agent_entropies(net) as entropies:
            net(torch.rand(1, 3, 32, 32))
        net(torch.rand(1, 3, 32, 32))  # the hooks are gone
    assert set(entropies) == set(agent_layers(net)) and len(entropies) == 4
    assert all(len(v) == 1 and 0.0 <= v[0] <= 1.0 for v in entropies.values())


def test_monitor_warns_after_patience_collapsed_validations():
    monitor = AttentionMonitor(threshold=0.95, patience=3)
    assert monitor.update({"a": 0.99, "b": 0.5}) == []
    assert monitor.update({"a": 0.97, "b": 0.99}) == []
    with pytest.warns(UserWarning, match="agent attention a looks collapsed"):
        assert monitor.update({"a": 0.96, "b": 0.99}) == ["a"]
    assert monitor.update({"a": 0.99, "b": 0.2}) == []  # warned once, b's streak reset
    assert monitor.streaks == {"a": 4, "b": 0}


def test_ratio_weight_logs_use_the_weights_as_applied():
    net = tiny(ratio_weighting="softmax")
    logs = ratio_weight_logs(net)
    assert set(logs) == {
        f"attn/tksa_ratio_weights/{layer}/{r}"
        for layer in ("encoders.1.0.attn", "decoders.1.0.attn", "bottleneck.0.attn")
        for r in ("0.5", "0.667", "0.75", "0.8")
    }
    assert all(v == pytest.approx(0.25) for v in logs.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    "averaged", [False, True]
)  # with EMAWeightAveraging, validation runs (and logs) that
def test_monitor_callback_logs_in_a_fast_dev_run(tmp_path, averaged):
    torch.manual_seed(0)
    batch = {"rain": torch.rand(3, 24, 24), "clean": torch.rand(3, 24, 24), "name": "x"}
    loader = DataLoader([batch, batch], batch_size=2)
    model = DerainLitModule(tiny(), warmup_steps=1)
    monitor = AttentionMonitor()
    averaging = [EMAWeightAveraging(decay=0.9)] if averaged else []
    trainer = L.Trainer(
        fast_dev_run=1,
        callbacks=[*averaging, monitor],
        default_root_dir=tmp_path,
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader, loader)
    keys = set(trainer.callback_metrics)
    entropy_keys = {k for k in keys if k.startswith("attn/agent_entropy/")}
    assert entropy_keys == {f"attn/agent_entropy/{name}" for name in agent_layers(model)}
    assert all(0.0 <= float(trainer.callback_metrics[k]) <= 1.0 for k in entropy_keys)
    assert "attn/tksa_ratio_weights/bottleneck.0.attn/0.5" in keys
    counted = {name: len(values) for name, values in monitor._entropies.items()}
    with torch.no_grad():
        model.eval()(batch["rain"][None])
    assert {name: len(values) for name, values in monitor._entropies.items()} == counted  # no hooks left
    assert monitor.streaks == {}  # validations before min_step (1000) do not count towards a warning

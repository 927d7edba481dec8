"""ONNX: ``python -m derain.export W model.onnx`` and the onnxruntime backend against torch eager."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import tiny_net
from PIL import Image

from derain import export as export_cli
from derain.infer import main as infer_main
from derain.inference import WeightsError, load_model, read_image, restore
from derain.inference.onnx import OnnxExportError, OnnxNet, cached_onnx, export_onnx
from derain.models import DerainNet
from derain.weights import save_net

pytestmark = pytest.mark.slow  # the module's network is exported to ONNX once: most of a minute on two cores
onnx = pytest.importorskip(
    "onnx", reason="ONNX is derain[onnx]'s (tests/test_extras.py covers an install without it)"
)
pytest.importorskip("onnxruntime")

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "datasets" / "examples").glob("*.jpg"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small trained-shape network (both mixers, three levels) as weights and, through the command line, as
    ONNX: the export takes most of a minute on two cores, so the module shares one."""
    folder = tmp_path_factory.mktemp("onnx")
    torch.manual_seed(0)
    net = DerainNet(
        dim=8, blocks=(1, 1, 1), heads=(1, 2, 2), mixers=(("agent",), ("tksa",), ("agent",)), agents=4
    )
    weights = save_net(net, folder / "small.safetensors")
    assert export_cli.main([str(weights), str(folder / "small.onnx")]) == 0
    return weights, folder / "small.onnx"


def test_graph_is_valid_with_dynamic_sizes(exported: tuple[Path, Path]) -> None:
    model = onnx.load(str(exported[1]))
    onnx.checker.check_model(model)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    (image,) = model.graph.input
    assert image.name == "image"
    dims = image.type.tensor_type.shape.dim
    assert dims[1].dim_value == 3
    assert all(d.dim_param for d in (dims[0], dims[2], dims[3])), "batch, height and width should be dynamic"
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["net"])["class_path"].endswith(".DerainNet")
    assert meta["multiple"] == "8"
    assert not list(exported[1].parent.glob(".*tmp")), "no temporary file is left beside the export"


@pytest.mark.parametrize("size", [(64, 96), (97, 131), (120, 75), (9, 30), (5, 3)])
def test_onnxruntime_matches_torch_on_real_photos(exported: tuple[Path, Path], size: tuple[int, int]) -> None:
    torch_net, onnx_net = load_model(exported[0], device="cpu"), OnnxNet(exported[1])
    for path in EXAMPLES:
        photo = np.asarray(Image.fromarray(read_image(path)).resize(size[::-1], Image.BICUBIC))
        a, b = restore(torch_net, photo).astype(int), restore(onnx_net, photo).astype(int)
        assert np.abs(a - b).max() <= 2, f"{path.name} at {size}"


def test_tiles_ensembles_and_batches_work_the_same(exported: tuple[Path, Path]) -> None:
    torch_net, onnx_net = load_model(exported[0], device="cpu"), OnnxNet(exported[1])
    photo = read_image(EXAMPLES[0])[:150, :190]
    for options in ({"tile": 64, "overlap": 16, "batch_size": 3}, {"ensemble": 4}):
        a = restore(torch_net, photo, **options).astype(int)
        b = restore(onnx_net, photo, **options).astype(int)
        assert np.abs(a - b).max() <= 2, options


def test_backend_option_of_the_commands(
    exported: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    photo = read_image(EXAMPLES[1])[:90, :130]
    Image.fromarray(photo).save(src / "a.png")
    argv = [str(src), str(tmp_path / "out"), "--backend", "onnxruntime", "--weights", str(exported[1])]
    assert infer_main(argv) == 0
    out = np.asarray(Image.open(tmp_path / "out" / "a.png")).astype(int)
    assert np.abs(out - restore(load_model(exported[0], device="cpu"), photo).astype(int)).max() <= 2
    # an .onnx file with the torch backend, and a GPU with onnxruntime: one-line errors
    assert infer_main([str(src), str(tmp_path / "o2"), "--weights", str(exported[1])]) == 2
    assert "runs with backend onnxruntime" in capsys.readouterr().err
    with pytest.raises(ValueError, match="runs on the CPU"):
        load_model(exported[1], device="cuda", backend="onnxruntime")
    with pytest.raises(WeightsError, match="not a loadable ONNX model"):
        bad = tmp_path / "bad.onnx"
        bad.write_bytes(b"garbage")
        OnnxNet(bad)


def test_weights_are_exported_once_into_the_cache(
    exported: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def fake_export(net, path, **kwargs):  # the real export is tested above; here only the caching
        calls.append(kwargs["metadata"]["source_sha256"])
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(exported[1].read_bytes())
        return Path(path)

    monkeypatch.setenv("DERAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("derain.inference.onnx.export_onnx", fake_export)
    first = cached_onnx(exported[0])
    assert cached_onnx(exported[0]) == first and len(calls) == 1
    assert isinstance(load_model(exported[0], backend="onnxruntime"), OnnxNet) and len(calls) == 1
    changed = tmp_path / "changed.safetensors"
    torch.manual_seed(1)
    save_net(tiny_net(seed=1), changed)
    assert cached_onnx(changed) != first and len(calls) == 2


def test_failed_export_is_one_line_and_writes_nothing(
    exported: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = load_model(exported[0], device="cpu")

    def broken(*args, **kwargs):
        raise RuntimeError("aten::topk: k out of range\nlong traceback ...")

    monkeypatch.setattr(torch.onnx, "export", broken)
    with pytest.raises(OnnxExportError) as err:
        export_onnx(net, tmp_path / "m.onnx")
    assert str(err.value) == "ONNX export of DerainNet failed: aten::topk: k out of range"
    with pytest.raises(OnnxExportError, match="opset should be 17 or newer"):
        export_onnx(net, tmp_path / "m.onnx", opset=13)
    with pytest.raises(OnnxExportError, match=r"should end in \.onnx"):
        export_onnx(net, tmp_path / "m.bin")
    assert list(tmp_path.iterdir()) == []

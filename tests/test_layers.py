"""The import rules of docs/architecture.md, read off the source: every ``import`` of every module under derain/
(function-local ones too), as a graph.

- no cycles;
- each module sits in a layer and imports only its own layer or those below (``models`` nothing of derain outside
  itself; ``data`` and ``train`` never the commands);
- restoring a photo, synthesising rain, reading weights never import Lightning, gradio or argparse;
- no module is longer than 500 lines, no function body longer than 80 (its docstring aside).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY

PACKAGE = Path(__file__).resolve().parents[1] / "derain"

LAYERS = {
    "derain": 1,  # the package itself: its version and lazy names (it imports nothing)
    "derain.models": 0,  # networks and attention: torch and einops only
    "derain.io": 1,
    "derain.metrics": 1,
    "derain.pairing": 1,
    "derain.resources": 1,
    "derain.extras": 1,
    "derain.weights": 2,  # the one owner of weights files
    "derain.synth": 3,  # rain models
    "derain.inference": 3,  # restore, backends, ONNX, video
    "derain.data": 4,
    "derain.train": 4,
    "derain.arguments": 5,  # the commands' shared options
    "derain.infer": 5,
    "derain.evaluate": 5,
    "derain.app": 5,
    "derain.page": 5,  # the web page's settings and requests (no gradio)
    "derain.export": 5,
    "derain.fit": 5,
    "derain.info": 5,  # how a weights file was made (its provenance)
    "derain.recipe": 5,  # runs a recipe's stages through derain.fit
    "derain.cli": 5,
    "derain.__main__": 5,
}
"""Each module's layer, by the longest prefix of its name (``derain`` itself only by name): a module imports only
modules of its layer or below."""

NO_FRAMEWORKS = ("derain.models", "derain.io", "derain.metrics", "derain.pairing", "derain.extras")
NO_FRAMEWORKS += ("derain.weights", "derain.synth", "derain.inference", "derain.resources")
"""Modules that never import Lightning, gradio or argparse (nor jsonargparse)."""

FRAMEWORKS = {"lightning", "pytorch_lightning", "gradio", "argparse", "jsonargparse"}

MAX_LINES = 500

MAX_BODY_LINES = 80
"""A function's body, its docstring excluded: one screen."""


def module_files() -> dict[str, Path]:
    files = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The derain modules ``name`` imports (``from derain.x import y`` counts ``derain.x.y`` when that is a module,
    else ``derain.x``) and the top-level names of everything else it imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    internal, external = set(), set()

    def add(target: str) -> None:
        while target not in modules:
            target = target.rpartition(".")[0]
        internal.add(target)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                (add if alias.name.split(".")[0] == "derain" else external.add)(
                    alias.name if alias.name.startswith("derain") else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            if module.split(".")[0] != "derain":
                external.add(module.split(".")[0])
                continue
            for alias in node.names:
                add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
    internal.discard(name)
    return internal, external


@pytest.fixture(scope="module")
def graph() -> dict[str, tuple[set[str], set[str]]]:
    modules = module_files()
    return {name: imports(name, path, modules) for name, path in modules.items()}


def layer(name: str) -> int:
    key = max(
        (k for k in LAYERS if name == k or name.startswith(k + ".") and k != "derain"), key=len, default=None
    )
    assert key is not None, f"{name} has no layer: add it to LAYERS here and to docs/architecture.md"
    return LAYERS[key]


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower(graph) -> None:
    wrong = [
        f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"
        for name, (targets, _) in graph.items()
        for target in sorted(targets)
        if layer(target) > layer(name)
    ]
    assert not wrong, "\n".join(wrong)


def test_models_import_nothing_of_derain_outside_models(graph) -> None:
    outside = {
        name: sorted(t for t in targets if not t.startswith("derain.models"))
        for name, (targets, _) in graph.items()
        if name.startswith("derain.models")
    }
    assert all(not v for v in outside.values()), outside


def test_the_library_below_the_commands_never_imports_lightning_gradio_or_argparse(graph) -> None:
    found = {
        name: sorted(external & FRAMEWORKS)
        for name, (_, external) in graph.items()
        if name.startswith(NO_FRAMEWORKS) and external & FRAMEWORKS
    }
    assert not found, found


def test_data_and_train_never_import_the_commands(graph) -> None:
    found = {
        name: sorted(t for t in targets if layer(t) >= LAYERS["derain.arguments"])
        for name, (targets, _) in graph.items()
        if name.startswith(("derain.data", "derain.train"))
    }
    assert all(not v for v in found.values()), found


def test_no_import_cycles(graph) -> None:
    """Tarjan's strongly connected components of the import graph: each must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v][0]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_no_module_is_longer_than_500_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end of the function."""
    body = node.body
    if (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def test_no_function_body_is_longer_than_80_lines() -> None:
    long = {
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}": n
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (n := body_lines(node)) > MAX_BODY_LINES
    }
    assert not long, long


def test_restoring_a_photo_imports_no_framework() -> None:
    """What the layers promise, in a fresh interpreter: the photo path, the rain models, the weights and the
    data split load without Lightning or gradio."""
    code = (
        "import sys, numpy as np\n"
        "import derain.inference, derain.synth, derain.weights, derain.data.split, derain.data.options\n"
        "from derain import restore\n"
        "from derain.models import DerainNet\n"
        f"net = DerainNet(**{TINY!r}).eval()\n"
        "restore(net, np.zeros((16, 16, 3), np.uint8))\n"
        "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'gradio') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_split_imports_no_augmentation_library() -> None:
    """``derain.data.split`` is pure bookkeeping of files: it loads neither albumentations nor kornia."""
    code = (
        "import sys, derain.data.split\n"
        "print(sorted(m for m in sys.modules if m.startswith(('albumentations', 'kornia'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

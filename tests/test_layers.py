"""What the import rules promise beyond the imports themselves (those are import-linter's contracts in
pyproject.toml, run by ``make test``; docs/architecture.md describes them):

- restoring a photo, synthesising rain, reading weights and the data split load no Lightning, gradio or
  jsonargparse, in a fresh interpreter (what ``from derain import restore`` pulls in, lazy names included);
- no module is longer than 500 lines, no function body longer than 80 (its docstring aside).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from helpers import TINY

PACKAGE = Path(__file__).resolve().parents[1] / "derain"

MAX_LINES = 500

MAX_BODY_LINES = 80
"""A function's body, its docstring excluded: one screen."""


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
    data split load without Lightning, gradio or jsonargparse. (argparse is import-linter's alone: torch loads it.)"""
    code = (
        "import sys, numpy as np\n"
        "import derain.inference, derain.synth, derain.weights, derain.data.split, derain.data.options\n"
        "from derain import restore\n"
        "from derain.models import DerainNet\n"
        f"net = DerainNet(**{TINY!r}).eval()\n"
        "restore(net, np.zeros((16, 16, 3), np.uint8))\n"
        "frameworks = ('lightning', 'pytorch_lightning', 'gradio', 'jsonargparse')\n"
        "print(sorted(m for m in frameworks if m in sys.modules))\n"
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

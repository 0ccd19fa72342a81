"""The package stays readable: `trainer.py` holds only TRL's seams (at most 350 lines), no class in `trl_pods/` is
longer than 350 lines and no function longer than 60, so each concern lives in its own module in small pieces."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "trl_pods"
TRAINER_LINES, CLASS_LINES, FUNCTION_LINES = 350, 350, 60


def _definitions(kinds: tuple[type, ...]) -> list[tuple[str, int]]:
    """``(file:line name, lines)`` of every definition of the given AST kinds in the package."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kinds):
                found.append((f"{path.name}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1))
    return found


def test_trainer_module_is_short():
    """The trainer module holds the overrides TRL calls, each handing its work to a concern's module."""
    assert len((PACKAGE / "trainer.py").read_text().splitlines()) <= TRAINER_LINES


def test_no_class_is_longer_than_the_limit():
    """No class grows back into a module of its own."""
    assert [(name, lines) for name, lines in _definitions((ast.ClassDef,)) if lines > CLASS_LINES] == []


def test_no_function_is_longer_than_the_limit():
    """Every function (and method) reads on one screen."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    assert [(name, lines) for name, lines in _definitions(kinds) if lines > FUNCTION_LINES] == []

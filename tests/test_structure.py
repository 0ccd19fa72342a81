"""The package stays readable: `trainer.py` holds only TRL's seams (at most 350 lines), no class in `trl_pods/` is
longer than 350 lines and no function longer than 60, so each concern lives in its own module in small pieces, and
its modules import one another in one direction (no cycle, imports inside functions counted); and the house stays
mostly the package: benchmarks/ at most 2,600 lines (issue 92: it had grown to 4,634, 30% of the code)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "trl_pods"
TRAINER_LINES, CLASS_LINES, FUNCTION_LINES = 350, 350, 60
BENCHMARKS, BENCHMARK_LINES = PACKAGE.parent / "benchmarks", 2600


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


def test_benchmarks_stay_a_small_part_of_the_house():
    """Every file of benchmarks/ (the race harness, the finished studies' renderer, the GPU check) together."""
    lines = sum(len(path.read_text().splitlines()) for path in BENCHMARKS.iterdir() if path.is_file())
    assert lines <= BENCHMARK_LINES, f"benchmarks/ holds {lines} lines"


def test_no_class_is_longer_than_the_limit():
    """No class grows back into a module of its own."""
    assert [(name, lines) for name, lines in _definitions((ast.ClassDef,)) if lines > CLASS_LINES] == []


def test_no_function_is_longer_than_the_limit():
    """Every function (and method) reads on one screen."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    assert [(name, lines) for name, lines in _definitions(kinds) if lines > FUNCTION_LINES] == []


def _imports(path: Path) -> set[str]:
    """The package's modules ``path`` imports anywhere in it (relative or ``trl_pods.``, inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith("trl_pods")):
            module = (node.module or "").removeprefix("trl_pods").lstrip(".")
            names = [module] if module else [alias.name for alias in node.names]
            found |= {name.split(".")[0] for name in names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("trl_pods.")}
    return found & {p.stem for p in PACKAGE.glob("*.py")}


def test_modules_import_in_one_direction():
    """No two modules of the package import each other, directly or through others (a cycle ties two concerns into
    one and breaks when either is imported alone, as the reward worker imports `trl_pods.rewards`)."""
    graph = {path.stem: _imports(path) - {path.stem} for path in PACKAGE.glob("*.py")}
    cycles, state = [], {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                cycles.append(trail[trail.index(imported) :] + [imported])
            elif imported not in state:
                visit(imported, [*trail, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []

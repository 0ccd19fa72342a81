"""The calculator-tool model, tool and reward of the example `scripts/calculator_tool.py` (loaded from its file:
`scripts/` is not a package), and a recording `add` tool for the tests."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "calculator_tool", Path(__file__).parents[1] / "scripts" / "calculator_tool.py"
)
calculator_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calculator_tool)

add, question = calculator_tool.add, calculator_tool.question
build_tool_model, calculator_reward = calculator_tool.build_tool_model, calculator_tool.calculator_reward


def counting_add(calls: list[tuple[int, int]]) -> Callable[[int, int], int]:
    """The `add` tool (same name and schema) recording each call's arguments in ``calls``."""

    @functools.wraps(add)
    def recorded(a: int, b: int) -> int:
        calls.append((a, b))
        return add(a, b)

    return recorded


def counting_async_add(calls: list[tuple[int, int]]) -> Callable:
    """`counting_add` as an async tool (TRL runs it on its event loop)."""

    @functools.wraps(add)
    async def recorded(a: int, b: int) -> int:
        calls.append((a, b))
        return add(a, b)

    return recorded

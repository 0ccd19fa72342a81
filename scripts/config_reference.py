"""Write the `PODSConfig` reference table of docs/configuration.md from the dataclass: every field that `PODSConfig`
adds over `trl.GRPOConfig` (or whose default it changes), with its type, default and help text.

    python scripts/config_reference.py    # rewrites the block between the config-reference markers

tests/test_docs.py checks that the committed page equals what this writes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trl import GRPOConfig

from trl_pods import PODSConfig

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def pods_fields() -> list[dataclasses.Field]:
    """The fields `PODSConfig` adds over `GRPOConfig`, or redefines with another default, in declaration order."""
    trl_defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    return [
        f for f in dataclasses.fields(PODSConfig) if f.name not in trl_defaults or trl_defaults[f.name] != f.default
    ]


def reference_table() -> str:
    """The markdown table: field, type, default (Python `repr`), meaning (the field's help metadata)."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    # The annotation as written, by the class that declares the field: an argument parser (HfArgumentParser) resolves
    # `Field.type` in place, which would make the table depend on what ran before.
    for f in pods_fields():
        declaring = next(c for c in PODSConfig.__mro__ if f.name in vars(c).get("__annotations__", {}))
        annotation = vars(declaring)["__annotations__"][f.name]
        kind, meaning = (str(text).replace("|", "\\|") for text in (annotation, f.metadata["help"]))
        rows.append(f"| `{f.name}` | `{kind}` | `{f.default!r}` | {meaning} |")
    return "\n".join(rows)


def render(page: str) -> str:
    """``page`` with the block between the markers replaced by the current table."""
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{reference_table()}\n{END}{tail}"


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text()))

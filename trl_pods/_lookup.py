"""Resolve a name from a registry, or a dotted import path ``"pkg.module.attr"``, to a callable."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def resolve(name_or_path: str, registry: Mapping[str, Callable], what: str) -> Callable:
    """Return ``registry[name_or_path]``, or the callable that the dotted path ``name_or_path`` names.

    Raises:
        ValueError: neither a registered name nor an importable callable; the message lists the registered names.
    """
    if name_or_path in registry:
        return registry[name_or_path]
    known = ", ".join(repr(name) for name in sorted(registry))
    module_name, _, attr = name_or_path.rpartition(".")
    if not module_name:
        raise ValueError(
            f"Unknown {what} {name_or_path!r}. Use one of {known}, or a dotted import path 'my_package.module.fn'."
        )
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"Could not import the {what} {name_or_path!r} ({err}). Registered names: {known}.") from err
    if not callable(fn):
        raise ValueError(f"The {what} {name_or_path!r} is not callable.")
    return fn

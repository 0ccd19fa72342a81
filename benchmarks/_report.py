"""The names `time_to_target.py` imports from here; they live in `harness.py`, the benchmarks' one shared module.
Remove this module once `time_to_target.py` imports them from `harness`."""

from harness import DOCS, cpu_model, environment, versions

__all__ = ["DOCS", "cpu_model", "environment", "versions"]

"""The GPU benchmark cannot run here for real; its CPU smoke mode runs the same code path so it does not rot."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).parent.parent


def test_gpu_step_benchmark_smoke_mode_runs_and_writes_nothing():
    """`benchmarks/gpu_step.py --smoke` trains all three variants on a tiny model and leaves docs/ untouched."""
    report = REPO / "docs" / "benchmarks.md"
    before = report.read_text()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_step.py"), "--smoke"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GRPO-GA" in result.stdout and "nothing written" in result.stdout
    assert report.read_text() == before

"""Benchmark scripts' smoke modes: the same code path as a full run, on tiny sizes, so the scripts do not rot.

The GPU benchmark cannot run here for real.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).parent.parent
REPORT = REPO / "docs" / "benchmarks.md"


def _run_smoke(script: str, *options: str) -> str:
    """Run ``benchmarks/<script> --smoke``; assert it succeeds and leaves docs/benchmarks.md untouched; its stdout."""
    before = REPORT.read_text()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--smoke", *options],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nothing written" in result.stdout
    assert REPORT.read_text() == before
    return result.stdout



@pytest.mark.parametrize("model", [[], ["--shape", "SmolLM2-135M", "--lora"]], ids=["qwen2-full", "llama-lora"])
def test_gpu_cost_curve_smoke_mode_times_every_size_and_fits_both_phases(model):
    """`benchmarks/gpu_cost_curve.py --smoke` times a generate call per rollout count and an optimizer step per row
    count on a tiny model (a fully trained Qwen2, or a Llama trained through the demo's LoRA adapters), fits both
    phases, and leaves docs/ untouched."""
    out = _run_smoke("gpu_cost_curve.py", "--rounds", "1", "--rollouts", "2", "8", "--rows", "2", "4", *model)
    trained = re.search(r"\(([\d,]+) parameters, ([\d,]+) trained;", out).groups()
    parameters, trainable = (int(n.replace(",", "")) for n in trained)
    assert (trainable < parameters / 2) if model else (trainable == parameters)
    assert re.findall(r"^\| (generation \| \d+ rollouts|update \| \d+ rows) \|", out, re.M) == [
        "generation | 2 rollouts",
        "generation | 8 rollouts",
        "update | 2 rows",
        "update | 4 rows",
    ]
    assert re.search(r"Fits: generation = .* ms × rollouts \+ .* s per call; update = .* ms × rows", out)



def test_budgeted_generation_benchmark_smoke_mode_trains_every_method():
    """`benchmarks/budgeted_generation.py --smoke` trains each method a few steps from scratch, including budgeted
    generation (rollouts per step within its budget), and leaves docs/ untouched."""
    methods = ["GRPO 4", "PODS 8->4", "budgeted 4-16 (mean 8)", "PODS 16->4", "GRPO 8"]
    out = _run_smoke(
        "budgeted_generation.py", "--seeds", "1", "--steps", "6", "--eval_every", "3", "--methods", *methods
    )
    rows = {line.split("|")[1].strip(): line.split("|") for line in out.splitlines() if line.startswith("| ")}
    assert set(rows) == set(methods)
    assert float(rows["budgeted 4-16 (mean 8)"][7]) <= 8 * 8, "rollouts per step: at most 8 prompts x 8"
    assert float(rows["PODS 16->4"][7]) == 16 * 8

"""Benchmark scripts' smoke modes: the same code path as a full run, on tiny sizes, so the scripts do not rot.

The GPU benchmarks cannot run here for real; the reward-throughput one takes minutes at full size.
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


def test_gpu_step_benchmark_smoke_mode_runs_and_writes_nothing():
    """`benchmarks/gpu_step.py --smoke` trains all three variants on a tiny model and leaves docs/ untouched."""
    assert "GRPO-GA" in _run_smoke("gpu_step.py")


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


def test_reward_throughput_smoke_mode_reports_every_reward_size_ending_and_recipe():
    """`benchmarks/reward_throughput.py --smoke` scores both rewards at its tiny batch sizes on 1 and on 2 workers and
    renders the whole section (throughput, per ending, share of the paper's step per recipe, load) without writing
    it."""
    out = _run_smoke("reward_throughput.py")
    assert "## Scoring at N: reward throughput" in out
    assert re.search(r"`os\.getloadavg\(\)` \(1 / 5 / 15 min\) [\d.]+ / [\d.]+ / [\d.]+ before", out)

    rate, time_ = r"([\d,]+)", r"[\d.]+ [mµn]?s"
    throughput_row = rf"^\| `(\w+)` \| (GSM8K|MATH) \| (\d+) \| {time_} \| {rate} \| [^|]+ \| {time_} \| {rate} \| "
    throughput = re.findall(throughput_row + r"[\d.]+× \|$", out, re.MULTILINE)
    measured = [(reward, data, int(size)) for reward, data, size, *_ in throughput]
    assert measured == [
        (r, d, n) for r, d in (("gsm8k_reward", "GSM8K"), ("accuracy_reward", "MATH")) for n in (4, 32)
    ]
    assert all(float(v.replace(",", "")) > 0 for *_, serial, parallel in throughput for v in (serial, parallel))
    assert "2 workers: completions/s" in out

    endings = re.findall(r"^\| (\w+) \| \d+% \| [\d,]+ \| [\d,]+ \|$", out, re.MULTILINE)
    assert endings == ["correct", "wrong", "unparsable", "truncated", "untagged"]

    share = r"[\d.]+%"
    recipe_row = rf"^\| [^|]+ \| `\w+` \| (\d+) \| 10\.1 s \(\S+\) \| {time_} \| {share} \| {share} \| {share} "
    recipes = re.findall(recipe_row + rf"\| {time_} \| {share} \|$", out, re.MULTILINE)
    assert recipes == ["64", "32", "256", "256", "128"]
    assert re.search(
        rf"Largest share with 1 worker \(.+\): {share} of the step in wall time \((below|above) the\s+5%", out
    )


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


def test_agent_modes_benchmark_smoke_mode_trains_every_method_with_the_tool():
    """`benchmarks/agent_modes.py --smoke` trains each method a few steps with TRL's tool loop: GRPO generates its 4
    rollouts per prompt, PODS its 8, refill at least PODS's and screened its pilot plus top-up; every method makes
    tool calls; docs/ is untouched."""
    out = _run_smoke("agent_modes.py", "--seeds", "1", "--steps", "2", "--eval_every", "2")
    summary = [line.split("|") for line in out.splitlines() if line.startswith("| ") and line.count("|") == 11]
    rows = {row[1].strip(): row for row in summary}
    rollouts = {method: float(row[5]) for method, row in rows.items() if method in ("GRPO 4", "PODS 8->4")}
    assert rollouts == {"GRPO 4": 4 * 4, "PODS 8->4": 4 * 8}
    assert float(rows["PODS 8->4 + refill"][5]) >= 4 * 8
    assert float(rows["screened 2x4->8->4"][5]) == 2 * 4 * 4 + 4 * 4
    assert all(float(rows[method][6]) > 0 for method in rollouts), "tool calls per step"

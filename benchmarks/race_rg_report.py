"""The page of the reasoning-gym race (`time_to_target_rg.py --report`): ``docs/benchmarks/time-to-target-rg.md`` from
the committed runs alone. Before any run it is the plan, the commands and the count of runs; each phase's section fills
in as its runs land: the pilot and the tasks it chose, the tuning and the baseline, target and budget it fixed, and the
evaluation runs against the baseline (`race_report.task_table`: restricted means, bootstrap 90% CIs, exact permutation
p) in CPU minutes (measured: the interleaved timing run) and H200 minutes (priced with the trainers' own H200 costs),
and what drives auto's plans (`race_rg_replay`: its planner replayed on the states its runs announced).
"""

from __future__ import annotations

import copy
import json
import statistics
from collections.abc import Iterable
from pathlib import Path

import race_rg_replay
import time_to_target_rg_plan as plan
from harness import DATA, PAGES, RunStore, notes
from race_analysis import (
    FIELD,
    Pricing,
    against_fastest,
    arm_costs,
    check_against_plan,
    fastest,
    fit_costs,
    lacking,
    minutes,
    misses,
    ratio,
    ratio_text,
    step_seconds,
    stop_step,
    tie_passes,
    total,
)
from race_report import NOISE, RESTRICTED, task_table

PAGE = PAGES / "time-to-target-rg.md"
CLOSE = 1.1
"""The issue's "within 10% of the best fixed trl_pods setting": auto's minutes at most this times that arm's."""
RESOLUTION = (
    'How much "within 10%" can tell. Its verdict reads one ratio of restricted means; beside it, the ratio\'s 90% '
    "bootstrap CI with the fastest fixed arm chosen again in every resample (the fastest of several noisy arms reads "
    "faster than it is, and that luck belongs in the interval). Below, how often an auto exactly as fast as the "
    "fastest fixed arm would pass: its runs drawn from that arm's own, against every fixed arm resampled "
    "(`race_analysis.tie_passes`, 10,000 draws). Near 50%, a met or a not met says little."
)
SEEDS_AN_ARM = (16, 32, 64)
"""Seeds an arm at which `resolution_text` also tells how often a tie passes "within 10%"."""


def targeted(runs: list[dict], fixing: dict) -> list[dict]:
    """The evaluation runs with their task's fixed target in their settings (they ran with none: no early stop)."""
    found = copy.deepcopy(runs)
    for run in found:
        run["settings"]["target"] = fixing["fixed"][run["task"]]["target"]
    return found


def planned_count(tasks: int, evaluation: str) -> str:
    """How many runs the plan asks for, in words: pilot, tuning (at most) and ``evaluation`` (`evaluation_count`)."""
    tuning = tasks * len(plan.TUNING_ARMS) * len(plan.TUNING_SEEDS)
    return (f"the pilot (one run per candidate task), at most {tuning} tuning runs ({len(plan.TUNING_ARMS)} settings "
            f"x {len(plan.TUNING_SEEDS)} tuning seeds x 2 tasks, fewer where a setting is clearly behind) and "
            f"{evaluation} evaluation runs")  # fmt: skip


def evaluation_count(races: dict | None) -> str:
    """The evaluation runs the plan asks for: those of the fixed tasks' races (`plan.evaluation_runs`), or before the
    fixing at most every arm's seeds on 2 tasks (the amendments' paced arms run only where the baseline's pace is
    theirs)."""
    if races is None:
        return f"at most {2 * sum(plan.EVALUATION_SEEDS.values())}"
    return str(len(plan.evaluation_runs(races)))


H200_PRICING = (
    "H200-priced minutes are a pricing, not runs on an H200: each step is priced with the costs fitted on the "
    "trainers' own step times on an H200 in the earlier race (HF `generate` in bf16, arithmetic completions of up to "
    "16 tokens), the baseline's generation counted on the steps that make it. This race's completions take up to 32 "
    "tokens, so a rollout likely costs more here than that pricing says. Its costs have no term for rows the policy "
    "scores at generation (no arm of that run scored any): a baseline with 4 steps a generation scores its rollouts "
    "and is priced below its cost there, against auto's claim."
)
"""What the H200 column is, and what its costs were measured on."""


def timing_run(data: Path) -> dict | None:
    """``data``'s timing run as saved so far (`plan.TIMING_FILE`), None before its first piece."""
    saved = data / plan.TIMING_FILE
    return json.loads(saved.read_text()) if saved.exists() else None


def cpu_costs(data: Path) -> dict[str, float] | None:
    """The CPU costs fitted on ``data``'s timing run (`plan.cpu_costs`: None until it is whole)."""
    return plan.cpu_costs(timing_run(data))


def pricings(data: Path) -> list[Pricing]:
    """CPU (`cpu_costs`) and the H200 pricing (costs fitted on the trainers' own H200 steps)."""
    h200 = fit_costs(json.loads((DATA / plan.H200_TIMING).read_text()))
    return [Pricing("CPU", cpu_costs(data), 1), Pricing("H200-priced", h200, 2)]


def costs_text(data: Path, runs: list[dict], found: dict) -> str:
    """The interleaved timing run: the CPU costs fitted on it (`cpu_costs`) and their check, each arm's seconds a step
    as measured there and as priced, with the rows scored at generation and without (`PLAN` ``amended (pricing)``);
    then the second tuning seeds those costs give (`plan.tuning_runs` on the pilot's tasks and the first seeds of
    the pilot and tuning ``runs``; none before the pilot has chosen). Pending until the timing run is whole."""
    measured, costs = timing_run(data), cpu_costs(data)
    if measured is None or costs is None:
        pieces = len(measured["runs"]) if measured else 0
        return (f"The interleaved timing run has {pieces} of its {len(plan.TIMING_ARMS) * plan.TIMING_ROUNDS} pieces: "
                "it prices nothing until it is whole (`plan.cpu_costs`).")  # fmt: skip
    unscored, rows = fit_costs(measured), []
    for arm in plan.TIMING_ARMS:
        mine = [record[2:] for record in measured["records"] if record[0] == arm]  # step records (FIELD)
        seconds = statistics.fmean(s[FIELD["step_time"]] for s in mine)
        priced = [statistics.fmean(step_seconds(s, c) for s in mine) / seconds
                  for c in (arm_costs(costs, arm in plan.TUNING_ARMS), unscored)]  # fmt: skip
        rows.append(f"| {arm} | {seconds:.1f} | {priced[0]:.2f} | {priced[1]:.2f} |")
    pilots = plan.pilot_runs(runs, found)
    try:
        tasks = plan.choose_tasks(pilots) if len(pilots) == len(found) else []
    except ValueError:  # no two tasks learn: `pilot_text` says so
        tasks = []
    queue = plan.tuning_runs(tasks, [r for r in runs if r["seed"] == plan.TUNING_SEEDS[0]], costs)
    later = [(task, arm) for task, arm, seed in queue if seed != plan.TUNING_SEEDS[0]]
    second = "; ".join(f"{task.removeprefix(plan.REASONING_GYM)}: {', '.join(a for t, a in later if t == task)}"
                       for task in tasks)  # fmt: skip
    return (
        f"{measured['device']}, {measured['engine']}, task {measured['task']}: {plan.TIMING_ROUNDS} rounds of "
        f"{measured['steps_per_run']} steps per arm (the first step of each left out), one torch thread, the order "
        f"rotated each round. Fitted over its {len(measured['records'])} steps: a step costs {costs['call']:.2f} s a "
        f"generation call + {1000 * costs['rollout']:.0f} ms a rollout + {1000 * costs['scored']:.0f} ms a row the "
        f"policy scores at generation + {1000 * costs['row']:.0f} ms a trained row + {costs['update']:.2f} s "
        f"(R² {costs['r2']:.3f}; without the scored rows, R² {unscored['r2']:.3f}). The check, each arm's mean "
        "seconds a step there and its pricing over them:\n\n"
        "| arm | s / step | priced / measured | without the scored rows |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\nSecond tuning seeds (`tuning_runs`: the settings not `clearly_behind` on these costs), "
        + (second if later else "once the pilot has chosen the tasks and every first seed is in")
        + "."
    )


def accuracy_text(runs: list[dict], task: str, race) -> str:
    """Per arm, the final held-out accuracy read both ways: the scorer on the extraction rule's answer and on the
    raw completion (mean over the arm's runs), and the base model's."""
    rows = []
    for arm in race.arms:
        mine = [r for r in runs if r["task"] == task and r["arm"] == arm]
        if mine:
            means = [statistics.fmean(values) for values in ([r["curve"][0][1] for r in mine],
                     [r["curve"][-1][1] for r in mine], [r["raw_accuracy"][-1] for r in mine])]  # fmt: skip
            rows.append(f"| {arm} | {len(mine)} | {means[0]:.3f} | {means[1]:.3f} | {means[2]:.3f} |")
    header = "| arm | runs | base (extracted) | final, extracted | final, raw |\n|---|---|---|---|---|\n"
    return header + "\n".join(rows) if rows else "No evaluation runs yet."


def fixed_arms(race) -> list[str]:
    """The fixed trl_pods settings of ``race``: its arms but the baselines and the autos (`plan.AUTO_RETURNS`)."""
    return [arm for arm in race.arms if arm not in (*race.baselines, *plan.AUTO_RETURNS)]


def goals_text(runs: list[dict], task: str, race, prices: list[Pricing]) -> str:
    """The issue's goals on ``task`` for each auto arm (`plan.AUTO_RETURNS`: as raced, and as changed by amendment),
    each measured once every arm it compares has all its runs (pending until then): against the baseline, and
    within 10% of the best trl_pods arm, the fastest fixed trl_pods setting of the task's race (the amendments' too;
    an auto faster than every one reads below 1)."""
    mine = [r for r in runs if r["task"] == task]
    rollouts = {arm: [total(r, "rollouts") for r in mine if r["arm"] == arm] for arm in race.arms}
    fixed = fixed_arms(race)
    lines = []
    for auto in (arm for arm in plan.AUTO_RETURNS if arm in race.arms):
        for pricing, goal, bound in zip(prices, (0.5, 0.7), (0.8, 1.0), strict=True):
            if pricing.costs is None:
                lines.append(f"- {task}, {pricing.name}: pending (the timing run is not whole yet)")
                continue
            if waiting := lacking(runs, task, ["baseline", auto], race):
                lines.append(f"- {task}, {pricing.name}: `{auto}`: pending (waiting for {', '.join(waiting)})")
                continue
            found = minutes(mine, pricing.costs, race.baselines)
            value, _, high, _ = ratio(found[auto], found["baseline"])
            fewer = statistics.fmean(rollouts[auto]) < statistics.fmean(rollouts["baseline"])
            missed = misses(mine, task, auto)  # then its restricted mean is a lower bound: not met
            met = value <= goal and high < bound and (fewer or pricing.name != "CPU") and not missed
            lines.append(f"- {task}, {pricing.name}: `{auto}` {value:.2f}x the baseline, upper {high:.2f} (goal <= "
                         f"{goal}, < {bound}{', fewer rollouts' * (pricing.name == 'CPU')}; {missed} of its runs "
                         f"missed): **{'met' if met else 'not met'}**")  # fmt: skip
            if waiting := lacking(runs, task, fixed, race):
                lines.append(f"- {task}, {pricing.name}: `{auto}` within 10% of the best trl_pods arm: pending "
                             f"(waiting for {', '.join(waiting)})")  # fmt: skip
                continue
            best, within, low, high = against_fastest(found[auto], {arm: found[arm] for arm in fixed})
            lines.append(f"- {task}, {pricing.name}: `{auto}` within 10% of the best trl_pods arm, the fastest fixed "
                         f"one (`{best}`): {within:.2f}× ({low:.2f}–{high:.2f}): "
                         f"**{'met' if within <= CLOSE else 'not met'}**")  # fmt: skip
    return "\n".join(lines)


def resolution_text(runs: list[dict], task: str, race, prices: list[Pricing]) -> str:
    """How much "within 10% of the best trl_pods arm" can tell on ``task``: how often an auto exactly as fast as the
    fastest fixed arm passes it (`tie_passes`), with the race's seeds (auto's most; each fixed arm its own) and with
    `SEEDS_AN_ARM` seeds on every arm; once every fixed arm has all its runs."""
    mine = [r for r in runs if r["task"] == task]
    fixed = fixed_arms(race)
    raced = max(race.seeds(task)[auto] for auto in plan.AUTO_RETURNS if auto in race.arms)
    rows = []
    for pricing in prices if not lacking(runs, task, fixed, race) else ():
        if pricing.costs is not None:
            found = minutes(mine, pricing.costs, race.baselines)
            others = {arm: found[arm] for arm in fixed}
            passes = [tie_passes(others, raced, CLOSE), *(tie_passes(others, k, CLOSE, each=k) for k in SEEDS_AN_ARM)]
            rows.append(f"| {pricing.name} | {fastest(others)} | " + " | ".join(f"{p:.0%}" for p in passes) + " |")
    if not rows:
        return "Pending: the fixed trl_pods arms' runs are not all in."
    columns = [f"a tie passes: as raced ({raced} auto runs)", *(f"{k} runs an arm" for k in SEEDS_AN_ARM)]
    header = "| pricing | fastest fixed arm | " + " | ".join(columns) + " |\n|---|---|" + "---|" * len(columns)
    return header + "\n" + "\n".join(rows)


def rollouts_text(runs: list[dict], task: str, race) -> str:
    """Per trl_pods arm with runs in, its rollouts to target (restricted: a miss at the budget) over the baseline's:
    ratio of means, bootstrap 90% CI over seeds, exact permutation p."""
    rollouts = {
        arm: [total(r, "rollouts") for r in runs if r["task"] == task and r["arm"] == arm] for arm in race.arms
    }
    lines = [f"- `{arm}`: {ratio_text(rollouts[arm], rollouts['baseline'])}" for arm in race.arms
             if arm != "baseline" and rollouts[arm] and rollouts["baseline"]]  # fmt: skip
    return "\n".join(lines) or "- No trl_pods arm and the baseline both have runs yet."


def pace_text(runs: list[dict], task: str, race, prices: list[Pricing]) -> str:
    """Where each trl_pods arm's minutes to target go against the baseline's: its restricted mean steps to target
    over the baseline's, and the price of its steps (each pricing's restricted mean minutes over its mean steps, over
    the baseline's). Their product is the table's ratio of minutes."""
    mine = [r for r in runs if r["task"] == task]
    steps = {arm: [stop_step(r) for r in mine if r["arm"] == arm] for arm in race.arms}
    found = [(p.name, minutes(mine, p.costs, race.baselines)) for p in prices if p.costs is not None]
    lines = []
    for arm in race.arms:
        if arm == "baseline" or not steps[arm] or not steps["baseline"]:
            continue
        pace = [statistics.fmean(steps[a]) for a in (arm, "baseline")]
        prices_text = ", ".join(
            f"{statistics.fmean(f[arm]) / pace[0] / (statistics.fmean(f['baseline']) / pace[1]):.2f}x ({name})"
            for name, f in found
        )
        lines.append(f"- `{arm}`: {pace[0] / pace[1]:.2f}x the baseline's steps to target, a step at {prices_text} "
                     "the baseline's price")  # fmt: skip
    return "\n".join(lines) or "- No trl_pods arm and the baseline both have runs yet."


def evaluation_text(data: Path, found: dict, prices: list[Pricing]) -> tuple[str, list[dict], dict | None]:
    """The evaluation section in each of ``prices``, the evaluation runs in (refusing runs the plan does not ask
    for) and each fixed task's race (`plan.evaluation_race`; None before the fixing)."""
    fixed_file = data / "race_rg_fixed.json"
    runs = RunStore(data / "race_rg.jsonl", ("task", "arm", "seed")).runs()
    if not fixed_file.exists():
        if runs:
            raise SystemExit("evaluation runs without race_rg_fixed.json: they cannot be reported.")
        return "Not started: the tuning fixes the baseline, the targets and the budget first.", [], None
    fixing, parts, races = json.loads(fixed_file.read_text()), [], {}
    tuning = RunStore(data / "race_rg_tuning.jsonl", ("task", "arm", "seed")).runs()
    if prices[0].costs is None or fixing["fixed"] != plan.fixed(tuning, fixing["tasks"], prices[0].costs):
        raise SystemExit("race_rg_fixed.json is not what the plan's rules give on the tuning runs and the timing run.")
    for task in fixing["tasks"]:
        race = races[task] = plan.evaluation_race(task, found[task], fixing["fixed"][task])
        mine = [r for r in runs if r["task"] == task]
        check_against_plan(mine, plan.evaluation_runs({task: race}), race)
        scored = plan.evaluation_race(task, found[task], fixing["fixed"][task], targets=True)
        fix, scored_runs = fixing["fixed"][task], targeted(mine, fixing)
        parts.append(
            f"**{task}** (baseline `{fix['baseline']}`, target {fix['target']}, budget {fix['max_steps']} steps):"
            f"\n\n{task_table(scored_runs, task, scored, prices)}\n\nRollouts to target over the baseline's:\n\n"
            f"{rollouts_text(scored_runs, task, scored)}\n\nSteps to target and the price of a step over the "
            f"baseline's (their product is the ratio of minutes):\n\n{pace_text(scored_runs, task, scored, prices)}"
            f"\n\nFinal held-out accuracy:\n\n"
            f"{accuracy_text(mine, task, race)}\n\nGoals:\n\n{goals_text(scored_runs, task, scored, prices)}\n\n"
            f"{RESOLUTION}\n\n{resolution_text(scored_runs, task, scored, prices)}"
        )
    return "\n\n".join(parts), runs, races


def replay_text(data: Path, runs: list[dict], costs: dict[str, float] | None) -> str:
    """The replay of auto's planner on the states its runs announced (`race_rg_replay`), priced with the CPU
    ``costs``, once states are in."""
    states = race_rg_replay.read_states(data)
    if not states or costs is None:
        return "No states of auto's runs yet (`python benchmarks/race_rg_replay.py LOG` adds a run log's)."
    runs_in = len({(s["task"], s["seed"]) for s in states})
    return (
        f"Auto's planner (`trl_pods.auto.best_plan`) replayed on the {len(states)} states at which {runs_in} of its "
        "runs announced a change of plan (the costs it measured and the contrast rates it observed, from the runs' "
        "logs: `python benchmarks/race_rg_replay.py LOG`), as raced (as auto planned until 2026-12-02) and with one "
        "part changed at a time: its floor, sized refill at `pods_n` 16, at `pods_m` 4; each group with contrast "
        "counted alike (no `kept_signal`); both; and the square root (the floor at `pods_m`, and a step's progress "
        "growing as the square root of its signal, not in proportion: auto from 2026-11-30 to 2026-12-01, the "
        "amended arms); and the square root with the floor at `pods_n` (the choice of rollouts per prompt of the "
        "one, the floor of the other: what the pods_n amendment's verdict pointed to, replayed, not raced). Each "
        "plan's expected calls and rollouts are priced with the CPU costs above, over the "
        "baseline's mean priced step in its runs.\n\n" + race_rg_replay.table(states, costs, runs)
    )


def setting_rows(runs: list[dict], tasks: Iterable[str]) -> str:
    """A table of ``runs`` of ``tasks``, per task and setting: runs, base accuracy, mean plateau ("" without runs)."""
    rows = [
        f"| {task} | {arm} | {len(mine)} | {statistics.fmean(r['curve'][0][1] for r in mine):.3f} | "
        f"{statistics.fmean(plan.plateau(r['curve']) for r in mine):.3f} |"
        for task in tasks
        for arm, mine in plan.by_arm(runs, task).items()
    ]
    header = (
        "| task | setting | runs | base accuracy | plateau (mean of the last 3 evaluations) |\n|---|---|---|---|---|\n"
    )
    return header + "\n".join(rows) if rows else ""


def tuning_text(runs: list[dict], found: dict) -> str:
    """The pilot's and the tuning's ``runs`` of the candidate tasks (``found``) so far, per task and setting (refusing
    runs off the plan), then the runs of tasks that are no longer candidates, set aside by the plan's amendment."""
    tuning = plan.tuning_race(found)
    for run in runs:
        if run["task"] in found and (run["settings"] != tuning.settings(run["task"]) or run["seed"] not in
                                     plan.TUNING_SEEDS):  # fmt: skip
            raise SystemExit(f"{(run['task'], run['arm'], run['seed'])} is not a tuning run of the plan.")
    aside = setting_rows(runs, sorted({r["task"] for r in runs} - set(found)))
    return (setting_rows(runs, found) or "No pilot or tuning runs yet.") + (
        f"\n\nSet aside (`PLAN` amended: their tasks are no longer candidates; the runs stay committed):\n\n{aside}"
        if aside
        else ""
    )


def pilot_text(runs: list[dict], found: dict) -> str:
    """The tasks the pilot chose (`choose_tasks`) and what each candidate's pilot run learned (`gain`, `late_gain`),
    from the pilot and tuning ``runs``; "" until every candidate's pilot run is in."""
    pilots = plan.pilot_runs(runs, found)
    if not found or len(pilots) < len(found):
        return ""
    try:
        chosen = f"The pilot chose {' and '.join(f'`{task}`' for task in plan.choose_tasks(pilots))}"
    except ValueError as err:
        chosen = f"The pilot chose no two tasks ({err})"
    learned = "; ".join(
        f"{r['task'].removeprefix(plan.REASONING_GYM)} {plan.gain(r):+.3f} over its base accuracy, "
        f"{plan.late_gain(r):+.3f} past step 20"
        for r in sorted(pilots, key=lambda r: r["task"])
    )
    return (
        f"{chosen} (`choose_tasks`: a task learns with a plateau at least {plan.LEARNS} over its base accuracy, and "
        f"keeps rising with one at least {plan.RISES} over its step-20 accuracy). The pilot runs learned: {learned}."
    )


def render(data: Path = DATA) -> str:
    """The page, from the runs under ``data`` alone (and the base-model table there, which names the candidates)."""
    table = data / plan.BASE_TABLE
    found, rows, why = (
        {},
        [],
        f"none yet: the base-model table (data/{plan.BASE_TABLE}, `reasoning_gym_base.py`) is not in",
    )
    if table.exists():
        rows = [json.loads(line) for line in table.read_text().splitlines() if line.strip()]
        try:
            found = plan.candidates(rows)
        except ValueError as err:
            why = f"none yet: {err}"
        if lacking := plan.missing(rows):
            why = f"provisional: the base-model table lacks {', '.join(lacking)} (the pilot waits for all of it)"
    runs = RunStore(data / "race_rg_tuning.jsonl", ("task", "arm", "seed")).runs()  # the pilot's and the tuning's
    tuning, tuned = tuning_text(runs, found), len(runs)
    prices = pricings(data)
    evaluation, evaluated, races = evaluation_text(data, found, prices)
    planned = evaluation_count(races)
    candidates = "\n".join(f"- `{task}` `{json.dumps(c['config'])}`, {c['max_completion_length']} tokens"
                           for task, c in found.items()) or f"- {why}"  # fmt: skip
    if found and plan.missing(rows):
        candidates += f"\n- {why}"
    plan_lines = "\n".join(f"- **{key}**: {value}" for key, value in plan.PLAN.items())
    return f"""# Time to target on reasoning-gym tasks against a tuned trl.GRPOTrainer

<!-- Written by `python benchmarks/time_to_target_rg.py --report` from docs/benchmarks/data/race_rg*; do not edit. -->

How many minutes and rollouts each setting needs to reach a held-out accuracy on two reasoning-gym tasks, against
TRL's own `GRPOTrainer` tuned as a TRL user would tune it (`num_generations`, `steps_per_generation`, learning rate).
SmolLM2-135M-Instruct with LoRA (the demo's), the vLLM CPU engine, 4 prompts per optimizer step for every arm.

**Runs: {tuned} of the pilot and tuning, {len(evaluated)} of {planned} evaluation runs.**
The plan asks for {planned_count(2, planned)}.

## The plan

Fixed before any run (`PLAN` and the rules in `benchmarks/time_to_target_rg_plan.py`; the git history shows the order):

{plan_lines}

Candidate tasks now (the base-model table's rows in the band, `candidates`):

{candidates}

## Pilot and tuning

{pilot_text(runs, found) or "The pilot has not chosen the tasks yet."}

{tuning}

## CPU costs

{costs_text(data, runs, found) if found else "No candidate tasks yet."}

## Evaluation

{RESTRICTED}

{NOISE}

{H200_PRICING}

{evaluation}

## What drives auto's plans

{replay_text(data, evaluated, prices[0].costs)}

## Commands

```bash
python benchmarks/time_to_target_rg.py --phase timing     # on an idle machine
python benchmarks/time_to_target_rg.py --phase pilot      # then tune, fix (commit race_rg_fixed.json), evaluate
python benchmarks/time_to_target_rg.py --report           # this page
```

A phase takes its runs as a queue: any number of processes side by side, each saving a run as it ends. A run trains
in its own folder under `runs/race_rg/` (`--work`) with a whole checkpoint at every evaluation, so a run cut short
(a stopped machine) continues from its last evaluated checkpoint when the phase is run again, the same run as one
that did not stop on HF `generate` (a test checks it); on vLLM its sampling takes a new random stream there, and the
run lists the step in `resumed_at`.

On a CUDA machine with vLLM, the same race with a model of your own (its runs, and its base-model table from
`reasoning_gym_base.py --model`, in a folder of their own), e.g.
`python benchmarks/time_to_target_rg.py --engine vllm-cuda --model Qwen/Qwen2.5-0.5B-Instruct --data runs/qwen
--phase pilot` (then `tune`, `fix`, `evaluate`, `--report --data runs/qwen`); `bash benchmarks/gpu_check.sh`
runs the smallest pair (the pilot's setting against auto, 2 seeds, on basic_arithmetic; `TASK=` another candidate)
and a few steps of the ZeRO-2 and ZeRO-3 recipes on one GPU.

{notes("race_rg")}
"""


def write_report(data: Path = DATA) -> None:
    """Write the page (`render`)."""
    PAGE.write_text(render(data))
    print(f"wrote {PAGE}")

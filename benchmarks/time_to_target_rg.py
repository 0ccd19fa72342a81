"""Time to target on reasoning-gym tasks against a tuned `trl.GRPOTrainer`: a race (`race`) planned before its first
run (2026-11-28; `PLAN`, amended five times before the runs each amendment added; the git history shows the order),
and its page.

Runs train and generate as the addition race's (SmolLM2-135M-Instruct + LoRA, 4 prompts per optimizer step, vLLM's
CPU engine) on two reasoning-gym tasks (`TASKS`, chosen by a pilot among the base-model table's candidates),
rewarded by the dataset's own scorer. `trl.GRPOTrainer` is tuned first on tuning seeds (`TUNING_GRID`,
`tuning_queue`), and the rules (`fix`) fix each task's baseline, target and budget from those runs before any
evaluation run; every evaluation run trains its whole budget (no early stop), and its time to target is read after.
`python benchmarks/time_to_target_rg.py --phase timing|tune|fix|evaluate|--report`: `race.main`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import race
import race_report as report
from harness import DATA, RunStore, difference, generated, holm, notes, ratio
from race_report import Race, accumulation, confirmed, steps_per_generation

NAME = "race_rg"
TASKS = {
    "reasoning_gym:basic_arithmetic": {"config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
                                       "max_completion_length": 32},
    "reasoning_gym:products": {"config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
                               "max_completion_length": 32},
}  # fmt: skip
"""The raced tasks with the setting and completion length the base-model table measured (reasoning_gym_base.jsonl)."""
LEARNING_RATES = (2e-4, 5e-4)
TUNING_GRID = [(g, k, lr) for g in (4, 8, 16) for k in (1, 4) for lr in LEARNING_RATES]
"""``(num_generations, optimizer steps per generation, learning rate)`` of each tuned `trl.GRPOTrainer` setting;
``k`` optimizer steps per generation is TRL's ``steps_per_generation = k x gradient_accumulation_steps``."""
TUNING_SEEDS, TUNING_STEPS, EVAL_EVERY, HELD_OUT, PROMPTS_PER_STEP = (100, 101), 80, 10, 200, 4
TARGET_FRACTION, BUDGET_FACTOR, PACED = 0.9, 1.5, 4


def arm_name(g: int, k: int, lr: float) -> str:
    """The name of a tuned `trl.GRPOTrainer` setting."""
    return f"trl.GRPOTrainer {g}, {k} step{'s' * (k != 1)}/gen, lr {lr:.0e}"


def trl_options(g: int, k: int, lr: float) -> dict:
    """Trainer options of a `trl.GRPOTrainer` setting (micro-batches of 4 rows per prompt: `accumulation` g / 4)."""
    return dict(pods_n=g, pods_m=g, steps_per_generation=k * accumulation(dict(pods_m=g)), learning_rate=lr)


TUNING_ARMS = {arm_name(*setting): trl_options(*setting) for setting in TUNING_GRID}
AUTO, PACE = dict(pods_n=16, pods_m=4, pods_generation="auto"), dict(steps_per_generation=PACED)
REFILL = dict(pods_n=4, pods_m=4, pods_generation="refill", pods_draw_coverage=0.9)
RACED = {
    "auto 16->4": (AUTO, 8, "any"),
    "PODS 16->4": (dict(pods_n=16, pods_m=4), 5, "any"),
    "GRPO 4 + refill (sized)": (REFILL, 5, "any"),
    "auto 16->4 (square root)": (AUTO, 8, "any"),
    "auto 16->4 (square root), 4 steps/gen": ({**AUTO, **PACE}, 8, "paced"),
    "GRPO 4 + refill (sized), 4 steps/gen": ({**REFILL, **PACE}, 5, "paced"),
    "auto 16->4 (pods_n), 4 steps/gen": ({**AUTO, **PACE}, 8, "paced"),
    "auto 16->4 (pods_n)": (AUTO, 8, "unpaced"),
}
"""The trl_pods arms: options (raced at the baseline's learning rate), seeds, and the tasks they race on (where the
baseline trains `PACED` optimizer steps on one generation, or where it trains one); the baseline has 8 seeds. The
first three are the plan's; the others its amendments' (`PLAN`)."""
RETIRED = {
    "auto 16->4": "trl_pods's auto planned so until 2026-11-30 (its rollouts per prompt chosen among 4, 8 and 16, a "
    "step's progress in proportion to its signal, its floor sized refill at pods_n); it has planned otherwise since",
    **dict.fromkeys(("auto 16->4 (square root)", "auto 16->4 (square root), 4 steps/gen"), "trl_pods's auto planned "
                    "so from 2026-11-30 to 2026-12-01 (a step's progress the square root of its signal, its floor "
                    "sized refill at pods_m); it holds its rollouts per prompt at pods_n since 2026-12-02"),
}  # fmt: skip
"""The auto arms whose planner trl_pods no longer has: a run of them would not be the arm (the pods_n arms are
trl_pods's auto now)."""
TIMING_ARMS = {**{arm_name(g, k, 2e-4): trl_options(g, k, 2e-4) for g in (4, 8, 16) for k in (1, 4)},
               **{arm: {**RACED[arm][0], "learning_rate": 2e-4} for arm in list(RACED)[:3]}}  # fmt: skip
"""The interleaved timing run's arms (the learning rate does not change what a step costs): its costs price every
tuning and evaluation run, once it holds each of them in each of 3 rounds (`cpu_costs`)."""
H200_COSTS = DATA / "time_to_target_timing_gpu.json"
"""The H200 pricing's costs file: the trainers' own step times on an H200 (the addition race's GPU timing run), fitted
(`race_report.load_costs`); `--report --costs FILE` prices the page's tables with another."""
PLAN = {
    "fixed": "2026-11-28, before any run of this plan; amended five times, each before any run of what it changed "
    "(the full text: `git show a0135bf:benchmarks/time_to_target_rg_plan.py`; the notes tell why)",
    "tasks": "two reasoning-gym tasks of different kinds where SmolLM2-135M-Instruct's extracted held-out accuracy is "
    "10-50% and one answer to all scores under 10%, chosen by a pilot run on each candidate (amended 2026-11-29: "
    "letter_counting learned to answer 1; a new pilot chose basic_arithmetic and products)",
    "tuning": f"trl.GRPOTrainer over num_generations 4, 8, 16 x 1 or {PACED} optimizer steps per generation x "
    f"learning rate 2e-4 or 5e-4, seeds {TUNING_SEEDS}, {TUNING_STEPS} steps, no early stop (a second seed skipped "
    "where a setting was clearly behind after its first)",
    "baseline": "per task, the setting with the lowest restricted mean CPU minutes to the tuning target, 0.9 x the "
    "highest setting plateau (a plateau: the mean of a run's last 3 evaluations)",
    "target and budget": f"per task, {TARGET_FRACTION} x the baseline's plateau (rounded down to 0.01), and "
    f"{BUDGET_FACTOR} x its restricted mean steps to that target (rounded up to {EVAL_EVERY}); every evaluation run "
    "trains the whole budget",
    "arms": "the baseline (8 seeds), auto 16->4 (8), PODS 16->4 (5), GRPO 4 + refill (sized, 5), at the baseline's "
    "learning rate; amended 2026-11-30: auto 16->4 (square root), the auto the data pointed to (8); 2026-12-01: "
    "it and sized refill at the baseline's pace where it trains 4 steps on a generation (8, 5); 2026-12-02: auto as "
    "it plans now, at pods_n (8)",
    "evaluation": f"greedy on {HELD_OUT} held-out problems (distinct questions of the seed's stream, excluded from "
    f"training), every {EVAL_EVERY} steps and at step 0; the endpoint the first evaluation at or above the target "
    "whose next one is too, a miss counted at the budget",
    "pricings": "CPU: the costs fitted on the interleaved timing run (amended 2026-11-30, before any run was priced: "
    "with the rows the policy scores at generation); H200: the costs fitted on the trainers' own H200 steps (the "
    "addition race's GPU timing run), a pricing",
    "goals": "CPU: auto <= 0.5x the baseline, CI upper bound < 0.8, fewer rollouts; H200: <= 0.7x, upper bound < 1; "
    "auto within 10% of the best trl_pods arm",
}
"""The plan in short; `race_report` reads the rules below, the notes (data/race_rg.notes.md) the history."""


# ------------------------------------------------------------------------------------------ the rules (pure)


def plateau(curve: Sequence[Sequence[float]]) -> float:
    """A run's plateau: the mean accuracy of its last 3 evaluations."""
    return statistics.fmean(point[1] for point in curve[-3:])


def steps_to(run: dict, target: float) -> int:
    """The step of ``run``'s endpoint at ``target``, or its last step when it does not confirm it (restricted)."""
    index = confirmed([point[1] for point in run["curve"]], target)
    return run["curve"][-1][0] if index is None else run["curve"][index][0]


def by_arm(runs: Sequence[dict], task: str) -> dict[str, list[dict]]:
    """A task's runs per arm, in seed order."""
    found: dict[str, list[dict]] = {}
    for run in sorted((r for r in runs if r["task"] == task), key=lambda r: r["seed"]):
        found.setdefault(run["arm"], []).append(run)
    return found


def choose_baseline(runs: Sequence[dict], task: str, costs: dict[str, float]) -> str:
    """The task's baseline: the setting with the lowest restricted mean CPU minutes (``costs``, a `trl.GRPOTrainer`
    setting's) to the tuning target, `TARGET_FRACTION` x the highest setting plateau; ties by name."""
    arms, prices = by_arm(runs, task), report.arm_costs(costs, trl=True)
    goal = TARGET_FRACTION * max(statistics.fmean(plateau(r["curve"]) for r in found) for found in arms.values())
    mean = {arm: statistics.fmean(report.priced_minutes(r, steps_to(r, goal), prices) for r in found)
            for arm, found in arms.items()}  # fmt: skip
    return min(sorted(mean), key=mean.__getitem__)


def target(runs: Sequence[dict], task: str, arm: str) -> float:
    """`TARGET_FRACTION` x the plateau of ``arm``'s tuning runs of ``task``, rounded down to 0.01. Refuses a task
    whose plateau is within 0.10 of its base accuracy (the runs do not learn it beyond noise)."""
    found = by_arm(runs, task)[arm]
    top, base = statistics.fmean(plateau(r["curve"]) for r in found), statistics.fmean(r["curve"][0][1] for r in found)
    if top < base + 0.1:
        raise ValueError(f"{task}: {arm}'s plateau {top:.3f} is within 0.1 of its base accuracy {base:.3f}.")
    return math.floor(round(TARGET_FRACTION * top * 100, 6)) / 100


def budget(runs: Sequence[dict], task: str, arm: str, goal: float) -> int:
    """`BUDGET_FACTOR` x ``arm``'s restricted mean steps to ``goal`` in its tuning runs, rounded up to `EVAL_EVERY`."""
    steps = statistics.fmean(steps_to(r, goal) for r in by_arm(runs, task)[arm])
    return math.ceil(BUDGET_FACTOR * steps / EVAL_EVERY - 1e-9) * EVAL_EVERY


def fixed(tuning: Sequence[dict], costs: dict[str, float]) -> dict[str, dict]:
    """Per task, what the tuning runs fix: its baseline setting, target and budget (the rules above)."""
    found = {}
    for task in TASKS:
        arm = choose_baseline(tuning, task, costs)
        goal = target(tuning, task, arm)
        found[task] = {"baseline": arm, "target": goal, "max_steps": budget(tuning, task, arm, goal)}
    return found


def cpu_costs(timing_run: dict) -> dict[str, float]:
    """The CPU costs of the timing run (`race_report.fit_costs` with the rows scored at generation); refused until it
    holds every arm of `TIMING_ARMS` in each of its 3 rounds (a timing run split across sessions prices nothing)."""
    if not {(arm, r) for arm in TIMING_ARMS for r in range(3)} <= {tuple(p) for p in timing_run.get("runs", ())}:
        raise SystemExit("error: the timing run is not whole: run --phase timing (an idle machine; it continues)")
    return report.fit_costs(timing_run, TUNING_ARMS)


def fix(data: Path = DATA) -> dict:
    """``race_rg_fixed.json``: the tasks and, per task, its baseline, target and budget by the rules."""
    tuning = RunStore(data / f"{NAME}_tuning.jsonl", ()).runs()
    return {
        "tasks": list(TASKS),
        "fixed": fixed(tuning, cpu_costs(json.loads((data / f"{NAME}_timing.json").read_text()))),
    }


# ------------------------------------------------------------------------------------------------- the races


def tuning_race() -> Race:
    """The tuning runs as a race (no target: every run trains `TUNING_STEPS` steps)."""
    plan = {"tasks": dict.fromkeys(TASKS), "max_steps": TUNING_STEPS, "eval_every": EVAL_EVERY, "held_out": HELD_OUT,
            "prompts_per_step": PROMPTS_PER_STEP}  # fmt: skip
    return Race(f"{NAME}_tuning", plan, TUNING_ARMS, tuple(TUNING_ARMS), TASKS)


def tuning_queue() -> list[tuple[str, str, int]]:
    """Every setting on both tasks, seed by seed."""
    return [(task, arm, seed) for seed in TUNING_SEEDS for task in TASKS for arm in TUNING_ARMS]


def evaluation_race(task: str, fix_: dict, targets: bool = False) -> Race:
    """One task's evaluation race (``fix_``: its entry of `fixed`): the baseline setting and the trl_pods arms at its
    learning rate, those of `RACED` that race at its pace; ``targets``: with the target (as the report reads the runs;
    the runs trained with none)."""
    baseline = TUNING_ARMS[fix_["baseline"]]
    pace = "paced" if steps_per_generation(baseline) == PACED else "unpaced"
    raced = {arm: options for arm, (options, _, where) in RACED.items() if where in ("any", pace)}
    arms = {
        "baseline": baseline,
        **{arm: {**o, "learning_rate": baseline["learning_rate"]} for arm, o in raced.items()},
    }
    seeds = {arm: RACED[arm][1] if arm in RACED else 8 for arm in arms}
    plan = {"tasks": {task: fix_["target"] if targets else None}, "max_steps": fix_["max_steps"],
            "eval_every": EVAL_EVERY, "held_out": HELD_OUT, "prompts_per_step": PROMPTS_PER_STEP,
            "seeds": {task: seeds}}  # fmt: skip
    return Race(NAME, plan, arms, ("baseline",), {task: TASKS[task]})


def fixing(data: Path = DATA) -> dict:
    return json.loads((data / f"{NAME}_fixed.json").read_text())


def races(data: Path = DATA, targets: bool = False) -> dict[str, Race]:
    """Each task's evaluation race, from the committed fixing."""
    return {task: evaluation_race(task, fix_, targets) for task, fix_ in fixing(data)["fixed"].items()}


def planned(races_: dict[str, Race]) -> list[tuple[str, str, int]]:
    """The evaluation runs, seed by seed over both tasks (a stop leaves them the same seeds), arms in order."""
    return [(t, a, s) for s in range(8) for t, race_ in races_.items() for a, n in race_.seeds(t).items() if s < n]


def timing_race(data: Path = DATA) -> Race:
    return Race(f"{NAME}_timing", tuning_race().plan, TIMING_ARMS, tuple(TUNING_ARMS), TASKS)


def known_race() -> Race:
    """Every arm the race knows (what ``--arms`` may name) on its tasks."""
    raced = {arm: options for arm, (options, _, _) in RACED.items()}
    return Race(
        "known", tuning_race().plan, {**TUNING_ARMS, "baseline": {}, **raced}, (*TUNING_ARMS, "baseline"), TASKS
    )


# -------------------------------------------------------------------------------------------------- the page


def report_inputs(data: Path = DATA) -> tuple[list[dict], dict[str, Race], list[report.Pricing]]:
    """The evaluation runs with their task's target (refusing runs the plan does not ask for, or a fixing the rules
    do not give), the races as scored, and the pricings: CPU (`cpu_costs`) and H200-priced."""
    runs = RunStore(data / f"{NAME}.jsonl", ()).runs()
    report.check_against_plan(runs, planned(races(data)), races(data))
    cpu = cpu_costs(json.loads((data / f"{NAME}_timing.json").read_text()))
    if fixing(data) != fix(data):
        raise SystemExit("race_rg_fixed.json is not what the plan's rules give on the tuning runs and the timing run.")
    targets = {task: fix_["target"] for task, fix_ in fixing(data)["fixed"].items()}
    scored = [{**r, "settings": {**r["settings"], "target": targets[r["task"]]}} for r in runs]
    h200 = report.load_costs(H200_COSTS)
    return scored, races(data, targets=True), [report.Pricing("CPU", cpu, 1), report.Pricing("H200-priced", h200, 2)]


def autos(race_: Race) -> list[str]:
    return [a for a in race_.arms if race_.arms[a].get("pods_generation") == "auto"]


def goals_text(runs: list[dict], races_: dict[str, Race], pricings: list[report.Pricing]) -> str:
    """The plan's goals per task and auto arm, in each pricing: against the baseline (CPU: ≤ 0.5x, upper < 0.8,
    fewer rollouts; H200: ≤ 0.7x, upper < 1; a miss makes its mean a lower bound: not met), and within 10% of the
    fastest fixed trl_pods arm (the interval choosing the fastest again in each resample)."""
    lines = []
    for task, race_ in races_.items():
        mine = [r for r in runs if r["task"] == task]
        fixed_arms = [a for a in race_.arms if a not in autos(race_) and a != "baseline"]
        rollouts = {
            a: statistics.fmean(report.total(r, "rollouts") for r in mine if r["arm"] == a) for a in race_.arms
        }
        for auto in autos(race_):
            parts = []
            found_ = report.priced(runs, task, race_, pricings)
            for pricing, (found, _), goal, bound in zip(pricings, found_, (0.5, 0.7), (0.8, 1.0), strict=True):
                value, _, high, _ = ratio(found[auto], found["baseline"])
                fewer = rollouts[auto] < rollouts["baseline"] or pricing.name != "CPU"
                met = value <= goal and high < bound and fewer and not report.misses(mine, auto)
                best = report.fastest({a: found[a] for a in fixed_arms})
                within, low, top, _ = ratio(found[auto], *(found[a] for a in fixed_arms))
                verdict = "met" if met else "not met"
                parts.append(
                    f"{pricing.name} {value:.2f}× (upper {high:.2f}): **{verdict}**, {within:.2f}× "
                    f"({low:.2f}–{top:.2f}) `{best}`: **{'met' if within <= 1.1 else 'not met'}**"
                )
            lines.append(f"- {task.split(':')[1]}, `{auto}`: " + "; ".join(parts))
    return "\n".join(lines)


def tuning_table(tuning: list[dict], cpu: dict) -> str:
    """Per tuned setting and raced task: runs and mean plateau, the baseline marked; the runs of tasks that are no
    longer candidates (set aside by the amendment) named."""
    fixed_ = fixed(tuning, cpu)
    rows = []
    for arm in TUNING_ARMS:
        cells = []
        for task in TASKS:
            mine = by_arm(tuning, task).get(arm, [])
            mark = " **baseline**" if fixed_[task]["baseline"] == arm else ""
            cells.append(
                f"{len(mine)}: {statistics.fmean(plateau(r['curve']) for r in mine):.3f}{mark}" if mine else "–"
            )
        rows.append(f"| {arm} | {' | '.join(cells)} |")
    aside = sorted({r["task"].split(":")[1] for r in tuning} - {t.split(":")[1] for t in TASKS})
    bases = [statistics.fmean(r["curve"][0][1] for r in tuning if r["task"] == t) for t in TASKS]
    header = " | ".join(f"{t.split(':')[1]} (base {b:.3f}): runs: plateau" for t, b in zip(TASKS, bases, strict=True))
    return (f"| setting | {header} |\n|---|---|---|\n" + "\n".join(rows)
            + f"\n\nSet aside by the amendment (their tasks are no longer candidates; the runs stay committed): "
            f"{', '.join(aside)}.")  # fmt: skip


def fastest_text(runs: list[dict], races_: dict[str, Race], pricings: list[report.Pricing]) -> str:
    """Per task and pricing, the fastest trl_pods arm (an auto: with its ratio to the fastest fixed arm, the interval
    choosing that one again in each resample), and the fixed arms whose 90% CI against the fastest fixed one lies
    above 1."""
    parts = []
    for task, race_ in races_.items():
        for pricing, (found, _) in zip(pricings, report.priced(runs, task, race_, pricings), strict=True):
            fixed_ = {a: found[a] for a in race_.arms if a != "baseline" and a not in autos(race_)}
            best, top = report.fastest(fixed_), report.fastest({a: found[a] for a in race_.arms if a != "baseline"})
            text = f"{task.split(':')[1]}, {pricing.name}: `{top}`"
            if top != best:
                value, low, high, _ = ratio(found[top], *fixed_.values())
                text += f" ({value:.2f}× ({low:.2f}–{high:.2f}) the fastest fixed arm)"
            apart = [f"`{a}`" for a in fixed_ if a != best and ratio(fixed_[a], fixed_[best])[1] > 1]
            parts.append(text + (f"; fixed arms whose CI lies above `{best}`'s: {', '.join(apart)}" if apart else ""))
    return "; ".join(parts)


def answer(runs: list[dict], races_: dict[str, Race], pricings: list[report.Pricing], tests: dict,
           equal: list[tuple], cpu_first: dict) -> str:  # fmt: skip
    """The page's answer, in numbers of the tables below."""
    cpu = {k: v for k, v in tests.items() if k[1] == "CPU"}
    low_key, low = min(cpu.items(), key=lambda item: item[1][3])
    mine = [r for r in runs if r["task"] == low_key[0]]
    capped = report.capped([r for r in mine if r["arm"] == low_key[2]], [r for r in mine if r["arm"] == "baseline"],
                           pricings[0].costs, (False, True))  # fmt: skip
    finals, rollouts = [], []
    for task, race_ in races_.items():
        mine = [r for r in runs if r["task"] == task]
        base = [r for r in mine if r["arm"] == "baseline"]
        for arm in (a for a in race_.arms if a != "baseline"):
            arm_runs = [r for r in mine if r["arm"] == arm]
            finals.append(difference([r["curve"][-1][1] for r in arm_runs], [r["curve"][-1][1] for r in base]))
            rollouts.append(ratio(*([report.total(r, "rollouts") for r in x] for x in (arm_runs, base)))[0])
    at_budget = [d for d in equal if d[1] == "CPU" and d[2] == 1.0]
    outside = [f"`{k[2]}`" for k, v in tests.items() if k[1] != "CPU" and not report.within_noise(v[1], v[2], v[4])]
    lead_key, lead = min(((k, v) for k, v in tests.items() if k[1] != "CPU"), key=lambda item: item[1][0])
    adjusted = holm([d[-1] for d in equal])
    apart = "; ".join(f"{d[0].split(':')[1]}, {d[1]}, at {d[2]:g} of the baseline's budget: `{d[3]}` {d[4]:+.3f} "
                      f"({d[5]:+.3f}–{d[6]:+.3f}), Holm {h:.2f}"
                      for d, h in zip(equal, adjusted, strict=True) if h <= 0.05)  # fmt: skip

    def spans(costs: dict) -> str:
        found = {t: report.minutes([r for r in runs if r["task"] == t], costs, ["baseline"]) for t in races_}
        ratios = {t: [statistics.fmean(v) / statistics.fmean(f["baseline"]) for a, v in f.items() if a != "baseline"]
                  for t, f in found.items()}  # fmt: skip
        return "; ".join(f"{t.split(':')[1]} {min(v):.2f}–{max(v):.2f}×" for t, v in ratios.items())

    return f"""- **On the CPU no trl_pods arm was told apart from `trl.GRPOTrainer` tuned over group size,
  `steps_per_generation` and learning rate**: restricted mean minutes to target {spans(pricings[0].costs)} the
  baseline's. The one ratio whose CI excludes 1, `{low_key[2]}` on {low_key[0].split(":")[1]}, {low[0]:.2f}×
  ({low[1]:.2f}–{low[2]:.2f}), is one unadjusted p ({low[3]:.2f}) among the page's {len(tests)} comparisons:
  Holm-adjusted {low[4]:.2f}; with every run capped at one horizon ([equal compute](#accuracy-against-minutes))
  {capped[0]:.2f}× ({capped[1]:.2f}–{capped[2]:.2f}), p {capped[3]:.2f}.
- **More compute, not better learning**: at the budget's last step {sum(f[0] > 0 for f in finals)} of the
  {len(finals)} trl_pods arms of the two tasks end above the baseline ({min(f[0] for f in finals):+.3f} to
  {max(f[0] for f in finals):+.3f} held-out accuracy; p < 0.01 for {sum(f[3] < 0.01 for f in finals)}), spending
  {min(rollouts):.1f}–{max(rollouts):.1f}× its rollouts to target; at the baseline's budget in CPU minutes every
  trl_pods arm is within {min(d[4] for d in at_budget):+.3f} to {max(d[4] for d in at_budget):+.3f} of its accuracy
  (p ≥ {min(d[7] for d in at_budget):.2f}). Differences at equal minutes outside noise (Holm over the
  {len(equal)}): {apart or "none"}.
- **What could have been seen**: with one run's spread as measured, 8 CPU runs against 8 find about
  {report.seen_words(runs, races_, pricings[0], 8, 8)} ([below](#what-the-race-could-see)): "not told apart" is "not
  detected" at that size.
- **Priced with an H200's costs**, the arms that generate once an optimizer step trail the basic_arithmetic baseline,
  which generates once every 4 (outside noise after Holm: {", ".join(outside) or "none"}); at its pace they are within
  noise of it. The lowest ratio is `{lead_key[2]}`'s on {lead_key[0].split(":")[1]}, {lead[0]:.2f}× ({lead[1]:.2f}–
  {lead[2]:.2f}), Holm {lead[4]:.2f}. The fastest trl_pods arm: {fastest_text(runs, races_, pricings)}.
- **The CPU pricing is the race's largest lever**: under the CPU fit as first registered (without the rows the
  policy scores at generation, R² {cpu_first["r2"]:.3f}) the trl_pods arms read {spans(cpu_first)} the baseline's
  minutes; under the amended fit (R² {pricings[0].costs["r2"]:.3f}, [CPU costs](#cpu-costs))
  {spans(pricings[0].costs)}.
  Both readings are of the same runs; the amendment came before any run was priced.
{report.replicates_text(runs, races_, pricings[0].costs)}
- The runs trained and were evaluated on reasoning-gym's problem streams as trl_pods drew them then (seed s: seed
  0's stream shifted by s items, so the 8 seeds evaluated nearly one set of ~206 problems): a rerun on a trl_pods
  that draws them otherwise trains and evaluates on other problems."""


def render(data: Path = DATA) -> str:
    """The page, from the committed runs, tuning runs, timing runs and fixing alone."""
    runs, races_, pricings = report_inputs(data)
    tests = report.comparisons(runs, races_, pricings)
    timing = json.loads((data / f"{NAME}_timing.json").read_text())
    cpu_first, tuning = report.fit_costs(timing), RunStore(data / f"{NAME}_tuning.jsonl", ()).runs()
    fixes = fixing(data)["fixed"]
    prices = (f"CPU minutes: each step priced with the costs fitted on the interleaved timing run ([CPU "
              f"costs](#cpu-costs)). H200-priced: with the costs fitted on the trainers' own step times on an H200 in "
              f"the addition race ({report.costs_words(pricings[1].costs)}; HF `generate` in bf16, completions of up "
              "to 16 tokens, no rows scored at generation), a pricing, not runs on an H200: this race's completions "
              "take up to 32 tokens, and a baseline that scores its rollouts at generation is priced below its cost "
              "there. `--report --costs FILE` prices that column with other costs.")  # fmt: skip

    def extra(task: str) -> str:
        return (f"Baseline `{fixes[task]['baseline']}`, budget {fixes[task]['max_steps']} steps. Held-out accuracy:"
                f"\n\n{report.accuracy_table(runs, task, races_[task])}\n")  # fmt: skip

    ends = "Every run trained its whole budget; after it, a run counts at its last evaluation."
    shared, equal = report.sections(runs, races_, pricings, tests, NAME, ends, prices, [(5, 8), (8, 8)], extra)
    body = notes(
        f"{NAME}_page", tuning_runs=len(tuning), runs=len(runs), shared=shared,
        answer=answer(runs, races_, pricings, tests, equal, cpu_first), goals=goals_text(runs, races_, pricings),
        plan=report.plan_text(PLAN), timing=timing,
        tuning=tuning_table(tuning, pricings[0].costs), timing_steps=len(timing["records"]),
        amended=report.costs_words(pricings[0].costs), first=report.costs_words(cpu_first),
        costs_table=report.costs_table(timing, {"amended fit": pricings[0].costs, "first fit": cpu_first},
                                       TUNING_ARMS), provenance=report.provenance(runs),
    )  # fmt: skip
    return generated("Time to target on reasoning-gym tasks against a tuned trl.GRPOTrainer", "time_to_target_rg.py",
                     NAME, body)  # fmt: skip


def figure(data: Path = DATA) -> None:
    """The page's figure, ``data/race_rg.png`` (`race_report.plot`)."""
    report.plot(*report_inputs(data), data / f"{NAME}.png")


PAGES = {"time-to-target-rg": render}

if __name__ == "__main__":
    race.main(sys.modules[__name__])

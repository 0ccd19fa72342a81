"""The report of a race to a target (`race_analysis.Race`): the markdown a study's page is made of, from its saved
runs alone. Per task, a table of every arm's time to target in each pricing against the baseline (`task_table`); the
figure (`plot`); the interleaved timing run (`timing_text`) and a GPU timing run in the trainers (`gpu_timing_text`);
the plan as fixed (`plan_text`) and the machines (`provenance`). Times are restricted means (`race_analysis`): a run
that did not reach the target counts at the budget, and the table says how many did not.
"""

from __future__ import annotations

import json
import shlex
import statistics
from pathlib import Path

from harness import mean_of, spread
from race_analysis import (
    FIELD,
    NOISE_P,
    TIMING_FIELD,
    Pricing,
    Race,
    baseline,
    fit_costs,
    minutes,
    ratio_text,
    reached,
    seconds_per_step,
    step_seconds,
    stop_step,
    total,
    unconfirmed,
)

RESTRICTED = (
    "Every run counts (restricted mean time to target): a run that did not reach the target counts at the budget, "
    "its `max_steps` steps priced as those steps' minutes, and the table says how many did not reach it; a run that "
    "first reached the target at its last evaluation, with none after it to confirm it, did not reach it (counted at "
    "the budget: for that arm's time, a lower bound)."
)
"""How the pages of a race count runs that missed the target, said once."""
NOISE = (
    f"A ratio is marked *within noise* where its 90% CI holds 1 or its permutation p is above {NOISE_P}: with 5 seeds "
    "a side the bootstrap CI is narrow beside the exact permutation test, so both must speak."
)
"""What *within noise* means on the pages of a race, said once."""


def comparison(found: dict[str, list[float]], arm: str, base: str | None, circular: bool = False) -> str:
    """``ratio (90% CI), p`` of ``arm``'s restricted mean minutes to ``base``'s (`race_analysis.ratio_text`), or a
    dash; ``circular``: the arm plans with the costs it is scored with, and the cell says so."""
    if base is None or arm not in found:
        return "–"
    text = "1 (baseline)" if arm == base else ratio_text(found[arm], found[base])
    return text + ("; circular: plans with these costs" if circular else "")


def missed_text(runs: list[dict]) -> str:
    """How many of ``runs`` did not reach the target, naming those that reached it only at their last evaluation."""
    missed, late = sum(not reached(r) for r in runs), sum(unconfirmed(r) for r in runs)
    return f"{missed}" + (f" ({late} at its last evaluation, unconfirmed)" if late else "")


def task_table(runs: list[dict], task: str, race: Race, pricings: list[Pricing]) -> str:
    """One task's table: per arm, its runs, how many did not reach the target, its steps and rollouts to target
    (restricted: a miss at the budget), its generation calls a step and trained groups with contrast (over all its
    steps), and its minutes to target in each of ``pricings`` against that pricing's baseline."""
    mine = [r for r in runs if r["task"] == task]
    found = [minutes(mine, pricing.costs, race.baselines) for pricing in pricings]
    bases = [baseline(f, race.baselines) for f in found]
    rows = []
    for arm in [a for a in race.arms if a in race.seeds(task)]:
        arm_runs = [r for r in mine if r["arm"] == arm]
        records = [s for r in arm_runs for s in r["steps"]]
        cells = [
            f"{len(arm_runs)}/{race.seeds(task)[arm]}",
            missed_text(arm_runs),
            spread([stop_step(r) for r in arm_runs], 0),
            spread([total(r, "rollouts") for r in arm_runs], 0),
            mean_of([s[FIELD["calls"]] for s in records], 2),
            mean_of([1 - s[FIELD["frac_zero_std"]] for s in records], 2),
        ]
        for pricing, f, base in zip(pricings, found, bases, strict=True):
            cells += [spread(f.get(arm, []), pricing.digits), comparison(f, arm, base, arm in pricing.circular)]
        rows.append(f"| {arm} | {' | '.join(cells)} |")
    header = ["arm", "runs (of planned)", "did not reach", "steps to target", "rollouts to target",
              "generation calls / step", "trained groups with contrast"]  # fmt: skip
    for pricing in pricings:
        header += [f"{pricing.name} minutes", f"÷ baseline ({pricing.name})"]
    return f"| {' | '.join(header)} |\n" + "|---" * len(header) + "|\n" + "\n".join(rows)


def plot(runs: list[dict], path: Path, race: Race) -> None:
    """Mean held-out accuracy per arm against optimizer steps (thin lines: each seed), a panel per task, the target
    dashed; a seed's curve stops at its endpoint, the mean where its first run stops."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = race.plan["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for axis, (task, target) in zip(axes[0], tasks.items(), strict=True):
        for i, arm in enumerate(race.arms):
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


def timing_text(timing_run: dict | None, runs: list[dict], race: Race) -> str:
    """How the interleaved timing run went, its seconds per step per arm, the CPU costs fitted on it, and the check:
    each arm's CPU minutes to target by steps x its interleaved seconds per step against the costs' pricing."""
    if timing_run is None:
        return ("Not measured yet: CPU minutes need every arm's step times taken side by side on an idle machine "
                f"(`python benchmarks/{race.name}.py --timing`).")  # fmt: skip
    per_step, loads, costs = seconds_per_step(timing_run), timing_run["load"], fit_costs(timing_run)
    field, rows = TIMING_FIELD, []
    for arm in [a for a in race.arms if a in per_step]:
        mine = [r for r in timing_run["records"] if r[0] == arm]
        by_steps = [stop_step(r) * per_step[arm] / 60 for r in runs if r["arm"] == arm]
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
        "the runs (restricted: a miss at the budget) as steps × the arm's seconds per step here, and as priced step "
        "by step.\n\n"
        "| arm | s / step (median over rounds) | rollouts / step | generation calls / step | "
        "minutes: steps × s/step | minutes: priced |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def gpu_timing_text(gpu_run: dict | None, runs: list[dict], race: Race, reference: Pricing) -> str:
    """The trainers' own step times on a GPU (``--engine hf --timing``): per arm, seconds a step measured against the
    ``reference`` pricing of the same steps, and rollouts and calls a step against the plan's runs on the same task;
    the costs fitted on them (`fit_costs`) and each arm's minutes to target priced with those, against the baseline
    so priced."""
    if gpu_run is None:
        return f"Not measured yet (`python benchmarks/{race.name}.py --timing --engine hf` on a CUDA GPU)."
    per_step, costs = seconds_per_step(gpu_run), fit_costs(gpu_run)
    rows = []
    for arm in [a for a in race.arms if a in per_step]:
        mine = [r[2:] for r in gpu_run["records"] if r[0] == arm]
        planned = [s for r in runs if r["arm"] == arm and r["task"] == gpu_run["task"] for s in r["steps"]]
        priced = statistics.mean(step_seconds(s, reference.costs) for s in mine)
        counts = [
            f"{mean_of([s[FIELD[name]] for s in mine], digits)} ({mean_of([s[FIELD[name]] for s in planned], digits)})"
            for name, digits in (("rollouts", 0), ("calls", 2))
        ]
        task_runs = [r for r in runs if r["arm"] == arm and r["task"] == gpu_run["task"]]
        by_steps = [stop_step(r) * per_step[arm] / 60 for r in task_runs]
        rows.append(f"| {arm} | {per_step[arm]:.2f} | {priced:.2f} | {per_step[arm] / priced:.2f} | "
                    f"{' | '.join(counts)} | {spread(by_steps, 2)} |")  # fmt: skip
    tasks = race.plan["tasks"]
    found = {task: minutes([r for r in runs if r["task"] == task], costs) for task in tasks}
    bases = {task: baseline(found[task], race.baselines) for task in tasks}
    ratios = [
        f"| {arm} | {' | '.join(comparison(found[task], arm, bases[task]) for task in tasks)} |"
        for arm in race.arms
        if any(r["arm"] == arm for r in runs)
    ]
    versions_text = ", ".join(f"{k} {v}" for k, v in gpu_run["versions"].items())
    command = shlex.join(["python", f"benchmarks/{race.name}.py", "--timing", "--engine", "hf", "--timing_rounds",
                          str(gpu_run["rounds"]), "--timing_steps", str(gpu_run["steps_per_run"]), "--arms",
                          *dict.fromkeys(r[0] for r in gpu_run["records"])])  # fmt: skip
    return (
        f"`{command}` on {gpu_run['device']} ({versions_text}), {gpu_run['engine']}; task {gpu_run['task']}, "
        f"{gpu_run['rounds']} "
        f"round{'s' * (gpu_run['rounds'] != 1)} of {gpu_run['steps_per_run']} steps per arm (the first step of each "
        f"run left out), the order rotated each round. Per arm: its seconds a step (median over rounds), the "
        f"{reference.name} seconds of the same steps, and its rollouts and generation calls a step here (in brackets: "
        f"in the plan's runs of {gpu_run['task']}; the auto arms without given costs plan with the costs they "
        "measure, here the GPU's), and the minutes to target of the plan's runs of that task as steps × the seconds "
        "a step measured here (restricted: a miss at the budget).\n\n"
        f"| arm | s / step, measured | s / step, {reference.name} | measured ÷ pricing | rollouts / step | "
        "generation calls / step | minutes to target |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Fitted over its {len(gpu_run['records'])} steps: a step costs {costs['call']:.3f} s a generation call + "
        f"{1000 * costs['rollout']:.2f} ms a rollout + {1000 * costs['row']:.2f} ms a trained row + "
        f"{costs['update']:.3f} s (R² {costs['r2']:.3f}). The plan's runs priced with these costs, ÷ the baseline "
        "so priced (ratio of restricted mean minutes, bootstrap 90% CI, permutation p):\n\n"
        f"| arm | {' | '.join(tasks)} |\n|---{'|---' * len(tasks)}|\n" + "\n".join(ratios)
    )


def plan_text(race: Race) -> str:
    """The plan as fixed, a line per entry, its seeds per arm last."""
    tasks = ", ".join(f"{task} to {target} held-out accuracy" for task, target in race.plan["tasks"].items())
    lines = [f"- **{key}**: {tasks if key == 'tasks' else value}" for key, value in race.plan.items()
             if key != "seeds"]  # fmt: skip
    seeds = "; ".join(f"{task}: " + ", ".join(f"{arm} {n}" for arm, n in arms.items())
                      for task, arms in race.plan["seeds"].items())  # fmt: skip
    return "\n".join([*lines, f"- **seeds per arm**: {seeds}"])


def provenance(runs: list[dict]) -> str:
    """Markdown lines naming the machines and versions the runs were made with."""
    made = sorted({(r["device"], json.dumps(r["versions"])) for r in runs})
    lines = [f"- Runs made on {device} with {', '.join(f'{k} {v}' for k, v in json.loads(v).items())}."
             for device, v in made]  # fmt: skip
    return "\n".join(lines) or "- No runs yet."

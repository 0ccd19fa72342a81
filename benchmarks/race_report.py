"""A race's plan as data (`Race`: arms, tasks, seeds, budget) and its report, from its saved runs alone: minutes to
target as a restricted mean (a run that never confirms the target counts at its budget: `minutes`), priced step by
step with a costs file or the costs fitted on a timing run (`Pricing`, `load_costs`, `fit_costs`, `arm_costs`); each
trl_pods arm against the baseline with a bootstrap 90% CI over seeds and the exact permutation p adjusted by Holm over
the page's comparisons (`comparisons`); held-out accuracy at equal minutes and minutes capped at one horizon
(`equal_compute_table`, drawn by `plot`); what the race could see (`power_table`), replicates (`replicates_text`),
steps and the price of a step (`pace_text`) and the costs' check against measured step times (`costs_table`).
`sections` puts them on a page; `race` trains the runs.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from harness import binomial_se, detectable, difference, holm, mean_ci, ratio, runs_for, spread

STEP_FIELDS = ("step", "step_time", "rollouts", "rows", "calls", "frac_zero_std", "reward", "completion_length")
"""Per optimizer step of a run: TRL's ``step_time`` (s), rollouts generated, rows trained, generation calls, the
fraction of trained groups whose rewards are all equal, the mean reward and completion length of the trained rows."""
FIELD = {name: i for i, name in enumerate(STEP_FIELDS)}
"""Index of each `STEP_FIELDS` name in a step record (a timing run's records: ``[arm, round, *step record]``)."""


@dataclasses.dataclass(frozen=True)
class Race:
    """A race's plan: its data files ``docs/benchmarks/data/<name>*``; the ``plan`` fixed before its runs (``tasks``:
    target per task, None where runs train their whole budget; ``max_steps``, ``eval_every``, ``held_out``: distinct
    problems the training excludes; ``prompts_per_step``; ``seeds``: per task, runs per arm; the rest is text); each
    arm's options (``arms``), those trained by `trl.GRPOTrainer` (``baselines``), and per reasoning-gym task its
    dataset settings and completion length (``task_configs``)."""

    name: str
    plan: dict
    arms: dict[str, dict]
    baselines: tuple[str, ...]
    task_configs: dict[str, dict] = dataclasses.field(default_factory=dict)

    def settings(self, task: str) -> dict:
        """What a run of ``task`` depends on besides its arm and seed; the report refuses runs with other ones."""
        keys = ("max_steps", "eval_every", "held_out", "prompts_per_step")
        generated = {"task_config": self.task_configs[task]} if task in self.task_configs else {}
        return {"target": self.plan["tasks"][task], **{key: self.plan[key] for key in keys}, **generated}

    def seeds(self, task: str) -> dict[str, int]:
        """Runs per arm the plan asks for on ``task``."""
        return self.plan["seeds"][task]

    def arm(self, name: str) -> tuple[str, dict]:
        """What arm ``name`` trains, as data: its trainer (``"trl.GRPOTrainer"`` or ``"trl_pods.PODSGRPOTrainer"``) and
        its options (`PODSConfig` fields on top of the demo's arguments; a baseline arm's ``pods_n`` is TRL's
        ``num_generations``): what `race.method_arguments` builds and a GPU check times."""
        return ("trl.GRPOTrainer" if name in self.baselines else "trl_pods.PODSGRPOTrainer"), self.arms[name]


def accumulation(options: dict) -> int:
    """Micro-batches of 4 rows a prompt an optimizer step of an arm accumulates: ``pods_m / 4`` (at least 1)."""
    return max(1, options["pods_m"] // 4)


def steps_per_generation(options: dict) -> int:
    """Optimizer steps an arm trains on one generation: its ``steps_per_generation`` over its `accumulation`."""
    return options.get("steps_per_generation", accumulation(options)) // accumulation(options)


def confirmed(accuracy: list[float], target: float) -> int | None:
    """Index of the endpoint in a run's evaluations: the first at or above ``target`` whose next is also at or above
    it (None: not reached)."""
    return next((i for i in range(len(accuracy) - 1) if accuracy[i] >= target <= accuracy[i + 1]), None)


NOISE_P = 0.05
RESTRICTED = (
    "Every run counts (restricted mean time to target): a run that does not confirm the target counts at its budget, "
    "its steps priced as those steps' minutes; a run that first reaches the target at its last evaluation, with none "
    "after it to confirm it, did not reach it. A ratio to the baseline is within noise where its 90% bootstrap CI "
    "over seeds holds 1 or its exact permutation p, adjusted by Holm over the page's {tests} comparisons of a "
    f"trl_pods arm with the baseline, is above {NOISE_P}; a ratio outside noise is marked so."
)
"""How a race's page counts runs and reads a ratio, said once (``tests``: the number of comparisons)."""


@dataclasses.dataclass(frozen=True)
class Pricing:
    """A way to turn a run's steps into minutes: its ``name``, its ``costs`` (seconds a ``call``, ``rollout``, ``row``,
    ``update``; ``scored``: `arm_costs`), its minutes' decimals, and the arms that plan with these costs (circular)."""

    name: str
    costs: dict[str, float]
    digits: int = 2
    circular: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------------------ analysis


def endpoint(run: dict) -> list[float] | None:
    """The run's curve point at its endpoint (`confirmed`), None when it did not reach it."""
    index = confirmed([point[1] for point in run["curve"]], run["settings"]["target"])
    return None if index is None else run["curve"][index]


def reached(run: dict) -> bool:
    return endpoint(run) is not None


def unconfirmed(run: dict) -> bool:
    """Whether the run first reached the target at its last evaluation, with none after it to confirm it."""
    return not reached(run) and run["curve"][-1][1] >= run["settings"]["target"]


def stop_step(run: dict) -> int:
    """The step the run's time to target counts to: its endpoint, or its budget (``max_steps``) when not reached."""
    point = endpoint(run)
    return run["settings"]["max_steps"] if point is None else point[0]


def step_seconds(step: list[float], costs: dict[str, float]) -> float:
    """A step record priced with ``costs`` (seconds per generation call, rollout and trained row, and per step)."""
    return (step[FIELD["calls"]] * costs["call"] + step[FIELD["rollouts"]] * costs["rollout"]
            + step[FIELD["rows"]] * costs["row"] + costs["update"])  # fmt: skip


def priced_minutes(run: dict, step: float, costs: dict[str, float]) -> float:
    """The run's steps up to ``step``, each priced with ``costs`` (`step_seconds`)."""
    return sum(step_seconds(s, costs) for s in run["steps"] if s[FIELD["step"]] <= step) / 60


def arm_costs(costs: dict[str, float], trl: bool) -> dict[str, float]:
    """``costs`` for one arm's steps, their ``scored`` term (`fit_costs`: seconds a row whose log-probs the policy
    computes at generation) folded in: into a rollout's cost for a `trl.GRPOTrainer` arm (``trl``: it scores every
    rollout), into a trained row's for a trl_pods arm (it scores the rows it keeps); costs without it as they are."""
    term = "rollout" if trl else "row"
    return {**costs, term: costs[term] + costs.get("scored", 0.0), "scored": 0.0}


def to_target(run: dict, costs: dict[str, float]) -> float:
    """The run's minutes to the endpoint priced with ``costs``, or to its budget where it did not reach it."""
    return priced_minutes(run, stop_step(run), costs)


def total(run: dict, name: str) -> float:
    """The run's `STEP_FIELDS` ``name`` summed over its steps up to `stop_step` (e.g. rollouts to target)."""
    return sum(s[FIELD[name]] for s in run["steps"] if s[FIELD["step"]] <= stop_step(run))


def minutes(runs: list[dict], costs: dict[str, float], trl_arms: Iterable[str] = ()) -> dict[str, list[float]]:
    """Per arm: every run's minutes to target priced with ``costs`` (`to_target`; a miss at the budget; `arm_costs`,
    ``trl_arms`` the `trl.GRPOTrainer` arms), so that a mean over them is the restricted mean."""
    found: dict[str, list[float]] = {}
    for run in runs:
        found.setdefault(run["arm"], []).append(to_target(run, arm_costs(costs, run["arm"] in set(trl_arms))))
    return found


def fastest(found: dict[str, Sequence[float]]) -> str:
    """The arm of ``found`` (per arm, its runs' minutes) with the lowest mean."""
    return min(found, key=lambda arm: statistics.fmean(found[arm]))


def fit_costs(timing_run: dict, trl_arms: Iterable[str] | None = None) -> dict[str, float]:
    """Least squares of a timing run's step times on (calls, rollouts, rows, 1), with the fit's R²; with ``trl_arms``
    (where the policy scores rows at generation) also on the rows scored (`arm_costs`)."""
    records = timing_run["records"]  # [arm, round, *step record]
    names = ["call", "rollout", "row", "update"]
    rows = [[r[2 + FIELD["calls"]], r[2 + FIELD["rollouts"]], r[2 + FIELD["rows"]], 1.0] for r in records]
    if trl_arms is not None:
        trl, names = set(trl_arms), [*names, "scored"]
        rows = [
            [*row, r[2 + FIELD["rollouts" if r[0] in trl else "rows"]]] for row, r in zip(rows, records, strict=True)
        ]
    x, y = np.array(rows), np.array([r[2 + FIELD["step_time"]] for r in records])  # [steps, terms], [steps]
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual, total_ = ((y - x @ coefficients) ** 2).sum(), ((y - y.mean()) ** 2).sum()
    r2 = float(1 - residual / total_) if total_ else 1.0
    return {**dict(zip(names, coefficients.tolist(), strict=True)), "r2": r2}


def load_costs(path: Path, trl_arms: Iterable[str] | None = None) -> dict[str, float]:
    """The costs a pricing reads from ``path``: a JSON object of seconds per ``call``, ``rollout``, ``row`` and
    ``update``, or a timing run (`race.timing`'s ``records``) to fit them on (`fit_costs`, ``trl_arms`` as there)."""
    saved = json.loads(Path(path).read_text())
    if "records" in saved:
        return fit_costs(saved, trl_arms)
    if missing := {"call", "rollout", "row", "update"} - set(saved):
        raise SystemExit(f"error: {path} holds no timing run and lacks the costs {sorted(missing)} (seconds each)")
    return {key: float(saved[key]) for key in ("call", "rollout", "row", "update", "scored") if key in saved}


def check_against_plan(runs: list[dict], planned: Iterable[tuple], races: dict[str, Race]) -> None:
    """Refuse runs the plan does not ask for (``planned``: its ``(task, arm, seed)`` keys), made with other settings
    (a mixed table would compare unlike runs), or saved twice (one run would count as two seeds)."""
    wanted, seen = set(planned), set()
    for run in runs:
        key = (run["task"], run["arm"], run["seed"])
        if key in seen:
            raise SystemExit(f"{key} is saved twice in the runs: keep one line of it.")
        seen.add(key)
        if key not in wanted or run["settings"] != races[run["task"]].settings(run["task"]):
            raise SystemExit(f"{key} with {run['settings']} is not a run of the plan (PLAN): it cannot be reported.")


def misses(runs: list[dict], arm: str) -> int:
    """How many of ``arm``'s runs (of one task) did not reach the target."""
    return sum(r["arm"] == arm and not reached(r) for r in runs)


# ------------------------------------------------------------------------------------------ against the baseline


def priced(runs: list[dict], task: str, race: Race, pricings: list[Pricing]) -> list[tuple[dict, str]]:
    """Per pricing: ``(minutes per arm, baseline)`` of ``task``'s runs, the baseline the `trl.GRPOTrainer` arm with
    the lowest restricted mean."""
    mine = [r for r in runs if r["task"] == task]
    found = [minutes(mine, p.costs, race.baselines) for p in pricings]
    return [(f, fastest({a: f[a] for a in race.baselines if a in f})) for f in found]


def comparisons(runs: list[dict], races: dict[str, Race], pricings: list[Pricing]) -> dict[tuple, tuple]:
    """The page's comparisons: ``(task, pricing, arm) -> (ratio, CI low, CI high, p, Holm p)`` of each trl_pods arm's
    restricted mean minutes to the baseline's, the p adjusted by Holm over all of them."""
    found = {}
    for task, race in races.items():
        for pricing, (f, base) in zip(pricings, priced(runs, task, race, pricings), strict=True):
            for arm in (a for a in race.arms if a in f and a not in race.baselines):
                found[task, pricing.name, arm] = ratio(f[arm], f[base])
    adjusted = holm([value[3] for value in found.values()])
    return {key: (*value, h) for (key, value), h in zip(found.items(), adjusted, strict=True)}


def within_noise(low: float, high: float, adjusted: float) -> bool:
    return low <= 1 <= high or adjusted > NOISE_P


def comparison_cell(value: float, low: float, high: float, p: float, adjusted: float) -> str:
    """``ratio× (low–high), p (Holm p)``, marked **outside noise** where it is not within noise (`within_noise`)."""
    noise = "" if within_noise(low, high, adjusted) else ", **outside noise**"
    return f"{value:.2f}× ({low:.2f}–{high:.2f}), p {p:.2f} (Holm {adjusted:.2f}){noise}"


def missed_text(runs: list[dict]) -> str:
    """How many of ``runs`` did not reach the target, naming those that reached it only at their last evaluation."""
    missed, late = sum(not reached(r) for r in runs), sum(unconfirmed(r) for r in runs)
    return f"{missed}" + (f" ({late} unconfirmed)" if late else "")


def task_table(runs: list[dict], task: str, race: Race, pricings: list[Pricing], tests: dict) -> str:
    """One task's table: per arm, its runs, misses, steps and rollouts to target, calls a step, trained groups with
    contrast, and its minutes to target in each pricing against that pricing's baseline (`comparisons`)."""
    mine = [r for r in runs if r["task"] == task]
    rows = []
    for arm in [a for a in race.arms if a in race.seeds(task)]:
        arm_runs = [r for r in mine if r["arm"] == arm]
        records = [s for r in arm_runs for s in r["steps"]]
        cells = [f"{len(arm_runs)}/{race.seeds(task)[arm]}", missed_text(arm_runs),
                 spread([stop_step(r) for r in arm_runs], 0), spread([total(r, "rollouts") for r in arm_runs], 0),
                 f"{statistics.fmean(s[FIELD['calls']] for s in records):.2f}",
                 f"{1 - statistics.fmean(s[FIELD['frac_zero_std']] for s in records):.2f}"]  # fmt: skip
        for pricing, (found, base) in zip(pricings, priced(runs, task, race, pricings), strict=True):
            test = tests.get((task, pricing.name, arm))
            cell = "baseline" if arm == base else comparison_cell(*test) if test else "–"
            circular = "; circular: plans with these costs" if arm in pricing.circular else ""
            cells += [spread(found.get(arm, []), pricing.digits), cell + circular]
        rows.append(f"| {arm} | {' | '.join(cells)} |")
    header = ["arm", "runs", "missed", "steps to target", "rollouts to target", "calls / step", "groups with contrast"]
    for pricing in pricings:
        header += [f"{pricing.name} minutes", "÷ baseline"]
    return f"| {' | '.join(header)} |\n" + "|---" * len(header) + "|\n" + "\n".join(rows)


def pace_text(runs: list[dict], task: str, race: Race, pricings: list[Pricing]) -> str:
    """Each trl_pods arm's steps to target over the baseline's, and the price of its step (mean minutes over mean
    steps) over the baseline's in each pricing: their product is the table's ratio of minutes."""
    mine = [r for r in runs if r["task"] == task]
    steps = {arm: [stop_step(r) for r in mine if r["arm"] == arm] for arm in race.arms}
    found = priced(runs, task, race, pricings)
    lines = []
    for arm in (a for a in race.arms if steps[a] and a not in race.baselines):
        prices = []
        for pricing, (f, base) in zip(pricings, found, strict=True):
            price = statistics.fmean(f[arm]) / statistics.fmean(steps[arm])
            prices.append(f"{price * statistics.fmean(steps[base]) / statistics.fmean(f[base]):.2f}× ({pricing.name})")
        lines.append(f"- `{arm}`: {statistics.fmean(steps[arm]) / statistics.fmean(steps[found[0][1]]):.2f}× the "
                     f"baseline's steps, a step at {', '.join(prices)} its price")  # fmt: skip
    return "\n".join(lines)


def replicates_text(runs: list[dict], races: dict[str, Race], costs: dict[str, float]) -> str:
    """Pairs of arms whose runs of every seed generated, trained and called alike at every step: replicates of one
    setting, their endpoints' spread the noise of a run (minutes priced with ``costs``)."""
    lines = []
    for task, race in races.items():
        mine = {(r["arm"], r["seed"]): r for r in runs if r["task"] == task}
        arms = [a for a in race.arms if a not in race.baselines]
        for i, first in enumerate(arms):
            for second in arms[i + 1 :]:
                seeds = sorted(s for a, s in mine if a == first and (second, s) in mine)
                pairs = [(mine[first, s], mine[second, s]) for s in seeds]
                if not pairs or any([x[2:5] for x in a["steps"]] != [x[2:5] for x in b["steps"]] for a, b in pairs):
                    continue
                found = [[to_target(run, arm_costs(costs, False)) for run in pair] for pair in pairs]
                apart = [f"{a:.1f} against {b:.1f}" for a, b in found if abs(a - b) > 0.05]
                lines.append(
                    f"- {task}: `{first}` and `{second}` generated, trained and called alike at every step of all "
                    f"{len(pairs)} seeds: replicates of one setting. Their minutes to target still differ in "
                    f"{len(apart)} of {len(pairs)} seeds ({'; '.join(apart) or 'none'}): where one evaluation crosses "
                    "the target moves a run's endpoint by whole evaluations, the noise of one run."
                )  # fmt: skip
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ equal compute


def end_minutes(run: dict, costs: dict[str, float], trl: bool) -> float:
    """The minutes of a run to its last evaluation, priced with ``costs``."""
    return priced_minutes(run, run["curve"][-1][0], arm_costs(costs, trl))


def accuracy_at(run: dict, cutoff: float, costs: dict[str, float], trl: bool) -> float:
    """The run's held-out accuracy at ``cutoff`` priced minutes: its last evaluation by then (after the run ended,
    its last one)."""
    prices = arm_costs(costs, trl)
    return [p[1] for p in run["curve"] if priced_minutes(run, p[0], prices) <= cutoff + 1e-9][-1]


def horizon(runs: list[dict], costs: dict[str, float]) -> float:
    """The baseline's horizon: the mean over its ``runs`` of their minutes to their last evaluation."""
    return statistics.fmean(end_minutes(r, costs, True) for r in runs)


def capped(first: list[dict], second: list[dict], costs: dict[str, float], trl: tuple[bool, bool]) -> tuple:
    """Minutes to target of two arms' runs, every run capped at the horizon all of them were followed to: the
    shortest budget among the runs that missed (a run that reached the target is known beyond it); `harness.ratio`
    of their means, and that horizon (None where no run missed)."""
    ends = [
        end_minutes(r, costs, t) for runs, t in zip((first, second), trl, strict=True) for r in runs if not reached(r)
    ]
    cap = min(ends, default=None)
    found = [[min(to_target(r, arm_costs(costs, t)), cap or float("inf")) for r in runs]
             for runs, t in zip((first, second), trl, strict=True)]  # fmt: skip
    return (*ratio(*found), cap)


CUTOFFS = (0.5, 1.0)
"""The minutes the equal-compute table reads each arm at: these shares of the baseline's `horizon`."""


def equal_compute_table(runs: list[dict], task: str, race: Race, pricings: list[Pricing]) -> tuple[str, list]:
    """One task's equal-compute table: per arm and pricing, its held-out accuracy at `CUTOFFS` of the baseline's
    horizon (mean, 90% CI) and its difference from the baseline's (permutation p), and its minutes to target `capped`
    at one horizon; and each trl_pods arm's differences ``(task, pricing, cutoff, arm, value, low, high, p)``."""
    mine = [r for r in runs if r["task"] == task]
    header, rows, tests = ["arm"], {arm: [f"`{arm}`"] for arm in race.arms if any(r["arm"] == arm for r in mine)}, []
    for pricing, (_, base) in zip(pricings, priced(runs, task, race, pricings), strict=True):
        base_runs = [r for r in mine if r["arm"] == base]
        for share in CUTOFFS:
            cutoff = share * horizon(base_runs, pricing.costs)
            header.append(f"{pricing.name}, {cutoff:.{pricing.digits}f} min: accuracy; Δ, p")
            base_acc = [accuracy_at(r, cutoff, pricing.costs, True) for r in base_runs]
            for arm, cells in rows.items():
                acc = [accuracy_at(r, cutoff, pricing.costs, arm in race.baselines) for r in mine if r["arm"] == arm]
                low, high = mean_ci(acc)
                cell = f"{statistics.fmean(acc):.3f} ({low:.3f}–{high:.3f})"
                if arm != base:
                    value, dlow, dhigh, p = difference(acc, base_acc)
                    tests += [(task, pricing.name, share, arm, value, dlow, dhigh, p)] * (arm not in race.baselines)
                    cell += f"; {value:+.3f}, p {p:.2f}"
                cells.append(cell)
        header.append(f"{pricing.name}: capped minutes ÷ baseline")
        for arm, cells in rows.items():
            if arm == base:
                cells.append("baseline")
                continue
            trl = (arm in race.baselines, True)
            value, low, high, p, cap = capped([r for r in mine if r["arm"] == arm], base_runs, pricing.costs, trl)
            at = f" at {cap:.{pricing.digits}f}" if cap else ""
            cells.append(f"{value:.2f}× ({low:.2f}–{high:.2f}), p {p:.2f}{at}")
    table = [f"| {' | '.join(header)} |", "|---" * len(header) + "|", *(f"| {' | '.join(c)} |" for c in rows.values())]
    return "\n".join(table), tests


def curves(runs: list[dict], costs: dict[str, float], trl: bool, grid: Sequence[float]) -> tuple[list, list, list]:
    """The runs' held-out accuracy at each of ``grid``'s minutes (`accuracy_at`): their mean, lowest and highest."""
    found = [[accuracy_at(r, x, costs, trl) for r in runs] for x in grid]
    return [statistics.fmean(a) for a in found], [min(a) for a in found], [max(a) for a in found]


def plot(runs: list[dict], races: dict[str, Race], pricings: list[Pricing], path: Path) -> None:
    """Held-out accuracy against minutes, a panel per task and pricing: each arm's mean over its seeds (`curves`; the
    baselines dashed) with the band of its lowest and highest seed; no timestamp or version: same data, same file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(races), len(pricings), figsize=(6 * len(pricings), 4.2 * len(races)), squeeze=False)
    for row, (task, race) in zip(axes, races.items(), strict=True):
        mine = [r for r in runs if r["task"] == task]
        for axis, pricing in zip(row, pricings, strict=True):
            arms = [a for a in race.arms if any(r["arm"] == a for r in mine)]
            ends = {
                a: [end_minutes(r, pricing.costs, a in race.baselines) for r in mine if r["arm"] == a] for a in arms
            }
            grid = np.linspace(0, max(map(statistics.median, ends.values())), 160).tolist()
            for i, arm in enumerate(arms):
                trl = arm in race.baselines
                mean, low, high = curves([r for r in mine if r["arm"] == arm], pricing.costs, trl, grid)
                axis.plot(grid, mean, color=f"C{i % 10}", linestyle="--" if trl else "-", label=arm, linewidth=1.4)
                axis.fill_between(grid, low, high, color=f"C{i % 10}", alpha=0.1, linewidth=0)
            target = race.plan["tasks"][task]
            if target is not None:
                axis.axhline(target, color="grey", linestyle=":", linewidth=0.8)
            axis.set(
                xlabel=f"{pricing.name} minutes", ylabel="held-out accuracy (greedy)", title=task, xlim=(0, grid[-1])
            )
        row[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


# ----------------------------------------------------------------------------------- what the race could see


def spread_of_runs(found: dict[str, list[float]], base: str) -> float:
    """One run's spread: the standard deviation of minutes to target within an arm (``found``: per arm, its runs'),
    pooled over the arms, over the baseline's mean."""
    squares = sum(sum((x - statistics.fmean(v)) ** 2 for x in v) for v in found.values())
    return (squares / sum(len(v) - 1 for v in found.values())) ** 0.5 / statistics.fmean(found[base])


def power_table(runs: list[dict], races: dict[str, Race], pricings: list[Pricing], sizes: Sequence[tuple]) -> str:
    """What the race could have detected, per task and pricing: one run's spread (`spread_of_runs`), the ratio a
    two-sided test at 0.05 finds with 80% power with ``sizes`` runs, and the runs a side 1.3× needs."""
    rows = []
    for task, race in races.items():
        for pricing, (found, base) in zip(pricings, priced(runs, task, race, pricings), strict=True):
            sd = spread_of_runs(found, base)
            seen = " | ".join(f"{1 + detectable(sd, *size):.2f}×" for size in sizes)
            rows.append(f"| {task} | {pricing.name} | {sd:.2f} | {seen} | {runs_for(0.3, sd)} |")
    header = " | ".join(f"detectable, {a} against {b} runs" for a, b in sizes)
    return (f"| task | pricing | one run's SD ÷ baseline's mean | {header} | runs a side for 1.3× |\n"
            + "|---" * (4 + len(sizes)) + "|\n" + "\n".join(rows)
            + "\n\nOne run's SD: of minutes to target within an arm, pooled over the task's arms. A difference is "
            "detectable where a two-sided test at 0.05 finds it with 80% power (normal approximation).")  # fmt: skip


def seen_words(runs: list[dict], races: dict[str, Race], pricing: Pricing, first: int, second: int) -> str:
    """Per task, the ratio that ``first`` runs against ``second`` could see in ``pricing`` (`power_table`), and the
    runs a side 1.3× needs, in words."""
    found = [(task, priced(runs, task, race, [pricing])[0]) for task, race in races.items()]
    sds = [(task, spread_of_runs(*f)) for task, f in found]
    seen = " and ".join(f"{1 + detectable(sd, first, second):.2f}× on {task.split(':')[-1]}" for task, sd in sds)
    return f"{seen}; 1.3× needs {' and '.join(str(runs_for(0.3, sd)) for _, sd in sds)} runs a side"


def accuracy_table(runs: list[dict], task: str, race: Race) -> str:
    """Per arm, its base and final held-out accuracy (means; one evaluation's binomial standard error beside) and, on
    a reasoning-gym task, the final accuracy with the scorer on the raw completion."""
    problems, rows = race.plan["held_out"], []
    raw = all("raw_accuracy" in r for r in runs)
    for arm in race.arms:
        mine = [r for r in runs if r["task"] == task and r["arm"] == arm]
        if mine:
            base, final = (statistics.fmean(r["curve"][i][1] for r in mine) for i in (0, -1))
            cells = [f"{base:.3f}", f"{final:.3f} ± {binomial_se(final, problems):.3f}"]
            cells += [f"{statistics.fmean(r['raw_accuracy'][-1] for r in mine):.3f}"] * raw
            rows.append(f"| {arm} | {len(mine)} | {' | '.join(cells)} |")
    header = "| arm | runs | base | final ± one evaluation's SE |" + " final, raw completion |" * raw
    return header + "\n|---|---|---|---|" + "---|" * raw + "\n" + "\n".join(rows)


def sections(runs: list[dict], races: dict[str, Race], pricings: list[Pricing], tests: dict, name: str,
             ends: str, prices: str, sizes: Sequence[tuple], extra=lambda task: "") -> tuple[str, list]:  # fmt: skip
    """The sections both races' pages share (the figure and equal compute, minutes to target with ``extra(task)``
    under each table, steps or cost per step, what the race could see), and the equal-compute differences."""
    equal, tables, paces, differences = [], [], [], []
    for task, race in races.items():
        table, found = equal_compute_table(runs, task, race, pricings)
        equal.append(f"**{task}**:\n\n{table}\n")
        differences += found
        target = race.plan["tasks"][task]
        tables.append(
            f"**{task}** (target {target}):\n\n{task_table(runs, task, race, pricings, tests)}\n\n{extra(task)}"
        )
        paces.append(f"**{task}**:\n\n{pace_text(runs, task, race, pricings)}\n")
    lowest = min(holm([d[-1] for d in differences]))
    return (
        f"""## Accuracy against minutes

![held-out accuracy against CPU and H200-priced minutes](data/{name}.png)

Each arm's mean held-out accuracy over its seeds (a line; `trl.GRPOTrainer` dashed) and the band from its lowest to its
highest seed, against minutes in each pricing; a run's accuracy is its last evaluation by then. {ends}

Equal compute: each arm's held-out accuracy at half and all of the baseline's mean minutes to its runs' last
evaluations (mean, 90% CI over seeds; its difference from the baseline's, with the permutation p), and its minutes to
target against the baseline's with every run of both capped at the shortest budget any of their misses ran ("at":
that horizon; with no miss, none). The lowest p of the {len(differences)} differences, Holm-adjusted, is {lowest:.2f}.

{chr(10).join(equal)}
## Minutes to target

{RESTRICTED.format(tests=len(tests))} {prices}

{chr(10).join(tables)}
## Steps or cost per step

An arm's minutes to target are its steps to target times the price of a step: both against the baseline's.

{chr(10).join(paces)}
## What the race could see

{power_table(runs, races, pricings, sizes)}""",
        differences,
    )


# ------------------------------------------------------------------------------------------------- costs, plan


def costs_table(timing_run: dict, prices: dict[str, dict], trl_arms: Iterable[str]) -> str:
    """Per arm of a timing run: its mean seconds a step as measured there, and each pricing of ``prices`` (name:
    costs) over the same steps divided by that."""
    trl, rows = set(trl_arms), []
    for arm in dict.fromkeys(r[0] for r in timing_run["records"]):
        mine = [r[2:] for r in timing_run["records"] if r[0] == arm]
        seconds = statistics.fmean(s[FIELD["step_time"]] for s in mine)
        ratios = [statistics.fmean(step_seconds(s, arm_costs(c, arm in trl)) for s in mine) / seconds
                  for c in prices.values()]  # fmt: skip
        rows.append(f"| {arm} | {seconds:.2f} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    header = " | ".join(f"{name} ÷ measured" for name in prices)
    return f"| arm | s / step, measured | {header} |\n" + "|---" * (2 + len(prices)) + "|\n" + "\n".join(rows)


def costs_words(costs: dict[str, float]) -> str:
    """A fit of costs in words."""
    scored = f" + {1000 * costs['scored']:.0f} ms a row scored at generation" if "scored" in costs else ""
    r2 = f" (R² {costs['r2']:.3f})" if "r2" in costs else ""
    return (f"{costs['call']:.3f} s a generation call + {1000 * costs['rollout']:.2f} ms a rollout{scored} + "
            f"{1000 * costs['row']:.2f} ms a trained row + {costs['update']:.3f} s{r2}")  # fmt: skip


def plan_text(plan: dict) -> str:
    """The plan as fixed, a line per entry (its targets per task in words)."""

    def words(value) -> str:
        return ", ".join(f"{task} to {target}" for task, target in value.items()) if isinstance(value, dict) else value

    return "\n".join(f"- **{key}**: {words(value)}" for key, value in plan.items())


def provenance(runs: list[dict]) -> str:
    """Markdown lines naming the machines and versions the runs were made with."""
    made = sorted({(r["device"], json.dumps(r["versions"])) for r in runs})
    return "\n".join(f"- Runs made on {device} with {', '.join(f'{k} {v}' for k, v in json.loads(v).items())}."
                     for device, v in made)  # fmt: skip


def reprice(plan, data: Path, costs_path: Path) -> None:
    """Print each task's table with the plan's second pricing (its H200 column) priced by ``costs_path``
    (`load_costs`): "re-price the race with these costs", writing nothing."""
    runs, races, pricings = plan.report_inputs(data)
    pricings[-1] = dataclasses.replace(pricings[-1], costs=load_costs(costs_path), circular=())
    tests = comparisons(runs, races, pricings)
    for task, race in races.items():
        print(f"**{task}** ({pricings[-1].name} with {costs_path}: {costs_words(pricings[-1].costs)})\n")
        print(task_table(runs, task, race, pricings, tests) + "\n")

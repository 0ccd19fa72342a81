"""The analysis of a race to a target: pure functions over saved runs, for any study that races arms to a held-out
accuracy under a plan fixed before its runs (`Race`; `time_to_target.py` is the first).

* A run: its evaluations (``curve``: step, accuracy, cumulative rollouts, rows and calls; step 0 the base model) and
  a record per optimizer step (`STEP_FIELDS`), saved with the plan's settings (`Race.settings`).
* The endpoint (`confirmed`): the first evaluation at or above the target whose next evaluation is also at or above
  it. A run that never confirms it, one that first reached the target at its last evaluation included, did not reach
  it (`reached`) and counts at the budget: its ``max_steps`` steps, priced as those steps' minutes. The mean of such
  values over seeds is the restricted mean time to target (`to_target`, `minutes`): every run counts, and a miss
  counts at least as fast as it could have been, so an arm that misses is never made to look slower than it is.
* Pricing (`Pricing`): a step's seconds from its generation calls, rollouts, trained rows and a constant
  (`step_seconds`), with costs measured on a machine or fitted on a timing run (`fit_costs`); where the engine has
  the policy score rows at generation, that cost too, by the arm's kind (`arm_costs`).
* The baseline (`baseline`): the lowest restricted mean among the candidate arms, every run counted.
* Against the fastest of several arms (`fastest`): the ratio's CI with the fastest chosen again in every resample
  (`harness.bootstrap_ratio_ci` with several denominators), and how often "within ``limit`` of the fastest" holds
  for an arm that ties it (`tie_passes`).
* Ratios (`ratio_text`): ratio of restricted means, bootstrap 90% CI over seeds and exact permutation p
  (`harness.bootstrap_ratio_ci`, `harness.permutation_p`), marked *within noise* (`within_noise`) where the CI holds 1
  or p is above `NOISE_P`.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Iterable, Sequence

import numpy as np
from harness import bootstrap_ratio_ci, permutation_p, resampled_mean

STEP_FIELDS = ("step", "step_time", "rollouts", "rows", "calls", "frac_zero_std", "reward", "completion_length")
"""Per optimizer step of a run: TRL's ``step_time`` (s), rollouts generated, rows trained, generation calls, the
fraction of trained groups whose rewards are all equal, the mean reward and completion length of the trained rows."""
FIELD = {name: i for i, name in enumerate(STEP_FIELDS)}
"""Index of each `STEP_FIELDS` name in a step record."""
TIMING_FIELD = {name: 2 + i for i, name in enumerate(STEP_FIELDS)}
"""Index of each `STEP_FIELDS` name in a timing run's record: ``[arm, round, *step record]``."""
NOISE_P = 0.05
"""A ratio is within noise where its 90% CI holds 1 or its permutation p is above this: with 5 seeds a side the
bootstrap CI is narrow beside the permutation test (which is exact), so both must speak."""


@dataclasses.dataclass(frozen=True)
class Race:
    """A race's plan as the runs, the analysis and the report read it: its data files ``docs/benchmarks/data/<name>*``,
    the ``plan`` fixed before its runs (``tasks``: target per task; ``max_steps``, ``eval_every``, ``held_out``,
    ``prompts_per_step``; ``seeds``: per task, runs per arm; the rest is text the page prints), what each arm trains
    (``arms``: trainer options), the arms the baseline is chosen from (``baselines``: `trl.GRPOTrainer` arms) and,
    per reasoning-gym task of the plan (``reasoning_gym:<name>``; an arithmetic task is a difficulty and has none),
    its dataset settings and completion length (``task_configs``: ``{"config": {...}, "max_completion_length": n}``).
    """

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


def accumulation(options: dict) -> int:
    """Micro-batches an optimizer step of an arm with trainer ``options`` accumulates: 4 rows per prompt each, so
    ``pods_m / 4`` (at least 1)."""
    return max(1, options["pods_m"] // 4)


def steps_per_generation(options: dict) -> int:
    """Optimizer steps an arm with trainer ``options`` trains on one generation: its ``steps_per_generation`` over its
    `accumulation`; 1 where it sets none."""
    return options.get("steps_per_generation", accumulation(options)) // accumulation(options)


@dataclasses.dataclass(frozen=True)
class Pricing:
    """A way to turn a run's steps into minutes: its ``name`` on the page, its ``costs`` (seconds per ``call``,
    ``rollout``, ``row`` and ``update``, and ``scored`` where fitted: `arm_costs`; None: not measured yet), the
    decimals its minutes print with, and the arms that plan with these same costs (``circular``: scoring them with
    the model they plan with is circular)."""

    name: str
    costs: dict[str, float] | None
    digits: int = 2
    circular: tuple[str, ...] = ()


def confirmed(accuracy: list[float], target: float) -> int | None:
    """Index of the endpoint in a run's evaluations: the first at or above ``target`` whose next is also at or above
    it (None: not reached)."""
    return next((i for i in range(len(accuracy) - 1) if accuracy[i] >= target <= accuracy[i + 1]), None)


def endpoint(run: dict) -> list[float] | None:
    """The run's curve point at its endpoint (`confirmed`): ``[step, accuracy, rollouts, rows, calls]``; None when
    it did not reach it."""
    index = confirmed([point[1] for point in run["curve"]], run["settings"]["target"])
    return None if index is None else run["curve"][index]


def reached(run: dict) -> bool:
    """Whether the run confirmed the endpoint."""
    return endpoint(run) is not None


def unconfirmed(run: dict) -> bool:
    """Whether the run first reached the target at its last evaluation, with none after it to confirm it (censored:
    it did not reach it by the plan's rule, and counts at the budget)."""
    accuracy = [point[1] for point in run["curve"]]
    return not reached(run) and accuracy[-1] >= run["settings"]["target"]


def stop_step(run: dict) -> int:
    """The step the run's time to target counts to: its endpoint, or its budget (``max_steps``) when not reached."""
    point = endpoint(run)
    return run["settings"]["max_steps"] if point is None else point[0]


def step_seconds(step: list[float], costs: dict[str, float]) -> float:
    """A step record priced with ``costs`` (seconds per generation call, rollout and trained row, and per step:
    ``call``, ``rollout``, ``row``, ``update``)."""
    return (step[FIELD["calls"]] * costs["call"] + step[FIELD["rollouts"]] * costs["rollout"]
            + step[FIELD["rows"]] * costs["row"] + costs["update"])  # fmt: skip


def priced_minutes(run: dict, step: int, costs: dict[str, float]) -> float:
    """The run's steps up to ``step``, each priced with ``costs`` (`step_seconds`)."""
    return sum(step_seconds(s, costs) for s in run["steps"] if s[FIELD["step"]] <= step) / 60


def arm_costs(costs: dict[str, float], trl: bool) -> dict[str, float]:
    """``costs`` for one arm's steps, their ``scored`` term (`fit_costs`: seconds a row whose log-probs the policy
    computes at generation) folded in: into a rollout's cost for a `trl.GRPOTrainer` arm (``trl``: it scores every
    rollout), into a trained row's for a trl_pods arm (it scores the rows it keeps, on every step); costs without
    that term as they are."""
    scored = costs.get("scored", 0.0)
    term = "rollout" if trl else "row"
    return {**costs, term: costs[term] + scored, "scored": 0.0}


def to_target(run: dict, costs: dict[str, float]) -> float:
    """The run's minutes to the endpoint priced with ``costs``, or to its budget where it did not reach it."""
    return priced_minutes(run, stop_step(run), costs)


def total(run: dict, name: str) -> float:
    """The run's `STEP_FIELDS` ``name`` summed over its steps up to `stop_step` (e.g. rollouts to target)."""
    return sum(s[FIELD[name]] for s in run["steps"] if s[FIELD["step"]] <= stop_step(run))


def minutes(runs: list[dict], costs: dict[str, float] | None, trl_arms: Iterable[str] = ()) -> dict[str, list[float]]:
    """Per arm: every run's minutes to target priced with ``costs`` (`to_target`; a miss at the budget; `arm_costs`,
    ``trl_arms`` the `trl.GRPOTrainer` arms), so that a mean over them is the restricted mean; none without costs."""
    found: dict[str, list[float]] = {}
    trl = set(trl_arms)
    for run in runs if costs is not None else ():
        found.setdefault(run["arm"], []).append(to_target(run, arm_costs(costs, run["arm"] in trl)))
    return found


def baseline(found: dict[str, list[float]], candidates: Iterable[str]) -> str | None:
    """The candidate arm with the lowest restricted mean (`minutes`: every run counted), None when none has runs."""
    with_runs = {arm: found[arm] for arm in candidates if found.get(arm)}
    return fastest(with_runs) if with_runs else None


def ratio(arm: Sequence[float], base: Sequence[float]) -> tuple[float, float, float, float]:
    """``(ratio of means, CI low, CI high, permutation p)`` of ``arm`` to ``base``."""
    low, high = bootstrap_ratio_ci(arm, base)
    return statistics.fmean(arm) / statistics.fmean(base), low, high, permutation_p(arm, base)


def within_noise(low: float, high: float, p: float) -> bool:
    """Whether a ratio's CI ``low``–``high`` holds 1 or its permutation ``p`` is above `NOISE_P`."""
    return low <= 1 <= high or p > NOISE_P


def ratio_words(value: float, low: float, high: float, p: float) -> str:
    """``value× (low–high), p``, with ``, within noise`` where it is so."""
    return f"{value:.2f}× ({low:.2f}–{high:.2f}), p {p:.2f}" + (", within noise" if within_noise(low, high, p) else "")


def ratio_text(arm: Sequence[float], base: Sequence[float]) -> str:
    """`ratio_words` of ``arm``'s mean to ``base``'s."""
    return ratio_words(*ratio(arm, base))


def fastest(found: dict[str, Sequence[float]]) -> str:
    """The arm of ``found`` (per arm, its runs' minutes) with the lowest mean."""
    return min(found, key=lambda arm: statistics.fmean(found[arm]))


def against_fastest(arm: Sequence[float], others: dict[str, Sequence[float]]) -> tuple[str, float, float, float]:
    """``(fastest of others, ratio of arm's mean to its, CI low, CI high)``: the 90% bootstrap interval chooses the
    fastest again in every resample (the fastest of several noisy arms reads faster than it is)."""
    best = fastest(others)
    low, high = bootstrap_ratio_ci(arm, *others.values())
    return best, statistics.fmean(arm) / statistics.fmean(others[best]), low, high


def tie_passes(
    others: dict[str, Sequence[float]],
    runs: int,
    limit: float,
    each: int | None = None,
    draws: int = 10_000,
    seed: int = 0,
) -> float:
    """How often an arm exactly as fast as the `fastest` of ``others`` (per arm, its runs' minutes) is found within
    ``limit`` times the fastest: the share of draws in which the mean of ``runs`` runs drawn from that arm's own is at
    most ``limit`` times the lowest mean of ``others``, each resampled with ``each`` runs (default: as many as it
    has). Near 1 the check passes a tie; near 0.5, passing or failing says little. Deterministic for ``seed``."""
    rng, tie = random.Random(seed), others[fastest(others)]
    passed = 0
    for _ in range(draws):
        top = resampled_mean(rng, tie, runs)
        passed += top <= limit * min(resampled_mean(rng, values, each) for values in others.values())
    return passed / draws


def fit_costs(timing_run: dict, trl_arms: Iterable[str] | None = None) -> dict[str, float]:
    """Least squares of a timing run's step times on (calls, rollouts, rows, 1): its machine's costs, with the fit's
    R². With ``trl_arms`` (an engine on which the policy scores rows at generation: TRL's vLLM importance-sampling
    correction), also on the rows scored, ``scored`` (`arm_costs`): every rollout of those `trl.GRPOTrainer` arms,
    the trained rows of the others."""
    field, records = TIMING_FIELD, timing_run["records"]
    names = ["call", "rollout", "row", "update"]
    rows = [[r[field["calls"]], r[field["rollouts"]], r[field["rows"]], 1.0] for r in records]
    if trl_arms is not None:
        trl, names = set(trl_arms), [*names, "scored"]
        scored = [r[field["rollouts"] if r[0] in trl else field["rows"]] for r in records]
        rows = [[*row, count] for row, count in zip(rows, scored, strict=True)]
    x = np.array(rows)  # [steps, len(names)]
    y = np.array([r[field["step_time"]] for r in records])  # [steps]
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual, spread = ((y - x @ coefficients) ** 2).sum(), ((y - y.mean()) ** 2).sum()
    return {**dict(zip(names, coefficients.tolist(), strict=True)),
            "r2": float(1 - residual / spread) if spread else 1.0}  # fmt: skip


def seconds_per_step(timing_run: dict) -> dict[str, float]:
    """Per arm: the median over rounds of the round's mean step time."""
    by_round: dict[str, dict[int, list[float]]] = {}
    for arm, round_, _step, step_time, *_ in timing_run["records"]:
        by_round.setdefault(arm, {}).setdefault(round_, []).append(step_time)
    return {arm: statistics.median(statistics.mean(t) for t in rounds.values()) for arm, rounds in by_round.items()}


def check_against_plan(runs: list[dict], planned: Iterable[tuple], race: Race) -> None:
    """Refuse runs the plan does not ask for (``planned``: its ``(task, arm, seed)`` keys), made with other settings
    (a mixed table would compare unlike runs), or saved twice (one run would count as two seeds)."""
    wanted, seen = set(planned), set()
    for run in runs:
        key = (run["task"], run["arm"], run["seed"])
        if key in seen:
            raise SystemExit(f"{key} is saved twice in the runs: keep one line of it.")
        seen.add(key)
        if key not in wanted or run["settings"] != race.settings(run["task"]):
            raise SystemExit(f"{key} with {run['settings']} is not a run of the plan (PLAN): it cannot be reported.")


def lacking(runs: list[dict], task: str, arms: Iterable[str], race: Race) -> list[str]:
    """``"arm (k of n runs)"`` for each of ``arms`` with fewer runs of ``task`` than the plan asks."""
    wanted = race.seeds(task)
    counts = {arm: sum(r["task"] == task and r["arm"] == arm for r in runs) for arm in arms}
    return [f"{arm} ({k} of {wanted[arm]} runs)" for arm, k in counts.items() if k < wanted[arm]]


def misses(runs: list[dict], task: str, arm: str) -> int:
    """How many of ``arm``'s runs of ``task`` did not reach the target."""
    return sum(r["task"] == task and r["arm"] == arm and not reached(r) for r in runs)

"""Auto generation: the prompts per call and the calls per step, at ``pods_n`` rollouts per prompt, that reach the most
signal per second on the run's own hardware.

With ``pods_generation="auto"`` (`AutoMode`) each generation is a refill (`trl_pods.refill`): groups whose rewards
all agree carry no signal, so the step trains on groups with contrast, drawing further prompts for them. What is
best to draw depends on the machine. Where every rollout costs (a CPU engine), the fewest prompts and a second call
when needed; where a generation call costs the same for 4 rollouts or 256 (HF ``generate`` on a GPU), one large call.
Auto decides, generation by generation, from two things it learns on the run:

* what a generation call, a rollout and the rest of a step cost (`trl_pods.costs`, timed on the generations the run
  makes anyway; or ``pods_auto_costs`` given), and
* how likely ``n`` rollouts of a prompt are to show contrast (`trl_pods.contrast.ContrastHistory`).

A plan (`trl_pods.refill.DrawPlan`) is ``n`` rollouts per prompt (``pods_n``; see below), the prompts of the first
call (from the batch's share up to ``pods_max_prompt_ratio`` times it) and the most calls (up to ``pods_max_draws``;
later calls sized to cover what is missing with probability ``pods_draw_coverage``).
`expected_outcomes` computes, for one process, the expected calls, prompts and trained groups with contrast of a
plan stopped after each of its calls: exactly at small sizes, and at any size in bounded work (log-space terms,
neighbouring states merged, a normal distribution for a call's outcomes once they spread over many counts), so that
planning takes a few milliseconds a generation up to 16,384 prompts a process and never
overflows (docs/benchmarks/planning.md); it is left out of the generation's timing. `best_plan` takes the plan with the
most progress per second of step. A step's signal is its expected trained groups with contrast, and its progress grows
in proportion to its signal (`STEP_RETURNS`). Among plans within 1% of the best, the fewest calls, then the fewest
prompts. It never plans worse than sized refill with the run's own settings
(`trl_pods.refill.RefillMode.sized` at ``pods_n`` rollouts per prompt, down-sampled to ``pods_m``: as many prompts as
cover the share with probability ``pods_draw_coverage``): only plans whose first call finds at least as many groups
with contrast as refill's, and that score at least refill's plan, are chosen from, so auto's plans differ from sized
refill's only where the costs say so. From 2026-11-30 to 2026-12-01 auto planned above sized refill at ``pods_m``
and valued a step as the square root of its signal: cheaper steps on the time-to-target race, but no faster to its
targets, and on the learning check from scratch it stalled where PODS ``pods_n`` -> ``pods_m`` did not
(docs/benchmarks/dynamic-sampling.md, `auto_floor_n`).

Auto holds its rollouts per prompt at ``pods_n``, its floor's. Until 2026-12-02 it chose them as well (``pods_m``
doubling up to ``pods_n``, each group weighed by what it teaches at its rollouts per prompt,
`trl_pods.contrast.kept_signal`): where a rollout is what costs it took 4 or 8 of 16, and on the learning check from
scratch those runs ended at 0.68 against 0.87 at ``pods_n`` (p 0.02), as often on the task's easy half as PODS
16 -> 4's (docs/benchmarks/dynamic-sampling.md, `floor_cost` and `auto_at_n`). Its model counts what a step trains on
and what it costs, not how a task is learned; ``pods_n`` is the user's. `best_plan` still searches a ladder of
rollouts per prompt, each weighed by a ``value``: the cost model's own choice, which the planning benchmark's sweep
and the race's replay read.

Until the costs can be told apart (`trl_pods.costs.fit_costs`: a time between generations, and two sizes of call among
the generations' first calls or among their later ones, a first call also loading the weights), auto plans as sized
refill does, and times what it draws (`AutoMode._exploring`): its first call's size once timed, only the next
generation differs, with the fewest more prompts in its first call that make a size the fit tells apart (at least as
many groups with contrast), or else fewer. The first generation a process times (the engine warming up) is left out, so
the fit comes after three generations (the warm-up and two sizes), sooner when refill's own calls already differ
enough. Given costs (``pods_auto_costs``) need no exploring. Each change of plan is logged in one line with its reason
(`AutoMode._announce`). With measured costs, choices follow the machine's timings, so two runs can differ; with
``pods_auto_costs`` every choice is a function of the rewards, reproducible and the same on every machine.

Several processes: each generation's timing is the most any process measured, and every process plans alike; the
expected calls are a single process's (processes that miss more draw in the same calls).

This module imports only torch.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from .contrast import TAIL, ContrastHistory, binomial_terms, prompts_to_cover
from .costs import SPREAD, CallTiming, Costs, fit_costs, parse_costs, spread
from .refill import DEFAULT_DRAW_COVERAGE, DrawPlan, RefillMode
from .reporting import describe_plan
from .waves import WaveState

__all__ = [
    "AutoMode",
    "Outcome",
    "best_plan",
    "expected_outcome",
    "expected_outcomes",
    "kept_calls",
    "planned_rollouts",
    "rollout_ladder",
]

EXACT_POINTS, RUNS = 40, 16  # `expected_outcomes` keeps up to 40 outcomes of a call (or states) apart, else 16 runs
NORMAL_VARIANCE = 400.0  # past this variance (20 groups' standard deviation) a call's outcomes are normal (`_found`)
TIES = 0.99  # plans within 1% of the best rate count as equally good
STEP_RETURNS = 1.0
"""A step's progress grows as its signal to this power (see the module docstring): 1, in proportion; 0.5, the square
root, would count the fourth group with contrast of a step worth less than the first."""
KEPT_CALLS, KEPT_GAPS = 50, 50  # timings kept: the most recent calls of each size class, and times between generations


@dataclass(frozen=True)
class Outcome:
    """Expected result of a `DrawPlan` on one process: generation calls, prompts generated for, trained groups with
    contrast."""

    calls: float
    prompts: float
    contrast: float


def _merged(points: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """``(missing, used, probability)`` points, in order, as they are when at most `EXACT_POINTS`; else `RUNS` runs
    of neighbours of about equal probability, each merged into its mean, split between the two whole counts of
    missing around it so that the mean stays exact (the prompts used rounded): at most ``2 * RUNS`` points."""
    if len(points) <= EXACT_POINTS:
        return points
    most = RUNS
    mass = list(itertools.accumulate(p for *_, p in points))
    missing = list(itertools.accumulate(m * p for m, _, p in points))
    used = list(itertools.accumulate(u * p for _, u, p in points))
    merged, before, total = [], -1, mass[-1]
    for j in range(1, most + 1):
        end = len(points) - 1 if j == most else min(bisect.bisect_left(mass, total * j / most), len(points) - 1)
        if end <= before:
            continue
        run = [series[end] - (series[before] if before >= 0 else 0.0) for series in (mass, missing, used)]
        before = end
        if run[0] <= 0.0:
            continue
        mean, used_mean = run[1] / run[0], round(run[2] / run[0])
        low = math.floor(mean)
        merged += [(low, used_mean, run[0] * (1 - mean + low)), (low + 1, used_mean, run[0] * (mean - low))]
    return [point for point in merged if point[2] > 0.0]


@functools.lru_cache(maxsize=65536)
def _found(trials: int, rate: float) -> tuple[tuple[int, float], ...]:
    """``(groups with contrast, probability)`` among ``trials``: the binomial's terms
    (`trl_pods.contrast.binomial_terms`), merged (`_merged`); where its variance passes `NORMAL_VARIANCE`, the
    normal distribution of its mean and variance in `RUNS` slices of equal
    probability, each at its mean (split between the two whole counts around it)."""
    variance = trials * rate * (1 - rate)
    if variance <= NORMAL_VARIANCE:
        start, terms = binomial_terms(trials, rate)
        points = [(found, 0, p) for found, p in enumerate(terms, start)]
    else:
        normal, mean, sd = statistics.NormalDist(), trials * rate, math.sqrt(variance)
        edges = [-math.inf, *(normal.inv_cdf(j / RUNS) for j in range(1, RUNS)), math.inf]
        density = [0.0 if math.isinf(z) else normal.pdf(z) for z in edges]
        slices = [min(max(mean + sd * (density[j] - density[j + 1]) * RUNS, 0.0), trials) for j in range(RUNS)]
        points = []
        for at in slices:
            low = math.floor(at)
            points += [(low, 0, (1 - at + low) / RUNS), (low + 1, 0, (at - low) / RUNS)]
        points = [point for point in points if point[2] > 0.0]
    return tuple((found, p) for found, _, p in _merged(points))


def expected_outcomes(rate: float, share: int, plan: DrawPlan, room: int) -> list[Outcome]:
    """The expected `Outcome` of ``plan`` stopped after each of its calls (entry ``k``: at most ``k + 1`` calls),
    for a process training ``share`` groups with room for ``room`` prompts, when each group of ``plan.n`` rollouts
    shows contrast with probability ``rate`` independently: the distribution of (groups still missing, prompts
    used) carried from call to call, in log-space binomial terms (no overflow at any size). Exact while a call has
    at most `EXACT_POINTS` outcomes and the distribution as many states (up to terms below
    `trl_pods.contrast.TAIL`); beyond, neighbouring ones are merged (`_merged`), which keeps the expected missing
    groups of each merge exact and bounds the work at any size.

    >>> expected_outcomes(0.5, 1, DrawPlan(n=4, first=1, calls=2, coverage=None), room=3)
    [Outcome(calls=1.0, prompts=1.0, contrast=0.5), Outcome(calls=1.5, prompts=1.5, contrast=0.75)]
    """
    first = min(plan.first, room)
    dist: dict[tuple[int, int], float] = {}
    for found, p in _found(first, rate):
        if found < share and p >= TAIL:
            dist[(share - found, first)] = dist.get((share - found, first), 0.0) + p
    calls, prompts, settled = 1.0, float(first), 0.0  # settled: expected missing groups of states done drawing
    outcomes = [Outcome(calls, prompts, share - sum(missing * p for (missing, _), p in dist.items()))]
    for _ in range(plan.calls - 1):
        after: dict[tuple[int, int], float] = {}
        for missing, used, p in _merged([(*key, p) for key, p in sorted(dist.items())]):
            if used >= room:
                settled += missing * p
                continue
            size = min(missing, room - used)
            if plan.coverage is not None:
                size = min(_cover(missing, rate, plan.coverage, room), room - used)
            calls, prompts = calls + p, prompts + p * size
            for found, q in _found(size, rate):
                if found < missing and p * q >= TAIL:
                    key = (missing - found, used + size)
                    after[key] = after.get(key, 0.0) + p * q
        dist = after
        outcomes.append(Outcome(calls, prompts, share - settled - sum(m * p for (m, _), p in dist.items())))
    return outcomes


def expected_outcome(rate: float, share: int, plan: DrawPlan, room: int) -> Outcome:
    """The expected `Outcome` of ``plan`` (`expected_outcomes`, all its calls).

    >>> expected_outcome(0.5, 1, DrawPlan(n=4, first=1, calls=2, coverage=None), room=3)
    Outcome(calls=1.5, prompts=1.5, contrast=0.75)
    """
    return expected_outcomes(rate, share, plan, room)[-1]


@functools.lru_cache(maxsize=65536)
def _cover(missing: int, rate: float, coverage: float, room: int) -> int:
    """`prompts_to_cover` within the whole ``room``: within less room ``r`` the answer is ``min(this, r)`` (the
    fewest prompts reaching the coverage, or all of them), so one value serves every state."""
    return prompts_to_cover(missing, rate, coverage, room)


def rollout_ladder(m: int, n_max: int) -> list[int]:
    """Rollouts per prompt auto considers: ``m`` doubling, and ``n_max``.

    >>> rollout_ladder(4, 24)
    [4, 8, 16, 24]
    """
    ladder = [m]
    while 2 * ladder[-1] < n_max:
        ladder.append(2 * ladder[-1])
    return ladder + ([n_max] if n_max > m else [])


def _first_calls(share: int, room: int) -> list[int]:
    """Prompts per process in the first call auto considers: every count from ``share`` to ``room``, or 25 spread
    geometrically when there are more."""
    if room - share <= 24:
        return list(range(share, room + 1))
    return sorted({round(share * (room / share) ** (i / 24)) for i in range(25)})


def best_plan(
    rate: Callable[[int], float],
    costs: Costs,
    share: int,
    ladder: list[int],
    room: int,
    max_calls: int,
    coverage: float | None,
    floor: DrawPlan | None = None,
    value: Callable[[int], float] | None = None,
    returns: float = STEP_RETURNS,
) -> tuple[DrawPlan, Outcome, float]:
    """The plan with the most progress per second (ties: see the module docstring), its expected `Outcome` and
    predicted seconds per step. ``rate(n)`` is the contrast rate of ``n`` rollouts; the signal of a plan is its
    expected trained groups with contrast times ``value(n)``, what such a group teaches at ``n`` rollouts
    (`trl_pods.contrast.kept_signal`; 1 without ``value``: the count of groups with contrast), and its progress the
    signal to the power ``returns`` (`STEP_RETURNS`).

    With a ``floor`` plan (sized refill's), only plans whose first call finds at least as many groups with contrast as
    the floor's first call, and that score at least the floor's, are chosen from; the floor is one of them."""
    scored, least_first, least = [], -math.inf, 0.0
    worth = (lambda n: 1.0) if value is None else value
    firsts = _first_calls(share, room)
    if floor is not None:
        outcomes = expected_outcomes(rate(floor.n), share, floor, room)
        least_first = outcomes[0].contrast - 1e-9
        seconds = costs.seconds(outcomes[-1].calls, floor.n * outcomes[-1].prompts)
        least = (outcomes[-1].contrast * worth(floor.n)) ** returns / seconds
        firsts = sorted({*firsts, min(floor.first, room)})
    for n in ladder:
        p, signal = rate(n), worth(n)
        for first in firsts:
            if expected_outcomes(p, share, DrawPlan(n, first, 1, coverage), room)[0].contrast < least_first:
                continue  # the first call alone decides it (and costs far less than the whole plan)
            outcomes = expected_outcomes(p, share, DrawPlan(n, first, max_calls, coverage), room)
            for calls, outcome in enumerate(outcomes, 1):
                seconds = costs.seconds(outcome.calls, n * outcome.prompts)
                plan = DrawPlan(n, first, calls, coverage)
                scored.append(((outcome.contrast * signal) ** returns / seconds, plan, outcome, seconds))
    best = max(rate for rate, *_ in scored)
    _, plan, outcome, seconds = max(
        (entry for entry in scored if entry[0] >= max(TIES * best, least * (1 - 1e-12))),
        key=lambda e: (e[1].n, -round(e[2].calls, 6), -round(e[2].prompts, 6)),
    )
    return plan, outcome, seconds


def planned_rollouts(m: int, n: int) -> list[int]:
    """The rollouts per prompt auto plans among with ``pods_m`` ``m`` and ``pods_n`` ``n``: ``n`` alone, its floor's
    (the module docstring); until 2026-12-02, `rollout_ladder` (``m`` doubling up to ``n``)."""
    return [n]


def kept_calls(calls: list[CallTiming]) -> list[CallTiming]:
    """The timings auto fits its costs to: the most recent `KEPT_CALLS` of each size class (rollouts per process
    within a factor of two) among first calls and among later calls, in order. A steady plan, which times one size
    generation after generation, then does not push the other sizes out of the fit (they would leave the costs
    impossible to tell apart)."""
    seen: dict[tuple[bool, int], int] = {}
    kept = []
    for call in reversed(calls):
        size = (call.first, max(call.rollouts, 1).bit_length())
        seen[size] = seen.get(size, 0) + 1
        if seen[size] <= KEPT_CALLS:
            kept.append(call)
    return kept[::-1]


class AutoMode(RefillMode):
    """``pods_generation="auto"``: refill whose `DrawPlan` is chosen each generation for the most signal per second
    (see the module docstring)."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.m, self.n_max = config.pods_m, config.pods_n
        self.groups_laid_out = config.pods_max_prompt_ratio
        coverage = config.pods_draw_coverage
        self.later_coverage = DEFAULT_DRAW_COVERAGE if coverage is None else coverage or None  # 0: exactly the missing
        self.history = ContrastHistory()
        self.given = None if config.pods_auto_costs is None else parse_costs(config.pods_auto_costs)
        self.timed = self.given is None
        self.calls: list[CallTiming] = []  # measured calls (kept across generations)
        self.gaps: list[float] = []  # measured seconds between generations
        self.skip_timing = True  # the first timing a process sees: the engine warming up
        self.lines: list[str] = []
        self.announced: DrawPlan | None = None
        self.exploring = True  # whether this generation's plan is one to tell the costs apart (`_exploring`)

    def costs(self) -> Costs | None:
        return self.given or fit_costs(self.calls, self.gaps)

    def plan(self, state: WaveState) -> DrawPlan:
        self._record(state)
        costs, room = self.costs(), state.groups_per_process
        floor = None if self.coverage is None else self.sized(state, self.n_max)  # sized refill's plan
        self.exploring = costs is None
        if costs is None:
            exploring = self._exploring(state, floor)
            smallest, largest = self.m * state.share, self.n_max * room  # rollouts of its first calls, at most
            if spread([smallest, largest]):
                self._announce(exploring, f"measuring what generating costs ({len(self.calls)} calls timed so far)")
            else:
                self._announce(
                    exploring,
                    f"its first calls can differ by at most {largest / smallest:.2f}x in "
                    f"rollouts (pods_n / pods_m x pods_max_prompt_ratio), too little to tell a call's cost from a "
                    f"rollout's ({SPREAD}x): it plans as sized refill until later calls of two sizes are timed; "
                    "pods_auto_costs gives it costs to plan with",
                )
            return exploring
        ladder = planned_rollouts(self.m, self.n_max)
        plan, outcome, seconds = best_plan(
            self.history.rate, costs, state.share, ladder, room, self.max_draws, self.later_coverage, floor
        )
        rates = ", ".join(f"{self.history.rate(n):.2f} at {n}" for n in rollout_ladder(self.m, self.n_max))
        self._announce(
            plan,
            f"expected {outcome.calls:.2f} calls, {outcome.contrast:.2f} of {state.share} groups with contrast, "
            f"{seconds:.3g} s a step ({outcome.contrast / seconds:.3g} groups with contrast a second per process); "
            f"costs: {costs} ({'given' if self.given else 'measured'}); contrast rate {rates} rollouts",
        )
        return plan

    def _exploring(self, state: WaveState, floor: DrawPlan | None) -> DrawPlan:
        """A plan while the costs cannot be fitted: sized refill's plan (``floor``; without it refill's at ``pods_n``)
        until a first call was timed; then the first of these whose first call, with those timed, gives the fit two
        sizes (`trl_pods.costs.spread`): that plan; the same with the fewest more prompts in its first call that do (at
        least as many groups with contrast); with the most fewer prompts that do (at least the share); at ``pods_m``
        rollouts per prompt. Where none does, the one of all the room or of the share only that is farther from those
        timed, so that the other one does next. Every process times the same calls, so every process explores alike."""
        base = floor or DrawPlan(self.n_max, state.share, self.max_draws, self.later_coverage)
        timed = [call.rollouts for call in self.calls if call.first]
        if not timed:
            return base
        room, share = state.groups_per_process, state.share
        more = max(base.first, math.ceil(SPREAD * min(timed) / base.n))
        fewer = min(base.first, math.floor(max(timed) / (SPREAD * base.n)))
        for plan in (
            base,
            replace(base, first=min(more, room)),
            replace(base, first=max(fewer, share)),
            replace(base, n=self.m),
        ):
            if spread([*timed, plan.n * plan.first]):
                return plan
        return replace(base, first=room if room * share * base.n**2 >= min(timed) * max(timed) else share)

    def _record(self, state: WaveState) -> None:
        timing = state.timing
        if timing is None:
            return
        if self.skip_timing:
            self.skip_timing = False
            return
        for i, (rollouts, seconds) in enumerate(timing.calls):
            self.calls.append(CallTiming(rollouts, seconds, i == 0))
        if timing.between is not None:
            self.gaps.append(timing.between)
        self.calls, self.gaps = kept_calls(self.calls), self.gaps[-KEPT_GAPS:]

    def _announce(self, plan: DrawPlan, reason: str) -> None:
        """One line when the plan changes what it is: its rollouts per prompt or its calls, or its first call's
        prompts by more than a quarter of the last line's (the contrast rate moves them by one or two nearly every
        step of a run)."""
        last = self.announced
        if (
            last is None
            or (plan.n, plan.calls) != (last.n, last.calls)
            or abs(plan.first - last.first) > last.first / 4
        ):
            self.announced = plan
            self.lines.append(
                f"pods_generation='auto': {describe_plan(plan.n, self.m, plan.calls)} ({plan.n} rollouts per prompt, "
                f"{plan.first} prompt{'s' if plan.first != 1 else ''} per process in the first call, at most "
                f"{plan.calls} call{'s' if plan.calls > 1 else ''}): {reason}"
            )

    def metrics(self, state: WaveState) -> dict[str, float]:
        return {
            **super().metrics(state),
            "rollouts_per_prompt": float(self.current.n),
            "first_call_prompts": float(self.current.first),
            "exploring": float(self.exploring),
        }

    def notes(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "calls": torch.tensor([[c.rollouts, c.seconds, c.first] for c in self.calls], dtype=torch.float64),
            "gaps": torch.tensor(self.gaps, dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.calls = [CallTiming(int(r), float(s), bool(f)) for r, s, f in state["calls"].tolist()]
        self.gaps = state["gaps"].tolist()

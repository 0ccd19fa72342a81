"""Auto generation: the rollouts per prompt, the prompts per call and the calls per step that reach the most signal
per second on the run's own hardware.

With ``pods_generation="auto"`` (`AutoMode`) each generation is a refill (`trl_pods.refill`): groups whose rewards
all agree carry no signal, so the step trains on groups with contrast, drawing further prompts for them. What is
best to draw depends on the machine. Where every rollout costs (a CPU engine), few rollouts per prompt and a second
call when needed; where a generation call costs the same for 4 rollouts or 256 (HF ``generate`` on a GPU), one large
call with many rollouts per prompt, down-sampled by PODS's max-variance rule. Auto decides, generation by
generation, from two things it learns on the run:

* what a generation call, a rollout and the rest of a step cost (`trl_pods.costs`, timed on the generations the run
  makes anyway; or ``pods_auto_costs`` given), and
* how likely ``n`` rollouts of a prompt are to show contrast (`trl_pods.contrast.ContrastHistory`).

A plan (`trl_pods.refill.DrawPlan`) is ``n`` rollouts per prompt (``pods_m``, doubling up to ``pods_n``), the prompts
of the first call (from the batch's share up to ``pods_max_prompt_ratio`` times it) and the most calls (up to
``pods_max_draws``; later calls sized to cover what is missing with probability ``pods_draw_coverage``).
`expected_outcome` computes exactly, for one process, the expected calls, prompts and trained groups with contrast
of a plan; `best_plan` takes the plan with the most trained groups with contrast per second of step, and among plans
within 1% of it, the most rollouts per prompt (more for max-variance down-sampling to choose from), then the fewest
calls, then the fewest prompts.

Until the costs can be told apart, auto measures them with plans it would also train well with: the run's first two
generations are plain refill at ``n = pods_m`` (calls of different sizes), the third one call of ``pods_n`` rollouts
per prompt. The first generation a process times (the engine warming up) is left out. Each change of plan is logged in
one line with its reason (`AutoMode._announce`). With measured costs, choices follow the machine's timings, so two runs
can differ; with ``pods_auto_costs`` every choice is a function of the rewards, reproducible and the same on every
machine.

Several processes: each generation's timing is the most any process measured, and every process plans alike; the
expected calls are a single process's (processes that miss more draw in the same calls).

This module imports only torch.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from .contrast import ContrastHistory, prompts_to_cover
from .costs import CallTiming, Costs, fit_costs, parse_costs
from .refill import DrawPlan, RefillMode
from .waves import WaveState

__all__ = ["AutoMode", "Outcome", "best_plan", "expected_outcome", "kept_calls", "rollout_ladder"]

DEFAULT_COVERAGE = 0.9  # later draws: cover what is missing with this probability, unless pods_draw_coverage is set
TIES = 0.99  # plans within 1% of the best rate count as equally good
KEPT_CALLS, KEPT_GAPS = 50, 50  # timings kept: the most recent calls of each size class, and times between generations


@dataclass(frozen=True)
class Outcome:
    """Expected result of a `DrawPlan` on one process: generation calls, prompts generated for, trained groups with
    contrast."""

    calls: float
    prompts: float
    contrast: float


def _binomial(trials: int, p: float) -> list[float]:
    """``P(Binomial(trials, p) = x)`` for ``x = 0..trials``."""
    return [math.comb(trials, x) * p**x * (1 - p) ** (trials - x) for x in range(trials + 1)]


def expected_outcome(rate: float, share: int, plan: DrawPlan, room: int) -> Outcome:
    """The exact expected `Outcome` of ``plan`` for a process training ``share`` groups with room for ``room``
    prompts, when each group of ``plan.n`` rollouts shows contrast with probability ``rate`` independently: the
    distribution of (groups still missing, prompts used) carried from call to call.

    >>> expected_outcome(0.5, 1, DrawPlan(n=4, first=1, calls=2, coverage=None), room=3)
    Outcome(calls=1.5, prompts=1.5, contrast=0.75)
    """
    first = min(plan.first, room)
    dist: dict[tuple[int, int], float] = {}
    for found, p in enumerate(_binomial(first, rate)):
        key = (max(share - found, 0), first)
        dist[key] = dist.get(key, 0.0) + p
    calls, prompts = 1.0, float(first)
    for _ in range(plan.calls - 1):
        after: dict[tuple[int, int], float] = {}
        for (missing, used), p in dist.items():
            if missing == 0 or used >= room:
                after[(missing, used)] = after.get((missing, used), 0.0) + p
                continue
            size = min(missing, room - used)
            if plan.coverage is not None:
                size = _cover(missing, rate, plan.coverage, room - used)
            calls, prompts = calls + p, prompts + p * size
            for found, q in enumerate(_binomial(size, rate)):
                key = (max(missing - found, 0), used + size)
                after[key] = after.get(key, 0.0) + p * q
        dist = after
    return Outcome(calls, prompts, share - sum(missing * p for (missing, _), p in dist.items()))


@functools.lru_cache(maxsize=4096)
def _cover(missing: int, rate: float, coverage: float, limit: int) -> int:
    return prompts_to_cover(missing, rate, coverage, limit)


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
    rate, costs: Costs, share: int, ladder: list[int], room: int, max_calls: int, coverage: float
) -> tuple[DrawPlan, Outcome, float]:
    """The plan with the most trained groups with contrast per second (ties: see the module docstring), its expected
    `Outcome` and predicted seconds per step. ``rate(n)`` is the contrast rate of ``n`` rollouts."""
    scored = []
    for n in ladder:
        p = rate(n)
        for first in _first_calls(share, room):
            for calls in range(1, max_calls + 1):
                plan = DrawPlan(n, first, calls, coverage)
                outcome = expected_outcome(p, share, plan, room)
                seconds = costs.seconds(outcome.calls, n * outcome.prompts)
                scored.append((outcome.contrast / seconds, plan, outcome, seconds))
    best = max(rate for rate, *_ in scored)
    _, plan, outcome, seconds = max(
        (entry for entry in scored if entry[0] >= TIES * best),
        key=lambda e: (e[1].n, -round(e[2].calls, 6), -round(e[2].prompts, 6)),
    )
    return plan, outcome, seconds


def kept_calls(calls: list[CallTiming]) -> list[CallTiming]:
    """The timings auto fits its costs to: the most recent `KEPT_CALLS` of each size class (rollouts per process
    within a factor of two), in order. A steady plan, which times one size generation after generation, then does
    not push the other sizes out of the fit (they would leave the costs impossible to tell apart)."""
    seen: dict[int, int] = {}
    kept = []
    for call in reversed(calls):
        size = max(call.rollouts, 1).bit_length()
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
        self.later_coverage = config.pods_draw_coverage or DEFAULT_COVERAGE
        self.history = ContrastHistory()
        self.given = None if config.pods_auto_costs is None else parse_costs(config.pods_auto_costs)
        self.timed = self.given is None
        self.calls: list[CallTiming] = []  # measured calls (kept across generations)
        self.gaps: list[float] = []  # measured seconds between generations
        self.generations = 0
        self.skip_timing = True  # the first timing a process sees: the engine warming up
        self.lines: list[str] = []
        self.announced: DrawPlan | None = None

    def costs(self) -> Costs | None:
        return self.given or fit_costs(self.calls, self.gaps)

    def plan(self, state: WaveState) -> DrawPlan:
        self._record(state)
        self.generations += 1
        costs, room = self.costs(), state.groups_per_process
        if costs is None:
            exploring = self._exploring(state.share, room, self.generations)
            self._announce(exploring, f"measuring what generating costs ({len(self.calls)} calls timed so far)")
            return exploring
        ladder = rollout_ladder(self.m, self.n_max)
        plan, outcome, seconds = best_plan(
            self.history.rate, costs, state.share, ladder, room, self.max_draws, self.later_coverage
        )
        rates = ", ".join(f"{self.history.rate(n):.2f} at {n}" for n in ladder)
        self._announce(
            plan,
            f"expected {outcome.calls:.2f} calls, {outcome.contrast:.2f} of {state.share} groups with contrast, "
            f"{seconds:.3g} s a step ({outcome.contrast / seconds:.3g} groups with contrast a second per process); "
            f"costs: {costs} ({'given' if self.given else 'measured'}); contrast rate {rates} rollouts",
        )
        return plan

    def _exploring(self, share: int, room: int, generation: int) -> DrawPlan:
        """The plans that measure the costs: refill at ``pods_m`` twice, then one call of ``pods_n`` per prompt (or
        of the most prompts, when ``pods_n == pods_m``), in turn."""
        if generation % 3 != 0:
            return DrawPlan(self.m, share, self.max_draws, None)
        return DrawPlan(self.n_max, share if self.n_max > self.m else room, 1, None)

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
                f"pods_generation='auto': {plan.n} rollouts per prompt, {plan.first} prompts per process in the first "
                f"call, at most {plan.calls} call{'s' if plan.calls > 1 else ''}: {reason}"
            )

    def metrics(self, state: WaveState) -> dict[str, float]:
        return {
            **super().metrics(state),
            "rollouts_per_prompt": float(self.current.n),
            "first_call_prompts": float(self.current.first),
            "exploring": float(self.costs() is None),
        }

    def notes(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "calls": torch.tensor([[c.rollouts, c.seconds, c.first] for c in self.calls], dtype=torch.float64),
            "gaps": torch.tensor(self.gaps, dtype=torch.float64),
            "generations": self.generations,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.calls = [CallTiming(int(r), float(s), bool(f)) for r, s, f in state["calls"].tolist()]
        self.gaps, self.generations = state["gaps"].tolist(), int(state["generations"])

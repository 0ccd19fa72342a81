"""The exact plan search as it was before issue 57 (``math.comb`` terms, every call count and every draw size
searched one by one): a brute-force reference for tests of the fast planner (`trl_pods.auto`, `trl_pods.contrast`).
Slow (seconds at 32 prompts a process) and it overflows past about 1,030 prompts: for small grids only."""

from __future__ import annotations

import functools
import math

from trl_pods.auto import TIES, Outcome
from trl_pods.costs import Costs
from trl_pods.refill import DrawPlan


def binomial(trials: int, p: float) -> list[float]:
    """``P(Binomial(trials, p) = x)`` for ``x = 0..trials``."""
    return [math.comb(trials, x) * p**x * (1 - p) ** (trials - x) for x in range(trials + 1)]


def at_least(k: int, trials: int, p: float) -> float:
    """``P(Binomial(trials, p) >= k)``."""
    return sum(math.comb(trials, i) * p**i * (1 - p) ** (trials - i) for i in range(k, trials + 1))


@functools.lru_cache(maxsize=65536)
def prompts_to_cover(missing: int, rate: float, coverage: float, limit: int) -> int:
    """The fewest prompts (at most ``limit``) that cover ``missing`` with probability ``coverage``: a linear scan."""
    if missing <= 0 or limit <= 0:
        return 0
    for prompts in range(min(missing, limit), limit + 1):
        if at_least(missing, prompts, rate) >= coverage:
            return prompts
    return limit


def expected_outcome(rate: float, share: int, plan: DrawPlan, room: int) -> Outcome:
    """The exact expected `Outcome` of ``plan``, state by state."""
    first = min(plan.first, room)
    dist: dict[tuple[int, int], float] = {}
    for found, p in enumerate(binomial(first, rate)):
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
                size = prompts_to_cover(missing, rate, plan.coverage, room - used)
            calls, prompts = calls + p, prompts + p * size
            for found, q in enumerate(binomial(size, rate)):
                key = (max(missing - found, 0), used + size)
                after[key] = after.get(key, 0.0) + p * q
        dist = after
    return Outcome(calls, prompts, share - sum(missing * p for (missing, _), p in dist.items()))


def first_calls(share: int, room: int) -> list[int]:
    """Every first-call size from ``share`` to ``room``, or 25 spread geometrically."""
    if room - share <= 24:
        return list(range(share, room + 1))
    return sorted({round(share * (room / share) ** (i / 24)) for i in range(25)})


def best_plan(
    rate, costs: Costs, share: int, ladder: list[int], room: int, max_calls: int, coverage: float
) -> tuple[DrawPlan, Outcome, float]:
    """The plan with the most trained groups with contrast per second (ties: the most rollouts per prompt, then the
    fewest calls, then the fewest prompts), searched plan by plan."""
    scored = []
    for n in ladder:
        p = rate(n)
        for first in first_calls(share, room):
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


__all__ = ["at_least", "best_plan", "binomial", "expected_outcome", "first_calls", "prompts_to_cover"]

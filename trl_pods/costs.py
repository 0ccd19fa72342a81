"""What a generation costs on the run's own hardware: a generation call, a rollout, and the rest of a step.

`trl_pods.auto` chooses how to generate from these costs. They differ by an order of magnitude between machines: on a
CPU engine every rollout costs (tens of milliseconds) and a call little; with HF ``generate`` on a GPU a call costs
about a second whether it decodes 4 rollouts or 256, and a rollout almost nothing. Measured on the run itself, from
the generations it makes anyway (no extra work):

* each generation call: its wall time, with the rollouts each process generated in it, and whether it was the
  generation's first (which also loads the new weights into the engine);
* between generations: the wall time from one generation's last call to the next generation's first (the update,
  TRL's log-probabilities and logging: what a step costs besides generating).

`fit_costs` fits ``call seconds = call + rollout x rollouts per process + load x first`` by non-negative least squares,
and the rest of a step as the median time between generations (robust to an evaluation or a checkpoint now and then)
plus the weight load. The fit is pure Python, so that the same timings give the same costs to the bit (a resumed run
plans as the uninterrupted one).

This module imports nothing outside the standard library.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

__all__ = ["SPREAD", "CallTiming", "Costs", "fit_costs", "parse_costs", "spread"]

DEPENDENT = 1e-12  # a unit column whose part outside the others' span has at most this squared norm depends on them
SPREAD = 1.5  # call sizes (rollouts per process) tell a call's cost from a rollout's when they differ by this factor


@dataclass(frozen=True)
class Costs:
    """Seconds per generation call, per rollout (each process generating its own in parallel) and for the rest of a
    step (the update and everything else a step does besides generating)."""

    call: float
    rollout: float
    step: float

    def seconds(self, calls: float, rollouts_per_process: float) -> float:
        """A step's predicted time with ``calls`` generation calls of ``rollouts_per_process`` rollouts in all."""
        return self.call * calls + self.rollout * rollouts_per_process + self.step

    def __str__(self) -> str:
        per_rollout = 1000 * self.rollout
        return f"{self.call:.3g} s a call, {per_rollout:.3g} ms a rollout, {self.step:.3g} s the rest of a step"


@dataclass(frozen=True)
class CallTiming:
    """One generation call: rollouts per process (padding included), wall seconds, and whether it was the first of
    its generation."""

    rollouts: int
    seconds: float
    first: bool


def parse_costs(text: str) -> Costs:
    """``"call=1.03,rollout=0.00012,step=0.32"`` (seconds) -> `Costs`; a clear error for anything else."""
    values = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            values[name.strip()] = float(value)
        except ValueError:
            values[name.strip()] = None
    names = ("call", "rollout", "step")
    if set(values) != set(names) or any(v is None or not v >= 0 for v in values.values()) or not any(values.values()):
        raise ValueError(
            f"pods_auto_costs must give seconds for each of {', '.join(names)}, e.g. 'call=1.03,rollout=0.00012,"
            f"step=0.32' (a generation call, a rollout, the rest of a step), all >= 0 and not all 0 (a step must "
            f"take time); got {text!r}."
        )
    return Costs(**values)


def _solve(gram: list[list[float]], moments: list[float]) -> list[float] | None:
    """``w`` with ``gram w = moments`` by Cholesky (``gram`` symmetric, unit diagonal), None where a column depends on
    the others (a pivot below `DEPENDENT`)."""
    size = len(moments)
    lower = [[0.0] * size for _ in range(size)]
    for j in range(size):
        pivot = gram[j][j] - math.fsum(lower[j][k] ** 2 for k in range(j))
        if pivot <= DEPENDENT:
            return None
        lower[j][j] = math.sqrt(pivot)
        for i in range(j + 1, size):
            lower[i][j] = (gram[i][j] - math.fsum(lower[i][k] * lower[j][k] for k in range(j))) / lower[j][j]
    z = [0.0] * size
    for i in range(size):
        z[i] = (moments[i] - math.fsum(lower[i][k] * z[k] for k in range(i))) / lower[i][i]
    w = [0.0] * size
    for i in reversed(range(size)):
        w[i] = (z[i] - math.fsum(lower[k][i] * w[k] for k in range(i + 1, size))) / lower[i][i]
    return w


def _non_negative_least_squares(x: list[list[float]], y: list[float]) -> list[float]:
    """``argmin |x w - y|`` over ``w >= 0``, by trying every set of free coefficients (``x`` has a few columns).

    One pass over the rows gives the columns' inner products (exactly rounded sums of Python floats: the same bits
    from the same numbers on every run, where LAPACK's answer through MKL changes in its last bits with the memory's
    alignment, and a resumed run must plan as the uninterrupted one); each set's least squares and its error then
    come from those alone, the columns scaled to unit norm."""
    columns = [list(c) for c in zip(*x, strict=True)]
    norms = [math.sqrt(math.fsum(a * a for a in c)) or 1.0 for c in columns]
    scaled = [[a / n for a in c] for c, n in zip(columns, norms, strict=True)]
    gram = [[math.fsum(a * b for a, b in zip(ci, cj, strict=True)) for cj in scaled] for ci in scaled]
    moments = [math.fsum(a * b for a, b in zip(c, y, strict=True)) for c in scaled]
    total = math.fsum(v * v for v in y)
    width = len(columns)
    best, best_error = [0.0] * width, total
    for size in range(1, width + 1):
        for free in itertools.combinations(range(width), size):
            solution = _solve([[gram[i][j] for j in free] for i in free], [moments[i] for i in free])
            if solution is None or any(v < 0 for v in solution):
                continue
            error = total - math.fsum(v * moments[i] for i, v in zip(free, solution, strict=True))  # |y|^2 - w.x'y
            if error < best_error - 1e-12 * max(total, 1.0):  # the error is |y|^2 less a near equal sum: its
                # rounding scales with |y|^2, so a set must fit better by more than that to count as better
                best, best_error = [0.0] * width, error
                for i, v in zip(free, solution, strict=True):
                    best[i] = v / norms[i]
    return best


def spread(sizes: list[int]) -> bool:
    """Whether call sizes (rollouts per process) differ by at least `SPREAD`.

    >>> spread([8, 12]), spread([8, 11])
    (True, False)
    """
    return bool(sizes) and max(sizes) >= SPREAD * max(min(sizes), 1)


def fit_costs(calls: list[CallTiming], between: list[float]) -> Costs | None:
    """`Costs` from measured calls and times between generations (see the module docstring), or None while they
    cannot be told apart: no time between generations, or no two sizes of call (`spread`) among the generations'
    first calls nor among their later ones. A first call also loads the weights, so a first and a later call of
    different sizes alone cannot tell a weight load from rollouts.

    Without any call that is not a generation's first, the weight load cannot be told from a call's own cost, and
    counts as the call's (each measured generation then made one call)."""
    firsts, laters = [c.rollouts for c in calls if c.first], [c.rollouts for c in calls if not c.first]
    if not between or not firsts or not (spread(firsts) or spread(laters)):
        return None
    later = bool(laters)
    x = [[1.0, float(c.rollouts), *([float(c.first)] if later else [])] for c in calls]  # [calls][2 or 3]
    call, rollout, *load = _non_negative_least_squares(x, [c.seconds for c in calls])
    return Costs(call=call, rollout=rollout, step=statistics.median(between) + (load[0] if load else 0.0))

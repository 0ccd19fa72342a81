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


def _least_squares(x: list[list[float]], y: list[float]) -> list[float] | None:
    """``argmin |x w - y|``, by modified Gram-Schmidt on the columns of ``x`` in Python floats with exactly rounded
    sums: the same bits from the same numbers on every run (LAPACK's answer through MKL changes in its last bits with
    the memory's alignment, and a resumed run must plan as the uninterrupted one); None where a column depends on the
    others."""
    columns, r, basis = [list(c) for c in zip(*x, strict=True)], {}, []
    for j, column in enumerate(columns):
        v = column
        for i, q in enumerate(basis):
            r[i, j] = math.fsum(a * b for a, b in zip(q, v, strict=True))
            v = [a - r[i, j] * b for a, b in zip(v, q, strict=True)]
        norm = math.sqrt(math.fsum(a * a for a in v))
        if norm <= 1e-9 * math.sqrt(math.fsum(a * a for a in column)):
            return None
        r[j, j] = norm
        basis.append([a / norm for a in v])
    projections, rest = [], y
    for q in basis:
        projections.append(math.fsum(a * b for a, b in zip(q, rest, strict=True)))
        rest = [a - projections[-1] * b for a, b in zip(rest, q, strict=True)]
    w = [0.0] * len(basis)
    for i in reversed(range(len(basis))):
        w[i] = (projections[i] - math.fsum(r[i, j] * w[j] for j in range(i + 1, len(basis)))) / r[i, i]
    return w


def _non_negative_least_squares(x: list[list[float]], y: list[float]) -> list[float]:
    """``argmin |x w - y|`` over ``w >= 0``, by trying every set of free coefficients (``x`` has a few columns)."""
    width = len(x[0])
    best, best_error = [0.0] * width, math.fsum(v * v for v in y)
    for size in range(1, width + 1):
        for free in itertools.combinations(range(width), size):
            solution = _least_squares([[row[i] for i in free] for row in x], y)
            if solution is None or any(v < 0 for v in solution):
                continue
            weights = [0.0] * width
            for i, v in zip(free, solution, strict=True):
                weights[i] = v
            fitted = [math.fsum(a * w for a, w in zip(row, weights, strict=True)) for row in x]
            error = math.fsum((f - v) ** 2 for f, v in zip(fitted, y, strict=True))
            if error < best_error - 1e-12:
                best, best_error = weights, error
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

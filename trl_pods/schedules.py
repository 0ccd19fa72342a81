"""Dynamic down-sampling schedules (D3S): kept fractions that start aggressive and relax over training."""

from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def scheduled_value(start: float, end: float, progress: float, shape: str) -> float:
    """The value at ``progress`` (0 at the first step, 1 at the last) of a ramp from ``start`` to ``end``.

    ``"constant"`` is ``end`` throughout; ``"linear"`` interpolates; ``"cosine"`` follows a half cosine, slow at both
    ends. Progress outside [0, 1] is clamped.
    """
    progress = min(max(progress, 0.0), 1.0)
    if shape == "constant":
        return end
    if shape == "linear":
        return start + (end - start) * progress
    if shape == "cosine":
        return start + (end - start) * (1 - math.cos(math.pi * progress)) / 2
    raise ValueError(f"Unknown schedule {shape!r}; use one of {SCHEDULES}.")


def kept_per_prompt(target: float, m_max: int, prompts_per_process: int, steps_per_generation: int) -> int:
    """The number of rollouts to keep per prompt when the schedule asks for ``target``.

    Every process holds ``prompts_per_process`` whole groups per generation and splits its kept rows into
    ``steps_per_generation`` equal micro-batches, so the kept count M must make ``prompts_per_process * M`` a
    multiple of ``steps_per_generation``. The result is the largest such M in ``[2, target]`` (at least the smallest
    valid one, at most ``m_max``, which is always valid). All processes compute the same M from the same step, so
    per-process batches stay equal.
    """
    valid = [m for m in range(2, m_max + 1) if (prompts_per_process * m) % steps_per_generation == 0]
    below = [m for m in valid if m <= target]
    return below[-1] if below else valid[0]

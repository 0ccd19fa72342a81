"""A run that cannot learn, said while it runs and when it ends: no trained group had contrast.

GRPO (and PODS, whose advantages are TRL's over the kept rollouts) learns only from groups whose rewards differ; a
group whose every rollout scores alike has advantage 0 everywhere and a loss of 0. On a task the model never (or
always) solves, every group is such a group, and the run ended like a healthy one (``reasoning_gym:count_bits``:
reward 0 on every rollout, loss 0 on every step). TRL already logs what tells it: ``frac_reward_zero_std``, the
fraction of the trained groups whose rewards are all equal (the kept groups, in a PODS run). A warning comes after
`FLAT_STEPS` steps in a row at 1.0 (`NoSignalWarning`), and a run whose every logged step was at 1.0 ends with one
line (`no_signal_line`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformers import TrainerCallback

__all__ = ["FLAT", "FLAT_STEPS", "NoSignalWarning", "no_signal_line"]

logger = logging.getLogger(__name__)

FLAT = "frac_reward_zero_std"
"""TRL's metric: the fraction of the trained groups whose rewards are all equal (no contrast, no gradient)."""

FLAT_STEPS = 10
"""Steps in a row without any trained group with contrast after which a run warns (once)."""

WHAT_TO_CHECK = (
    "a task the model never (or always) solves gives no signal: check the task's settings (--task_config, "
    "--arithmetic_difficulty) and the base model's accuracy on it (docs/benchmarks/reasoning-gym-base.md)"
)


def _flat(entry: dict) -> bool:
    return entry[FLAT] >= 1.0


def no_signal_line(log_history: Sequence[dict]) -> str | None:
    """The line a run ends with when no step it logged trained a group with contrast (None: some did, or no step
    logged the metric)."""
    logged = [entry for entry in log_history if FLAT in entry]
    if not logged or not all(map(_flat, logged)):
        return None
    return f"no trained group had contrast (each prompt's rollouts scored alike): nothing was learned; {WHAT_TO_CHECK}"


class NoSignalWarning(TrainerCallback):
    """Warns once, on the main process, after `FLAT_STEPS` steps in a row whose trained groups all lacked contrast."""

    def __init__(self):
        self.flat_since: int | None = None  # the first step of the current run of steps without contrast
        self.last_logged, self.warned = 0, False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or FLAT not in logs:
            return
        step, first = state.global_step, self.last_logged + 1
        self.last_logged = step
        if not _flat(logs):
            self.flat_since = None
            return
        self.flat_since = first if self.flat_since is None else self.flat_since
        if not self.warned and step - self.flat_since + 1 >= FLAT_STEPS and state.is_world_process_zero:
            self.warned = True
            logger.warning(
                "Steps %d-%d trained no group with contrast (%s = 1): nothing is being learned; %s.",
                self.flat_since, step, FLAT, WHAT_TO_CHECK,
            )  # fmt: skip

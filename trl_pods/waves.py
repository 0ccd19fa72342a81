"""What a generation mode is: a policy deciding, wave by wave, which prompts get how many more rollouts.

Phase 1 of `PODSGRPOTrainer` runs one loop for every mode (`trl_pods.phase1.generate_and_score`): it asks the mode
for its first `Wave`, generates and scores it, shows the mode the rewards so far (`WaveState`), and asks for the
next wave until the mode answers None. The loop does not know which mode it runs; a mode knows nothing of TRL,
processes or engines:

* `first_wave(state)`: the wave every generation starts with;
* `next_wave(state)`: given the rewards so far, the next wave, or None when done;
* `chosen(state)`: the groups to train on (None: all; refill and screened train on some of them);
* `finished(state)`: the generation is over (refill and auto learn the contrast rate from it);
* `metrics(state)`: what it reports (`pods/<name>`), the same on every process;
* `notes()`: lines to log once, on the main process (auto's choice when it changes);
* `fork()`: a copy for one more generation at the same time, which the asynchronous worker runs over windows of its
  stream of prompts (`trl_pods.streaming`).

Groups are the prompts of a generation, over all processes, in *slot layout*: process ``r`` owns groups
``r * groups_per_process .. (r + 1) * groups_per_process - 1``, the first of them holding the data loader's prompts;
the others (refill) receive prompts a wave draws. Slot ``s`` of group ``g`` is its ``s``-th rollout; a wave fills
each group's next slots. Everything a mode sees is gathered, so every process decides alike.

A mode that plans from what generating costs (`GenerationMode.timed`) also sees how long the previous generation's
calls took (`GenerationTiming`, the same on every process).

Built-in modes (registered in `trl_pods.generation_modes`): `FixedMode` here, `trl_pods.adaptive.AdaptiveMode`,
`trl_pods.budget.BudgetedMode`, `trl_pods.refill.RefillMode`, `trl_pods.screening.ScreenedMode`,
`trl_pods.auto.AutoMode`.

This module imports only torch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["FixedMode", "GenerationMode", "GenerationTiming", "Wave", "WaveState"]


@dataclass(frozen=True)
class GenerationTiming:
    """How long the previous generation took, the most any process measured (so every process sees the same).

    Attributes:
        calls: Per generation call, ``(rollouts per process, seconds)``, padding included, in order.
        between: Seconds from the end of the generation before it to its start: the update and everything else a
            step does besides generating (None for a run's first generation).
    """

    calls: tuple[tuple[int, float], ...]
    between: float | None


@dataclass
class WaveState:
    """What a mode sees between waves, the same on every process.

    Attributes:
        n: Slots per group (`pods_n`): the most rollouts a prompt may get.
        processes: Number of processes.
        groups_per_process: Groups laid out per process (the data loader's prompts, and room for draws).
        share: Groups each process trains on.
        rewards: ``[G, N]`` TRL's reward of each filled slot (weighted sum of the reward functions; NaN: unfilled
            or unscorable).
        counts: ``[G]`` slots filled per group.
        drawn: ``[G]`` bool, the groups that hold a prompt (the loader's, or drawn since).
        seed: Seed of the generation's random decisions (the same on every process).
        group_keys: ``() -> [G]`` digests of the groups' prompts (`budget.prompt_key`), gathered; computed on demand.
        calls: Generation calls made so far.
        generated: Rollouts generated so far over all processes, padding included.
        padding: Of those, rollouts generated only to keep the processes in step.
        timing: The previous generation's `GenerationTiming`, for a mode that is `GenerationMode.timed` (None for the
            run's first generation, and for other modes).
    """

    n: int
    processes: int
    groups_per_process: int
    share: int
    rewards: torch.Tensor
    counts: torch.Tensor
    drawn: torch.Tensor
    seed: int = 0
    group_keys: Callable[[], list[int]] | None = None
    calls: int = 0
    generated: int = 0
    padding: int = 0
    timing: GenerationTiming | None = None

    def blocks(self) -> list[slice]:
        """Each process's groups."""
        per = self.groups_per_process
        return [slice(r * per, (r + 1) * per) for r in range(self.processes)]


@dataclass(frozen=True)
class Wave:
    """One generation call: ``sizes[i]`` more rollouts for group ``groups[i]`` (``[A]``, global indices, ascending),
    requested ``request`` per prompt (vLLM server mode sends each prompt once with ``n = request``; 1: every rollout
    is its own request). With ``draw`` the loop first reads ``draw[r]`` further prompts for process ``r`` into its
    next empty groups (fewer when the data runs out), and the wave also gives each of them ``request`` rollouts, in
    the same call."""

    groups: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    sizes: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    request: int = 1
    draw: list[int] | None = None

    @classmethod
    def uniform(cls, groups: torch.Tensor, size: int) -> Wave:
        """``size`` more rollouts for each of ``groups``, requested together."""
        return cls(groups, torch.full_like(groups, size), size)


class GenerationMode:
    """A generation mode (see the module docstring). Subclasses set what the data loader reads and how many groups
    the layout holds, and decide the waves; the defaults describe one wave that trains on every group.

    Attributes:
        prompts_read: Prompts the data loader reads per trained prompt (screened reads its pool).
        groups_laid_out: Groups laid out per trained prompt (refill: room for its draws; screened: its pool).
        dependent_waves: Whether later waves depend on earlier ones' rewards, so that the loop makes them share one
            weight load (vLLM sleep mode, ZeRO-3).
        draws: Whether waves draw further prompts (`Wave.draw`); the trainer then reads the data in an order it can
            draw from (`trl_pods.prompt_order.DrawingSampler`).
        timed: Whether the mode plans from the previous generation's timing (`WaveState.timing`).
    """

    prompts_read: int = 1
    groups_laid_out: int = 1
    dependent_waves: bool = True
    draws: bool = False
    timed: bool = False

    def first_wave(self, state: WaveState) -> Wave:
        raise NotImplementedError

    def next_wave(self, state: WaveState) -> Wave | None:
        return None

    def chosen(self, state: WaveState) -> torch.Tensor | None:
        """``[G]`` bool, the groups to train on (exactly ``share`` per process), or None for all."""
        return None

    def finished(self, state: WaveState) -> None:
        """The generation is over: ``state`` holds all its rewards."""

    def metrics(self, state: WaveState) -> dict[str, float]:
        return {"generation_calls": float(state.calls), "rollouts_padding": float(state.padding)}

    def notes(self) -> list[str]:
        """Lines to log once, on the main process (each call returns the lines since the last)."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the mode across generations (e.g. budgeted generation's prompt history)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`."""

    def fork(self) -> GenerationMode:
        """A mode for one more generation at the same time as this one's (the asynchronous worker runs one per
        window of prompts in flight, `trl_pods.streaming`): its own state for the generation, sharing what the mode
        keeps across generations (`state_dict`). The default, a shallow copy, suits a mode that assigns its
        per-generation state rather than changing shared objects in place."""
        return copy.copy(self)


class FixedMode(GenerationMode):
    """``pods_generation="fixed"``: every prompt gets ``N`` rollouts in one call."""

    dependent_waves = False

    def __init__(self, config: Any = None):
        pass

    def first_wave(self, state: WaveState) -> Wave:
        return Wave.uniform(torch.arange(state.rewards.size(0)), state.n)

    def metrics(self, state: WaveState) -> dict[str, float]:
        return {"generation_calls": float(state.calls)}

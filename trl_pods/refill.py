"""Refill (DAPO's dynamic sampling): replace the groups whose rollouts all agree by further prompts, drawn on demand.

With ``pods_generation="refill"`` (`RefillMode`) a generation gives ``N`` rollouts to each of the ``B`` prompts of
the data loader's batch (each process its own share, ``B / processes``). A group whose rewards all agree has zero
advantage and carries no signal, so each process draws further prompts for the groups with contrast it lacks,
``N`` rollouts each, until every process holds its share or ``max_draws`` draws (generation calls) are made; the
remainder is filled with the first groups without contrast (`refill_choice`). Selection is local: no row ever moves
between processes. The further prompts are read from the epoch's order only when drawn
(`trl_pods.prompt_order.DrawingSampler`), so an epoch generates for every prompt once; a prompt drawn and not
trained on is consumed for the epoch, as in DAPO.

How many prompts a call generates for (`DrawPlan`):

* by default (``pods_draw_coverage`` `DEFAULT_DRAW_COVERAGE`, 0.9) the draws are sized from the contrast rate the run
  has observed (`trl_pods.contrast.ContrastHistory`): the first call already generates for enough prompts that their
  groups with contrast cover the batch with that probability, and a later call for enough to cover what is still
  missing (verl's over-provisioned generation batch, with PODS's down-sampling inside each group). Calls are traded
  for rollouts; ``pods_max_draws=1`` makes it one call a step. At most ``pods_max_prompt_ratio`` prompts per trained
  prompt are generated for in one generation (the room laid out);
* with ``pods_draw_coverage=0``, exactly the groups still missing (the limit of the sizing as the coverage goes to
  0): the loader's batch first, then one prompt per missing group. Each call waits for the previous one, so a step
  makes about ``1 / contrast rate`` calls.

This module imports only torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .adaptive import has_contrast
from .contrast import ContrastHistory, prompts_to_cover
from .waves import GenerationMode, Wave, WaveState

__all__ = [
    "DEFAULT_DRAW_COVERAGE",
    "DrawPlan",
    "RefillMode",
    "missing_groups",
    "refill_choice",
    "sized_draws",
    "sized_plan",
]

DEFAULT_DRAW_COVERAGE = 0.9
"""`pods_draw_coverage` of refill and auto when it is not set: draws sized to cover what a step lacks with this
probability (0: exactly the missing groups)."""


def sized_draws(generation: str, coverage: float | None) -> bool:
    """Whether ``pods_generation`` sizes its draws from the contrast rate (and may lay out room for
    ``pods_max_prompt_ratio`` times the batch): auto, and refill with a ``pods_draw_coverage`` above 0."""
    return generation == "auto" or (generation == "refill" and bool(coverage))


def refill_choice(rewards: torch.Tensor, drawn: torch.Tensor, chosen: int) -> tuple[torch.Tensor, int]:
    """Refill's choice among one process's drawn groups: those with contrast first, in draw order, then the first
    groups without contrast to fill the remainder.

    Args:
        rewards: ``[G, N]`` rewards of the process's groups (NaN where nothing was generated).
        drawn: ``[G]`` bool, the groups drawn (generated).
        chosen: groups to train on.

    Returns:
        The ``[chosen]`` group indices, sorted, and how many of them lack contrast (filled).
    """
    contrast = has_contrast(rewards) & drawn  # [G]
    picked = torch.cat([contrast.nonzero().squeeze(1), (drawn & ~contrast).nonzero().squeeze(1)])[:chosen].sort()
    return picked.values, int((~contrast[picked.values]).sum())


def missing_groups(rewards: torch.Tensor, drawn: torch.Tensor, chosen: int) -> int:
    """Groups with contrast one process still lacks for its ``chosen``."""
    return max(chosen - int((has_contrast(rewards) & drawn).sum()), 0)


@dataclass(frozen=True)
class DrawPlan:
    """How one generation draws.

    Attributes:
        n: Rollouts per prompt.
        first: Prompts per process in the first call, the loader's included (at least its share).
        calls: The most generation calls.
        coverage: Later draws cover the missing groups with contrast with this probability at the observed rate
            (None: one prompt per missing group).
    """

    n: int
    first: int
    calls: int
    coverage: float | None


def sized_plan(n: int, rate: float, share: int, room: int, calls: int, coverage: float) -> DrawPlan:
    """Sized refill's plan at ``n`` rollouts per prompt whose groups have contrast at ``rate``: a first call of as
    many prompts as cover the ``share`` with probability ``coverage`` within ``room`` (at least the share), at most
    ``calls`` calls.

    >>> sized_plan(4, 0.5, 4, 16, 3, 0.9)
    DrawPlan(n=4, first=12, calls=3, coverage=0.9)
    """
    return DrawPlan(n, max(prompts_to_cover(share, rate, coverage, room), share), calls, coverage)


class RefillMode(GenerationMode):
    """``pods_generation="refill"``: the loader's prompts, then draws of further prompts for the missing groups with
    contrast, at most ``pods_max_draws`` generation calls, each sized by `DrawPlan` (see the module docstring). The
    layout holds room for ``pods_max_prompt_ratio`` times the loader's groups per process with sized draws, or
    ``pods_max_draws`` times drawing exactly the missing groups (``pods_draw_coverage`` 0, or unset here: the
    config resolves unset to `DEFAULT_DRAW_COVERAGE`)."""

    draws = True

    def __init__(self, config: Any):
        self.max_draws = config.pods_max_draws
        self.coverage = config.pods_draw_coverage or None  # None: exactly the missing groups
        sized = self.coverage is not None
        self.groups_laid_out = config.pods_max_prompt_ratio if sized else self.max_draws
        self.history = ContrastHistory() if sized else None  # the contrast rate observed, kept across generations
        self.current: DrawPlan | None = None  # this generation's plan
        self.waves = 0  # generation calls made in this generation

    def plan(self, state: WaveState) -> DrawPlan:
        """This generation's `DrawPlan`: ``N`` rollouts per prompt; the first call the loader's share, or as many
        prompts as cover it at the observed contrast rate."""
        if self.history is None:
            return DrawPlan(state.n, state.share, self.max_draws, None)
        return self.sized(state, state.n)

    def sized(self, state: WaveState, n: int) -> DrawPlan:
        """Sized refill's plan at ``n`` rollouts per prompt: a first call of as many prompts as cover the share with
        probability ``pods_draw_coverage`` at the observed contrast rate of ``n`` rollouts (at least the share)."""
        rate = self.history.rate(n)
        return sized_plan(n, rate, state.share, state.groups_per_process, self.max_draws, self.coverage)

    def first_wave(self, state: WaveState) -> Wave:
        self.current, self.waves = self.plan(state), 1
        loaded = state.drawn.nonzero().squeeze(1)
        extra = [max(self.current.first - int(state.drawn[block].sum()), 0) for block in state.blocks()]
        return Wave(loaded, torch.full_like(loaded, self.current.n), self.current.n, extra if any(extra) else None)

    def next_wave(self, state: WaveState) -> Wave | None:
        plan, draws = self.current, []
        for block in state.blocks():
            room = int((~state.drawn[block]).sum())
            missing = missing_groups(state.rewards[block], state.drawn[block], state.share)
            if plan.coverage is None:
                draws.append(min(missing, room))
            else:
                draws.append(prompts_to_cover(missing, self.history.rate(plan.n), plan.coverage, room))
        if self.waves == plan.calls or not any(draws):
            return None
        self.waves += 1
        return Wave(request=plan.n, draw=draws)

    def finished(self, state: WaveState) -> None:
        if self.history is not None:
            self.history.observe(state.rewards[state.drawn])

    def chosen(self, state: WaveState) -> torch.Tensor:
        return self._choice(state)[0]

    def metrics(self, state: WaveState) -> dict[str, float]:
        chosen, filled = self._choice(state)
        sized = {} if self.history is None else {"contrast_rate": self.history.rate(self.current.n)}
        return {
            **super().metrics(state),
            "draws": float(state.calls),
            "groups_filled_without_contrast": float(filled),
            "prompts_drawn": float(state.drawn.sum()),
            "prompts_trained": float(chosen.sum()),
            **sized,
        }

    def state_dict(self) -> dict[str, Any]:
        return {} if self.history is None else {"contrast": self.history.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.history is not None and "contrast" in state:
            self.history.load_state_dict(state["contrast"])

    def _choice(self, state: WaveState) -> tuple[torch.Tensor, int]:
        """``[G]`` bool, each process's `refill_choice`, and how many chosen groups lack contrast."""
        chosen, filled = torch.zeros_like(state.drawn), 0
        for block in state.blocks():
            picked, lacking = refill_choice(state.rewards[block], state.drawn[block], state.share)
            chosen[block.start + picked], filled = True, filled + lacking
        return chosen, filled

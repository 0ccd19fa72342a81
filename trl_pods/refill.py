"""Refill (DAPO's dynamic sampling): replace the groups whose rollouts all agree by further prompts, drawn on demand.

With ``pods_generation="refill"`` (`RefillMode`) a generation gives ``N`` rollouts to each of the ``B`` prompts of
the data loader's batch (each process its own share, ``B / processes``). A group whose rewards all agree has zero
advantage and carries no signal, so each process draws as many further prompts as it lacks groups with contrast,
``N`` rollouts each, until every process holds its share or ``max_draws`` draws (generation calls) are made; the
remainder is filled with the first groups without contrast (`refill_choice`). Selection is local: no row ever moves
between processes. The further prompts are read from the epoch's order only when drawn
(`trl_pods.prompt_order.DrawingSampler`), so an epoch generates for every prompt once; a prompt drawn and not
trained on is consumed for the epoch, as in DAPO.

This module imports only torch.
"""

from __future__ import annotations

from typing import Any

import torch

from .adaptive import has_contrast
from .waves import GenerationMode, Wave, WaveState

__all__ = ["RefillMode", "missing_groups", "refill_choice"]


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


class RefillMode(GenerationMode):
    """``pods_generation="refill"``: the loader's prompts, then draws of further prompts for the missing groups with
    contrast, at most ``pods_max_draws`` generation calls (see the module docstring). The layout holds room for
    ``pods_max_draws`` times the loader's groups per process."""

    draws = True

    def __init__(self, config: Any):
        self.max_draws = self.groups_laid_out = config.pods_max_draws
        self.waves = 0  # draws (generation calls) made in this generation

    def first_wave(self, state: WaveState) -> Wave:
        self.waves = 1
        return Wave.uniform(state.drawn.nonzero().squeeze(1), state.n)

    def next_wave(self, state: WaveState) -> Wave | None:
        missing = [
            min(
                missing_groups(state.rewards[block], state.drawn[block], state.share), int((~state.drawn[block]).sum())
            )
            for block in state.blocks()
        ]
        if self.waves == self.max_draws or not any(missing):
            return None
        self.waves += 1
        return Wave(request=state.n, draw=missing)

    def chosen(self, state: WaveState) -> torch.Tensor:
        return self._choice(state)[0]

    def metrics(self, state: WaveState) -> dict[str, float]:
        chosen, filled = self._choice(state)
        return {
            **super().metrics(state),
            "draws": float(state.calls),
            "groups_filled_without_contrast": float(filled),
            "prompts_drawn": float(state.drawn.sum()),
            "prompts_trained": float(chosen.sum()),
        }

    def _choice(self, state: WaveState) -> tuple[torch.Tensor, int]:
        """``[G]`` bool, each process's `refill_choice`, and how many chosen groups lack contrast."""
        chosen, filled = torch.zeros_like(state.drawn), 0
        for block in state.blocks():
            picked, lacking = refill_choice(state.rewards[block], state.drawn[block], state.share)
            chosen[block.start + picked], filled = True, filled + lacking
        return chosen, filled

"""Adaptive over-generation: extra rollouts only for the prompts whose rollouts do not disagree yet.

With ``pods_generation="adaptive"`` (`AdaptiveMode`), phase 1 of `PODSGRPOTrainer` generates in waves instead of N
at once:

1. every prompt gets ``n_initial`` rollouts, and each is scored once;
2. a prompt whose scored rewards are all equal has no contrast (its advantages would all be zero) and gets more in
   the next wave, its count doubling each wave (``n_initial, 2 n_initial, 4 n_initial, ...``, the last wave capped
   at ``n_max``), until its rewards differ or it holds ``n_max``;
3. the down-sampler picks M per prompt from what each prompt got.

Doubling is a geometric search for the rare different outcome: a prompt that succeeds with probability p shows
contrast after about 1/p rollouts, which doubling overshoots by at most 2x, in ``1 + log2(n_max / n_initial)``
sequential waves at most; no prompt ever gets more than ``n_max``.

Rollouts live in *slots* (`trl_pods.waves`): slot ``s`` of group ``g`` is the group's ``s``-th rollout, and slots
``count..n_max - 1`` are unfilled. The result is a ``[G, n_max]`` reward matrix, NaN where a slot is unfilled (as for
an unscorable rollout), so the down-samplers work unchanged; since every group holds at least ``n_initial >= M``
slots and the rules keep scored rollouts first, then unscorable ones by index, an unfilled slot is never kept.

Every decision is a function of the gathered reward matrix, so all processes take the same ones.

This module imports only torch.
"""

from __future__ import annotations

from typing import Any

import torch

from .waves import GenerationMode, Wave, WaveState

__all__ = ["AdaptiveMode", "count_schedule", "generated_slots", "has_contrast", "wave_metrics"]


def count_schedule(n_initial: int, n_max: int) -> list[int]:
    """Rollouts a group holds after each wave while it shows no contrast: ``n_initial`` doubling, capped at ``n_max``.

    >>> count_schedule(4, 16)
    [4, 8, 16]
    """
    if not 1 <= n_initial <= n_max:
        raise ValueError(f"Need 1 <= n_initial <= n_max; got n_initial={n_initial}, n_max={n_max}.")
    counts = [n_initial]
    while counts[-1] < n_max:
        counts.append(min(2 * counts[-1], n_max))
    return counts


def has_contrast(rewards: torch.Tensor) -> torch.Tensor:
    """``[G, N] -> [G]`` bool: the group holds at least two different scored rewards (NaN is ignored)."""
    high = torch.nan_to_num(rewards, nan=-torch.inf).amax(dim=1)
    low = torch.nan_to_num(rewards, nan=torch.inf).amin(dim=1)
    return high > low


def generated_slots(counts: torch.Tensor, n_max: int) -> torch.Tensor:
    """``[G] -> [G, n_max]`` bool: the slots that hold a rollout."""
    return torch.arange(n_max, device=counts.device) < counts.unsqueeze(1)


def wave_metrics(rewards: torch.Tensor, counts: torch.Tensor, n_initial: int) -> dict[str, float]:
    """The effect of the waves, the same on every process (their cost, calls and rollouts generated, is recorded
    while generating).

    Args:
        rewards: ``[G, n_max]`` slot-order rewards (NaN: unscorable or unfilled).
        counts: ``[G]`` rollouts generated per group.
        n_initial: rollouts per group in the first wave.

    Returns:
        ``frac_groups_topped_up`` (groups that got more than ``n_initial``) and ``frac_topped_up_with_contrast`` (of
        those, the fraction whose rewards finally differ; NaN when none was topped up).
    """
    topped_up = counts.cpu() > n_initial
    contrast = has_contrast(rewards.cpu())[topped_up]
    return {
        "frac_groups_topped_up": topped_up.float().mean().item(),
        "frac_topped_up_with_contrast": contrast.float().mean().item() if contrast.numel() else float("nan"),
    }


class AdaptiveMode(GenerationMode):
    """``pods_generation="adaptive"``: ``pods_n_initial`` rollouts per prompt, then waves doubling the count of the
    prompts without contrast, at most ``pods_n`` (see the module docstring)."""

    def __init__(self, config: Any):
        self.n_initial = config.pods_n_initial
        self.schedule: list[int] = []
        self.wave = 0

    def first_wave(self, state: WaveState) -> Wave:
        self.schedule, self.wave = count_schedule(self.n_initial, state.n), 0
        return Wave.uniform(torch.arange(state.rewards.size(0)), self.schedule[0])

    def next_wave(self, state: WaveState) -> Wave | None:
        self.wave += 1
        if self.wave == len(self.schedule):
            return None
        before, after = self.schedule[self.wave - 1], self.schedule[self.wave]
        waiting = ((state.counts == before) & ~has_contrast(state.rewards)).nonzero().squeeze(1)  # [A]
        return Wave.uniform(waiting, after - before) if waiting.numel() else None

    def metrics(self, state: WaveState) -> dict[str, float]:
        return {
            "waves": float(state.calls),
            "rollouts_padding": float(state.padding),
            **wave_metrics(state.rewards, state.counts, self.n_initial),
        }

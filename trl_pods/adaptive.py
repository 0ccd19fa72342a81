"""Adaptive over-generation: extra rollouts only for the prompts whose rollouts do not disagree yet.

With ``pods_generation="adaptive"``, phase 1 of `PODSGRPOTrainer` generates in waves instead of N at once:

1. every prompt gets ``n_initial`` rollouts, and each is scored once;
2. a prompt whose scored rewards are all equal has no contrast (its advantages would all be zero) and gets more in
   the next wave, its count doubling each wave (``n_initial, 2 n_initial, 4 n_initial, ...``, the last wave capped
   at ``n_max``), until its rewards differ or it holds ``n_max``;
3. the down-sampler picks M per prompt from what each prompt got.

Doubling is a geometric search for the rare different outcome: a prompt that succeeds with probability p shows
contrast after about 1/p rollouts, which doubling overshoots by at most 2x, in ``1 + log2(n_max / n_initial)``
sequential waves at most; no prompt ever gets more than ``n_max``.

Rollouts live in *slots*: slot ``s`` of group ``g`` is the group's ``s``-th rollout, and slots ``count..n_max - 1``
are unfilled. The result is a ``[G, n_max]`` reward matrix, NaN where a slot is unfilled (as for an unscorable
rollout), so the down-samplers work unchanged; since every group holds at least ``n_initial >= M`` slots and the
rules keep scored rollouts first, then unscorable ones by index, an unfilled slot is never kept.

Every decision is a function of the gathered reward matrix, so all processes take the same ones. All processes take
part in every wave with the same number of rows (TRL gathers rewards and lengths, vLLM server mode slices the
broadcast by rank, tensor-parallel vLLM and ZeRO-3 generate collectively): each process generates for as many
rows as the busiest one (`lockstep_rows`), padding with copies of its own prompts whose rollouts are
discarded (counted in `pods/rollouts_padding`).

This module imports only torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "Waves",
    "count_schedule",
    "gathered_rows",
    "generated_slots",
    "has_contrast",
    "lockstep_rows",
    "top_up_waves",
    "wave_metrics",
]

WaveGenerator = Callable[[torch.Tensor, int, int], torch.Tensor]


@dataclass(frozen=True)
class Waves:
    """What phase 1 generated.

    Attributes:
        rewards: ``[G, n_max]`` scalar rewards in slot order, NaN for unscorable rollouts and unfilled slots.
        counts: ``[G]`` int64 rollouts generated per group (slots ``0..count - 1`` are filled).
        waves: number of waves (generation calls) it took, 1 when no group was topped up.
    """

    rewards: torch.Tensor
    counts: torch.Tensor
    waves: int


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


def top_up_waves(n_groups: int, n_initial: int, n_max: int, generate: WaveGenerator) -> Waves:
    """Run the waves: ``n_initial`` rollouts per group, then top-ups for groups without contrast (see the module).

    Args:
        n_groups: groups (prompts) over all processes, G.
        n_initial: rollouts per group in the first wave.
        n_max: the most rollouts a group may get.
        generate: ``generate(groups, first_slot, size)`` generates and scores ``size`` more rollouts for each of
            ``groups`` (``[A]`` int64 global group indices, ascending, the same on every process), which fill slots
            ``first_slot .. first_slot + size - 1``, and returns their gathered rewards, ``[A, size]``. Within a wave
            all groups hold the same count, so one size serves them all.

    Returns:
        The reward matrix in slot order, the count per group and the number of waves.
    """
    schedule = count_schedule(n_initial, n_max)
    rewards: torch.Tensor | None = None
    counts = torch.zeros(n_groups, dtype=torch.long)
    waves = 0
    for before, after in zip([0, *schedule[:-1]], schedule, strict=True):
        waiting = counts == before
        if rewards is not None:
            waiting &= ~has_contrast(rewards).cpu()
        groups = waiting.nonzero().squeeze(1)  # [A]
        if groups.numel() == 0:
            break
        size = after - before
        new = generate(groups, before, size)
        if tuple(new.shape) != (groups.numel(), size):
            expected = (groups.numel(), size)
            raise ValueError(f"expected rewards of shape {expected} from the wave; got {tuple(new.shape)}.")
        if rewards is None:
            rewards = new.new_full((n_groups, n_max), torch.nan)
        rewards[groups.to(rewards.device), before:after] = new
        counts[groups] = after
        waves += 1
    return Waves(rewards, counts, waves)


def lockstep_rows(groups: torch.Tensor, sizes: torch.Tensor, groups_per_process: int, processes: int) -> int:
    """Rows every process generates in a call: the most that any one process needs (the others pad).

    Args:
        groups: ``[A]`` global indices of the call's groups, ascending; process ``r`` owns groups
            ``r * groups_per_process .. (r + 1) * groups_per_process - 1``.
        sizes: ``[A]`` rollouts generated for each.
        groups_per_process: groups each process holds.
        processes: number of processes.
    """
    per_process = torch.zeros(processes, dtype=torch.long).index_add_(0, groups // groups_per_process, sizes)
    return int(per_process.max())


def gathered_rows(groups: torch.Tensor, sizes: torch.Tensor, groups_per_process: int, lockstep: int) -> torch.Tensor:
    """``[sizes.sum()]`` rows of a call's gathered rewards that belong to ``groups``, group by group.

    Each process contributes ``lockstep`` rows (`lockstep_rows`): its own groups first, in ascending order,
    ``sizes[i]`` rows each, then its padding.
    """
    rank = groups // groups_per_process  # [A]
    before = sizes.cumsum(0) - sizes  # [A]: rows of all earlier groups of the call
    first_of_rank = torch.searchsorted(groups, rank * groups_per_process)  # [A]: index of the rank's first group
    start = rank * lockstep + before - before[first_of_rank]  # [A]
    return torch.cat([torch.arange(s, s + size) for s, size in zip(start.tolist(), sizes.tolist(), strict=True)])


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

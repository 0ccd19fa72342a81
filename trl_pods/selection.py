"""Keep M of each prompt's rollouts: the selection of a generation, computed alike on every process.

`select_rollouts` takes phase 1's gathered ``[G * N, F]`` rewards in slot layout (`trl_pods.phase1`) and keeps, per
prompt, the rows the down-sampler chooses (`trl_pods.down_sampling`), or with D3S cross-group selection a budget of
rows per process chosen across its prompts; only generated slots, and only the groups the generation mode chose to
train on (refill, screened). Everything works on the gathered ``[G, N]`` objective, so every process computes the
same kept mask; `kept_generation` then cuts this process's 8-tuple of `_generate` to its kept rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .adaptive import generated_slots, has_contrast
from .advantages import full_group_advantages, group_objective
from .down_sampling import max_variance_across_groups
from .rollout_fields import kept_fields, per_row
from .schedules import kept_per_prompt, scheduled_value

Generation = tuple  # the 8-tuple of GRPOTrainer._generate


@dataclass(frozen=True)
class Phase1Settings:
    """What phase 1 (generation, then selection) reads from the configuration and the process layout.

    Attributes:
        n: Rollouts per prompt (N, slots per group).
        process_index: This process's index.
        processes: Number of processes.
        reward_weights: ``[F]`` weights of the reward functions.
        aggregation: TRL's `multi_objective_aggregation` (the objective selection ranks).
        down_sampler: The per-group rule, ``(rewards [G, N], m, generator) -> [G, m]`` indices.
        down_sampler_name: Its configured name, for error messages.
        cross_group: D3S cross-group selection.
        scale_rewards: TRL's `scale_rewards` (full-group advantages).
        drop_constant_groups: Mark groups with all-zero advantages as dropped.
        advantage_scope: ``"kept"`` or ``"all"``.
        seed: Seed of the generation's random rules (the same on every process).
    """

    n: int
    process_index: int
    processes: int
    reward_weights: torch.Tensor
    aggregation: str
    down_sampler: Callable
    down_sampler_name: str
    cross_group: bool = False
    scale_rewards: str = "group"
    drop_constant_groups: bool = False
    advantage_scope: str = "kept"
    seed: int = 0


@dataclass
class Selection:
    """The kept rollouts of one generation.

    Attributes:
        rewards: ``[G, N]`` TRL's reward (weighted sum), NaN where nothing was generated.
        kept: ``[G, N]`` bool, the same on every process.
        m: Rollouts kept per prompt.
        seconds: Time the selection rule took.
        kept_rows: ``[K]`` global row indices of the kept rollouts, by group then slot.
        local: This process's kept rows (local indices, in order).
        dropped: ``[K]`` bool, kept rows of constant groups (`pods_drop_constant_groups`), all processes.
        local_dropped: ``[len(local)]`` the same for this process's kept rows.
    """

    rewards: torch.Tensor
    kept: torch.Tensor
    m: int
    seconds: float
    kept_rows: torch.Tensor
    local: list[int]
    dropped: torch.Tensor
    local_dropped: torch.Tensor


def take(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[i] for i in rows]


def select(
    rewards: torch.Tensor,
    m: int,
    groups_per_process: int,
    counts: torch.Tensor,
    settings: Phase1Settings,
    seed: int,
    chosen: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[G, N]`` bool mask of the kept rollouts, computed from the gathered ``[G, N]`` objective (the same on every
    process).

    Per-group rules keep exactly ``m`` per group (``seed`` seeds their generator); with cross-group selection each
    process's groups share one budget of ``groups_per_process * m`` rollouts, chosen on full-group advantages. Only
    generated slots (the first ``counts[g]`` of group ``g``) may be kept, and with ``chosen`` (``[G]`` bool: refill,
    screened) only rows of the chosen groups.
    """
    if chosen is not None:
        mask = torch.zeros_like(rewards, dtype=torch.bool)
        mask[chosen] = select(rewards[chosen], m, groups_per_process, counts[chosen], settings, seed)
        return mask
    g, n = rewards.shape
    generated = generated_slots(counts, n)  # [G, N]
    if settings.cross_group:
        advantages = full_group_advantages(rewards, settings.scale_rewards).masked_fill(rewards.isnan(), torch.nan)
        return max_variance_across_groups(advantages, m, groups_per_process, generated=generated)
    if m == n:
        kept = torch.arange(n).expand(g, -1)
    else:
        kept = settings.down_sampler(rewards, m, generator=torch.Generator().manual_seed(seed))
        if (
            not isinstance(kept, torch.Tensor)
            or tuple(kept.shape) != (g, m)
            or kept.dtype != torch.long
            or (kept.numel() and (kept.min() < 0 or kept.max() >= n))
            or (kept.sort(dim=1).values.diff(dim=1) == 0).any()
        ):
            raise ValueError(
                f"The down-sampler {settings.down_sampler_name!r} must return a LongTensor of shape {(g, m)} "
                f"with distinct indices in [0, {n}) per row."
            )
    mask = torch.zeros(g, n, dtype=torch.bool).scatter_(1, kept, True)
    if (mask & ~generated).any():
        raise ValueError(
            f"The down-sampler {settings.down_sampler_name!r} kept a slot that was never generated: a generation mode "
            "may fill only the first counts[g] slots of group g (the rest are NaN, e.g. adaptive, budgeted). Keep "
            "scored rollouts first, then unscorable (NaN) ones by lowest index, as the built-in rules do."
        )
    return mask


def constant_groups(grouped: torch.Tensor, kept: torch.Tensor, settings: Phase1Settings) -> torch.Tensor:
    """``[G]`` bool: groups whose advantages are all zero, so they carry no signal (`pods_drop_constant_groups`).

    Those are groups whose objective (`group_objective`: the weighted reward sum, or with `normalize_then_sum`
    the sum of normalised rewards) is constant over the kept rollouts (``advantage_scope="kept"``) or over all N
    (``"all"``). ``grouped`` is ``[G, N, F]``.
    """
    if not settings.drop_constant_groups:
        return torch.zeros(grouped.size(0), dtype=torch.bool)
    rows = None if settings.advantage_scope == "all" else kept
    return ~has_contrast(group_objective(grouped, settings.reward_weights, settings.aggregation, rows))


def select_rollouts(
    rewards_per_func: torch.Tensor,
    counts: torch.Tensor,
    local_rows: int,
    m: int,
    seed: int,
    settings: Phase1Settings,
    chosen: torch.Tensor | None = None,
) -> Selection:
    """Select M per prompt (of the ``chosen`` groups, refill and screened) from the gathered ``[G * N, F]``
    rewards; ``local_rows`` is this process's row count."""
    n = settings.n
    grouped = rewards_per_func.view(-1, n, rewards_per_func.size(1)).detach().cpu()  # [G, N, F], all processes
    rewards = group_objective(grouped, settings.reward_weights, "sum_then_normalize")  # [G, N], TRL's reward
    objective = group_objective(grouped, settings.reward_weights, settings.aggregation)  # [G, N]
    start = time.perf_counter()
    kept = select(objective, m, local_rows // n, counts, settings, seed, chosen)  # [G, N] bool
    seconds = time.perf_counter() - start
    kept_rows = kept.flatten().nonzero().squeeze(1)  # [K], ordered by group, then rollout
    first_row = settings.process_index * local_rows
    local = [row - first_row for row in kept_rows.tolist() if first_row <= row < first_row + local_rows]
    dropped = constant_groups(grouped, kept, settings).repeat_interleave(n)[kept_rows]  # [K]
    local_dropped = dropped[(kept_rows >= first_row) & (kept_rows < first_row + local_rows)]  # [len(local)]
    return Selection(rewards, kept, m, seconds, kept_rows, local, dropped, local_dropped)


def kept_generation(generation: Generation, selection: Selection, drop_constant_groups: bool) -> Generation:
    """The 8-tuple of this process's kept rows, `rollout_func`'s extra fields and tool images included. With dropped
    groups, a zero loss mask (`tool_mask`) keeps their rows out of the loss and its normaliser."""
    prompt_ids, completion_ids, tool_mask, completions, logps, extra_fields, images, tool_images = generation
    local, rows = selection.local, len(completion_ids)
    kept_ids, tool_mask = take(completion_ids, local), take(tool_mask, local)  # tool_mask: 0 on tool-output tokens
    if drop_constant_groups:
        drops = selection.local_dropped.tolist()
        masks = tool_mask or [[1] * len(ids) for ids in kept_ids]
        tool_mask = [[0 if drop else keep for keep in mask] for mask, drop in zip(masks, drops, strict=True)]
    kept = (take(prompt_ids, local), kept_ids, tool_mask, take(completions, local), take(logps, local))
    tool_images = take(tool_images, local) if per_row(tool_images, rows) else tool_images
    return (*kept, kept_fields(extra_fields, local, rows), take(images, local), tool_images)


def kept_per_step(args: Any, progress: float, prompts_per_process: int) -> int:
    """M for this step: `pods_m`, or the scheduled value (`pods_schedule`), rounded to keep batches even."""
    if args.pods_m_start is None:
        return args.pods_m
    target = scheduled_value(args.pods_m_start, args.pods_m, progress, args.pods_schedule)
    return kept_per_prompt(target, args.pods_m, prompts_per_process, args.steps_per_generation)


def selection_seed(seed: int, global_step: int, micro_step: int, accumulation: int) -> int:
    """Seed of a per-group rule's generator: the same on every process; depends on the seed, the optimizer step and
    the generation within it (``micro_step`` is TRL's micro-step counter)."""
    position = global_step * accumulation + micro_step % accumulation
    return (seed * 1_000_003 + position) % (2**63)

"""GRPO advantages with the baseline taken over every generated rollout of a prompt (torch only)."""

from __future__ import annotations

import torch


def nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Bessel-corrected std ignoring NaN, as TRL's `nanstd`; NaN where fewer than two values are present.

    Reduces over ``dim`` keeping it (``[G, N] -> [G, 1]``), or over everything (a scalar) when ``dim`` is None.
    """
    keepdim = dim is not None
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=keepdim)
    squares = torch.nansum((x - mean) ** 2, dim=dim, keepdim=keepdim)
    return torch.where(count > 1, squares / (count - 1).clamp(min=1), torch.nan).sqrt()


def full_group_advantages(rewards: torch.Tensor, scale_rewards: str) -> torch.Tensor:
    """GRPO advantages of every rollout, normalised with the statistics of all N rollouts of its group.

    This is ``pods_advantage_scope="all"`` (D3S's choice): kept rollouts are compared with everything the policy
    produced for the prompt, not only with each other. ``scale_rewards`` keeps TRL's meaning: ``"group"`` divides
    by the group's std, ``"batch"`` by the std of every reward in the batch, ``"none"`` does not divide.

    Args:
        rewards: ``[G, N]`` rewards, NaN for an unscorable rollout.
        scale_rewards: ``"group"``, ``"batch"`` or ``"none"``.

    Returns:
        ``[G, N]`` advantages; 0 for unscorable rollouts and wherever the std is undefined.
    """
    advantages = rewards - torch.nanmean(rewards, dim=1, keepdim=True)  # [G, N]
    if scale_rewards == "group":
        advantages = advantages / (nanstd(rewards, dim=1) + 1e-4)
    elif scale_rewards == "batch":
        advantages = advantages / (nanstd(rewards) + 1e-4)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none'; got {scale_rewards!r}.")
    return advantages.nan_to_num(0.0)


def group_objective(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, aggregation: str, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """The scalar per rollout that TRL's advantages rank within a group, for its `multi_objective_aggregation`.

    ``"sum_then_normalize"``: the weighted sum of the reward functions (TRL's logged reward). ``"normalize_then_sum"``:
    each function's rewards normalised within the group, ``(r - mean) / (std + 1e-4)`` over ``rows``, then weighted
    and summed, so that no function dominates by its scale. (TRL then normalises these sums over the batch with one
    affine map, which changes neither the order of a group's rollouts nor which subset varies most.)

    Args:
        rewards_per_func: ``[G, N, F]`` rewards of F functions, NaN where a function returned None.
        weights: ``[F]`` reward weights.
        aggregation: ``"sum_then_normalize"`` or ``"normalize_then_sum"``.
        rows: ``[G, N]`` bool, the rollouts the group statistics cover (all when None).

    Returns:
        ``[G, N]``; NaN outside ``rows`` and for unscorable rollouts (every function returned None).
    """
    if rows is not None:
        rewards_per_func = rewards_per_func.masked_fill(~rows.unsqueeze(2), torch.nan)
    unscorable = torch.isnan(rewards_per_func).all(dim=2)  # [G, N]
    if aggregation == "normalize_then_sum":
        mean = torch.nanmean(rewards_per_func, dim=1, keepdim=True)  # [G, 1, F]
        rewards_per_func = (rewards_per_func - mean) / (nanstd(rewards_per_func, dim=1) + 1e-4)
    elif aggregation != "sum_then_normalize":
        raise ValueError(
            f"multi_objective_aggregation must be 'sum_then_normalize' or 'normalize_then_sum'; got {aggregation!r}."
        )
    objective = (rewards_per_func * weights.to(rewards_per_func.device)).nansum(dim=2)  # [G, N]
    return objective.masked_fill(unscorable, torch.nan)


def population_group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """GRPO advantages as TRL's asynchronous trainer computes them (`AsyncRolloutWorker`'s `_score_group`): each
    reward minus its group's mean, over the group's population std (no Bessel correction) plus 1e-8, both taken
    over the group's scored rollouts.

    Args:
        rewards: ``[G, n]`` rewards, NaN for an unscorable rollout.

    Returns:
        ``[G, n]`` advantages; 0 for unscorable rollouts.
    """
    scored = (~torch.isnan(rewards)).sum(dim=1, keepdim=True).clamp(min=1)  # [G, 1]
    centred = rewards - torch.nanmean(rewards, dim=1, keepdim=True)  # [G, n]
    std = (torch.nansum(centred**2, dim=1, keepdim=True) / scored).sqrt()  # [G, 1]
    return (centred / (std + 1e-8)).nan_to_num(0.0)

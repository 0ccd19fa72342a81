"""Down-sampling rules: choose, per prompt, which M of its N scored rollouts to train on.

Every rule is a pure tensor function with one signature::

    fn(rewards: Tensor[G, N], m: int, *, generator: torch.Generator | None = None) -> LongTensor[G, m]

``rewards[g, i]`` is the scalar reward of rollout ``i`` of prompt group ``g``; NaN marks a rollout that no
reward function could score. The result holds, per group, ``m`` distinct indices into the N axis, sorted
ascending. Rules never pick an unscorable rollout while a scored one is left.

This module imports only torch, so rules can be tested and benchmarked without transformers or TRL.
Rules are looked up by name (``register_down_sampler`` / ``get_down_sampler``) or by a dotted import path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from ._lookup import resolve
from .advantages import full_group_advantages

__all__ = [
    "DownSampler",
    "get_down_sampler",
    "list_down_samplers",
    "max_advantage_variance",
    "max_reward",
    "max_variance",
    "max_variance_across_groups",
    "random",
    "register_down_sampler",
]


TIE_TOLERANCE = 1e-10  # candidate variances closer than this times the squared reward spread are equally good


class DownSampler(Protocol):
    def __call__(self, rewards: torch.Tensor, m: int, *, generator: torch.Generator | None = None) -> torch.Tensor: ...


_REGISTRY: dict[str, DownSampler] = {}


def register_down_sampler(name: str) -> Callable[[DownSampler], DownSampler]:
    """Decorator that makes a down-sampling rule available under ``name`` (e.g. ``pods_down_sampler=name``)."""

    def decorator(fn: DownSampler) -> DownSampler:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"A down-sampler named {name!r} is already registered; choose another name.")
        _REGISTRY[name] = fn
        return fn

    return decorator


def list_down_samplers() -> list[str]:
    """Names of the registered down-sampling rules."""
    return sorted(_REGISTRY)


def get_down_sampler(name_or_path: str) -> DownSampler:
    """Return the rule registered as ``name_or_path``, or import it from a dotted path ``"pkg.module.fn"``.

    Raises:
        ValueError: the name is neither registered nor an importable callable; the message lists the known names.
    """
    return resolve(name_or_path, _REGISTRY, "down-sampler")


def _check(rewards: torch.Tensor, m: int) -> None:
    if rewards.dim() != 2 or not rewards.is_floating_point():
        raise ValueError(
            f"rewards must be a floating-point tensor of shape [groups, N]; got {tuple(rewards.shape)} "
            f"{rewards.dtype}."
        )
    if not 1 <= m <= rewards.size(1):
        raise ValueError(f"m must be between 1 and N={rewards.size(1)}; got m={m}.")
    if torch.isinf(rewards).any():
        raise ValueError("rewards contain +/-inf; return a finite reward, or None (NaN) for an unscorable rollout.")


def _scored_first_order(keys: torch.Tensor, rewards: torch.Tensor, descending: bool = False) -> torch.Tensor:
    """Stable argsort of ``keys`` along N that puts unscorable (NaN-reward) rollouts last, ties by index."""
    keys = keys.double().masked_fill(torch.isnan(rewards), float("inf") if not descending else float("-inf"))
    return torch.sort(keys, dim=1, descending=descending, stable=True).indices


def _finish(order: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Map chosen positions of a per-group ordering back to rollout indices, sorted ascending."""
    return torch.sort(order.gather(1, positions), dim=1).values


@register_down_sampler("max_variance")
def max_variance(rewards: torch.Tensor, m: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Exact maximum-variance subset of size ``m`` per group (PODS, Theorem 1).

    Some optimal subset is the ``k`` highest and ``m - k`` lowest rewards for some ``k`` in ``0..m``. One stable
    sort, prefix sums of the centred rewards (float64) and a ``[G, m + 1]`` table of candidate variances find it
    for all groups at once: O(N log N) per group, no Python loop over groups. Among equally good ``k`` (variances
    within ``TIE_TOLERANCE`` times the squared spread of the group's rewards, so that float rounding does not
    break exact ties) the largest wins: keep more of the best rollouts, e.g. two 1s of ``[0, 0, 1, 1, 1]`` for
    ``m = 3``. Equal rewards are ordered by a stable sort, so the choice is deterministic. A group with fewer than
    ``m`` scored rollouts keeps all of them plus the lowest-indexed unscorable ones.

    Args:
        rewards: ``[G, N]`` rewards, NaN for an unscorable rollout.
        m: rollouts to keep per group.
        generator: unused (the rule is deterministic).

    Returns:
        ``[G, m]`` int64 indices into the N axis, sorted ascending.
    """
    _check(rewards, m)
    g, n = rewards.shape
    device = rewards.device
    order = _scored_first_order(rewards, rewards)  # [G, N]: scored rewards ascending, then NaN
    scored = (~torch.isnan(rewards)).sum(dim=1, keepdim=True)  # [G, 1]: c, rollouts with a reward
    x = rewards.double().gather(1, order)  # [G, N]
    x = x - torch.nanmean(x, dim=1, keepdim=True).nan_to_num(0.0)  # centre: no cancellation in E[x^2] - E[x]^2
    x = x.nan_to_num(0.0)
    zero = x.new_zeros(g, 1)
    s1 = torch.cat([zero, x.cumsum(1)], dim=1)  # [G, N + 1]: s1[:, j] = sum of the j lowest
    s2 = torch.cat([zero, (x * x).cumsum(1)], dim=1)  # [G, N + 1]

    k = torch.arange(m + 1, device=device).expand(g, -1)  # [G, m + 1]: k highest + (m - k) lowest
    top_start = (scored - k).clamp(min=0)  # [G, m + 1]
    top_end = scored.expand_as(k)
    total1 = s1.gather(1, m - k) + s1.gather(1, top_end) - s1.gather(1, top_start)  # [G, m + 1]
    total2 = s2.gather(1, m - k) + s2.gather(1, top_end) - s2.gather(1, top_start)
    variance = total2 / m - (total1 / m) ** 2  # [G, m + 1]
    # Equally good k differ by float rounding only: compare within a tolerance relative to the group's spread.
    spread = x.gather(1, (scored - 1).clamp(min=0)) - x[:, :1]  # [G, 1]: highest minus lowest scored reward
    best = variance >= variance.amax(dim=1, keepdim=True) - TIE_TOLERANCE * spread**2  # [G, m + 1]
    # The first best of the k-reversed table is the largest best k; all k tie in groups with fewer than m scored.
    best_k = m - best.flip(1).int().argmax(dim=1, keepdim=True)  # [G, 1]
    best_k = torch.where(scored >= m, best_k, torch.zeros_like(best_k))

    j = torch.arange(m, device=device).expand(g, -1)  # [G, m]: output slot
    # Slots below m - k take the lowest; the rest take the top k, which end at position c - 1.
    positions = torch.where(j < m - best_k, j, scored - m + j)
    positions = torch.where(scored >= m, positions, j)  # too few scored: all scored, then NaN rows
    return _finish(order, positions)


@register_down_sampler("max_reward")
def max_reward(rewards: torch.Tensor, m: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """The ``m`` highest rewards per group (PODS's max-reward rule; ties go to the lower index).

    Args:
        rewards: ``[G, N]`` rewards, NaN for an unscorable rollout.
        m: rollouts to keep per group.
        generator: unused (the rule is deterministic).

    Returns:
        ``[G, m]`` int64 indices into the N axis, sorted ascending.
    """
    _check(rewards, m)
    order = _scored_first_order(rewards, rewards, descending=True)
    return order[:, :m].sort(dim=1).values


@register_down_sampler("random")
def random(rewards: torch.Tensor, m: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """``m`` rollouts per group uniformly at random among the scored ones (PODS's random rule).

    The draw depends only on ``generator``: the trainer seeds it from ``seed`` and the step, so every rank draws
    the same subsets and a resumed run draws what the uninterrupted run would have.

    Args:
        rewards: ``[G, N]`` rewards, NaN for an unscorable rollout.
        m: rollouts to keep per group.
        generator: source of randomness; ``None`` uses torch's global generator.

    Returns:
        ``[G, m]`` int64 indices into the N axis, sorted ascending.
    """
    _check(rewards, m)
    device = generator.device if generator is not None else rewards.device
    keys = torch.rand(rewards.shape, generator=generator, device=device).to(rewards.device)
    order = _scored_first_order(keys, rewards)
    return order[:, :m].sort(dim=1).values


@register_down_sampler("max_advantage_variance")
def max_advantage_variance(rewards: torch.Tensor, m: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """D3S's per-group rule: the ``m`` rollouts whose full-group advantages have the largest variance.

    Advantages ``(r - mean_N) / (std_N + eps)`` are an increasing affine map of the rewards within a group, and
    variance only scales under such a map, so the subset is exactly `max_variance`'s. The rule exists under its
    D3S name for clarity (use it with ``pods_advantage_scope="all"``, as D3S does); where D3S differs from PODS is
    across groups, see `max_variance_across_groups`.
    """
    _check(rewards, m)
    advantages = full_group_advantages(rewards.double(), "group")
    return max_variance(advantages.masked_fill(torch.isnan(rewards), torch.nan), m)


def max_variance_across_groups(
    values: torch.Tensor, m: int, groups_per_budget: int, generated: torch.Tensor | None = None
) -> torch.Tensor:
    """D3S cross-group selection: keep ``groups_per_budget * m`` rollouts from each block of ``groups_per_budget``
    consecutive groups, choosing the subset of the block's values (full-group advantages) with the largest
    variance. Theorem 1 holds for any multiset, so this is `max_variance` on the flattened blocks; a group may keep
    more or fewer than ``m`` rollouts (possibly none).

    Args:
        values: ``[G, N]`` full-group advantages, NaN for unscorable rollouts.
        m: kept rollouts per group on average.
        groups_per_budget: groups sharing one budget (the trainer uses each process's groups, so every process
            keeps the same number of rows).
        generated: ``[G, N]`` bool, the slots that hold a rollout (adaptive generation; all when None). When a
            block has fewer scored rollouts than its budget, the rest are unscorable generated ones, never empty
            slots (each group must hold at least ``m`` generated slots).

    Returns:
        ``[G, N]`` bool mask with exactly ``groups_per_budget * m`` True per block.
    """
    g, n = values.shape
    if groups_per_budget < 1 or g % groups_per_budget:
        raise ValueError(f"{g} groups do not split into blocks of {groups_per_budget}.")
    blocks = values.reshape(g // groups_per_budget, groups_per_budget * n)  # [blocks, G_b * N]
    order = torch.arange(blocks.size(1), device=values.device).expand_as(blocks)  # [blocks, G_b * N]
    if generated is not None:  # generated slots first: max_variance fills a short budget with the lowest positions
        order = torch.sort((~generated).reshape_as(blocks).to(torch.uint8), dim=1, stable=True).indices
    kept = order.gather(1, max_variance(blocks.gather(1, order), groups_per_budget * m))  # [blocks, G_b * m]
    mask = torch.zeros_like(blocks, dtype=torch.bool).scatter_(1, kept, True)
    return mask.reshape(g, n)

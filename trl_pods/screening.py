"""Dynamic sampling: choose which prompts get trained on, from what a few of their rollouts showed.

Both modes generate for more prompts than the ``B`` a generation trains on, and train on ``B`` of them, each process on
its own share (``B / processes``; selection is local, so no row ever moves between processes). A prompt generated for
and not trained on is consumed for the epoch, as in DAPO.

* ``"refill"`` (DAPO's dynamic sampling): ``N`` rollouts for the ``B`` prompts of the data loader's batch; groups whose
  rewards all agree carry no signal, so as many further prompts as groups are missing are drawn, read from the
  epoch's order only then (`trl_pods.prompt_order.DrawingSampler`), ``N`` rollouts each, until every process holds
  its share of groups with contrast or ``max_draws`` draws are made; the remainder is filled with the first groups
  without contrast (`refill_choice`).
* ``"screened"`` (pilot, then commit): the data loader reads a pool of ``ratio x B`` prompts, each gets a pilot of
  ``n_initial`` rollouts, a rule picks the ``B`` to train on (`SCREEN_RULES`), and those get their remaining
  ``N - n_initial`` rollouts; the pilot rollouts stay in their group.

A rule is ``rule(pilot [G, k], chosen, generator) -> [chosen]`` indices into the ``G`` pool groups of one process,
``pilot`` holding the reward (TRL's weighted sum) of each pilot rollout (NaN: unscorable). Registered rules:

* ``"frontier"`` (default): groups whose pilot shows contrast first, but a quarter of the picks (`FRONTIER_SHARE`)
  go to groups whose whole pilot earned the pool's lowest reward: the prompts the policy does not solve yet, where a
  rule that ranks by observed signal never looks (a never-solved prompt shows no contrast in a small pilot, and
  budgeted generation's history starved exactly those on the add1 benchmark). Left-over picks go to the remaining
  groups, lowest pilot mean first (unsolved before solved).
* ``"contrast"`` (SPEED-RL's screen): groups with pilot contrast first, then the rest, lowest pilot mean first.
* ``"random"``: ``chosen`` groups uniformly (the pilot only pays for itself through down-sampling).

Reusing an earlier correct rollout of a hard prompt (AR3PO) is not done: it is off-policy, and TRL's importance
correction covers the engine's sampling, not rollouts of an earlier policy.

This module imports only torch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._lookup import resolve
from .adaptive import has_contrast

__all__ = [
    "FRONTIER_SHARE",
    "SCREEN_RULES",
    "contrast_first",
    "frontier",
    "get_screen_rule",
    "missing_groups",
    "pool_factor",
    "random_screen",
    "refill_choice",
    "register_screen_rule",
]

FRONTIER_SHARE = 0.25  # of the picks of the "frontier" rule, reserved for groups whose pilot all failed

ScreenRule = Callable[[torch.Tensor, int, torch.Generator | None], torch.Tensor]


def pool_factor(generation: str, screen_ratio: int) -> int:
    """Prompts the data loader reads per trained prompt: ``screen_ratio`` (screened, which pilots them all), else 1
    (refill reads its further prompts when it draws them: `trl_pods.prompt_order.DrawingSampler`)."""
    return screen_ratio if generation == "screened" else 1


def _lowest_mean_first(pilot: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``candidates`` ``[C]`` ordered by pilot mean, lowest first (ties: lower index; an all-NaN pilot last)."""
    means = torch.nanmean(pilot[candidates], dim=1).nan_to_num(torch.inf)  # [C]
    return candidates[torch.sort(means, stable=True).indices]


def _take(order: list[torch.Tensor], chosen: int) -> torch.Tensor:
    """The first ``chosen`` distinct indices of the concatenated ``order``, sorted."""
    picked = list(dict.fromkeys(torch.cat(order).tolist()))[:chosen]
    return torch.tensor(sorted(picked), dtype=torch.long)


def contrast_first(pilot: torch.Tensor, chosen: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[chosen]`` groups: those whose pilot shows contrast (in order), then the rest, lowest pilot mean first."""
    contrast = has_contrast(pilot)  # [G]
    return _take([contrast.nonzero().squeeze(1), _lowest_mean_first(pilot, (~contrast).nonzero().squeeze(1))], chosen)


def frontier(pilot: torch.Tensor, chosen: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[chosen]`` groups: up to ``FRONTIER_SHARE x chosen`` whose whole pilot earned the pool's lowest reward
    (unsolved), the others from those with pilot contrast, then the rest, lowest pilot mean first. A fractional share
    is rounded up with the probability of its fraction (drawn from ``generator``), so that a process picking one
    group gives the unsolved a quarter of its picks on average, not all of them."""
    finite = pilot[pilot.isfinite()]
    contrast = has_contrast(pilot)  # [G]
    if finite.numel() == 0:
        return _take([torch.arange(pilot.size(0))], chosen)
    unsolved = ~contrast & (pilot.nan_to_num(torch.inf) == finite.min()).all(dim=1)  # [G]: every pilot at the floor
    share = FRONTIER_SHARE * chosen
    rounded_up = torch.rand((), generator=generator).item() < share % 1
    reserve = min(int(share) + rounded_up, int(unsolved.sum()))
    rest = _lowest_mean_first(pilot, (~contrast).nonzero().squeeze(1))
    with_contrast = contrast.nonzero().squeeze(1)[: chosen - reserve]
    return _take([unsolved.nonzero().squeeze(1)[:reserve], with_contrast, rest], chosen)


def random_screen(pilot: torch.Tensor, chosen: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[chosen]`` groups drawn uniformly."""
    return torch.randperm(pilot.size(0), generator=generator)[:chosen].sort().values


SCREEN_RULES: dict[str, ScreenRule] = {"frontier": frontier, "contrast": contrast_first, "random": random_screen}


def register_screen_rule(name: str, rule: ScreenRule) -> None:
    """Register ``rule(pilot [G, k], chosen, generator) -> [chosen]`` distinct group indices under ``name`` (usable
    as `pods_screen_rule`)."""
    SCREEN_RULES[name] = rule


def get_screen_rule(name: str) -> ScreenRule:
    return resolve(name, SCREEN_RULES, "screening rule")


def refill_choice(rewards: torch.Tensor, drawn: torch.Tensor, chosen: int) -> tuple[torch.Tensor, int]:
    """Refill's choice among one process's drawn groups: those with contrast first, in draw order, then the first
    groups without contrast to fill the remainder.

    Args:
        rewards: ``[G, N]`` rewards of the process's pool groups (NaN where nothing was generated).
        drawn: ``[G]`` bool, the groups drawn (generated).
        chosen: groups to train on.

    Returns:
        The ``[chosen]`` group indices, sorted, and how many of them lack contrast (filled).
    """
    contrast = has_contrast(rewards) & drawn  # [G]
    picked = _take([contrast.nonzero().squeeze(1), (drawn & ~contrast).nonzero().squeeze(1)], chosen)
    return picked, int((~contrast[picked]).sum())


def missing_groups(rewards: torch.Tensor, drawn: torch.Tensor, chosen: int) -> int:
    """Groups with contrast one process still lacks for its ``chosen``."""
    return max(chosen - int((has_contrast(rewards) & drawn).sum()), 0)

"""Screened generation (pilot, then commit): choose which prompts get trained on from what a few rollouts showed.

With ``pods_generation="screened"`` (`ScreenedMode`) the data loader reads a pool of ``ratio x B`` prompts per
generation, ``B`` being the prompts it trains on (each process its own share, ``B / processes``; selection is local,
so no row ever moves between processes). A prompt piloted and not chosen is consumed for the epoch, as in DAPO.

Every pool prompt gets a pilot of ``n_initial`` rollouts (one call), a rule picks the ``B`` to train on
(`SCREEN_RULES`), and those get their remaining ``N - n_initial`` rollouts (a second call); the pilot rollouts stay
in their group. With ``n_initial = N`` the pilot is the whole group: one call a step, verl's over-provisioned batch
with the rule choosing the groups to train on and PODS's down-sampling inside each.

With ``pods_draw_coverage`` the pool is sized from the contrast rate the run has observed in its pilots
(`trl_pods.contrast`): the data loader reads the batch, and the pilot's call also draws as many further prompts as
make the pool hold ``B`` groups whose pilot shows contrast with that probability (at most ``ratio x B``); fewer
prompts are piloted for nothing once the policy solves some of them.

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
from typing import Any

import torch

from ._lookup import resolve
from .adaptive import has_contrast
from .contrast import ContrastHistory, prompts_to_cover
from .waves import GenerationMode, Wave, WaveState

__all__ = [
    "FRONTIER_SHARE",
    "SCREEN_RULES",
    "ScreenedMode",
    "contrast_first",
    "frontier",
    "get_screen_rule",
    "random_screen",
    "register_screen_rule",
]

FRONTIER_SHARE = 0.25  # of the picks of the "frontier" rule, reserved for groups whose pilot all failed

ScreenRule = Callable[[torch.Tensor, int, torch.Generator | None], torch.Tensor]


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


class ScreenedMode(GenerationMode):
    """``pods_generation="screened"``: a pilot of ``pods_n_initial`` rollouts for every prompt of the pool
    (``pods_screen_ratio`` prompts per trained prompt, or as many as the observed contrast rate asks with
    ``pods_draw_coverage``), then the remaining ``pods_n - pods_n_initial`` for the prompts each process's rule
    (`pods_screen_rule`) picks from its own pool; the rule's generator is seeded with the generation's seed and the
    process's first group, so every process can replay every choice."""

    def __init__(self, config: Any):
        self.groups_laid_out = config.pods_screen_ratio
        self.coverage = config.pods_draw_coverage
        self.draws = self.coverage is not None  # the pool is drawn, sized, rather than read by the loader
        self.prompts_read = 1 if self.draws else config.pods_screen_ratio
        self.history = ContrastHistory() if self.draws else None  # the pilots' contrast rate
        self.pilot, self.rule = config.pods_n_initial, get_screen_rule(config.pods_screen_rule)
        self.picked: torch.Tensor | None = None

    def first_wave(self, state: WaveState) -> Wave:
        self.picked = None
        if self.history is None:
            return Wave.uniform(torch.arange(state.rewards.size(0)), self.pilot)
        rate, room = self.history.rate(self.pilot), state.groups_per_process
        pool = max(prompts_to_cover(state.share, rate, self.coverage, room), state.share)
        loaded = state.drawn.nonzero().squeeze(1)
        extra = [max(pool - int(state.drawn[block].sum()), 0) for block in state.blocks()]
        return Wave(loaded, torch.full_like(loaded, self.pilot), self.pilot, extra if any(extra) else None)

    def next_wave(self, state: WaveState) -> Wave | None:
        if self.picked is not None:
            return None
        pilot = state.rewards[:, : self.pilot]  # [G, k]
        self.picked = torch.zeros(pilot.size(0), dtype=torch.bool)
        for block in state.blocks():
            generator = torch.Generator().manual_seed(state.seed + block.start)
            pool = state.drawn[block].nonzero().squeeze(1)  # [P]: the block's piloted groups
            picked = self.rule(pilot[block][pool], state.share, generator)
            _check_screen_choice(picked, pool.numel(), state.share)
            self.picked[block.start + pool[picked]] = True
        commit = self.picked.nonzero().squeeze(1)
        return Wave.uniform(commit, state.n - self.pilot) if state.n > self.pilot else None

    def finished(self, state: WaveState) -> None:
        if self.history is not None:
            self.history.observe(state.rewards[state.drawn, : self.pilot])

    def chosen(self, state: WaveState) -> torch.Tensor | None:
        return self.picked

    def metrics(self, state: WaveState) -> dict[str, float]:
        trained = state.rewards[self.picked]  # [B, N]
        return {
            **super().metrics(state),
            "predicted_contrast": has_contrast(trained[:, : self.pilot]).float().mean().item(),
            "observed_contrast": has_contrast(trained).float().mean().item(),
            "prompts_drawn": float(state.drawn.sum()),
            "prompts_trained": float(self.picked.sum()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {} if self.history is None else {"contrast": self.history.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.history is not None and "contrast" in state:
            self.history.load_state_dict(state["contrast"])


def _check_screen_choice(picked: Any, pool: int, share: int) -> None:
    if (
        not isinstance(picked, torch.Tensor)
        or picked.dtype != torch.long
        or tuple(picked.shape) != (share,)
        or picked.unique().numel() != share
        or (share and (picked.min() < 0 or picked.max() >= pool))
    ):
        raise ValueError(
            f"The screening rule (pods_screen_rule) must return a LongTensor of {share} distinct group indices in "
            f"[0, {pool}) (the groups of one process's pool to train on)."
        )

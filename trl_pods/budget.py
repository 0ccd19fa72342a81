"""Budgeted generation: give each prompt its rollouts before generating, from what its earlier visits showed.

With ``pods_generation="budgeted"`` a generation of G prompts spends at most ``budget * G`` rollouts, each prompt
getting between ``m`` (the rollouts it keeps) and ``n_max``. Training revisits its prompts epoch after epoch, so the
last visits tell how a prompt behaves: one the policy always solves gains nothing from more rollouts, one it solves
half the time shows contrast with a few, one it rarely solves needs many to show a single success.

**History** (`PromptHistory`). Per prompt, keyed by a digest of its dataset row (`prompt_key`: its text, other
columns and images), the (decayed) count of its rollouts'
rewards at each reward *level*. While the rewards take at most `MAX_LEVELS` distinct values (0/1 correctness, graded
or partial credit), the levels are those values. Beyond that (a reward model, a continuous score) the levels are
`MAX_LEVELS` quantile bins of the last `RECENT_REWARDS` rewards, each represented by the mean of its rewards, and
re-cut after every update so that they follow the reward distribution as training moves it (a prompt's counts move
to the new bin holding their old level's value); a point mass, such as a fixed penalty, keeps a bin of its own. A
prompt with counts ``c`` has a Dirichlet posterior ``Dir(c + prior)`` over the levels, the prior being
`PRIOR_STRENGTH` rollouts distributed as the recent population's outcomes, so a prompt seen for the first time gets
the population's odds. Memory is bounded: at most ``capacity`` prompts are kept, the least recently visited forgotten
first (a test bounds it below 100 bytes per prompt with 0/1 rewards: bookkeeping plus 4 bytes per level).

**Allocation.** A rule scores the expected learning signal of giving each prompt ``n = 0 .. n_max`` rollouts
(`expected_signal` by default; pluggable like the down-samplers); `greedy_allocation` then spends the budget one
rollout at a time on the largest marginal gain, which is exact for scores concave in ``n`` (checked against brute
force in the tests). Each process spends its own share of the budget on its own prompts (`BudgetedAllocation.plan`),
so with equal prompts per process every process generates the same number of rollouts and none pads. The default
signal is the probability that the group shows contrast with ``n`` rollouts times the value of learning on the
prompt, integrated over the posterior in closed form (Dirichlet moments, no sampling):

    E[(1 - sum_v theta_v ** n) * Var_theta(r) * (1 - E_theta[r])],   r = reward scaled to [0, 1] over the levels

For 0/1 rewards the value is Knapsack-RL's ``p (1 - p) ** 2``. It vanishes as the success rate goes to 0 or to 1, so a
prompt whose visits never showed contrast gets ``m``, where contrast probability alone (`contrast_probability`)
would pour rollouts into nearly solved prompts (their rare failure is "contrast"). With continuous rewards the
contrast is calibrated (a test checks it within 0.1 of what is observed), but a prompt whose scores vary shows it with
any few rollouts, so its score stops growing there: the rest of the budget goes where contrast is still uncertain,
such as prompts that always earned the same score (their posterior keeps a small chance of another one).

This module imports only torch.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

import torch

from ._lookup import resolve
from .adaptive import has_contrast
from .waves import GenerationMode, Wave, WaveState

__all__ = [
    "ALLOCATION_RULES",
    "BudgetedAllocation",
    "BudgetedMode",
    "PromptHistory",
    "allocate",
    "contrast_probability",
    "expected_signal",
    "get_allocation_rule",
    "greedy_allocation",
    "prompt_key",
    "register_allocation_rule",
]

logger = logging.getLogger(__name__)

MAX_LEVELS = 16  # reward levels a history tracks: distinct values, or quantile bins beyond that many
RECENT_REWARDS = 4096  # rewards the quantile bins of continuous rewards are cut from
PRIOR_STRENGTH = 2.0  # rollouts' worth of population prior in each prompt's posterior

AllocationRule = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def prompt_key(row: Any) -> int:
    """A 63-bit digest of a prompt: its whole dataset row (the text, every other column, images by their pixels), the
    same on every process and in every run. Rows that share a question and differ in an image (TRL's vision layout) or
    another column are different prompts with histories of their own; a row needs no ``prompt`` column (an
    environment's dataset)."""
    text = json.dumps(_content(row), sort_keys=True, ensure_ascii=False, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def _content(value: Any) -> Any:
    """``value`` as JSON data that depends on its content only: containers item by item; bytes, tensors, arrays and
    images (anything with ``tobytes``) by a digest of their bytes with their type and layout, never by their
    ``repr`` (a PIL image's holds its memory address)."""
    if isinstance(value, dict):
        return {str(key): _content(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_content(item) for item in value]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    data = bytes(value) if isinstance(value, bytes | bytearray) else None
    if data is None and callable(getattr(value, "tobytes", None)):
        layout = getattr(value, "shape", None) or getattr(value, "size", None)
        kind = getattr(value, "mode", None) or getattr(value, "dtype", None)
        data = f"{type(value).__name__}:{kind}:{layout}:".encode() + value.tobytes()
    return value if data is None else {"bytes": hashlib.blake2b(data, digest_size=16).hexdigest()}


class PromptHistory:
    """Decayed counts of each reward level per prompt, for at most ``capacity`` prompts (least recently visited are
    forgotten first). The levels are the distinct reward values, or quantile bins once there are more than
    `MAX_LEVELS` of them (see the module).

    Args:
        capacity: the most prompts kept.
        decay: weight of a prompt's earlier counts at each new visit (1.0: all visits count alike), so the history
            follows a policy that changes; it also discounts the population prior of new prompts.
    """

    def __init__(self, capacity: int, decay: float):
        self.capacity, self.decay = capacity, decay
        self.levels: list[float] = []  # distinct reward values in order of first appearance, or the bins' means
        self.edges: torch.Tensor | None = None  # [L - 1] upper edges of the quantile bins; None: exact values
        self.recent = torch.zeros(0, dtype=torch.float64)  # the last RECENT_REWARDS finite rewards, oldest first
        self.population = torch.zeros(0, dtype=torch.float64)  # [L] decayed outcome counts over all prompts
        self.rows: dict[int, int] = {}  # key -> row of `counts`, least recently visited first
        self.counts = torch.zeros(0, 0)  # [rows, L]

    def __len__(self) -> int:
        return len(self.rows)

    def known(self, keys: list[int]) -> torch.Tensor:
        """``[G]`` bool: the prompt has a history."""
        return torch.tensor([key in self.rows for key in keys], dtype=torch.bool)

    def posterior(self, keys: list[int]) -> torch.Tensor:
        """``[G, L]`` Dirichlet parameters over the ``L`` known levels: counts plus the population prior."""
        prior = self.population / self.population.sum().clamp_min(1e-12) * PRIOR_STRENGTH
        empty = torch.zeros(len(self.levels))
        counts = [self.counts[self.rows[key]] if key in self.rows else empty for key in keys]
        return (torch.stack(counts) if keys else empty[:0]).double() + prior.clamp_min(1e-6)

    def level_values(self) -> torch.Tensor:
        """``[L]`` the known levels (float64)."""
        return torch.tensor(self.levels, dtype=torch.float64)

    def update(self, keys: list[int], rewards: torch.Tensor) -> None:
        """Add one visit of each prompt: ``rewards`` ``[G, N]`` are its rollouts' rewards (NaN: not generated or
        unscorable, and infinite values are ignored). A prompt listed twice is visited once, with both groups'
        rewards. Call it with the same gathered values on every process."""
        rewards = rewards.detach().double().cpu()
        finite = rewards[rewards.isfinite()]  # [R]
        self.recent = torch.cat([self.recent, finite])[-RECENT_REWARDS:]
        self._fit_levels(finite)
        visits: dict[int, torch.Tensor] = {}
        for key, values in zip(keys, rewards, strict=True):
            levels = self._level_of(values[values.isfinite()])
            outcome = torch.bincount(levels, minlength=len(self.levels)).float()  # [L]
            visits[key] = visits[key] + outcome if key in visits else outcome
        self.population = self.population * self.decay + sum(visits.values(), torch.zeros(len(self.levels))).double()
        for key, outcome in visits.items():
            row = self.rows.pop(key, None)  # re-inserted last: most recently visited
            if row is None:
                row = self._free_row()
                self.counts[row] = outcome
            else:
                self.counts[row] = self.counts[row] * self.decay + outcome
            self.rows[key] = row

    def _fit_levels(self, new: torch.Tensor) -> None:
        """Add the new distinct values as levels while there are at most `MAX_LEVELS`; past that, (re-)cut the
        quantile bins of the recent rewards and move every count to the bin of its old level's value."""
        if self.edges is None:
            fresh = [value for value in dict.fromkeys(new.tolist()) if not self._known_value(value)]
            if len(self.levels) + len(fresh) <= MAX_LEVELS:
                self._remap(self.levels + fresh, None, torch.arange(len(self.levels)))
                return
            logger.info(
                "Rewards took more than %d distinct values: budgeted generation's history now counts them in %d "
                "quantile bins of the last %d rewards, re-cut after every generation.",
                MAX_LEVELS, MAX_LEVELS, RECENT_REWARDS,
            )  # fmt: skip
        quantiles = torch.arange(1, MAX_LEVELS, dtype=torch.float64) / MAX_LEVELS
        edges = torch.quantile(self.recent, quantiles).unique()  # a point mass keeps one edge, so one bin
        size = torch.bincount(torch.searchsorted(edges, self.recent), minlength=edges.numel() + 1)
        keep = size[:-1] > 0  # edge i closes bin i, (edges[i - 1], edges[i]]: drop the edges of empty bins
        if size[-1] == 0 and keep.any():
            keep[int(keep.nonzero().max())] = False
        edges = edges[keep]  # [L - 1]
        bins = torch.searchsorted(edges, self.recent)  # [R]
        total = torch.zeros(edges.numel() + 1, dtype=torch.float64).index_add_(0, bins, self.recent)
        levels = (total / torch.bincount(bins, minlength=edges.numel() + 1)).tolist()  # each bin's mean
        self._remap(levels, edges, torch.searchsorted(edges, self.level_values()))

    def _known_value(self, value: float) -> bool:
        return any(abs(value - level) <= 1e-6 * max(1.0, abs(level)) for level in self.levels)

    def _remap(self, levels: list[float], edges: torch.Tensor | None, target: torch.Tensor) -> None:
        """Switch to ``levels``: the counts of old level ``i`` move to new level ``target[i]``."""
        size = len(levels)
        self.population = torch.zeros(size, dtype=torch.float64).index_add_(0, target, self.population)
        self.counts = torch.zeros(self.counts.size(0), size).index_add_(1, target, self.counts)
        self.levels, self.edges = levels, edges

    def _level_of(self, values: torch.Tensor) -> torch.Tensor:
        """``[R]`` level index of each finite reward value."""
        if self.edges is not None:
            return torch.searchsorted(self.edges, values)
        known = self.level_values()
        close = (values.unsqueeze(1) - known).abs() <= 1e-6 * known.abs().clamp_min(1.0)  # [R, L]
        return close.long().argmax(dim=1)

    def _free_row(self) -> int:
        if len(self.rows) >= self.capacity:  # forget the least recently visited prompt, reuse its row
            return self.rows.pop(next(iter(self.rows)))
        if len(self.rows) == self.counts.size(0):
            grown = max(16, min(2 * self.counts.size(0), self.capacity))
            self.counts = torch.cat(
                [self.counts, self.counts.new_zeros(grown - self.counts.size(0), len(self.levels))]
            )
        return len(self.rows)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint saves: enough for a resumed run to allocate exactly as the uninterrupted one."""
        rows = torch.tensor(list(self.rows.values()), dtype=torch.long)
        state = {
            "keys": torch.tensor(list(self.rows), dtype=torch.long),  # least recently visited first
            "counts": self.counts[rows].clone(),
            "levels": torch.tensor(self.levels, dtype=torch.float64),
            "population": self.population.clone(),
            "recent": self.recent.clone(),
        }
        if self.edges is not None:
            state["edges"] = self.edges.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.levels = state["levels"].tolist()
        self.population = state["population"].clone()
        self.counts = state["counts"].clone()
        self.rows = {key: row for row, key in enumerate(state["keys"].tolist())}
        self.recent = state["recent"].clone()
        self.edges = state["edges"].clone() if "edges" in state else None


# ---------------------------------------------------------------- expected learning signal under Dir(alpha)


def _rising(a: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """log of the rising factorial ``a (a + 1) ... (a + k - 1)``."""
    return torch.lgamma(a + k) - torch.lgamma(a)


def _moment_all_equal(alpha: torch.Tensor, n_max: int) -> torch.Tensor:
    """``[G, L, n_max + 1]``: ``E[theta_v ** n]`` under ``Dir(alpha)``, ``alpha`` ``[G, L]``."""
    n = torch.arange(n_max + 1, dtype=alpha.dtype)
    total = alpha.sum(dim=1, keepdim=True)  # [G, 1]
    return torch.exp(_rising(alpha.unsqueeze(2), n) - _rising(total.unsqueeze(2), n))


def _expected_value(alpha: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``E[Var_theta(r) (1 - E_theta[r])]`` under ``Dir(alpha)`` (``alpha`` ``[..., L]``, ``r`` ``[L]``), exactly,
    from the Dirichlet moments of ``mu = sum theta r`` and ``s = sum theta r**2`` (``R_k = sum alpha r**k``)."""
    b = alpha.sum(dim=-1)
    r1, r2, r3 = ((alpha * r**k).sum(dim=-1) for k in (1, 2, 3))
    second, third = b * (b + 1), b * (b + 1) * (b + 2)
    return r2 / b - (r1**2 + r2) / second - (r2 * r1 + r3) / second + (r1**3 + 3 * r1 * r2 + 2 * r3) / third


def contrast_probability(alpha: torch.Tensor, levels: torch.Tensor, n_max: int) -> torch.Tensor:
    """``[G, n_max + 1]``: the probability that ``n`` rollouts do not all earn the same reward, integrated over
    ``Dir(alpha)``. Alone it is the wrong objective for allocation (see the module); it calibrates the history."""
    return (1 - _moment_all_equal(alpha, n_max).sum(dim=1)).clamp_min(0)  # n = 0: no group, no contrast


def expected_signal(alpha: torch.Tensor, levels: torch.Tensor, n_max: int) -> torch.Tensor:
    """``[G, n_max + 1]``: expected learning signal of ``n`` rollouts, ``E[P(contrast | n) * Var(r) (1 - E r)]``
    under ``Dir(alpha)`` (``alpha`` ``[G, L]`` over the reward ``levels`` ``[L]``), in closed form.

    ``E[theta_v ** n f(theta)] = E[theta_v ** n] E'[f]`` with ``E'`` under ``Dir(alpha + n e_v)``, so the expectation
    of the product needs only moments.
    """
    low, high = levels.min(), levels.max()
    r = (levels - low) / (high - low)
    g, size = alpha.shape
    n = torch.arange(n_max + 1, dtype=alpha.dtype)
    tilted = alpha.view(g, 1, 1, size) + torch.eye(size, dtype=alpha.dtype).view(1, size, 1, size) * n.view(
        1, 1, -1, 1
    )  # [G, L, n_max + 1, L]: alpha + n e_v
    all_equal = (_moment_all_equal(alpha, n_max) * _expected_value(tilted, r)).sum(dim=1)  # [G, n_max + 1]
    return _expected_value(alpha, r).unsqueeze(1) - all_equal


ALLOCATION_RULES: dict[str, AllocationRule] = {
    "expected_signal": expected_signal,
    "contrast": contrast_probability,
}


def register_allocation_rule(name: str, rule: AllocationRule) -> None:
    """Register ``rule(alpha [G, L], levels [L], n_max) -> [G, n_max + 1]`` scores, concave and non-decreasing in n,
    under ``name`` (usable as `pods_allocation`)."""
    ALLOCATION_RULES[name] = rule


def get_allocation_rule(name: str) -> AllocationRule:
    return resolve(name, ALLOCATION_RULES, "allocation rule")


# ---------------------------------------------------------------- the allocation


def greedy_allocation(scores: torch.Tensor, low: int, high: int, total: int) -> torch.Tensor:
    """``[G]`` rollouts per prompt in ``[low, high]``, ``min(total, G * high)`` in all, maximising
    ``sum_g scores[g, n_g]``.

    Starting from ``low`` each, the budget goes one rollout at a time to the largest marginal gain
    ``scores[g, n + 1] - scores[g, n]`` (ties: the smaller count, then the lower group), which is optimal when every
    row of ``scores`` (``[G, high + 1]``) is concave in ``n``. The whole budget is spent, even on gains of zero, so
    that the rollouts generated are known before generating (processes generate alike, and none pads).
    """
    g = scores.size(0)
    if total < g * low:
        raise ValueError(f"A budget of {total} rollouts cannot give {g} prompts {low} each.")
    gains = scores[:, low + 1 : high + 1] - scores[:, low:high]  # [G, high - low]: the step from low + j
    if gains.numel() and (gains.diff(dim=1) > 1e-9 * (1 + gains.abs().max())).any():
        raise ValueError(
            "The allocation rule's scores must be concave in the number of rollouts (each extra rollout adds no "
            "more than the one before); greedy allocation is not optimal otherwise."
        )
    by_step = gains.t().flatten()  # [(high - low) * G]: position i is step i // G of group i % G
    taken = torch.sort(-by_step, stable=True).indices[: total - g * low]  # ties: smaller step, then lower group
    return low + torch.bincount(taken % g, minlength=g)


def allocate(
    history: PromptHistory, keys: list[int], low: int, high: int, budget: float, rule: AllocationRule
) -> torch.Tensor:
    """``[G]`` rollouts for the prompts ``keys`` (all processes, in group order): ``greedy_allocation`` of ``rule``'s
    scores under each prompt's posterior, ``floor(budget * G)`` in all. Until two reward levels have been
    seen there is no contrast to predict, and the budget is spread evenly."""
    total = int(budget * len(keys) + 1e-9)
    if len(history.levels) < 2:
        scores = torch.arange(high + 1, dtype=torch.float64).expand(len(keys), -1)  # equal gains: round-robin
        return greedy_allocation(scores, low, high, total)
    scores = rule(history.posterior(keys), history.level_values(), high)
    if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != (len(keys), high + 1):
        raise ValueError(f"An allocation rule must return a tensor of shape {(len(keys), high + 1)} (scores per n).")
    return greedy_allocation(scores.double(), low, high, total)


class BudgetedAllocation:
    """A run's budgeted generation: `plan` the counts of a generation's prompts, then `observe` their rewards.

    Args:
        low: fewest rollouts per prompt (`pods_m`); high: most (`pods_n`).
        budget: mean rollouts per prompt (`pods_budget`).
        rule: the allocation rule's name or dotted path (`pods_allocation`).
        capacity, decay: of the `PromptHistory`.
    """

    def __init__(self, low: int, high: int, budget: float, rule: str, capacity: int, decay: float):
        self.low, self.high, self.budget = low, high, budget
        self.rule = get_allocation_rule(rule)
        self.history = PromptHistory(capacity, decay)
        self._planned: tuple[list[int], torch.Tensor, torch.Tensor] | None = None

    def plan(self, keys: list[int], processes: int = 1) -> torch.Tensor:
        """``[G]`` rollouts for the prompts ``keys`` (all processes, in group order, ``G / processes`` each): each
        process's prompts share its own ``budget * G / processes`` rollouts, so processes generate alike."""
        if len(keys) % processes:
            raise ValueError(f"{len(keys)} prompts cannot be shared equally by {processes} processes.")
        per_process = len(keys) // processes
        counts = torch.cat(
            [
                allocate(self.history, keys[first : first + per_process], self.low, self.high, self.budget, self.rule)
                for first in range(0, len(keys), per_process)
            ]
        )
        self._planned = (keys, counts, self.history.known(keys))
        return counts

    def observe(self, rewards: torch.Tensor) -> dict[str, float]:
        """Update the history with the planned prompts' ``[G, N]`` rewards (NaN where nothing was generated) and
        return the allocation's metrics: its spread, the share of rollouts given to prompts without history, and
        the fraction of groups with contrast, as predicted before generating (not while fewer than two reward
        levels are known) and as observed."""
        keys, counts, known = self._planned
        self._planned = None
        metrics = {}
        if len(self.history.levels) >= 2:
            contrast = contrast_probability(self.history.posterior(keys), self.history.level_values(), self.high)
            metrics["predicted_contrast"] = contrast.gather(1, counts.unsqueeze(1)).mean().item()
        self.history.update(keys, rewards)
        counts = counts.float()
        return {
            "allocation_min": counts.min().item(),
            "allocation_mean": counts.mean().item(),
            "allocation_max": counts.max().item(),
            "budget_share_no_history": (counts[~known].sum() / counts.sum()).item(),
            **metrics,
            "observed_contrast": has_contrast(rewards).float().mean().item(),
        }


class BudgetedMode(GenerationMode):
    """``pods_generation="budgeted"``: each prompt's rollouts allocated before generating, from its history
    (`BudgetedAllocation`, each process's prompts within its own share of the budget), and generated in one call,
    every rollout its own request (group size 1, which vLLM server mode also takes unchanged). The history is what a
    checkpoint keeps, so a resumed run allocates as the uninterrupted one."""

    dependent_waves = False

    def __init__(self, config: Any):
        self.allocation = BudgetedAllocation(
            config.pods_m, config.pods_n, config.pods_budget, config.pods_allocation, config.pods_history_size,
            config.pods_history_decay,
        )  # fmt: skip

    def first_wave(self, state: WaveState) -> Wave:
        counts = self.allocation.plan(state.group_keys(), state.processes)  # [G], the same on every process
        return Wave(torch.arange(counts.numel()), counts, 1)

    def metrics(self, state: WaveState) -> dict[str, float]:
        return {**super().metrics(state), **self.allocation.observe(state.rewards)}

    def state_dict(self) -> dict[str, Any]:
        return {"prompt_history": self.allocation.history.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.allocation.history.load_state_dict({k: v.cpu() for k, v in state["prompt_history"].items()})

    def fork(self) -> BudgetedMode:
        """A mode with a plan of its own, sharing this one's prompt history."""
        forked = copy.copy(self)
        forked.allocation = copy.copy(self.allocation)
        return forked

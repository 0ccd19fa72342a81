"""The contrast rate a run observes: how likely a group of ``n`` rollouts is to show contrast, for any ``n``.

A group shows contrast when its rewards differ; a group without contrast has zero advantages and carries no signal.
Refill and auto generation (`trl_pods.refill`, `trl_pods.auto`) size their draws from this rate, so that one
generation call usually finds the groups with contrast a step trains on.

The model: a rollout of a prompt *passes* (earns more than the midpoint of the lowest and highest rewards seen) with
the prompt's own probability ``q``, and ``q`` varies across the prompts of the data as ``Beta(a, b)``. A group of
``n`` rollouts then lacks contrast with probability ``E[q^n + (1 - q)^n]``, so

    P(contrast | n) = 1 - (B(a + n, b) + B(a, b + n)) / B(a, b),

which rises with ``n`` the way the data's mix of easy, hard and unsolved prompts says: a prompt solved once in twenty
tries rarely shows contrast in 4 rollouts and often in 16. `ContrastHistory` fits ``(a, b)`` by maximum likelihood
(beta-binomial) to the pass counts of the groups observed, each generation's weighing `HISTORY_DECAY` times the
next one's, so that the fit follows the policy as it learns (early in training the rate can rise tenfold within a
few steps); the prompts drawn are a uniform sample of the data, so the fit describes the data under the policy.
With rewards that take many values the binary view undercounts contrast (two different failing rewards also
differ): the sizing is then conservative.

`prompts_to_cover` turns a rate into a draw: the fewest prompts whose groups with contrast cover what a step still
lacks with a given probability.

This module imports only torch.
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

import torch

__all__ = [
    "ContrastHistory", "at_least", "binomial_terms", "contrast_rate", "fit_pass_rates", "kept_signal", "pass_counts",
    "prompts_to_cover",
]  # fmt: skip

HISTORY_DECAY = 0.8
"""Weight of a generation's groups relative to the next generation's: about the last five generations count."""
HISTORY_GROUPS = 512
"""The most groups the history keeps (the most recent); older ones weigh almost nothing anyway."""
_MEANS = torch.linspace(0.005, 0.995, 100, dtype=torch.float64)  # the grid of Beta means ...
_SIZES = torch.logspace(-1.5, 3, 46, dtype=torch.float64)  # ... and of concentrations a + b the fit searches


def pass_counts(rewards: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``[G, N]`` rewards (NaN: not generated or unscorable) -> ``([G], [G])``: rollouts above ``threshold`` and
    scored rollouts per group."""
    scored = rewards.isfinite()
    return ((rewards > threshold) & scored).sum(dim=1), scored.sum(dim=1)


def _log_beta(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)


def fit_pass_rates(
    passes: torch.Tensor, counts: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[float, float]:
    """Maximum-likelihood ``Beta(a, b)`` of the prompts' pass rates from groups with ``passes[g]`` of ``counts[g]``
    rollouts passing (beta-binomial; each group's log-likelihood weighted by ``weights[g]``, 1 by default), over a
    grid of means and concentrations. ``(1, 1)`` (uniform) without data.

    The grid keeps the fit finite where the maximum lies at a boundary (every group all-pass or all-fail: the
    likelihood grows as the concentration falls, and the smallest one on the grid stands for "prompts are either
    solved or not")."""
    keep = counts > 0
    if not keep.any():
        return 1.0, 1.0
    weights = torch.ones(counts.shape, dtype=torch.float64) if weights is None else weights.double()
    outcomes, index = torch.stack([passes[keep], counts[keep]], dim=1).unique(dim=0, return_inverse=True)
    times = torch.zeros(outcomes.size(0), dtype=torch.float64).index_add_(0, index, weights[keep])  # [U]
    k, n = (outcomes[:, i].double().view(-1, 1, 1) for i in (0, 1))  # [U, 1, 1]: the distinct outcomes
    a = (_MEANS.view(-1, 1) * _SIZES.view(1, -1)).unsqueeze(0)  # [1, means, sizes]
    b = ((1 - _MEANS).view(-1, 1) * _SIZES.view(1, -1)).unsqueeze(0)
    per_outcome = _log_beta(a + k, b + n - k) - _log_beta(a, b)  # [U, means, sizes]
    likelihood = (per_outcome * times.view(-1, 1, 1)).sum(dim=0)  # [means, sizes]
    best = int(likelihood.argmax())
    mean, size = _MEANS[best // _SIZES.numel()].item(), _SIZES[best % _SIZES.numel()].item()
    return mean * size, (1 - mean) * size


def _beta_binomial(a: float, b: float, n: int, k: int) -> float:
    """``P(k passes of n)`` when pass rates follow ``Beta(a, b)`` (the beta-binomial), from log space."""
    base = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    return math.exp(
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        + math.lgamma(a + k) + math.lgamma(b + (n - k)) - math.lgamma(a + b + n) - base
    )  # fmt: skip


def contrast_rate(a: float, b: float, n: int) -> float:
    """``P(contrast | n)`` when pass rates follow ``Beta(a, b)`` (see the module docstring); 0 for ``n <= 1``."""
    if n <= 1:
        return 0.0
    return max(0.0, 1.0 - _beta_binomial(a, b, n, n) - _beta_binomial(a, b, n, 0))


def kept_signal(a: float, b: float, n: int, m: int) -> float:
    """The expected variance of the ``m`` rewards a group with contrast keeps, when ``n`` rollouts are generated and
    max-variance down-sampling keeps ``m`` of them (``n == m``: all), pass rates following ``Beta(a, b)``.

    In the binary view of the module docstring, a group with ``k`` passes keeps the number of passes ``j`` nearest
    ``m / 2`` that its passes and failures allow, whose rewards vary by ``j (m - j) / m^2``: a quarter when balanced.
    More rollouts to choose from balance the kept group more often, so the signal a trained group carries grows with
    ``n``; 0 for ``m < 2`` or ``n < 2``.

    >>> round(kept_signal(1.0, 1.0, 4, 4), 4), round(kept_signal(1.0, 1.0, 16, 4), 4)
    (0.2083, 0.2417)
    """
    if n < 2 or m < 2:
        return 0.0
    total, contrast = 0.0, 0.0
    for k in range(1, n):
        p = _beta_binomial(a, b, n, k)
        j = min(max(m // 2, m - (n - k)), k, m)
        total, contrast = total + p * j * (m - j) / m**2, contrast + p
    return total / contrast if contrast > 0 else 0.0


TAIL = 1e-17
"""Binomial terms below this probability are left out (`binomial_terms`): sums change by far less than a rounding
error's worth of a plan's choice, and a term's support shrinks from ``trials + 1`` to about ``20 sqrt(trials)``."""

EXACT_TRIALS = 1000
"""Up to this many trials a binomial coefficient fits in a float (``comb(1030, 515)`` does not)."""
ROUNDING = 1e-12
"""Probabilities this close count as equal (`prompts_to_cover`)."""


def _log_term(trials: int, x: int, p: float) -> float:
    """``log P(Binomial(trials, p) = x)`` for ``0 <= x <= trials`` and ``0 < p < 1``."""
    return (
        math.lgamma(trials + 1) - math.lgamma(x + 1) - math.lgamma(trials - x + 1)
        + x * math.log(p) + (trials - x) * math.log1p(-p)
    )  # fmt: skip


@functools.lru_cache(maxsize=65536)
def binomial_terms(trials: int, p: float) -> tuple[int, tuple[float, ...]]:
    """``P(Binomial(trials, p) = x)`` for ``x = start, start + 1, ...`` as ``(start, terms)``: the terms of at least
    `TAIL`, from the mode outwards by the ratio of neighbouring terms. Past `EXACT_TRIALS` the mode's term comes
    from log space (no overflow at any ``trials``) and the terms are scaled to sum to 1 (the log-gamma of a large
    count leaves a relative error of about 1e-11).

    >>> binomial_terms(2, 0.5)
    (0, (0.25, 0.5, 0.25))
    """
    if p <= 0.0 or p >= 1.0 or trials == 0:
        return (0 if p <= 0.0 else trials), (1.0,)
    mode = min(int((trials + 1) * p), trials)
    if trials <= EXACT_TRIALS:
        center = math.comb(trials, mode) * p**mode * (1 - p) ** (trials - mode)
    else:
        center = math.exp(_log_term(trials, mode, p))
    odds = p / (1 - p)
    above, term, x = [], center, mode
    while x < trials:
        term *= (trials - x) / (x + 1) * odds
        if term < TAIL:
            break
        above.append(term)
        x += 1
    below, term, x = [], center, mode
    while x > 0:
        term *= x / ((trials - x + 1) * odds)
        if term < TAIL:
            break
        below.append(term)
        x -= 1
    terms = (*below[::-1], center, *above)
    if trials > EXACT_TRIALS:
        total = math.fsum(terms)
        terms = tuple(term / total for term in terms)
    return mode - len(below), terms


def at_least(k: int, trials: int, p: float) -> float:
    """``P(Binomial(trials, p) >= k)``."""
    start, terms = binomial_terms(trials, p)
    return math.fsum(terms[max(k - start, 0) :])


def prompts_to_cover(missing: int, rate: float, coverage: float, limit: int) -> int:
    """The fewest prompts (at most ``limit``) whose groups, each with contrast at ``rate``, hold at least ``missing``
    with contrast with probability ``coverage``; ``limit`` when even that many fall short, 0 when nothing is
    missing. A probability within `ROUNDING` of ``coverage`` reaches it (an exact tie, e.g. 0.75 at rate 0.5, is
    not lost to the order of a sum).

    In log space, and in about ``sqrt(missing)`` steps: from a little below the normal approximation's answer, the
    probability is carried one prompt at a time (``P(X_{n+1} >= k) = P(X_n >= k) + p P(X_n = k - 1)``); a
    bisection below the start if it already reaches the coverage.

    >>> prompts_to_cover(4, 0.5, 0.9, 100)
    12
    """
    if missing <= 0 or limit <= 0:
        return 0
    least, target = min(missing, limit), coverage - ROUNDING
    if rate <= 0.0 or rate >= 1.0:
        return least if rate >= 1.0 or target <= 0.0 else limit
    spread = math.sqrt(rate * (1 - rate)) * statistics.NormalDist().inv_cdf(min(max(coverage, 1e-9), 1 - 1e-9))
    root = (spread + math.sqrt(spread * spread + 4 * rate * max(missing - 0.5, 0.0))) / (2 * rate)
    start = min(max(least, int(root * root - 3 * root - 3)), limit)  # below the answer, nearly always
    reached = at_least(missing, start, rate)
    if reached >= target:
        low, high = least, start
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if at_least(missing, middle, rate) >= target else (middle + 1, high)
        return low
    if start == limit:
        return limit
    term = math.exp(_log_term(start, missing - 1, rate))  # P(X_start = missing - 1); start >= missing here
    for prompts in range(start, limit):
        reached += rate * term  # P(X_{prompts + 1} >= missing)
        term *= (prompts + 1) / (prompts + 2 - missing) * (1 - rate)  # P(X_{prompts + 1} = missing - 1)
        if reached >= target:
            return prompts + 1
    return limit


class ContrastHistory:
    """Pass counts of the groups observed (at most `HISTORY_GROUPS`, the most recent), each generation's weighing
    ``decay`` times the next's, and the fit of their pass rates.

    The pass threshold is the midpoint of the lowest and highest finite reward the history has seen, fixed at each
    group's observation; the fit (`fit_pass_rates`) is recomputed when groups arrive.
    """

    def __init__(self, capacity: int = HISTORY_GROUPS, decay: float = HISTORY_DECAY):
        self.capacity, self.decay = capacity, decay
        self.passes = torch.zeros(0, dtype=torch.long)
        self.counts = torch.zeros(0, dtype=torch.long)
        self.weights = torch.zeros(0, dtype=torch.float64)
        self.low, self.high = math.inf, -math.inf
        self.beta = (1.0, 1.0)

    def observe(self, rewards: torch.Tensor) -> None:
        """Add the groups of a generation: ``[G, N]`` rewards, NaN where nothing was generated (or unscorable)."""
        finite = rewards[rewards.isfinite()]
        if finite.numel():
            self.low, self.high = min(self.low, finite.min().item()), max(self.high, finite.max().item())
        threshold = (self.low + self.high) / 2 if self.high > self.low else math.inf
        passes, counts = pass_counts(rewards.cpu(), threshold)
        self.passes = torch.cat([self.passes, passes])[-self.capacity :]
        self.counts = torch.cat([self.counts, counts])[-self.capacity :]
        fresh = torch.ones(passes.numel(), dtype=torch.float64)
        self.weights = torch.cat([self.weights * self.decay, fresh])[-self.capacity :]
        self.beta = fit_pass_rates(self.passes, self.counts, self.weights)

    def rate(self, n: int) -> float:
        """``P(contrast | n)`` under the current fit."""
        return contrast_rate(*self.beta, n)

    def state_dict(self) -> dict[str, Any]:
        return {
            "passes": self.passes, "counts": self.counts, "weights": self.weights,
            "range": torch.tensor([self.low, self.high]),
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.passes, self.counts, self.weights = (state[k].cpu() for k in ("passes", "counts", "weights"))
        self.low, self.high = state["range"].tolist()
        self.beta = fit_pass_rates(self.passes, self.counts, self.weights)

"""Budgeted generation's pure parts (`trl_pods.budget`): the closed-form expected signal against Monte Carlo, greedy
allocation against brute force, the allocation's behaviour on prompts with and without contrast, the bounded
prompt history and its checkpoint state, and the generation calls per engine."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from PIL import Image

from trl_pods.budget import (
    MAX_LEVELS,
    BudgetedAllocation,
    PromptHistory,
    allocate,
    contrast_probability,
    expected_signal,
    get_allocation_rule,
    greedy_allocation,
    prompt_key,
    register_allocation_rule,
)

BINARY = torch.tensor([0.0, 1.0], dtype=torch.float64)


def _monte_carlo(alpha: torch.Tensor, levels: torch.Tensor, n: int, samples: int = 400_000) -> float:
    torch.manual_seed(0)
    theta = torch.distributions.Dirichlet(alpha).sample((samples,))  # [S, L]
    r = (levels - levels.min()) / (levels.max() - levels.min())
    mean = (theta * r).sum(1)
    variance = (theta * r**2).sum(1) - mean**2
    return ((1 - (theta**n).sum(1)) * variance * (1 - mean)).mean().item()


@pytest.mark.parametrize(
    "alpha, levels",
    [
        ([3.0, 1.0], [0.0, 1.0]),
        ([0.5, 0.5], [0.0, 1.0]),
        ([1.0, 9.0], [0.0, 1.0]),
        ([1.0, 2.0, 3.0], [0.0, 0.5, 1.0]),
        ([0.3, 4.0, 1.5, 2.0], [-1.0, 0.0, 0.2, 2.0]),
    ],
    ids=["binary-likely-wrong", "binary-uninformed", "binary-likely-right", "graded", "graded-unordered"],
)
def test_expected_signal_closed_form_matches_monte_carlo(alpha, levels):
    """The Dirichlet-moment formula equals E[P(contrast | n) Var(r) (1 - E r)] estimated by sampling the posterior,
    for 0/1 and graded rewards (levels in any order, any scale)."""
    alpha, levels = torch.tensor([alpha], dtype=torch.float64), torch.tensor(levels, dtype=torch.float64)
    scores = expected_signal(alpha, levels, 12)
    for n in (2, 4, 12):
        assert scores[0, n].item() == pytest.approx(_monte_carlo(alpha[0], levels, n), rel=0.02, abs=1e-4)


def test_binary_value_is_knapsack_rl_p_one_minus_p_squared():
    """With 0/1 rewards and a very confident posterior the signal of many rollouts is p (1 - p)^2, and the contrast
    probability 1 - p^n - (1 - p)^n."""
    p = 0.3
    alpha = torch.tensor([[(1 - p) * 1e6, p * 1e6]], dtype=torch.float64)
    assert expected_signal(alpha, BINARY, 200)[0, 200].item() == pytest.approx(p * (1 - p) ** 2, rel=1e-4)
    assert contrast_probability(alpha, BINARY, 4)[0, 4].item() == pytest.approx(1 - p**4 - (1 - p) ** 4, rel=1e-4)


def test_scores_are_concave_and_non_decreasing_in_n():
    """Greedy allocation is exact only for concave scores: both built-in rules are, on random posteriors."""
    torch.manual_seed(1)
    alpha = torch.rand(64, 3, dtype=torch.float64) * 10 + 0.01
    levels = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    for rule in (expected_signal, contrast_probability):
        gains = rule(alpha, levels, 16)[:, 2:].diff(dim=1)
        assert (gains >= -1e-12).all() and (gains.diff(dim=1) <= 1e-12).all()


@pytest.mark.parametrize("rule", ["expected_signal", "contrast", "uniform"])
def test_greedy_allocation_matches_brute_force(rule):
    """On small cases (1-3 prompts, counts 2..6, every budget) greedy marginal allocation reaches the best total
    score that any allocation within the budget reaches, and never exceeds the budget or the bounds."""
    torch.manual_seed(2)
    for _ in range(120):
        groups, high = int(torch.randint(1, 4, ())), int(torch.randint(2, 7, ()))
        alpha = torch.rand(groups, 2, dtype=torch.float64) * 6 + 0.05
        if rule == "uniform":
            scores = torch.arange(high + 1, dtype=torch.float64).expand(groups, -1)
        else:
            scores = get_allocation_rule(rule)(alpha, BINARY, high)
        total = int(torch.randint(2 * groups, high * groups + 3, ()))
        counts = greedy_allocation(scores, 2, high, total)
        assert counts.sum() <= total and counts.min() >= 2 and counts.max() <= high
        best = max(
            sum(scores[g, c[g]].item() for g in range(groups))
            for c in itertools.product(range(2, high + 1), repeat=groups)
            if sum(c) <= total
        )
        assert sum(scores[g, counts[g]].item() for g in range(groups)) == pytest.approx(best, abs=1e-12)


def test_greedy_allocation_refuses_non_concave_scores_and_an_impossible_budget():
    """A rule whose extra rollouts gain more and more would make greedy allocation wrong: a clear error instead;
    so does a budget below pods_m per prompt."""
    convex = (torch.arange(9, dtype=torch.float64) ** 2).expand(3, -1)
    with pytest.raises(ValueError, match="concave"):
        greedy_allocation(convex, 2, 8, 12)
    with pytest.raises(ValueError, match="cannot give 3 prompts 2 each"):
        greedy_allocation(torch.zeros(3, 9), 2, 8, 5)


def _history(visits: dict[int, list[list[float]]], decay: float = 1.0) -> PromptHistory:
    history = PromptHistory(capacity=100, decay=decay)
    for rewards in zip(*visits.values(), strict=True):
        history.update(list(visits), torch.tensor(rewards))
    return history


def test_prompts_without_contrast_get_the_minimum_and_the_rest_goes_where_signal_is():
    """After several visits, a prompt always solved and one never solved get pods_m; the budget goes to the prompts
    that showed contrast, the rarely solved one first; a new prompt gets a share from the population prior; the
    total is at most floor(budget x prompts)."""
    visits = {
        1: [[1.0] * 8] * 4,  # always right
        2: [[0.0] * 8] * 4,  # always wrong
        3: [[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]] * 4,  # half
        4: [[1.0] + [0.0] * 7] * 4,  # 1 in 8
    }
    history = _history(visits)
    counts = allocate(history, [1, 2, 3, 4, 99], 4, 16, 8.5, expected_signal)
    assert counts[0] == counts[1] == 4
    assert counts[3] > counts[2] > 4, "the rarely solved prompt needs more rollouts to show its success"
    assert 4 < counts[4] < 16, "a prompt without history gets a prior-based share"
    assert counts.sum() <= math.floor(8.5 * 5)


def test_contrast_probability_alone_pours_rollouts_into_nearly_solved_prompts():
    """Why the value term matters: ranking by contrast probability alone gives a prompt solved 31 times in 32 more
    rollouts than a prompt solved 1 time in 2; the default rule does the opposite."""
    history = _history({1: [[1.0] * 15 + [0.0]] * 2, 2: [[1.0, 0.0] * 8] * 2})
    by_contrast = allocate(history, [1, 2], 4, 16, 10, contrast_probability)
    by_signal = allocate(history, [1, 2], 4, 16, 10, expected_signal)
    assert by_contrast[0] > by_contrast[1]
    assert by_signal[0] < by_signal[1]


def test_without_two_reward_levels_the_budget_is_spread_evenly():
    """Before two distinct rewards have been seen there is nothing to predict contrast from: counts differ by at most
    one, and the budget is spent."""
    history = _history({1: [[0.0] * 4], 2: [[0.0] * 4]})
    counts = allocate(history, [1, 2, 3], 4, 16, 6.5, expected_signal)
    assert sorted(counts.tolist()) == [6, 6, 7]


def test_history_is_bounded_decays_and_round_trips_through_its_state():
    """At most `capacity` prompts are kept (the least recently visited forgotten); earlier visits weigh `decay`; a
    history rebuilt from its state dict gives the same posteriors and forgets the same prompt next."""
    history = PromptHistory(capacity=2, decay=0.5)
    history.update([1, 2], torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    history.update([1], torch.tensor([[1.0, 1.0]]))  # prompt 1 visited again: 2 is now the oldest
    history.update([3], torch.tensor([[0.0, float("nan")]]))  # NaN (not generated) is ignored
    assert len(history) == 2 and history.known([1, 2, 3]).tolist() == [True, False, True]
    counts = history.posterior([1]) - history.posterior([99])  # minus the prior: the counts
    assert history.levels == [1.0, 0.0], "levels in the order they first appeared"
    assert counts[0].tolist() == pytest.approx([2.5, 0.5]), "0.5 x (1 right, 1 wrong) + (2 right, 0 wrong)"
    restored = PromptHistory(capacity=2, decay=0.5)
    restored.load_state_dict(history.state_dict())
    assert torch.equal(restored.posterior([1, 3, 99]), history.posterior([1, 3, 99]))
    for h in (history, restored):
        h.update([4], torch.tensor([[1.0, 1.0]]))
    assert restored.known([1, 3, 4]).tolist() == history.known([1, 3, 4]).tolist() == [False, True, True]


def test_history_memory_per_prompt():
    """The documented bound: about 70 bytes of bookkeeping plus 4 bytes per reward level per prompt (0/1 rewards
    here: under 100 bytes with the counts table's growth slack)."""
    import tracemalloc

    history = PromptHistory(capacity=200_000, decay=0.8)
    keys = [prompt_key(f"problem {i}") for i in range(50_000)]
    tracemalloc.start()
    for first in range(0, len(keys), 1000):
        history.update(keys[first : first + 1000], torch.randint(0, 2, (1000, 8)).float())
    python_bytes = tracemalloc.get_traced_memory()[0]  # the key -> row index (torch's storage is not traced)
    tracemalloc.stop()
    table_bytes = history.counts.numel() * history.counts.element_size()
    assert history.counts.size(1) == 2
    assert (python_bytes + table_bytes) / len(keys) < 100


def test_graded_rewards_keep_their_exact_values_as_levels():
    """Up to MAX_LEVELS distinct values (0/1, graded or partial credit) the levels are the values themselves."""
    history = PromptHistory(capacity=10, decay=1.0)
    history.update([1], torch.arange(MAX_LEVELS, dtype=torch.float).unsqueeze(0))
    history.update([2], torch.tensor([[3.0, 3.0, 15.0]]))
    assert history.levels == [float(v) for v in range(MAX_LEVELS)] and history.edges is None
    counts = (history.posterior([2]) - history.posterior([99]))[0]
    assert counts[3].item() == pytest.approx(2.0) and counts[15].item() == pytest.approx(1.0)


def _reward_model_visits(generator: torch.Generator, prompts: int, n: int) -> torch.Tensor:
    """``[prompts, n]`` rewards shaped like a reward model's: a continuous score around each prompt's own mean (prompt
    quality spread 1, rollout spread 0.6), except every fourth prompt, which always earns the same fixed penalty
    (e.g. a failed format check), so its group has no contrast."""
    means = torch.linspace(-1.5, 1.5, prompts).unsqueeze(1)  # [P, 1]
    scores = means + 0.6 * torch.randn(prompts, n, generator=generator)
    scores[::4] = -3.0
    return scores


def test_continuous_rewards_are_binned_by_quantiles_that_follow_the_distribution():
    """A reward model's scores (more than MAX_LEVELS distinct values) are counted in quantile bins of the recent
    rewards, not frozen at the first values seen: the levels span the scores' range, the fixed penalty keeps a bin of
    its own, and when the scores drift the bins drift with them."""
    generator = torch.Generator().manual_seed(0)
    history = PromptHistory(capacity=100, decay=0.8)
    keys = list(range(16))
    history.update(keys[:2], _reward_model_visits(generator, 2, 8))  # the first prompts alone: few values
    for _ in range(6):
        history.update(keys, _reward_model_visits(generator, 16, 8))
    levels = history.level_values()
    assert history.edges is not None and 8 <= levels.numel() <= MAX_LEVELS
    assert levels.min().item() == -3.0, "the penalty is a bin of its own"
    spread = levels[levels > -3.0]
    assert spread.min() < -1.0 and spread.max() > 1.0, f"levels cover the scores: {levels.tolist()}"
    for _ in range(8):  # the policy improves: every score moves up by 2
        history.update(keys, _reward_model_visits(generator, 16, 8) + 2.0)
    assert history.level_values().max() > levels.max() + 1.5, "the bins followed the scores"


def test_continuous_rewards_give_a_calibrated_allocation():
    """With a reward model's kind of output, the contrast predicted before generating is within 0.1 of the contrast
    observed from the fourth visit on (frozen levels predicted 0.53 against 1.0 observed), and per prompt it separates
    the prompts whose score varies from those that always earn the fixed penalty."""
    generator = torch.Generator().manual_seed(1)
    allocation = BudgetedAllocation(4, 16, 8, "expected_signal", capacity=100, decay=0.8)
    keys = list(range(16))
    errors = []
    for visit in range(10):
        counts = allocation.plan(keys)
        history = allocation.history
        rewards = _reward_model_visits(generator, 16, 16)
        rewards[torch.arange(16) >= counts.unsqueeze(1)] = torch.nan  # [G, N], only the allocated rollouts
        if visit >= 3:
            contrast = contrast_probability(history.posterior(keys), history.level_values(), 16)  # [G, 17]
            predicted = contrast.gather(1, counts.unsqueeze(1)).squeeze(1)  # [G]
        metrics = allocation.observe(rewards)
        if visit >= 3:
            errors.append(abs(metrics["predicted_contrast"] - metrics["observed_contrast"]))
            penalty = torch.arange(16) % 4 == 0
            assert predicted[~penalty].min() > 0.9 and predicted[penalty].max() < 0.4, predicted.tolist()
    assert max(errors) < 0.1, errors


def test_a_prompt_twice_in_one_generation_is_visited_once():
    """Two groups of the same prompt in one generation count as one visit: earlier counts decay once, and both
    groups' rollouts are added."""
    history = PromptHistory(capacity=10, decay=0.5)
    history.update([7], torch.tensor([[1.0, 1.0, 0.0, 0.0]]))
    history.update([7, 7], torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    counts = (history.posterior([7]) - history.posterior([99]))[0]
    assert counts.tolist() == pytest.approx([0.5 * 2 + 3, 0.5 * 2 + 1])


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_each_process_spends_its_own_share_of_the_budget(processes):
    """Each process's prompts share its own budget, all of it: with equal prompts per process every process generates
    the same number of rollouts (no padding: generated / budget = 1), also before any history and with prompts of
    very different odds."""
    allocation = BudgetedAllocation(4, 16, 8, "expected_signal", capacity=100, decay=0.8)
    keys = list(range(16))
    for visit in range(3):
        counts = allocation.plan(keys, processes)  # [G]
        per_process = counts.view(processes, -1).sum(dim=1)
        assert per_process.tolist() == [8 * 16 // processes] * processes, (visit, counts.tolist())
        success = torch.linspace(0, 1, 16).unsqueeze(1)  # prompt g solved with probability g / 15
        rewards = (torch.rand(16, 16, generator=torch.Generator().manual_seed(visit)) < success).float()
        rewards[torch.arange(16) >= counts.unsqueeze(1)] = torch.nan
        allocation.observe(rewards)
    assert counts.min() == 4 and counts.max() > 8, "the history moved rollouts between prompts"
    with pytest.raises(ValueError, match="shared equally"):
        allocation.plan(keys[:15], 2)


def test_prompt_key_is_a_content_digest():
    """The same content gives the same 63-bit key (on every process, in every run); different content another."""
    chat = [{"role": "user", "content": "What is 2 + 3?"}]
    assert prompt_key(chat) == prompt_key([dict(reversed(list(chat[0].items())))])
    assert prompt_key(chat) != prompt_key([{"role": "user", "content": "What is 2 + 4?"}])
    assert 0 <= prompt_key("x") < 2**63


def test_prompt_key_is_a_digest_of_the_whole_row():
    """Budgeted generation keyed a prompt's history on its text alone: rows sharing a question and differing in an
    image (TRL's vision layout) or another column shared one history, and a row without a ``prompt`` column (an
    environment's dataset) raised KeyError. The key is now the whole row's: images by their pixels, not their
    ``repr`` (which holds a memory address), so equal content gives equal keys on every visit and process."""
    question = [{"role": "user", "content": "What color is this picture?"}]
    red, green = (Image.new("RGB", (8, 8), color) for color in ((250, 0, 0), (0, 250, 0)))
    keys = {
        "red": prompt_key({"prompt": question, "image": red}),
        "red again": prompt_key({"prompt": question, "image": Image.new("RGB", (8, 8), (250, 0, 0))}),
        "green": prompt_key({"prompt": question, "image": green}),
        "red, another answer": prompt_key({"prompt": question, "image": red, "answer": "blue"}),
        "pixels as a tensor": prompt_key({"prompt": question, "image": torch.ones(2, 2)}),
        "other pixels": prompt_key({"prompt": question, "image": torch.zeros(2, 2)}),
        "no prompt column": prompt_key({"a": 1, "b": 2}),
        "no prompt column, other values": prompt_key({"a": 3, "b": 4}),
    }
    assert keys["red"] == keys["red again"]
    assert len(set(keys.values())) == len(keys) - 1


def test_allocation_rules_are_pluggable():
    """A registered name or a dotted path selects the rule; an unknown one is a clear error listing the names; a rule
    returning the wrong shape is refused."""
    register_allocation_rule("flat", lambda alpha, levels, n_max: torch.zeros(alpha.size(0), n_max + 1))
    assert get_allocation_rule("trl_pods.budget.contrast_probability") is contrast_probability
    with pytest.raises(ValueError, match="Unknown allocation rule 'nope'.*'expected_signal'"):
        get_allocation_rule("nope")
    register_allocation_rule("bad", lambda alpha, levels, n_max: torch.zeros(n_max + 1))
    allocation = BudgetedAllocation(2, 8, 4, "bad", capacity=10, decay=1.0)
    allocation.history.update([1], torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"shape \(1, 9\)"):
        allocation.plan([1])


def test_observe_reports_the_allocation_and_its_calibration():
    """`observe` updates the history and reports the spread, the budget share of prompts without history and the
    predicted against the observed fraction of groups with contrast."""
    allocation = BudgetedAllocation(2, 8, 4, "expected_signal", capacity=10, decay=1.0)
    allocation.plan([1, 2])
    first = allocation.observe(torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    assert first["budget_share_no_history"] == 1.0 and "predicted_contrast" not in first
    assert first["observed_contrast"] == 0.5
    counts = allocation.plan([1, 2, 3])
    nan = float("nan")
    rewards = torch.full((3, 8), nan)
    rewards[0, :2], rewards[1, :2], rewards[2, :2] = torch.tensor([0.0, 1.0]), 0.0, 1.0
    second = allocation.observe(rewards)
    assert second["allocation_min"] == counts.min() and second["allocation_max"] == counts.max()
    assert second["budget_share_no_history"] == pytest.approx(counts[2].item() / counts.sum().item())
    assert 0.0 < second["predicted_contrast"] < 1.0 and second["observed_contrast"] == pytest.approx(1 / 3)

"""The down-sampling rules: exact optimality, properties, NaN handling and the registry."""

import itertools
import subprocess
import sys

import pytest
import torch

from trl_pods.down_sampling import (
    get_down_sampler,
    list_down_samplers,
    max_reward,
    max_variance,
    random,
    register_down_sampler,
)


def _variance(values: torch.Tensor) -> float:
    values = values.double()
    return ((values - values.mean()) ** 2).mean().item()


def _brute_force_best_variance(row: torch.Tensor, m: int) -> float:
    """The best variance over all C(N, m) subsets of scored rollouts."""
    scored = [i for i in range(row.numel()) if not torch.isnan(row[i])]
    return max(_variance(row[list(subset)]) for subset in itertools.combinations(scored, m))


def _random_rewards(kind: str, g: int, n: int, gen: torch.Generator) -> torch.Tensor:
    if kind == "continuous":
        return torch.randn(g, n, generator=gen) * 10 ** torch.randint(-3, 4, (g, 1), generator=gen)
    if kind == "binary":
        return torch.randint(0, 2, (g, n), generator=gen).float()
    if kind == "ties":
        return torch.randint(0, 3, (g, n), generator=gen).float() * 0.5
    rewards = torch.randn(g, n, generator=gen)  # "nan"
    return rewards.masked_fill(torch.rand(g, n, generator=gen) < 0.3, float("nan"))


@pytest.mark.parametrize("kind", ["continuous", "binary", "ties", "nan"])
def test_max_variance_matches_brute_force(kind):
    """Theorem 1 implementation: the chosen subset reaches the optimum over all C(N, m) subsets (1,000 cases each)."""
    gen = torch.Generator().manual_seed(len(kind))
    checked = 0
    for _ in range(250):
        n = int(torch.randint(2, 10, (1,), generator=gen))
        m = int(torch.randint(1, n + 1, (1,), generator=gen))
        rewards = _random_rewards(kind, 4, n, gen)
        kept = max_variance(rewards, m)
        for row, idx in zip(rewards, kept, strict=True):
            scored = int((~torch.isnan(row)).sum())
            if scored >= m:
                assert not torch.isnan(row[idx]).any(), "picked an unscorable rollout while scored ones were left"
                best = _brute_force_best_variance(row, m)
                assert _variance(row[idx]) >= best - 1e-9 * max(1.0, best), (row, m, idx)
                checked += 1
            else:
                assert int((~torch.isnan(row[idx])).sum()) == scored, "dropped a scored rollout"
    assert checked > 600  # the rest are groups with fewer than m scored rollouts


@pytest.mark.parametrize("rule", [max_variance, max_reward, random])
def test_rules_return_distinct_sorted_indices_in_range(rule):
    """Every rule returns [G, m] int64, distinct indices per row, sorted, within [0, N)."""
    gen = torch.Generator().manual_seed(0)
    for g, n, m in [(1, 1, 1), (3, 5, 2), (64, 16, 4), (7, 33, 33)]:
        rewards = torch.randn(g, n, generator=gen)
        kept = rule(rewards, m, generator=torch.Generator().manual_seed(1))
        assert kept.shape == (g, m) and kept.dtype == torch.long
        assert (kept >= 0).all() and (kept < n).all()
        assert (kept.diff(dim=1) > 0).all(), "indices must be distinct and sorted ascending"


def test_max_variance_is_deterministic_and_vectorised():
    """Same input → same output, and batching groups gives exactly the per-group answers."""
    rewards = torch.randint(0, 4, (50, 24), generator=torch.Generator().manual_seed(3)).float()
    batched = max_variance(rewards, 6)
    assert torch.equal(batched, max_variance(rewards.clone(), 6))
    per_group = torch.cat([max_variance(row.unsqueeze(0), 6) for row in rewards])
    assert torch.equal(batched, per_group)


def test_max_variance_is_numerically_safe_with_large_offsets():
    """float32 rewards with a large common offset (E[x²] − E[x]² would cancel) still give the exact optimum."""
    row = torch.tensor([[1e6 + 0.0, 1e6 + 1.0, 1e6 + 0.5, 1e6 + 0.25, 1e6 + 0.75, 1e6 + 0.1]])
    kept = max_variance(row, 2)
    assert kept.tolist() == [[0, 1]]


@pytest.mark.parametrize("ones,zeros,m", [(3, 5, 4), (1, 7, 4), (6, 2, 4), (5, 5, 6), (2, 10, 5), (8, 8, 3)])
def test_binary_rewards_give_balanced_split(ones, zeros, m):
    """Theorem 2: take ⌊m/2⌋ (or ⌈m/2⌉) of each class when possible, else all of the scarce class."""
    rewards = torch.tensor([[1.0] * ones + [0.0] * zeros])
    kept_ones = int(rewards[0, max_variance(rewards, m)[0]].sum())
    scarce = min(ones, zeros)
    if scarce >= m // 2:
        assert kept_ones in (m // 2, m - m // 2)
    else:
        assert kept_ones == (scarce if ones == scarce else m - scarce)


def test_all_equal_group_keeps_m():
    """A zero-variance group still yields m rollouts (they get zero advantage downstream)."""
    assert max_variance(torch.ones(2, 8), 3).shape == (2, 3)


def test_max_reward_keeps_the_highest_and_avoids_nan():
    """max_reward keeps the m highest scored rewards; NaN rollouts only fill in when too few are scored."""
    rewards = torch.tensor([[0.1, float("nan"), 0.9, 0.5, 0.7], [float("nan"), 1.0, float("nan"), float("nan"), 0.0]])
    assert max_reward(rewards, 2).tolist() == [[2, 4], [1, 4]]
    kept = max_reward(rewards, 3)
    assert kept[0].tolist() == [2, 3, 4]
    assert int((~torch.isnan(rewards[1, kept[1]])).sum()) == 2


def test_random_is_reproducible_from_the_generator_and_uniform():
    """random: the same seed gives the same subsets (identical on every rank); each rollout is kept ≈ m/N of times."""
    rewards = torch.zeros(2000, 8)
    a = random(rewards, 2, generator=torch.Generator().manual_seed(7))
    b = random(rewards, 2, generator=torch.Generator().manual_seed(7))
    c = random(rewards, 2, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    frequency = torch.bincount(a.flatten(), minlength=8).float() / 2000
    assert torch.allclose(frequency, torch.full((8,), 0.25), atol=0.04)


def test_random_prefers_scored_rollouts():
    """random never keeps an unscorable rollout while a scored one is left out."""
    rewards = torch.tensor([[float("nan"), 1.0, 2.0, float("nan"), 3.0]]).expand(200, -1)
    kept = random(rewards, 3, generator=torch.Generator().manual_seed(0))
    assert (kept == torch.tensor([1, 2, 4])).all()


@pytest.mark.parametrize(
    "rewards,m,message",
    [
        (torch.zeros(4), 2, "shape"),
        (torch.zeros(2, 4, dtype=torch.long), 2, "floating-point"),
        (torch.zeros(2, 4), 5, "between 1 and N"),
        (torch.zeros(2, 4), 0, "between 1 and N"),
        (torch.tensor([[0.0, float("inf")]]), 1, "inf"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(rewards, m, message):
    """Bad shapes, dtypes, m and infinite rewards raise ValueError naming the problem."""
    with pytest.raises(ValueError, match=message):
        max_variance(rewards, m)


def test_registry_lookup_by_name_and_dotted_path():
    """Built-in names, user registration and dotted paths resolve; unknown names list the known ones."""
    assert get_down_sampler("max_variance") is max_variance
    assert get_down_sampler("trl_pods.down_sampling.max_reward") is max_reward
    assert {"max_variance", "max_reward", "random"} <= set(list_down_samplers())

    @register_down_sampler("test_first_m")
    def first_m(rewards, m, *, generator=None):
        return torch.arange(m).expand(rewards.size(0), -1)

    assert get_down_sampler("test_first_m") is first_m
    with pytest.raises(ValueError, match="'max_variance'"):
        get_down_sampler("no_such_rule")
    with pytest.raises(ValueError, match="Could not import"):
        get_down_sampler("no_such_module.rule")
    with pytest.raises(ValueError, match="already registered"):
        register_down_sampler("max_variance")(first_m)


def test_down_sampling_imports_without_trl_or_transformers():
    """The pure rules stay importable without TRL/transformers (tools outside the package call them)."""
    code = "import sys, trl_pods.down_sampling; assert 'trl' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _largest_best_ones(ones: int, zeros: int, m: int) -> int:
    """The documented tie rule on a binary group: the feasible count of kept ones with the largest variance
    j(m - j) / m², the largest such count among equally good ones."""
    feasible = range(max(0, m - zeros), min(ones, m) + 1)
    best = max(j * (m - j) for j in feasible)
    return max(j for j in feasible if j * (m - j) == best)


def test_max_variance_tie_rule_keeps_more_of_the_best_on_binary_groups():
    """The docstring's rule "among equally good k the largest wins" holds despite float rounding: for [0, 0, 1, 1, 1]
    and m = 3 two 1s are kept (not one), and on every binary group of N <= 9 and every m (odd m ties between
    (m - 1)/2 and (m + 1)/2 ones) the kept ones are the largest optimal count."""
    assert max_variance(torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0]]), 3).tolist() == [[0, 3, 4]]
    for n in range(2, 10):
        for ones in range(n + 1):
            for m in range(1, n + 1):
                for scale, offset in ((1.0, 0.0), (0.1, 0.0), (3.7, -1.3), (1e-3, 5.0)):
                    row = torch.tensor([[offset] * (n - ones) + [offset + scale] * ones])
                    kept_ones = int((row[0, max_variance(row, m)[0]] > offset + scale / 2).sum())
                    assert kept_ones == _largest_best_ones(ones, n - ones, m), (n, ones, m, scale, offset)

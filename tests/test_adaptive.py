"""Adaptive over-generation's waves (`AdaptiveMode` in phase 1's loop, no model): which groups top up, by how much,
when it stops, what the lockstep padding costs, and that the down-samplers never keep a slot that was not
generated."""

from types import SimpleNamespace

import pytest
import torch

from trl_pods.adaptive import AdaptiveMode, count_schedule, generated_slots, has_contrast, wave_metrics
from trl_pods.down_sampling import get_down_sampler, max_variance_across_groups
from trl_pods.phase1 import GenerationSteps, Rollouts, gathered_rows, generate_and_score, lockstep_rows
from trl_pods.rollout_fields import RolloutRows
from trl_pods.selection import Phase1Settings

NAN = float("nan")


def _oracle(g: int, n: int, gen: torch.Generator, p_nan: float = 0.2) -> torch.Tensor:
    """[G, N] rewards the policy would produce, slot by slot: mostly constant groups (binary, skewed), some NaN."""
    p_one = torch.rand(g, 1, generator=gen) ** 3  # many groups rarely succeed: constant prefixes are common
    rewards = (torch.rand(g, n, generator=gen) < p_one).float()
    return rewards.masked_fill(torch.rand(g, n, generator=gen) < p_nan, NAN)


class OracleSteps:
    """Generation and scoring against an oracle ``[G, N]``: a rollout of group g gets the oracle's next reward of g.
    Records each call's groups (one entry per row) and request size, and how many rollouts each group got."""

    def __init__(self, oracle: torch.Tensor):
        self.oracle, self.served, self.calls = oracle, [0] * oracle.size(0), []

    def generate(self, rows: list[dict], request: int) -> RolloutRows:
        self.calls.append(([row["prompt"] for row in rows], request))
        return RolloutRows([row["prompt"] for row in rows], (None, [[0]] * len(rows), None, [""] * len(rows)), None)

    def score(self, rows: list[dict], generated: RolloutRows, real: int) -> tuple[torch.Tensor, dict]:
        rewards = torch.full((len(rows), 1), NAN)
        for i, row in enumerate(rows[:real]):
            rewards[i, 0] = self.oracle[row["prompt"], self.served[row["prompt"]]]
            self.served[row["prompt"]] += 1
        return rewards, {}


def _waves(oracle: torch.Tensor, n_initial: int) -> tuple[Rollouts, OracleSteps]:
    """Adaptive generation of one process's groups against ``oracle`` through phase 1's loop."""
    g, n = oracle.shape
    settings = Phase1Settings(n, 0, 1, torch.ones(1), "sum_then_normalize", None, "none")
    steps = OracleSteps(oracle)
    mode = AdaptiveMode(SimpleNamespace(pods_n_initial=n_initial))
    inputs = [{"prompt": group} for group in range(g) for _ in range(n)]
    return generate_and_score(inputs, settings, mode, GenerationSteps(steps.generate, steps.score)), steps


def _reference_counts(oracle: torch.Tensor, n_initial: int) -> list[int]:
    """Per group, by hand: the first scheduled count whose prefix holds two different scored rewards, else N."""
    counts = []
    for row in oracle:
        for count in count_schedule(n_initial, row.numel()):
            scored = {v for v in row[:count].tolist() if v == v}
            if len(scored) > 1:
                break
        counts.append(count)
    return counts


def test_count_schedule_doubles_up_to_the_maximum():
    """Each wave doubles a constant group's rollouts, the last wave is capped at N, and N == n_initial is one wave."""
    assert count_schedule(4, 16) == [4, 8, 16]
    assert count_schedule(3, 10) == [3, 6, 10]
    assert count_schedule(5, 8) == [5, 8]
    assert count_schedule(4, 4) == [4]
    assert count_schedule(1, 5) == [1, 2, 4, 5]
    with pytest.raises(ValueError, match="1 <= n_initial <= n_max"):
        count_schedule(5, 4)


def test_has_contrast_ignores_unscorable_rollouts():
    """Contrast needs two different scored rewards; NaN (unscorable) and unfilled slots do not count."""
    rewards = torch.tensor(
        [[1.0, 1.0, NAN], [1.0, 0.0, NAN], [NAN, NAN, NAN], [NAN, 2.0, NAN], [0.5, NAN, 0.25], [0.0, 0.0, 0.0]]
    )
    assert has_contrast(rewards).tolist() == [False, True, False, False, True, False]


@pytest.mark.parametrize("n_initial,n", [(4, 16), (3, 10), (2, 2), (1, 7)])
def test_waves_match_a_per_group_reference(n_initial, n):
    """Against a per-group loop over 60 random oracles: the final counts, the NaN-padded slot matrix, each rollout
    generated exactly once, one uniform request size per wave, and only groups without contrast ever topped up."""
    gen = torch.Generator().manual_seed(n_initial * 100 + n)
    for _ in range(60):
        g = int(torch.randint(1, 9, (1,), generator=gen))
        oracle = _oracle(g, n, gen)
        rollouts, steps = _waves(oracle, n_initial)
        expected = _reference_counts(oracle, n_initial)
        assert rollouts.counts.tolist() == expected == steps.served, "every generated slot once, nothing else"
        filled = generated_slots(rollouts.counts, n)
        rewards = rollouts.rewards_per_func.view(g, n)
        assert torch.equal(rewards.isnan(), oracle.isnan() | ~filled)
        assert torch.allclose(rewards[filled], oracle[filled], equal_nan=True)
        schedule = count_schedule(n_initial, n)
        assert rollouts.calls == len(steps.calls) == sum(any(c >= s for c in expected) for s in schedule)
        sizes = [after - before for before, after in zip([0, *schedule[:-1]], schedule, strict=True)]
        assert [request for _, request in steps.calls] == sizes[: len(steps.calls)]
        assert steps.calls[0][0] == [group for group in range(g) for _ in range(n_initial)], "n_initial for all"
        assert rollouts.metrics["waves"] == rollouts.calls and rollouts.metrics["rollouts_padding"] == 0


def test_waves_stop_when_every_group_has_contrast():
    """Groups that disagree after the first wave get nothing more: one wave, n_initial each."""
    rollouts, steps = _waves(torch.arange(16.0).expand(3, -1), n_initial=4)
    assert [request for _, request in steps.calls] == [4] and rollouts.counts.tolist() == [4, 4, 4]


def test_lockstep_rows_and_gathered_rows():
    """Each process generates as many rows as the busiest process (padding the rest); a group's rewards sit in its
    process's block of the gathered call, after its process's earlier groups, with as many rows as it was given."""
    groups = torch.tensor([1, 2, 3, 6])  # 2 groups per process, 4 processes: ranks 0, 1, 1, 3
    assert lockstep_rows(groups, torch.full((4,), 3), groups_per_process=2, processes=4) == 6
    rows = gathered_rows(groups, torch.full((4,), 3), groups_per_process=2, lockstep=6)
    # rank r's block starts at r * 6; group 1 is rank 0's first, 2 and 3 rank 1's, 6 rank 3's.
    assert rows.tolist() == [0, 1, 2, 6, 7, 8, 9, 10, 11, 18, 19, 20]
    assert lockstep_rows(torch.tensor([0, 1]), torch.tensor([4, 4]), groups_per_process=2, processes=1) == 8
    # sizes per group (budgeted generation): rank 0 needs 2 + 5 rows, rank 1 needs 3, so each generates 7
    groups, sizes = torch.tensor([0, 1, 2]), torch.tensor([2, 5, 3])
    assert lockstep_rows(groups, sizes, groups_per_process=2, processes=2) == 7
    assert gathered_rows(groups, sizes, groups_per_process=2, lockstep=7).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert gathered_rows(torch.tensor([1, 2]), torch.tensor([2, 3]), 2, lockstep=3).tolist() == [0, 1, 3, 4, 5]


def test_wave_metrics_by_hand():
    """Fraction of groups topped up, and of those the fraction that found contrast (NaN when none was topped up)."""
    rewards = torch.tensor(
        [
            [1.0, 0.0, NAN, NAN, NAN, NAN, NAN, NAN],  # contrast at once: 2
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # constant to the end: 8
            [1.0, 1.0, 1.0, 0.0, NAN, NAN, NAN, NAN],  # contrast after a top-up: 4
            [0.0, 1.0, NAN, NAN, NAN, NAN, NAN, NAN],
        ]
    )
    counts = torch.tensor([2, 8, 4, 2])
    metrics = wave_metrics(rewards, counts, n_initial=2)
    assert metrics == {"frac_groups_topped_up": 0.5, "frac_topped_up_with_contrast": 0.5}
    none = wave_metrics(rewards[[0, 3]], counts[[0, 3]], n_initial=2)
    assert none["frac_groups_topped_up"] == 0.0
    assert none["frac_topped_up_with_contrast"] != none["frac_topped_up_with_contrast"], "NaN: no group topped up"


@pytest.mark.parametrize("rule", ["max_variance", "max_reward", "random", "max_advantage_variance"])
def test_down_samplers_never_keep_an_unfilled_slot(rule):
    """After waves (counts >= n_initial >= m), every rule keeps M generated slots, also when reward functions return
    None (NaN) for generated rollouts, including groups with no scored rollout at all."""
    sampler = get_down_sampler(rule)
    gen = torch.Generator().manual_seed(7)
    for _ in range(80):
        n = int(torch.randint(2, 17, (1,), generator=gen))
        m = int(torch.randint(1, n + 1, (1,), generator=gen))
        n_initial = int(torch.randint(m, n + 1, (1,), generator=gen))
        g = int(torch.randint(1, 6, (1,), generator=gen))
        oracle = _oracle(g, n, gen, p_nan=float(torch.rand(1, generator=gen)))
        oracle[0] = NAN  # a group nobody could score
        rollouts, _ = _waves(oracle, n_initial)
        rewards = rollouts.rewards_per_func.view(g, n)
        kept = sampler(rewards, m, generator=torch.Generator().manual_seed(0))
        assert (kept < rollouts.counts.unsqueeze(1)).all(), (rewards, kept)


def test_cross_group_selection_keeps_only_generated_slots():
    """Cross-group selection flattens a process's groups; with `generated` it prefers unscorable generated rollouts
    over unfilled slots when too few rollouts were scored (without it, it would take group 0's unfilled slots)."""
    values = torch.tensor([[NAN, NAN, NAN, NAN], [NAN, 1.0, NAN, NAN]])  # group 0 holds 2 rollouts, group 1 all 4
    generated = generated_slots(torch.tensor([2, 4]), 4)
    kept = max_variance_across_groups(values, 2, groups_per_budget=2, generated=generated)
    assert kept.sum() == 4 and not (kept & ~generated).any()
    assert kept[1, 1], "the one scored rollout is kept"
    unguarded = max_variance_across_groups(values, 2, groups_per_budget=2)
    assert (unguarded & ~generated).any(), "the guard is needed"

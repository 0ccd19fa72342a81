"""Dynamic sampling's pure parts (`trl_pods.screening`, `trl_pods.refill`): the screening rules on pilot rewards,
refill's choice among drawn groups, and what each mode has the data loader read and the layout hold."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trl_pods.generation_modes import build_generation_mode
from trl_pods.refill import missing_groups, refill_choice
from trl_pods.screening import contrast_first, frontier, get_screen_rule, random_screen, register_screen_rule

NAN = float("nan")
PILOT = torch.tensor(
    [
        [1.0, 1.0, 1.0, 1.0],  # 0: solved
        [0.0, 0.0, 0.0, 0.0],  # 1: unsolved
        [0.0, 1.0, 0.0, 0.0],  # 2: contrast
        [0.0, 0.0, 0.0, 0.0],  # 3: unsolved
        [1.0, 0.0, 1.0, 1.0],  # 4: contrast
        [0.0, 1.0, 1.0, 0.0],  # 5: contrast
        [0.0, 0.0, NAN, 0.0],  # 6: all scored ones at the floor, one unscorable
        [1.0, 1.0, 0.0, 1.0],  # 7: contrast
    ]
)


def test_contrast_rule_takes_groups_with_pilot_contrast_first_then_the_hardest():
    """SPEED-RL's screen: groups whose pilot rewards differ, then the rest by pilot mean, lowest first."""
    assert contrast_first(PILOT, 4).tolist() == [2, 4, 5, 7]
    assert contrast_first(PILOT, 6).tolist() == [1, 2, 3, 4, 5, 7], "then unsolved (mean 0) before solved"


def test_frontier_rule_reserves_a_quarter_of_the_picks_for_unsolved_prompts():
    """The default must not starve the unsolved frontier: with 4 picks and 4 groups with contrast, one pick still goes
    to a group whose whole pilot earned the pool's lowest reward (a pilot with an unscorable rollout is not one)."""
    assert frontier(PILOT, 4).tolist() == [1, 2, 4, 5]
    assert frontier(PILOT, 8).tolist() == list(range(8))
    only_contrast = PILOT[[2, 4, 5, 7]]
    assert frontier(only_contrast, 2).tolist() == [0, 1], "no unsolved group: all picks go to contrast"
    assert frontier(torch.full((3, 4), NAN), 2).tolist() == [0, 1], "nothing scored: the first groups"


def test_frontier_rule_keeps_a_quarter_for_unsolved_prompts_when_it_picks_one_group():
    """With one pick per process (B = 1, common on many GPUs), rounding the quarter up would give every pick to an
    unsolved prompt and skip the prompt with contrast; rounded at random from the generator, about a quarter of the
    picks go to the unsolved prompt, reproducibly for a seed."""
    pool = PILOT[[1, 2]]  # an unsolved group and one with contrast

    def unsolved_picked(chosen: int) -> float:
        picks = [frontier(pool, chosen, torch.Generator().manual_seed(seed)) for seed in range(400)]
        return sum(0 in pick.tolist() for pick in picks) / len(picks)

    assert 0.18 < unsolved_picked(1) < 0.32
    assert unsolved_picked(2) > 0.99, "both groups picked when two are chosen"
    assert (
        frontier(pool, 1, torch.Generator().manual_seed(3)).tolist()
        == frontier(pool, 1, torch.Generator().manual_seed(3)).tolist()
    )


def test_random_rule_is_seeded_and_distinct():
    """Uniform picks, reproducible from the generator."""
    a = random_screen(PILOT, 3, torch.Generator().manual_seed(1))
    b = random_screen(PILOT, 3, torch.Generator().manual_seed(1))
    assert a.tolist() == b.tolist() and a.unique().numel() == 3


def test_rules_are_pluggable_and_unknown_names_are_refused():
    """Registered names and dotted paths resolve; an unknown name lists the known ones."""
    register_screen_rule("last", lambda pilot, chosen, generator=None: torch.arange(pilot.size(0))[-chosen:])
    assert get_screen_rule("last")(PILOT, 2).tolist() == [6, 7]
    assert get_screen_rule("trl_pods.screening.frontier") is frontier
    with pytest.raises(ValueError, match="frontier"):
        get_screen_rule("nope")


def test_refill_choice_takes_contrast_in_draw_order_then_fills_with_the_first_others():
    """Refill keeps the drawn groups with contrast, in draw order, and fills the remainder with drawn groups without
    contrast, reporting how many; undrawn groups are never chosen."""
    rewards = torch.full((6, 4), NAN)
    rewards[0], rewards[1], rewards[2], rewards[3] = PILOT[0], PILOT[2], PILOT[1], PILOT[4]
    drawn = torch.tensor([True, True, True, True, False, False])
    assert missing_groups(rewards, drawn, 3) == 1
    picked, filled = refill_choice(rewards, drawn, 3)
    assert picked.tolist() == [0, 1, 3] and filled == 1
    picked, filled = refill_choice(rewards, drawn, 2)
    assert picked.tolist() == [1, 3] and filled == 0


def test_what_each_mode_reads_and_lays_out():
    """The data loader reads screened's pool (its ratio of prompts per trained prompt), which its layout holds;
    refill reads the batch only, and its layout keeps room for its most draws, or with sized draws (and auto) for
    pods_max_prompt_ratio prompts per trained one; the others read and lay out the batch."""
    config = SimpleNamespace(
        pods_generation="fixed", pods_screen_ratio=3, pods_max_draws=4, pods_n_initial=2, pods_screen_rule="frontier",
        pods_m=2, pods_n=4, pods_budget=3, pods_allocation="expected_signal", pods_history_size=10,
        pods_history_decay=0.8, pods_draw_coverage=None, pods_max_prompt_ratio=5, pods_auto_costs=None,
    )  # fmt: skip
    layout = {}
    modes = {name: dict(pods_generation=name) for name in ("fixed", "adaptive", "budgeted", "refill", "screened")}
    modes.update(
        {"sized refill": dict(pods_generation="refill", pods_draw_coverage=0.9), "auto": dict(pods_generation="auto")}
    )
    for name, options in modes.items():
        mode = build_generation_mode(SimpleNamespace(**{**vars(config), **options}))
        layout[name] = (mode.prompts_read, mode.groups_laid_out, mode.draws, mode.dependent_waves)
    assert layout == {
        "fixed": (1, 1, False, False),
        "adaptive": (1, 1, False, True),
        "budgeted": (1, 1, False, False),
        "refill": (1, 4, True, True),
        "sized refill": (1, 5, True, True),
        "screened": (3, 3, False, True),
        "auto": (1, 5, True, True),
    }

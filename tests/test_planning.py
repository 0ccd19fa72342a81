"""Auto's and sized refill's planning at scale: fast, in log space, outside the generation clock, with a fit that
survives steady plans (issue 57)."""

from __future__ import annotations

import functools
import itertools
import math
import time
from types import SimpleNamespace

import planning_reference as reference
import pytest
import torch
from test_phase1 import FakeSteps, _inputs, _settings

from trl_pods.auto import KEPT_CALLS, AutoMode, best_plan, expected_outcomes, rollout_ladder
from trl_pods.contrast import contrast_rate, kept_signal, prompts_to_cover
from trl_pods.costs import CallTiming, Costs, fit_costs, parse_costs
from trl_pods.phase1 import generate_and_score
from trl_pods.refill import DrawPlan, RefillMode, sized_plan
from trl_pods.waves import FixedMode, GenerationTiming, WaveState


class _SlowPlanner(FixedMode):
    """Fixed generation whose plan takes 0.3 s to make (as auto's exact search did at 32+ prompts a process)."""

    def first_wave(self, state: WaveState):
        time.sleep(0.3)
        return super().first_wave(state)


def test_planning_is_not_charged_to_the_first_generation_call():
    """The first call's clock starts after the mode has planned: with an instant fake engine, a plan that takes
    0.3 s leaves the call's measured seconds near zero (they used to include it, so a measured-cost auto fitted its
    own planning as generation cost)."""
    fake = FakeSteps({"a": [0, 1, 0, 1.0], "b": [1.0] * 4})
    rollouts = generate_and_score(_inputs(["a", "b"], 4), _settings(n=4), _SlowPlanner(), fake.steps([], n=4))
    assert len(rollouts.call_seconds) == 1 and rollouts.call_seconds[0] < 0.1, rollouts.call_seconds


def _state(timing: GenerationTiming) -> WaveState:
    rewards, counts, drawn = torch.zeros(6, 4), torch.zeros(6, dtype=torch.long), torch.ones(6, dtype=torch.bool)
    return WaveState(4, 1, 6, 2, rewards, counts, drawn, timing=timing)


def test_a_steady_plan_keeps_its_fit():
    """Auto fits its costs from calls of different sizes; once it settles on one plan, hundreds of generations of
    one call size no longer push the other sizes out of what it fits (the fit used to vanish after `KEPT_CALLS`
    steady calls, sending auto back to exploring, and the next fit rested on one differing call)."""
    truth = Costs(call=0.5, rollout=0.002, step=1.0)
    mode = AutoMode(SimpleNamespace(pods_m=2, pods_n=4, pods_max_draws=2, pods_draw_coverage=None,
                                    pods_max_prompt_ratio=3, pods_auto_costs=None))  # fmt: skip
    for rollouts in (16, 16, 48, 8, 32):  # the first timing is the warm-up, left out
        mode._record(_state(GenerationTiming(((rollouts, truth.call + truth.rollout * rollouts),), truth.step)))
    assert mode.costs() is not None
    for _ in range(KEPT_CALLS + 50):
        mode._record(_state(GenerationTiming(((64, truth.call + truth.rollout * 64),), truth.step)))
    costs = mode.costs()
    assert costs is not None and (costs.call, costs.rollout, costs.step) == pytest.approx((0.5, 0.002, 1.0))


def test_auto_fits_its_costs_once_a_generation_from_one_pass_over_its_timings(monkeypatch):
    """On the learning check from scratch a step takes 60 ms, and auto took 13% longer a step than sized refill with
    the same rollouts: each generation it fitted its costs twice (its metrics fitted them again), and each fit solved a
    least squares over every kept call for each of the seven sets of free coefficients. Now a generation fits once,
    and a fit reads the calls once (their inner products) and solves each set from those: the same non-negative least
    squares as solving every set on the rows (numpy's, here), on timings where some costs come out negative."""
    import numpy as np

    import trl_pods.auto as auto_module
    from trl_pods.costs import _non_negative_least_squares

    rng = np.random.default_rng(0)
    for case in range(40):
        rows = 3 + case
        x = np.stack([np.ones(rows), rng.integers(4, 400, rows).astype(float), rng.integers(0, 2, rows).astype(float)])
        x = x.T if case % 4 else x[:2].T  # some fits have no later calls: no load column
        costs = rng.normal([0.5, 0.002, 0.2][: x.shape[1]], [0.5, 0.003, 0.3][: x.shape[1]])  # some negative
        y = x @ costs + rng.normal(0, 0.05, rows)
        best, best_error = np.zeros(x.shape[1]), float(y @ y)
        for size in range(1, x.shape[1] + 1):
            for free in itertools.combinations(range(x.shape[1]), size):
                w = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
                error = float(((x[:, free] @ w - y) ** 2).sum())
                if (w >= 0).all() and error < best_error - 1e-12:
                    best, best_error = np.zeros(x.shape[1]), error
                    best[list(free)] = w
        fitted = _non_negative_least_squares(x.tolist(), y.tolist())
        assert fitted == pytest.approx(best.tolist(), rel=1e-7, abs=1e-10), case

    truth = Costs(call=0.5, rollout=0.002, step=1.0)
    fits = []
    monkeypatch.setattr(auto_module, "fit_costs", lambda *a: fits.append(1) or fit_costs(*a))
    mode = AutoMode(SimpleNamespace(pods_m=2, pods_n=4, pods_max_draws=2, pods_draw_coverage=None,
                                    pods_max_prompt_ratio=3, pods_auto_costs=None))  # fmt: skip
    for generation, rollouts in enumerate((16, 16, 48, 8, 32, 24)):
        state = _state(GenerationTiming(((rollouts, truth.call + truth.rollout * rollouts),), truth.step))
        fits.clear()
        mode.first_wave(state)
        assert mode.metrics(state)["exploring"] == float(generation < 2)  # the warm-up, then one size
        assert len(fits) == 1, generation


def test_costs_that_make_a_step_free_are_refused():
    """Given costs that are all zero would make every plan's step take no time (a ZeroDivisionError at the first
    generation): refused with the expected form; a zero rollout cost alone is a fair model and passes."""
    with pytest.raises(ValueError, match="a step must take time"):
        parse_costs("call=0,rollout=0,step=0")
    assert parse_costs("call=1,rollout=0,step=0.5") == Costs(1.0, 0.0, 0.5)


H200, CPU, MIXED = Costs(1.03, 0.00012, 0.32), Costs(0.05, 0.041, 0.5), Costs(0.3, 0.002, 0.3)
BETAS = [(0.5, 1.5), (0.2, 0.2), (2.0, 0.5), (0.05, 0.5)]


@pytest.mark.parametrize("share,ratio", [(1, 4), (2, 3), (3, 4), (4, 2), (4, 4), (6, 4), (8, 4)])
def test_plan_choices_equal_the_exact_search(share, ratio):
    """Where the exact search of issue 57's time is feasible, the fast planner (log-space terms, a covering search in
    about sqrt steps, merged states) chooses the same plan, with the same expected outcome, on a grid of contrast
    rates, costs and coverages (the reference: `planning_reference`, the search as it was)."""
    for beta, costs, coverage in itertools.product(BETAS, (H200, CPU, MIXED), (0.9, 0.75)):
        rate = functools.partial(contrast_rate, *beta)
        args = (costs, share, rollout_ladder(4, 16), share * ratio, 3, coverage)
        fast, exact = best_plan(rate, *args), reference.best_plan(rate, *args)
        assert fast[0] == exact[0], (beta, costs, coverage)
        assert fast[1].contrast == pytest.approx(exact[1].contrast, rel=1e-9)


def test_planning_never_overflows():
    """Auto's search and sized refill's draw sizes at 16,384 prompts a process and 65,536 of room (the exact terms,
    ``math.comb(n, k) * p**k``, raised OverflowError past about 1,030 prompts): a plan whose expected outcome is
    within reach, and a covering draw that covers (expected groups with contrast at least the missing ones)."""
    rate = functools.partial(contrast_rate, 0.5, 1.5)
    for costs in (H200, CPU):
        plan, outcome, seconds = best_plan(rate, costs, 16384, rollout_ladder(4, 16), 65536, 3, 0.9)
        assert 16384 <= plan.first <= 65536 and 0 < outcome.contrast <= 16384 and seconds > 0
    drawn = prompts_to_cover(16384, 0.3, 0.9, 65536)
    assert 16384 / 0.3 < drawn < 16384 / 0.3 * 1.05
    assert prompts_to_cover(16384, 0.2, 0.9, 65536) == 65536  # 0.2 x 65,536 falls short: all the room


def _auto_and_refill(m: int, n: int, costs: Costs, beta: tuple[float, float], share: int):
    """Auto's plan with given ``costs`` and the contrast fit ``beta`` for a process training ``share`` groups (room
    for 4 times as many), and sized refill's plan at ``pods_n`` from the same history (the floor auto plans above)."""
    given = f"call={costs.call},rollout={costs.rollout},step={costs.step}"
    config = SimpleNamespace(pods_m=m, pods_n=n, pods_max_draws=3, pods_draw_coverage=0.9, pods_max_prompt_ratio=4,
                             pods_auto_costs=given)  # fmt: skip
    auto, refill = AutoMode(config), RefillMode(config)
    auto.history.beta = refill.history.beta = beta
    room = 4 * share
    state = WaveState(n, 1, room, share, torch.full((room, n), torch.nan), torch.zeros(room, dtype=torch.long),
                      torch.arange(room) < share)  # fmt: skip
    return auto.plan(state), refill.plan(state), auto.history.rate, room


def _first_call(rate, share: int, plan: DrawPlan, room: int) -> float:
    """Expected groups with contrast after a plan's first call."""
    return expected_outcomes(rate(plan.n), share, plan, room)[0].contrast


@pytest.mark.parametrize("share", [2, 4, 8])
def test_autos_first_call_finds_at_least_what_sized_refills_does(share):
    """Auto's first call is never smaller in expected groups with contrast than sized refill's (its n = pods_n, its
    prompts covering the share with probability 0.9), whatever the costs: its plans differ from sized refill's only in
    what the costs pay for (with a CPU engine's costs it used to plan a smaller first call and a second one)."""
    for beta, costs in itertools.product(BETAS, (H200, CPU, MIXED)):
        auto, refill, rate, room = _auto_and_refill(4, 16, costs, beta, share)
        assert _first_call(rate, share, auto, room) >= _first_call(rate, share, refill, room) - 1e-9, (beta, costs)


@pytest.mark.parametrize("share", [2, 4, 8])
def test_auto_with_natural_groups_is_never_worse_than_sized_refill(share):
    """With pods_n == pods_m auto chooses prompts per call and calls only; by its own cost model its plan trains at
    least as many groups with contrast a second as sized refill's plan at the same n."""
    for beta, costs in itertools.product(BETAS, (H200, CPU, MIXED)):
        auto, refill, rate, room = _auto_and_refill(4, 4, costs, beta, share)
        score = []
        for plan in (auto, refill):
            outcome = expected_outcomes(rate(4), share, plan, room)[-1]
            score.append(outcome.contrast / costs.seconds(outcome.calls, 4 * outcome.prompts))
        assert score[0] >= score[1] * (1 - 1e-9), (beta, costs, auto, refill)


def test_auto_plans_pods_n_rollouts_a_prompt_where_rollouts_are_dear():
    """Auto holds its rollouts per prompt at pods_n, its floor's, and chooses only its first call's prompts and its
    calls from the costs, even where a rollout is what costs and its search over 4, 8 and 16 rollouts a prompt
    finds fewer cheaper: on the learning check from scratch those plans of 4 and 8 ended at 0.68 against its floor's
    0.90 (p 0.004), on the one-digit plateau in 5 of 10 runs against 1 (`floor_cost` in
    docs/benchmarks/dynamic-sampling.md)."""
    searched = []
    for beta, share in itertools.product(BETAS, (2, 4, 8)):
        auto, refill, rate, room = _auto_and_refill(4, 16, CPU, beta, share)
        assert auto.n == 16 and _first_call(rate, share, auto, room) >= _first_call(rate, share, refill, room) - 1e-9
        value = functools.partial(kept_signal, *beta, m=4)
        searched.append(best_plan(rate, CPU, share, rollout_ladder(4, 16), room, 3, 0.9, refill, value)[0].n)
    assert min(searched) < 16, "the search over rollouts per prompt would have drawn fewer"


def test_a_group_kept_from_more_rollouts_carries_more_signal():
    """`kept_signal`: the expected reward variance of the M rollouts a group with contrast keeps grows with the
    rollouts max-variance down-sampling chooses from (a group of 4 chosen from 16 is more often balanced than one of
    4 taken from 4), whatever the mix of easy and hard prompts; with N == M it is the group's own variance, by
    enumeration."""
    for beta in BETAS:
        signals = [kept_signal(*beta, n, 4) for n in (4, 8, 16, 32)]
        assert all(0 < low < high <= 0.25 for low, high in itertools.pairwise(signals)), (beta, signals)
    a, b, n = 0.5, 1.5, 4
    beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    weights = {
        k: math.comb(n, k) * math.exp(math.lgamma(a + k) + math.lgamma(b + n - k) - math.lgamma(a + b + n) - beta)
        for k in (1, 2, 3)
    }
    variance = sum(w * k * (n - k) / n**2 for k, w in weights.items()) / sum(weights.values())
    assert kept_signal(a, b, n, n) == pytest.approx(variance)


def test_the_search_weighs_what_a_group_teaches():
    """`best_plan` can score a plan by its groups with contrast times what such a group teaches at its rollouts per
    prompt (its ``value``; the cost model's own choice of rollouts per prompt, which `benchmarks/planning.py --sweep`
    and the race's replay read): with a CPU engine's costs it keeps 4 rollouts per prompt counting groups alone, and
    takes 16 once a group of 16 teaches enough more. Auto itself plans at pods_n."""
    rate = functools.partial(contrast_rate, 0.5, 1.5)
    counted, *_ = best_plan(rate, CPU, 4, rollout_ladder(4, 16), 16, 3, 0.9)
    weighed, *_ = best_plan(rate, CPU, 4, rollout_ladder(4, 16), 16, 3, 0.9, value=lambda n: 4.0 if n == 16 else 1.0)
    assert (counted.n, weighed.n) == (4, 16)


def test_a_first_and_a_later_call_alone_do_not_fit_the_costs():
    """A generation's first call also loads the weights; with one first call and one later call of another size, a
    weight load and a rollout's cost cannot be told apart. The fit used to take them as enough: on a CPU engine with a
    1 s weight load it called rollouts free (the next plan then took the most rollouts per prompt in one call).
    Now it waits for a second size of first call (or of later calls), and then recovers the costs."""
    truth, load = CPU, 1.0
    calls = [
        CallTiming(32, truth.call + load + 32 * truth.rollout, True),
        CallTiming(8, truth.call + 8 * truth.rollout, False),
    ]
    assert fit_costs(calls, [truth.step]) is None
    calls.append(CallTiming(64, truth.call + load + 64 * truth.rollout, True))
    costs = fit_costs(calls, [truth.step])
    assert (costs.call, costs.rollout, costs.step) == pytest.approx((truth.call, truth.rollout, truth.step + load))
    later = [
        CallTiming(8, truth.call + 8 * truth.rollout, False),
        CallTiming(2, truth.call + 2 * truth.rollout, False),
    ]
    costs = fit_costs([calls[0], *later], [truth.step])  # later calls of two sizes tell the load apart too
    assert (costs.call, costs.rollout, costs.step) == pytest.approx((truth.call, truth.rollout, truth.step + load))


def test_auto_explores_with_sized_refills_plan():
    """Until its costs are fitted, auto's generations are sized refill's plan (the plan it never plans worse than),
    but for at most one, whose first call is of another size and finds at least as many groups with contrast; it used
    to explore with three fixed plans (refill at pods_m twice, one call of pods_n) that sized refill's plan beats.
    The fit still needs the warm-up and two sizes of call: three generations before it plans from the costs, each
    generation timed with one call (every group showing contrast)."""
    truth, load = CPU, 1.0
    config = SimpleNamespace(pods_m=2, pods_n=8, pods_max_draws=2, pods_draw_coverage=0.9, pods_max_prompt_ratio=4,
                             pods_auto_costs=None)  # fmt: skip
    auto, refill = AutoMode(config), RefillMode(config)
    share, room, timing, explored, deviating = 4, 16, None, 0, []
    for generation in range(6):
        state = WaveState(8, 1, room, share, torch.full((room, 8), torch.nan), torch.zeros(room, dtype=torch.long),
                          torch.arange(room) < share, timing=timing)  # fmt: skip
        plan, floor = auto.plan(state), refill.plan(state)
        if auto.costs() is None:
            explored += 1
            if plan != floor:
                deviating.append(plan)
                assert _first_call(auto.history.rate, share, plan, room) >= _first_call(
                    auto.history.rate, share, floor, room
                )
        rollouts = plan.n * plan.first
        seconds = truth.call + load + truth.rollout * rollouts + (5.0 if generation == 0 else 0.0)  # warm-up
        timing = GenerationTiming(((rollouts, seconds),), truth.step if generation else None)
    assert explored == 3 and len(deviating) <= 1, (explored, deviating)
    restored = AutoMode(config)
    restored.load_state_dict(auto.state_dict())
    assert restored.costs() == auto.costs()


def test_auto_explores_call_sizes_that_the_fit_can_tell_apart():
    """Where no exploring plan gives the timed first calls two sizes at once (pods_n == pods_m, room for twice the
    share, a first call of 11 prompts timed), auto takes the one of all the room or of the share farther from the
    timed size, then the other: the fit gets two sizes, and exploring never stalls on sizes it cannot tell apart."""
    config = SimpleNamespace(pods_m=4, pods_n=4, pods_max_draws=2, pods_draw_coverage=0.0, pods_max_prompt_ratio=2,
                             pods_auto_costs=None)  # fmt: skip
    auto = AutoMode(config)
    state = WaveState(4, 1, 16, 8, torch.full((16, 4), torch.nan), torch.zeros(16, dtype=torch.long),
                      torch.arange(16) < 8)  # fmt: skip
    assert auto._exploring(state, None) == DrawPlan(4, 8, 2, None), "nothing timed: refill's plan"
    auto.calls = [CallTiming(44, 1.0, True)]
    assert auto._exploring(state, None) == DrawPlan(4, 16, 2, None), "64 rollouts: 1.45 x 44, against 1.38 x 32"
    auto.calls.append(CallTiming(64, 1.2, True))
    assert auto._exploring(state, None) == DrawPlan(4, 8, 2, None), "32 rollouts: 2 x 64 with those timed"
    auto.calls = [CallTiming(46, 1.0, True)]
    assert auto._exploring(state, None) == DrawPlan(4, 8, 2, None), (
        "32 rollouts: 46 / 32 = 1.44 against 64 / 46 = 1.39"
    )


def test_auto_says_when_its_calls_cannot_tell_the_costs_apart():
    """With pods_max_prompt_ratio 1 and pods_n below 1.5 x pods_m, auto's first calls can never differ enough for the
    cost fit (`trl_pods.costs.SPREAD`): it plans as sized refill, and its line says so and what to set, instead of
    "measuring what generating costs" for ever while nothing it can draw would let it measure them."""
    for ratio, expected in ((1, "too little to tell a call's cost from a rollout's"), (2, "measuring what")):
        config = SimpleNamespace(pods_m=4, pods_n=4, pods_max_draws=2, pods_draw_coverage=0.9,
                                 pods_max_prompt_ratio=ratio, pods_auto_costs=None)  # fmt: skip
        auto, refill = AutoMode(config), RefillMode(config)
        room, share = 8 * ratio, 8
        state = WaveState(4, 1, room, share, torch.full((room, 4), torch.nan), torch.zeros(room, dtype=torch.long),
                          torch.arange(room) < share)  # fmt: skip
        assert auto.plan(state) == refill.plan(state)
        (line,) = auto.notes()
        assert expected in line and ("pods_auto_costs" in line) == (ratio == 1), line


def test_auto_draws_pods_n_where_most_prompts_are_solved():
    """On a state of the learning check from scratch (`benchmarks/dynamic_sampling.py`: auto's measured costs there, a
    call 9.1 ms, a rollout 0.118 ms, the rest of a step 24.2 ms; contrast rates 0.21, 0.35 and 0.51 at 4, 8 and 16
    rollouts, most prompts solved), auto plans PODS 16 -> 4, its floor sized refill at pods_n. With its floor at
    pods_m and a step's progress the square root of its signal, as it planned from 2026-11-30 to 2026-12-01, it drew
    4 rollouts for all the room and left groups without contrast: the plans on which that check stalled on its
    one-digit half (19 of 20 runs), where PODS 16 -> 4 broke through."""
    costs, beta = Costs(0.00909, 0.000118, 0.0242), (14.15, 0.951)
    auto, _, rate, room = _auto_and_refill(4, 16, costs, beta, 8)
    assert auto == DrawPlan(16, 21, 1, 0.9)
    at_m, value = sized_plan(4, rate(4), 8, room, 3, 0.9), functools.partial(kept_signal, *beta, m=4)
    plan, outcome, _ = best_plan(rate, costs, 8, rollout_ladder(4, 16), room, 3, 0.9, at_m, value, 0.5)
    assert plan == DrawPlan(4, 32, 1, 0.9) and outcome.contrast < 6.5, (plan, outcome)

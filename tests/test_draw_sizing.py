"""Sizing draws from what the run observes, without a model: the contrast rate (`trl_pods.contrast`), the costs
(`trl_pods.costs`), the plans of auto generation (`trl_pods.auto`), and refill and auto carried out by phase 1's
loop with fake generation steps (`test_phase1.FakeSteps`)."""

from __future__ import annotations

import io
import math
import random
import re
import sys
from types import SimpleNamespace

import pytest
import torch
from test_phase1 import FakeSteps, _inputs, _settings
from tqdm import tqdm

from trl_pods.auto import AutoMode, best_plan, expected_outcome, rollout_ladder
from trl_pods.contrast import ContrastHistory, contrast_rate, fit_pass_rates, prompts_to_cover
from trl_pods.costs import CallTiming, Costs, fit_costs, parse_costs
from trl_pods.phase1 import generate_and_score
from trl_pods.refill import DrawPlan, RefillMode
from trl_pods.reporting import describe_plan
from trl_pods.screening import ScreenedMode
from trl_pods.trainer_steps import end_generation
from trl_pods.waves import GenerationTiming

H200 = Costs(call=1.031, rollout=0.000116, step=0.321)  # the H200's costs of the time-to-target runs
CPU = Costs(call=0.3, rollout=0.041, step=10.4)  # the vLLM CPU engine's, roughly


def test_fitted_pass_rates_predict_the_contrast_of_groups_larger_than_those_observed():
    """Pass rates drawn from Beta(0.5, 1.5), 1024 groups of 4 rollouts observed: the beta-binomial fit predicts the
    contrast rate of groups of 8 and 16 (never observed) within 0.04 of the truth for those prompts (the worst over
    20 seeds was 0.033), where a rate that ignored the prompts' spread (every prompt at the mean pass rate) would be
    off by more than 0.2 at 16."""
    torch.manual_seed(0)
    q = torch.distributions.Beta(0.5, 1.5).sample((1024,))
    passes = torch.binomial(torch.full((1024,), 4.0), q).long()
    a, b = fit_pass_rates(passes, torch.full((1024,), 4))
    for n in (4, 8, 16):
        truth = (1 - q**n - (1 - q) ** n).mean().item()
        assert contrast_rate(a, b, n) == pytest.approx(truth, abs=0.04)
    mean = q.mean().item()
    assert abs(1 - mean**16 - (1 - mean) ** 16 - (1 - q**16 - (1 - q) ** 16).mean().item()) > 0.2
    assert fit_pass_rates(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)) == (1.0, 1.0)
    assert contrast_rate(1.0, 1.0, 1) == 0.0 and contrast_rate(1.0, 1.0, 4) == pytest.approx(3 / 5)


def test_prompts_to_cover_is_the_fewest_prompts_reaching_the_coverage():
    """`prompts_to_cover` against the binomial tail computed by brute force over every outcome: the smallest count
    whose probability of at least `missing` groups with contrast reaches the coverage; the limit when none does;
    nothing when nothing is missing."""

    def tail(k: int, trials: int, p: float) -> float:
        return sum(math.comb(trials, i) * p**i * (1 - p) ** (trials - i) for i in range(k, trials + 1))

    for missing, rate, coverage in [(4, 0.5, 0.9), (3, 0.2, 0.8), (1, 0.9, 0.95), (8, 0.35, 0.5)]:
        prompts = prompts_to_cover(missing, rate, coverage, 1000)
        assert tail(missing, prompts, rate) >= coverage > tail(missing, prompts - 1, rate)
    assert prompts_to_cover(4, 0.1, 0.99, 10) == 10
    assert prompts_to_cover(0, 0.5, 0.9, 10) == 0 and prompts_to_cover(3, 0.5, 0.9, 0) == 0


def test_contrast_history_weighs_recent_generations_and_round_trips():
    """The history counts a rollout as passing above the midpoint of the rewards seen (0/1 and 0/0.2/1 rewards
    alike), drops unscored slots, keeps the most recent groups, each generation weighing `decay` times the next, so
    that the rate follows a policy that learns: after a generation of 64 unsolved prompts, five generations of 16
    half-solved ones put the rate at 4 rollouts above 0.75 (the half-solved prompts' own: 7/8), where weighing every
    group alike would leave it near 0.5. It restores the same rate from its state."""
    nan = float("nan")
    history = ContrastHistory(capacity=3, decay=0.5)
    history.observe(torch.tensor([[1.0, 0.0, 0.2, nan], [0.2, 0.0, 0.0, 0.0]]))
    assert history.passes.tolist() == [1, 0] and history.counts.tolist() == [3, 4]
    history.observe(torch.tensor([[1.0, 1.0, nan, nan], [0.0, 1.0, 1.0, 1.0]]))
    assert history.passes.tolist() == [0, 2, 3] and history.counts.tolist() == [4, 2, 4]
    assert history.weights.tolist() == [0.5, 1.0, 1.0]
    restored = ContrastHistory(capacity=3)
    restored.load_state_dict(history.state_dict())
    assert restored.rate(8) == history.rate(8) and restored.beta == history.beta
    rates = []
    for decay in (0.8, 1.0):
        learning = ContrastHistory(decay=decay)
        for rewards in (torch.zeros(16, 4), torch.ones(16, 4), torch.zeros(64, 4)):  # 0 fails, 1 passes
            learning.observe(rewards)
        assert learning.rate(4) < 0.1
        for _ in range(5):
            learning.observe(torch.tensor([[0.0, 1.0, 0.0, 1.0]] * 16))
        rates.append(learning.rate(4))
    assert rates[0] > 0.75 and rates[1] < 0.55, rates


def test_fit_costs_recovers_the_call_rollout_and_weight_load_costs():
    """Timings made from known costs (0.5 s a call, 2 ms a rollout, 0.25 s of weight load on a generation's first
    call, 3 s between generations) are fitted back exactly; without a later call the load counts as the call's; no
    fit while calls are all of one size or nothing was timed between generations; no cost is ever negative."""
    sizes = [(64, True), (32, False), (16, True), (8, False)]
    calls = [CallTiming(r, 0.5 + 0.002 * r + 0.25 * first, first) for r, first in sizes]
    costs = fit_costs(calls, [3.0, 2.9, 3.1])
    assert (costs.call, costs.rollout, costs.step) == pytest.approx((0.5, 0.002, 3.25))
    firsts = [CallTiming(r, 0.75 + 0.002 * r, True) for r in (64, 16)]
    alone = fit_costs(firsts, [3.0])
    assert (alone.call, alone.rollout, alone.step) == pytest.approx((0.75, 0.002, 3.0))
    assert fit_costs([CallTiming(16, 1.0, True), CallTiming(16, 1.1, False)], [3.0]) is None
    assert fit_costs(calls, []) is None
    falling = fit_costs([CallTiming(10, 2.0, True), CallTiming(40, 1.0, True)], [1.0])
    assert falling.rollout == 0.0 and falling.call >= 0.0


def test_fit_costs_gives_the_same_bits_from_the_same_timings():
    """The fit went through LAPACK (MKL), whose last bits change with the memory's alignment: the same timings gave
    six different costs in 200 fits, and a resumed auto fitted other costs than the run it resumed (a test of the
    restored state failed now and then). The fit is pure Python now: one answer, to the bit."""
    calls = [CallTiming(r, 1.05 + 0.041 * r + first, first) for r, first in [(8, True), (16, True), (24, False)] * 3]
    fits = set()
    for size in range(1, 60):
        padding = [torch.zeros(size) for _ in range(3)]  # moves where the next tensors, if any, are allocated
        fits.add(fit_costs(calls, [0.5]))
        del padding
    assert len(fits) == 1


def test_parse_costs_reads_seconds_and_refuses_anything_else():
    """`pods_auto_costs` is three named non-negative seconds; a missing, unknown, negative or non-numeric one is a
    clear error naming the expected form."""
    assert parse_costs("call=1.03, rollout=0.00012,step=0.32") == Costs(1.03, 0.00012, 0.32)
    for text in ("call=1,rollout=2", "call=1,rollout=2,step=3,load=4", "call=-1,rollout=0,step=0", "call=x"):
        with pytest.raises(ValueError, match="call=1.03,rollout=0.00012,step=0.32"):
            parse_costs(text)


def _simulate(rate: float, share: int, plan: DrawPlan, room: int, runs: int = 20000) -> tuple[float, ...]:
    """Mean calls, prompts and trained groups with contrast of a plan, carried out draw by draw with random
    groups (the way `RefillMode` draws on one process)."""
    rng = random.Random(0)
    totals = [0.0, 0.0, 0.0]
    for _ in range(runs):
        size = min(plan.first, room)
        found, used, calls = sum(rng.random() < rate for _ in range(size)), size, 1
        while found < share and calls < plan.calls and used < room:
            missing = share - found
            size = min(missing, room - used)
            if plan.coverage is not None:
                size = prompts_to_cover(missing, rate, plan.coverage, room - used)
            found, used, calls = found + sum(rng.random() < rate for _ in range(size)), used + size, calls + 1
        for i, value in enumerate((calls, used, min(found, share))):
            totals[i] += value / runs
    return tuple(totals)


@pytest.mark.parametrize(
    "rate, plan, room",
    [
        (0.4, DrawPlan(4, 4, 3, None), 12),
        (0.4, DrawPlan(4, 9, 2, 0.9), 16),
        (0.7, DrawPlan(16, 4, 1, None), 16),
        (0.25, DrawPlan(4, 6, 3, 0.8), 10),
    ],
)
def test_expected_outcome_matches_drawing_it_many_times(rate, plan, room):
    """The exact expected calls, prompts and trained groups with contrast of a plan equal the means of 20,000
    simulated generations (4 trained groups), within sampling error."""
    outcome = expected_outcome(rate, 4, plan, room)
    simulated = _simulate(rate, 4, plan, room)
    assert (outcome.calls, outcome.prompts, outcome.contrast) == pytest.approx(simulated, rel=0.02)


def test_best_plan_follows_the_hardware():
    """With the H200's costs (a call ~1 s, a rollout ~0.1 ms) the best plan is one call of the most rollouts per
    prompt for enough prompts that nearly every step trains 4 groups with contrast; with a CPU engine's (a rollout
    41 ms) it is the fewest rollouts per prompt, and draws again when needed rather than over-drawing."""
    history = ContrastHistory()
    history.beta = (0.5, 1.5)
    ladder = rollout_ladder(4, 16)
    assert ladder == [4, 8, 16]
    gpu, outcome, _ = best_plan(history.rate, H200, 4, ladder, 16, 3, 0.9)
    assert gpu.n == 16 and gpu.calls == 1 and outcome.contrast > 3.9
    cpu, outcome, seconds = best_plan(history.rate, CPU, 4, ladder, 16, 3, 0.9)
    assert cpu.n == 4 and cpu.calls > 1 and outcome.calls < 1.5
    exact = expected_outcome(history.rate(4), 4, DrawPlan(4, 4, 3, None), 12)  # today's refill: exactly the missing
    assert outcome.contrast / seconds > exact.contrast / CPU.seconds(exact.calls, 4 * exact.prompts)


def _auto(**fields) -> AutoMode:
    config = dict(
        pods_m=2, pods_n=4, pods_max_draws=2, pods_draw_coverage=None, pods_max_prompt_ratio=3, pods_auto_costs=None
    )
    return AutoMode(SimpleNamespace(**{**config, **fields}))


def _generation(mode, fake_rewards: dict, draws: list[str], timing: GenerationTiming | None = None, seed: int = 0):
    """One generation of ``mode`` on one process: the loader's prompts a and b (N = 4 slots), further prompts from
    ``draws``."""
    fake = FakeSteps(fake_rewards)
    steps = fake.steps(draws, n=4)
    steps = type(steps)(steps.generate, steps.score, steps.one_weight_load, steps.draw, steps.group_keys,
                        lambda: timing)  # fmt: skip
    return generate_and_score(_inputs(["a", "b"], 4), _settings(n=4, seed=seed), mode, steps), fake


def test_sized_refill_draws_for_more_prompts_in_its_first_call():
    """Refill with pods_draw_coverage: once the history says half the groups show contrast, the first call already
    generates for the loader's 2 prompts and 3 drawn ones (enough to cover 2 groups with probability 0.75), in one
    generate call; the mode keeps the groups with contrast and learns from every group it drew."""
    mode = RefillMode(SimpleNamespace(pods_max_draws=3, pods_draw_coverage=0.75, pods_max_prompt_ratio=3))
    mode.history.beta = (1.0, 1.0)
    mode.history.rate = lambda n: 0.5
    rewards = {"a": [1.0] * 4, "b": [0, 1, 0, 1.0], "c": [0.0] * 4, "d": [1, 0, 0, 0.0], "e": [1.0] * 4}
    rollouts, fake = _generation(mode, rewards, ["c", "d", "e", "f"])
    generated = [call[1] for call in fake.calls if call[0] == "generate"]
    assert generated == [["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4 + ["e"] * 4], "one call, 5 prompts"
    assert ("draw", [3]) in fake.calls
    assert rollouts.chosen.tolist() == [False, True, False, True, False, False]
    assert rollouts.metrics["generation_calls"] == 1.0 and rollouts.metrics["prompts_drawn"] == 5.0
    assert mode.history.counts.tolist() == [4] * 5


def test_auto_measures_costs_then_plans_and_says_why():
    """Auto with measured costs: while the timings cannot tell a call from a rollout it explores with refill's plan
    (pods_n rollouts per prompt), and once that plan's first call was timed, the same plan with the fewest more
    prompts in its first call that make another size for the fit (3 prompts, 12 rollouts against 8); the first
    timing it sees (warm-up) is left out; once the calls' sizes differ it plans from the fitted costs (here: calls
    dear, rollouts cheap, so one call of pods_n for more prompts), and each change of plan is one line naming its
    reason."""
    mode = _auto()
    rewards = {p: [0.0, 1.0] * 8 for p in "abcdefghijkl"}
    plans = []
    slow = GenerationTiming(((8, 9.0), (4, 9.0)), 1.0)  # the warm-up: left out
    timings = [None, slow, GenerationTiming(((8, 1.0),), 0.5), GenerationTiming(((16, 1.01),), 0.5)]
    for timing in timings:
        rollouts, _ = _generation(mode, rewards, list("cdefghijkl"), timing)
        plans.append(mode.current)
    refill = DrawPlan(4, 2, 2, 0.9)
    assert plans[:3] == [refill, refill, DrawPlan(4, 3, 2, 0.9)], "explore: refill's plan, then a first call 1.5x"
    assert [c.rollouts for c in mode.calls] == [8, 16] and mode.gaps == [0.5, 0.5]
    assert plans[3].n == 4 and plans[3].calls >= 1 and rollouts.metrics["exploring"] == 0.0
    lines = mode.notes()
    assert len(lines) == 3 and "measuring what generating costs" in lines[0] and "(measured)" in lines[2]
    assert mode.notes() == []
    restored = _auto()
    restored.load_state_dict(mode.state_dict())
    assert (restored.calls, restored.gaps) == (mode.calls, mode.gaps)
    assert restored.history.beta == mode.history.beta


def test_auto_says_a_plan_once_and_again_only_when_it_changes_what_it_is():
    """A run's log gets a line when auto's plan changes its rollouts per prompt or its calls, or its first call's
    prompts by more than a quarter; the prompt count moving by one or two as the contrast rate moves (nearly every
    step of the benchmark's runs) is no new line."""
    mode = _auto()
    for plan in [DrawPlan(8, 12, 2, 0.9), DrawPlan(8, 13, 2, 0.9), DrawPlan(8, 11, 2, 0.9), DrawPlan(8, 16, 2, 0.9),
                 DrawPlan(16, 16, 2, 0.9), DrawPlan(16, 16, 1, 0.9), DrawPlan(16, 16, 1, 0.9)]:  # fmt: skip
        mode._announce(plan, "why")
    said = [line.split(": ")[1] for line in mode.notes()]
    assert said == [
        "this is PODS 8 -> 2 with refill (8 rollouts per prompt, 12 prompts per process in the first call, at most 2 "
        "calls)",
        "this is PODS 8 -> 2 with refill (8 rollouts per prompt, 16 prompts per process in the first call, at most 2 "
        "calls)",
        "this is PODS 16 -> 2 with refill (16 rollouts per prompt, 16 prompts per process in the first call, at most "
        "2 calls)",
        "this is PODS 16 -> 2 (16 rollouts per prompt, 16 prompts per process in the first call, at most 1 call)",
    ]


def test_auto_says_in_plain_words_what_its_plan_amounts_to():
    """Auto's line gave rollouts per prompt, prompts and calls, and never what they amount to; it said "1 prompts".
    It now opens with the plan in plain words (`describe_plan`: GRPO when it keeps every rollout, PODS N -> M when it
    down-samples, "with refill" when it may call again), and counts in the singular where there is one."""
    assert describe_plan(n=4, m=4, calls=3) == "this is GRPO 4 with refill"
    assert describe_plan(n=16, m=4, calls=1) == "this is PODS 16 -> 4"
    mode = _auto()
    mode._announce(DrawPlan(2, 1, 2, None), "why")
    assert mode.notes() == [
        "pods_generation='auto': this is GRPO 2 with refill (2 rollouts per prompt, 1 prompt per process in the first "
        "call, at most 2 calls): why"
    ]


def test_auto_lines_start_on_a_line_of_their_own_beside_the_progress_bar(monkeypatch):
    """Auto's lines were printed straight after the training progress bar, glued onto it ("... 3/40 [00:12<...]
    [trl_pods] pods_generation='auto': ..."). They now go through tqdm, which clears the bar, prints the line on a
    line of its own and redraws the bar."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    mode = SimpleNamespace(timed=False, notes=lambda: ["pods_generation='auto': this is PODS 16 -> 4"])
    trainer = SimpleNamespace(_pods_mode=mode, accelerator=SimpleNamespace(is_main_process=True))
    with tqdm(total=40, file=stream) as bar:
        bar.update(3)
        end_generation(trainer, None)
    assert re.search(r"(^|[\r\n])\[trl_pods\] pods_generation='auto': this is PODS 16 -> 4\n", stream.getvalue())


def test_auto_with_given_costs_plans_from_the_first_generation():
    """With pods_auto_costs auto needs no timing: it plans at once (the H200's costs: the most rollouts per prompt in
    one call) and asks for no timing."""
    mode = _auto(pods_auto_costs="call=1.031,rollout=0.000116,step=0.321")
    assert not mode.timed
    _generation(mode, {p: [0.0, 1.0] * 8 for p in "abcdef"}, list("cdef"))
    assert mode.current.n == 4 and mode.current.calls == 1 and "(given)" in mode.notes()[0]


def _screened(**fields) -> ScreenedMode:
    config = dict(pods_screen_ratio=3, pods_draw_coverage=0.75, pods_n_initial=2, pods_screen_rule="contrast")
    return ScreenedMode(SimpleNamespace(**{**config, **fields}))


def test_sized_screened_draws_its_pool_with_the_pilot_and_picks_among_the_drawn():
    """Screened with pods_draw_coverage reads the loader's batch and, in the pilot's call, draws as many further
    prompts as hold the batch's groups with pilot contrast at the observed rate (here 3 more at rate 0.5, coverage
    0.75); the rule picks among the piloted groups only (a random rule never picks a group that was not drawn), the
    commit gives them the rest of N, and the pilots teach the history."""
    mode = _screened()
    mode.history.rate = lambda n: 0.5
    rewards = {"a": [1.0] * 4, "b": [0, 1, 0, 1.0], "c": [0.0] * 4, "d": [1, 0, 0, 0.0], "e": [1.0] * 4}
    rollouts, fake = _generation(mode, rewards, ["c", "d", "e", "f"])
    generated = [call[1] for call in fake.calls if call[0] == "generate"]
    assert generated == [[p for p in "abcde" for _ in range(2)], ["b", "b", "d", "d"]], "pilot of 5, commit of 2"
    assert rollouts.chosen.tolist() == [False, True, False, True, False, False]
    assert mode.history.counts.tolist() == [2] * 5, "the pilots"
    for seed in range(20):
        randomly = _screened(pods_screen_rule="random")
        randomly.history.rate = lambda n: 0.99  # a pool of the batch alone, room for 6
        rollouts, _ = _generation(randomly, {p: [0.0, 1.0] * 2 for p in "ab"}, [], seed=seed)
        assert rollouts.chosen.tolist() == [True, True, False, False, False, False]


@pytest.mark.parametrize(
    "costs, beta, plan",
    [
        (H200, (0.5, 1.5), DrawPlan(16, 9, 1, 0.9)),
        (H200, (0.05, 2.0), DrawPlan(16, 16, 1, 0.9)),
        (H200, (2.0, 2.0), DrawPlan(16, 5, 1, 0.9)),
        (H200, (3.0, 0.3), DrawPlan(16, 15, 1, 0.9)),
        (CPU, (0.5, 1.5), DrawPlan(4, 11, 2, 0.9)),
        (CPU, (0.05, 2.0), DrawPlan(8, 16, 1, 0.9)),
        (CPU, (2.0, 2.0), DrawPlan(4, 7, 2, 0.9)),
        (CPU, (3.0, 0.3), DrawPlan(8, 12, 2, 0.9)),
    ],
    ids=["h200-mixed", "h200-hard", "h200-middling", "h200-easy", "cpu-mixed", "cpu-hard", "cpu-middling", "cpu-easy"],
)
def test_the_cost_aware_choice_is_pinned(costs, beta, plan):
    """The plans auto chooses for 4 trained groups (room for 16 prompts, at most 3 calls, pods_m 4 to pods_n 16)
    under the H200's and a CPU engine's costs, for pass rates across prompts that are mixed, mostly unsolved,
    middling or mostly solved: a change to the choice fails here until it is pinned again. With the H200's costs
    always one call of 16 rollouts per prompt; on the CPU few rollouts per prompt, over-drawing, a second call when
    contrast is common enough."""
    ladder = rollout_ladder(4, 16)
    assert best_plan(lambda n: contrast_rate(*beta, n), costs, 4, ladder, 16, 3, 0.9)[0] == plan

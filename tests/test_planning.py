"""Auto's and sized refill's planning at scale: fast, in log space, outside the generation clock, with a fit that
survives steady plans (issue 57)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch
from test_phase1 import FakeSteps, _inputs, _settings

from trl_pods.auto import KEPT_CALLS, AutoMode
from trl_pods.costs import Costs, parse_costs
from trl_pods.phase1 import generate_and_score
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


def test_costs_that_make_a_step_free_are_refused():
    """Given costs that are all zero would make every plan's step take no time (a ZeroDivisionError at the first
    generation): refused with the expected form; a zero rollout cost alone is a fair model and passes."""
    with pytest.raises(ValueError, match="a step must take time"):
        parse_costs("call=0,rollout=0,step=0")
    assert parse_costs("call=1,rollout=0,step=0.5") == Costs(1.0, 0.0, 0.5)

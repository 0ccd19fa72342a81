"""The plan of the time-to-target race against `trl.GRPOTrainer` (`PLAN`), fixed before its runs; the git history
shows the order. What each arm trains (`ARMS`), the order the runs are taken in (`planned_runs`), the H200's costs
the runs are priced with (`H200`) and the goals (`GOALS`). `time_to_target.py` runs it and writes its page."""

from __future__ import annotations

from race_analysis import FIELD, Race

from trl_pods import PODSConfig
from trl_pods.config import DEFAULT_PROMPT_RATIO

H200 = dict(call=1.031, rollout=0.000116, row=0.01279, update=0.1165)
"""Seconds per generation call, per rollout, per trained row and per update on an NVIDIA H200 (HF `generate`, the
runs' model shape with LoRA, their prompt and completion lengths): the least-squares fits of
``docs/benchmarks/data/gpu_cost_curve_SmolLM2-135M_lora.json`` (`gpu_cost_curve.py`), rounded."""
H200_PLAN_COSTS = f"call={H200['call']},rollout={H200['rollout']},step={H200['update'] + 16 * H200['row']:.3f}"
"""`H200` as ``pods_auto_costs``: a step trains 16 rows (4 prompts x 4), so the rest of a generation costs an
update and 16 rows."""
TRL_GROUP_SIZES = {f"trl.GRPOTrainer {g}": g for g in (4, 8, 16)}
ARMS = {
    **{name: dict(pods_n=g, pods_m=g) for name, g in TRL_GROUP_SIZES.items()},
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "GRPO 4 + refill (sized)": dict(pods_n=4, pods_m=4, pods_generation="refill", pods_draw_coverage=0.9),
    "auto 16->4": dict(pods_n=16, pods_m=4, pods_generation="auto"),
    "auto 16->4, H200 costs": dict(pods_n=16, pods_m=4, pods_generation="auto", pods_auto_costs=H200_PLAN_COSTS),
    "auto 4->4": dict(pods_n=4, pods_m=4, pods_generation="auto"),
    "auto 4->4, H200 costs": dict(pods_n=4, pods_m=4, pods_generation="auto", pods_auto_costs=H200_PLAN_COSTS),
}
"""What each arm trains: `trl.GRPOTrainer` itself at ``num_generations`` 4, 8 and 16 (built from the same arguments,
`trl_config`), PODS 16 -> 4 (max-variance), refill (DAPO's dynamic sampling) with its draws sized from the observed
contrast rate, and the cost-aware setting (``pods_generation="auto"``), measuring its costs on the run's machine or
planning with the H200's (the GPU-regime arm: its steps are hardware-free, so it runs on the CPU and is priced with
the H200's costs); `ADDED`: auto held to natural groups of 4."""
ADDED = ("auto 4->4", "auto 4->4, H200 costs")
"""The arms the plan's amendment (`PLAN` ``added``) took on after its first runs, run after all of them: auto with
``pods_n == pods_m`` chooses the prompts per call and the calls from the costs, and never down-samples a group."""

PLAN = {
    "fixed": "2026-11-27, before any run of this plan",
    "tasks": {"add2": 0.65, "add2x1": 0.6},
    "max_steps": 120,
    "eval_every": 5,
    "held_out": 200,
    "prompts_per_step": 4,
    "seeds": {
        "add2": {
            "trl.GRPOTrainer 4": 8,
            "trl.GRPOTrainer 8": 8,
            "auto 16->4": 8,
            "PODS 16->4": 5,
            "GRPO 4 + refill (sized)": 5,
            "auto 16->4, H200 costs": 5,
            "trl.GRPOTrainer 16": 5,
            "auto 4->4": 5,
            "auto 4->4, H200 costs": 5,
        },
        "add2x1": {
            "trl.GRPOTrainer 4": 5,
            "trl.GRPOTrainer 8": 5,
            "auto 16->4": 5,
            "PODS 16->4": 5,
            "GRPO 4 + refill (sized)": 5,
            "auto 16->4, H200 costs": 5,
            "trl.GRPOTrainer 16": 5,
            "auto 4->4": 5,
            "auto 4->4, H200 costs": 5,
        },
    },  # fmt: skip
    "order": "seed by seed; within a seed add2 before add2x1, arms in ARMS order; trl.GRPOTrainer 16 after all others "
    "but the added arms, which come last",
    "endpoint": "the first evaluation at or above the target whose next evaluation is also at or above it",
    "stop": "a run stops at the evaluation confirming the endpoint, or after max_steps (then it did not reach it)",
    "baseline": "in each pricing, the trl.GRPOTrainer arm with the lowest mean minutes among those whose runs all "
    "reached the target, with as many runs as the plan asks",
    "statistics": "ratio of mean minutes to the baseline's; bootstrap 90% CI resampling seeds within each arm (10,000 "
    "draws); exact two-sided permutation p of the difference of means",
    "pricings": "CPU: each step up to the endpoint priced with the costs (a call, a rollout, a row, a step) fitted by "
    "least squares on the interleaved timing run (--timing, idle machine), steps x the arm's interleaved seconds "
    "per step kept as a check; H200: each step priced with H200 (calls, rollouts, rows, update)",
    "amended": "2026-11-27, after the first runs had started and before any had finished: the CPU pricing was steps x "
    "the arm's interleaved seconds per step; refill and auto change their work per step over a run, and a "
    "timing run's few steps are auto's exploration, so each step is priced by what it did, as in the H200 pricing",
    "rerun": "auto 16->4's first run (add2, seed 0; endpoint at step 30) timed its generation calls without the "
    "weight load they share (phase 1 started the first call's clock after it, fixed in 'phase 1: a generation's "
    "first call is timed from the start of the generation'); it was set aside unreported and the run made again",
    "added": "2026-11-27, after 53 of the first 79 runs (seeds 0-3 of every arm but trl.GRPOTrainer 16): auto 16->4 "
    "took more steps to target than sized refill (means: add2 25 against 18, add2x1 45 against 39) while training "
    "more groups with contrast (0.89 against 0.84, 0.84 against 0.79), so its objective, groups with contrast per "
    "second, is not what tells them apart; its groups are: 8 or 16 rollouts down-sampled to 4 in part of its steps, "
    "against refill's natural groups of 4. The arms auto 4->4 (measured and H200 costs: prompts per call and calls "
    "chosen from the costs, no down-sampling) test that, 5 seeds on each task after all other runs; the goals stay "
    "on auto 16->4",
}
"""The measurement, fixed before its runs (the git history shows the order); `--report` refuses runs made otherwise.
The targets were chosen from the earlier 50-problem measurement (``docs/benchmarks/data/time_to_target_2026-11.jsonl``,
retired: docs/benchmarks/time-to-target-earlier.md): where the arms' curves
still rise, so that a step count resolves them, and every arm's earlier runs reached it within 100 steps."""
RACE = Race("time_to_target", PLAN, ARMS, tuple(TRL_GROUP_SIZES))
"""The plan as the runs, the analysis and the report read it."""
SIZED_REFILL = "GRPO 4 + refill (sized)"
FIXED_PODS = ("PODS 16->4", SIZED_REFILL)  # the fixed trl_pods settings auto is held against
GOALS = {"cpu": ("auto 16->4", 0.5, 0.7), "h200": ("auto 16->4, H200 costs", 0.7, 1.0)}
"""Per pricing: the cost-aware arm, and the issue's goal for its ratio to the best trl.GRPOTrainer setting and for
the upper bound of that ratio's 90% CI."""


def planned_runs(plan: dict = PLAN) -> list[tuple[str, str, int]]:
    """The plan's ``(task, arm, seed)`` runs in the order they are taken (`PLAN` ``order``)."""
    most = max(n for arms in plan["seeds"].values() for n in arms.values())
    last = [arm for arm in ARMS if arm == "trl.GRPOTrainer 16"]
    first = [arm for arm in ARMS if arm not in last and arm not in ADDED]
    return [
        (task, arm, seed)
        for group in (first, last, list(ADDED))
        for seed in range(most)
        for task, arms in plan["seeds"].items()
        for arm in group
        if seed < arms.get(arm, 0)
    ]


def bounded(step: list[float], plan: dict = PLAN) -> bool:
    """Whether a step of `SIZED_REFILL` reached one of its bounds (the most prompts, ``pods_max_prompt_ratio`` per
    trained prompt at ``pods_n`` rollouts each, or the most calls, ``pods_max_draws``: the arm's settings or their
    defaults), so that the data within them may not have held a group with contrast for every trained prompt."""
    options = ARMS[SIZED_REFILL]
    ratio = options.get("pods_max_prompt_ratio", DEFAULT_PROMPT_RATIO)
    most_rollouts = ratio * plan["prompts_per_step"] * options["pods_n"]
    most_calls = options.get("pods_max_draws", PODSConfig.pods_max_draws)
    return step[FIELD["rollouts"]] >= most_rollouts or step[FIELD["calls"]] >= most_calls

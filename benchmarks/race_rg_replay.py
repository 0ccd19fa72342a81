"""What drives auto's plans in the reasoning-gym race (a section of its page, `race_rg_report`): its planner
(`trl_pods.auto.best_plan`, as `trl_pods.auto.AutoMode.plan` calls it) replayed on the states its race runs
announced, as it plans and with one part changed at a time.

A state is what auto planned from at a generation where its plan changed (its log line): the costs it measured (a
call, a rollout, the rest of a step) and the contrast rate it observed at 4, 8 and 16 rollouts per prompt, to which
pass rates ``Beta(a, b)`` are fitted (the planner's own model, `trl_pods.contrast.contrast_rate`). The variants:

* **as raced**, as auto planned until 2026-12-02 (it now holds ``pods_n``): its floor is sized refill at ``pods_n``
  (16 rollouts per prompt), each group weighed by `trl_pods.contrast.kept_signal`, a step's progress in proportion
  to its signal (`trl_pods.auto.STEP_RETURNS`);
* **floor at pods_m**: the floor is sized refill at ``pods_m`` (4 rollouts per prompt);
* **groups alike**: no `kept_signal` (each trained group with contrast counts 1);
* **both**;
* **square root**: the floor at ``pods_m`` and a step's progress growing as the square root of its signal, as auto
  planned from 2026-11-30 to 2026-12-01 (the race's amended arms), the change these replays and the race's steps
  pointed to then;
* **square root, floor at pods_n**: a step's progress the square root of its signal, its floor sized refill at
  ``pods_n``: the square root's choice of rollouts per prompt where 16 are not needed for the floor, ``pods_n``'s
  floor where they are (the planner the pods_n amendment's verdict pointed to).

Each plan's expected calls and rollouts are priced with the race's CPU costs (a trl_pods step: its 16 trained rows
scored and trained, `race_analysis.arm_costs`) beside the baseline's mean priced step in its runs.

The states come from the logs of the race's runs (the runs' records keep no plans):

    python benchmarks/race_rg_replay.py LOG            # add the auto states of a log of time_to_target_rg.py
    python benchmarks/time_to_target_rg.py --report    # the page, with the replay's table

The logs are not committed; the states file is (docs/benchmarks/data/race_rg_auto_states.jsonl).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
from pathlib import Path

import torch
from harness import DATA
from race_analysis import FIELD, arm_costs, step_seconds
from time_to_target_rg_plan import AUTO_RETURNS

from trl_pods.auto import STEP_RETURNS, best_plan, rollout_ladder
from trl_pods.contrast import contrast_rate, kept_signal
from trl_pods.costs import Costs
from trl_pods.refill import DEFAULT_DRAW_COVERAGE, DrawPlan, sized_plan

STATES = "race_rg_auto_states.jsonl"
"""The states, one JSON line each, under the data folder."""
SHARE, M, N, RATIO, MAX_CALLS = 4, 4, 16, 4, 3
"""The race's auto arm: 4 prompts a step on one process, pods_m 4, pods_n 16, pods_max_prompt_ratio 4, 3 draws."""
LADDER = rollout_ladder(M, N)
STATE = re.compile(
    r"\((\d+) rollouts per prompt, (\d+) prompts? per process in the first call, at most (\d+) calls?\).*"
    r"costs: ([\d.e+-]+) s a call, ([\d.e+-]+) ms a rollout, ([\d.e+-]+) s the rest of a step \(measured\); "
    r"contrast rate ([\d.]+) at 4, ([\d.]+) at 8, ([\d.]+) at 16 rollouts"
)
RUN = re.compile(r"^(reasoning_gym:\w+) (.+) seed (\d+): 0:")
VARIANTS = {
    "as raced": (N, True, STEP_RETURNS),
    "floor at pods_m": (M, True, 1.0),
    "groups alike": (N, False, 1.0),
    "both": (M, False, 1.0),
    "square root": (M, True, AUTO_RETURNS["auto 16->4 (square root)"]),
    "square root, floor at pods_n": (N, True, AUTO_RETURNS["auto 16->4 (square root)"]),
}
"""Each variant's floor (sized refill at this many rollouts per prompt), whether groups are weighed by `kept_signal`,
and the power of a step's signal its progress grows as (`trl_pods.auto.STEP_RETURNS`, 1, as raced)."""


def extract(log: str) -> list[dict]:
    """The auto states of a race log: each planning line (with measured costs) of a run, the plan it announced
    (rollouts per prompt, first-call prompts, calls) beside the state, given the run's task and seed by the summary
    line the run prints when it ends (``<task> auto 16->4 seed <s>: 0: ...``)."""
    states, pending = [], []
    for line in re.split(r"[\r\n]", log):
        if "pods_generation='auto'" in line and (found := STATE.search(line)):
            n, first, calls, call, rollout, step, *rates = map(float, found.groups())
            plan = [int(n), int(first), int(calls)]
            pending.append({"plan": plan, "call": call, "rollout": rollout / 1000, "step": step, "rates": rates})
        elif run := RUN.match(line):
            if run[2] == "auto 16->4":
                states += [{"task": run[1], "seed": int(run[3]), **state} for state in pending]
            pending = []
    return states


GRID = [math.exp(x / 20) for x in range(-80, 81)]
"""The values of ``a`` and of ``b`` `fit_beta` tries: ``log a`` and ``log b`` in steps of 0.05 from -4 to 4."""


def contrast_rates(a: torch.Tensor, b: torch.Tensor, n: int) -> torch.Tensor:
    """`trl_pods.contrast.contrast_rate` at ``n`` rollouts for every ``Beta(a, b)`` of broadcast tensors ``a`` and
    ``b``: one minus the beta-binomial chances of ``n`` passes and of none, from log space (``n >= 2``)."""
    base = torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)
    every = torch.lgamma(a + n) + torch.lgamma(b) - torch.lgamma(a + b + n) - base
    none = torch.lgamma(a) + torch.lgamma(b + n) - torch.lgamma(a + b + n) - base
    return (1 - every.exp() - none.exp()).clamp(min=0)


@functools.cache
def fit_beta(rates: tuple[float, ...]) -> tuple[float, float]:
    """``Beta(a, b)`` whose contrast rates at the ladder's rollouts are nearest ``rates``: least squares over `GRID`
    for ``a`` and for ``b``, the first of equal errors in the order ``a``, then ``b``."""
    grid = torch.tensor(GRID, dtype=torch.float64)
    a, b = grid.view(-1, 1), grid.view(1, -1)
    error = sum((contrast_rates(a, b, n) - r) ** 2 for n, r in zip(LADDER, rates, strict=True))
    row, column = divmod(int(error.argmin()), len(GRID))
    return GRID[row], GRID[column]


def replay(state: dict, floor_n: int, weighed: bool, returns: float) -> tuple[DrawPlan, float, float, float]:
    """Auto's plan for ``state`` with its floor at ``floor_n`` rollouts per prompt, groups weighed by `kept_signal`
    or not, a step's progress its signal to the power ``returns``: the plan, its expected calls, rollouts and
    trained groups with contrast."""
    a, b = fit_beta(tuple(state["rates"]))
    rate = functools.partial(contrast_rate, a, b)
    room = SHARE * RATIO
    floor = sized_plan(floor_n, rate(floor_n), SHARE, room, MAX_CALLS, DEFAULT_DRAW_COVERAGE)
    value = (lambda n: kept_signal(a, b, n, M)) if weighed else None
    costs = Costs(state["call"], state["rollout"], state["step"])
    plan, outcome, _ = best_plan(
        rate, costs, SHARE, LADDER, room, MAX_CALLS, DEFAULT_DRAW_COVERAGE, floor, value, returns
    )
    return plan, outcome.calls, plan.n * outcome.prompts, outcome.contrast


def announced(state: dict) -> tuple[bool, bool]:
    """Whether the replay as raced gives the plan auto announced in ``state`` (rollouts per prompt, first-call
    prompts, calls), and its rollouts per prompt: the check that the fitted ``Beta(a, b)`` stands in for the run's own
    fit (the log rounds the rates to 2 decimals, so near-ties can fall a prompt or a call apart)."""
    plan = replay(state, *VARIANTS["as raced"])[0]
    return [plan.n, plan.first, plan.calls] == state["plan"], plan.n == state["plan"][0]


def agreement(states: list[dict]) -> tuple[int, int]:
    """In how many of ``states`` the replay as raced gives the plan auto announced, and its rollouts per prompt
    (`announced`)."""
    same, same_n = (sum(found) for found in zip(*map(announced, states), strict=True))
    return same, same_n


def baseline_step(task: str, costs: dict[str, float], runs: list[dict]) -> float:
    """The baseline's mean priced seconds a step over every step of its ``runs`` on ``task``."""
    priced = arm_costs(costs, trl=True)
    return statistics.fmean(step_seconds(s, priced) for r in runs if r["task"] == task and r["arm"] == "baseline"
                            for s in r["steps"])  # fmt: skip


def table(states: list[dict], costs: dict[str, float], runs: list[dict]) -> str:
    """Per task and variant: the share of states planned at each rollouts per prompt, the mean expected rollouts,
    calls and trained groups with contrast a step, and the price of such a step (``costs``) over the baseline's in
    its evaluation ``runs``; then how many of the states' announced plans the replay as raced gives."""
    priced = arm_costs(costs, trl=False)
    rows = ["| task | variant | states | rollouts per prompt 4 / 8 / 16 | rollouts | calls | groups with contrast "
            "(of 4) | price of a step ÷ baseline's |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for task in sorted({s["task"] for s in states}):
        mine, base = [s for s in states if s["task"] == task], baseline_step(task, costs, runs)
        for name, variant in VARIANTS.items():
            plans = [replay(s, *variant) for s in mine]
            shares = " / ".join(f"{sum(p[0].n == n for p in plans) / len(plans):.2f}" for n in LADDER)
            calls, rollouts, contrast = (statistics.fmean(p[i] for p in plans) for i in (1, 2, 3))
            step = [0.0] * len(FIELD)
            step[FIELD["rollouts"]], step[FIELD["rows"]], step[FIELD["calls"]] = rollouts, SHARE * M, calls
            rows.append(f"| {task.split(':')[1]} | {name} | {len(plans)} | {shares} | {rollouts:.0f} | {calls:.2f} | "
                        f"{contrast:.2f} | {step_seconds(step, priced) / base:.2f} |")  # fmt: skip
    same, same_n = agreement(states)
    check = (f"The replay as raced gives the plan auto announced in {same} of {len(states)} states, and its rollouts "
             f"per prompt in {same_n}.")  # fmt: skip
    return "\n".join(rows) + "\n\n" + check


def read_states(data: Path = DATA) -> list[dict]:
    """The states saved under ``data`` (`STATES`), in the order added; none before the first."""
    path = data / STATES
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="a log of time_to_target_rg.py: its auto runs' states are added to the file")
    args = parser.parse_args()
    seen = {(s["task"], s["seed"]) for s in read_states()}
    new = [s for s in extract(Path(args.log).read_text(errors="replace")) if (s["task"], s["seed"]) not in seen]
    with (DATA / STATES).open("a") as file:
        file.writelines(json.dumps(s) + "\n" for s in new)
    print(f"{len(new)} states of {len({(s['task'], s['seed']) for s in new})} runs added to {DATA / STATES}")


if __name__ == "__main__":
    main()

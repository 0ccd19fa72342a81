"""Planning a generation: how long auto's plan search and sized refill's first draw take, per generation, at 16 to
1,024 prompts a process, and at 16,384 with 65,536 prompts of room (the most any plan considers).

Auto (`trl_pods.auto.best_plan`, as `trl_pods.auto.AutoMode.plan` calls it: with sized refill's plan as its floor,
at ``pods_n`` 16 rollouts per prompt) searches every plan of prompts in the first call (25 from the share up to
``pods_max_prompt_ratio`` 4 times it) and calls (up to ``pods_max_draws`` 3, later ones sized at coverage 0.9), for
the expected outcome of each; sized refill (`trl_pods.contrast.prompts_to_cover`) finds the fewest prompts that cover
the share at the observed contrast rate. Both run once per generation on every process, so their time is what a
generation waits for before its first call. Each generation here plans with another contrast rate (pass rates
``Beta(a, 1)``, ``a`` in `GENERATIONS`), as a run's fit moves from step to step, so the caches of one generation do
not serve the next. Costs: an H200's (HF ``generate``: a call 1.03 s, a rollout 0.12 ms) and a CPU engine's (a rollout
41 ms), as in tests/test_draw_sizing.py.

With measured costs, auto also fits them once a generation (`trl_pods.costs.fit_costs`, on the timings
`trl_pods.auto.kept_calls` keeps): "cost fit" times it on the fullest window a run can keep at that share,
`KEPT_CALLS` calls of each size class its first and later calls can fall in (``pods_m`` x the share to ``pods_n`` x
the room rollouts), with 5% noise on the H200's costs; a measured-cost auto plans in the search's time plus this.

Times are the process's CPU time (``time.process_time``), so that other jobs on the machine do not inflate them as
much as they would wall time. "Before" is the exact search as it was before issue 57 (tests/planning_reference.py,
the same code): measured where it finishes in seconds; at 16,384 prompts it raises OverflowError.

``--sweep`` records the cost model's own choice (`cost_model_choice`: rollouts per prompt, first-call prompts and
calls; auto's until 2026-12-02, auto now holding ``pods_n``) on a sweep of given costs, a call 1 s and the rest of a
step 0.3 s, a rollout from 100 ms down to 0.01 ms, with ``pods_n`` 64, for three mixes of prompts (`SWEEP_BETAS`):
IsoCompute's finding is that the best rollouts per prompt grow with the budget, then saturate.

    python benchmarks/planning.py            # measure, save docs/benchmarks/data/planning.json, write the page
    python benchmarks/planning.py --sweep    # auto's choices on a sweep of given costs (no timing), then the page
    python benchmarks/planning.py --report   # the page from the saved measurement
    python benchmarks/planning.py --smoke    # 16 and 32 prompts, one generation: prints, writes nothing
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable

from harness import DATA, REPO, Study, command_line, environment

sys.path.insert(0, str(REPO / "tests"))  # the exact search as it was, kept as the tests' reference

import planning_reference  # noqa: E402

from trl_pods.auto import KEPT_CALLS, KEPT_GAPS, best_plan, kept_calls, rollout_ladder  # noqa: E402
from trl_pods.contrast import contrast_rate, kept_signal, prompts_to_cover  # noqa: E402
from trl_pods.costs import CallTiming, Costs, fit_costs  # noqa: E402
from trl_pods.refill import DEFAULT_DRAW_COVERAGE, DrawPlan, sized_plan  # noqa: E402

STUDY = Study("planning.py", "planning", "Planning time: auto's search and sized refill's draw", "planning")
SHARES = (16, 32, 64, 128, 256, 512, 1024, 16384)
"""Prompts a process trains on per generation; the room is `RATIO` times as many."""
RATIO, LADDER, MAX_CALLS, COVERAGE = 4, rollout_ladder(4, 16), 3, DEFAULT_DRAW_COVERAGE
COSTS = {
    "H200": Costs(call=1.031, rollout=0.000116, step=0.321),
    "CPU engine": Costs(call=0.3, rollout=0.041, step=10.4),
}
LOAD = 0.5
"""Seconds a generation's first call spends loading the new weights, in `fit_window`'s timings."""
GENERATIONS = (0.3, 0.5, 0.8, 1.2, 2.0)
"""Each generation's pass rates ``Beta(a, 1)``: contrast rates from 0.38 to 0.61 at 4 rollouts."""
SWEEP_BETAS = ((0.5, 1.5), (0.2, 0.2), (2.0, 0.5))
"""Pass rates ``Beta(a, b)``: mostly hard prompts; prompts mostly solved or unsolved; mostly easy prompts."""
SWEEP_ROLLOUT_MS = (100, 30, 10, 3, 1, 0.3, 0.1, 0.01)
BEFORE_UP_TO = 64
"""The largest share the exact search is timed at (4-7 s a generation at 64; minutes at 128)."""
PARSER = STUDY.parser(__doc__)
PARSER.add_argument("--before_up_to", type=int, default=BEFORE_UP_TO, help="time the exact search up to this share")
PARSER.add_argument("--sweep", action="store_true", help="record auto's choices on a sweep of given costs")


def _rate(a: float, n: int) -> float:
    """The contrast rate of ``n`` rollouts when pass rates follow ``Beta(a, 1)``."""
    return contrast_rate(a, 1.0, n)


def _milliseconds(plan: Callable[[], object]) -> float:
    began = time.process_time()
    plan()
    return 1000 * (time.process_time() - began)


def _search(beta: tuple[float, float], costs: Costs, share: int, ladder: list[int], weighed: bool) -> DrawPlan:
    """`best_plan` above sized refill's plan at the ladder's top (the floor), pass rates ``Beta(*beta)``, each group
    weighed by what it teaches (`trl_pods.contrast.kept_signal`) where ``weighed``."""
    rate, room, n = functools.partial(contrast_rate, *beta), RATIO * share, ladder[-1]
    floor = sized_plan(n, rate(n), share, room, MAX_CALLS, COVERAGE)
    value = functools.partial(kept_signal, *beta, m=ladder[0]) if weighed else None
    return best_plan(rate, costs, share, ladder, room, MAX_CALLS, COVERAGE, floor, value)[0]


def auto_planning(a: float, costs: Costs, share: int) -> DrawPlan:
    """Auto's planning as `trl_pods.auto.AutoMode.plan` does it, pass rates ``Beta(a, 1)``: the search at ``pods_n``
    rollouts per prompt above sized refill's plan."""
    return _search((a, 1.0), costs, share, LADDER[-1:], weighed=False)


def cost_model_choice(beta: tuple[float, float], costs: Costs, share: int, ladder: list[int]) -> DrawPlan:
    """The cost model's own choice of rollouts per prompt (auto's until 2026-12-02), pass rates ``Beta(*beta)``: the
    search over ``ladder`` above sized refill at its top, each group weighed by what it teaches."""
    return _search(beta, costs, share, ladder, weighed=True)


def exact_search(a: float, costs: Costs, share: int) -> DrawPlan:
    """The exact search as it was, pass rates ``Beta(a, 1)``."""
    rate = functools.partial(_rate, a)
    return planning_reference.best_plan(rate, costs, share, LADDER, RATIO * share, MAX_CALLS, COVERAGE)[0]


def fit_window(share: int, seed: int) -> list[CallTiming]:
    """The fullest window of kept timings at ``share`` prompts a process: `KEPT_CALLS` first and later calls of each
    size class (a power of two of rollouts per process) from ``pods_m`` x the share to ``pods_n`` x the room, timed at
    the H200's costs (a first call also loading the weights) with 5% noise drawn from ``seed``."""
    rng, costs = random.Random(seed), COSTS["H200"]
    sizes = [LADDER[0] * share * 2**i for i in range((LADDER[-1] * RATIO // LADDER[0]).bit_length())]
    calls = [
        CallTiming(size, (costs.call + costs.rollout * size + first * LOAD) * rng.uniform(0.95, 1.05), first)
        for _ in range(KEPT_CALLS) for size in sizes for first in (True, False)
    ]  # fmt: skip
    return kept_calls(calls)


def _timings(search: Callable, share: int, costs: Costs, generations: tuple[float, ...]) -> dict:
    """Milliseconds per generation of ``search``, or the error it raises."""
    try:
        return {"ms": [_milliseconds(functools.partial(search, a, costs, share)) for a in generations]}
    except OverflowError as error:
        return {"error": f"OverflowError: {error}"}


def measure(shares: tuple[int, ...], generations: tuple[float, ...], before_up_to: int) -> list[dict]:
    """A row per share: auto's search (now, and before where timed) with each cost model, sized refill's draw."""
    rows = []
    for share in shares:
        row = {"share": share, "room": RATIO * share}
        for name, costs in COSTS.items():
            row[f"auto {name}"] = _timings(auto_planning, share, costs, generations)
            if share <= before_up_to or share > 1030:  # past ~1,030 prompts the exact terms overflow at once
                row[f"before {name}"] = _timings(exact_search, share, costs, generations)
        draws = [
            functools.partial(prompts_to_cover, share, _rate(a, 16), COVERAGE, RATIO * share) for a in generations
        ]
        row["sized refill"] = {"ms": [_milliseconds(draw) for draw in draws]}
        gaps = [COSTS["H200"].step] * KEPT_GAPS
        fits = [functools.partial(fit_costs, fit_window(share, seed), gaps) for seed in range(len(generations))]
        row["cost fit"] = {"ms": [_milliseconds(fit) for fit in fits]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def sweep() -> list[dict]:
    """The cost model's choice (`cost_model_choice`: share 4, room 16, rollouts per prompt 4 to 64) for each mix of
    prompts and rollout cost."""
    rows = []
    for beta in SWEEP_BETAS:
        for rollout_ms in SWEEP_ROLLOUT_MS:
            costs = Costs(call=1.0, rollout=rollout_ms / 1000, step=0.3)
            plan = cost_model_choice(beta, costs, 4, rollout_ladder(4, 64))
            rows.append(
                {"beta": beta, "rollout_ms": rollout_ms, "n": plan.n, "first": plan.first, "calls": plan.calls}
            )
    return rows


def sweep_table(rows: list[dict]) -> str:
    """Rollouts per prompt (first-call prompts, calls) the cost model chooses, a row per mix of prompts."""
    header = "| pass rates | " + " | ".join(f"{ms:g} ms" for ms in SWEEP_ROLLOUT_MS) + " |"
    lines = [header, "|---|" + "---|" * len(SWEEP_ROLLOUT_MS)]
    for beta in SWEEP_BETAS:
        cells = [f"{r['n']} ({r['first']}, {r['calls']})" for r in rows if tuple(r["beta"]) == beta]
        lines.append(f"| Beta{beta} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(timing: dict | None) -> str:
    if timing is None:
        return "not timed"
    if "error" in timing:
        return timing["error"].split(":")[0]
    times = timing["ms"]
    return f"{_ms(statistics.median(times))} ({_ms(max(times))})"


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2g}" if value < 1 else f"{value:.3g}"


def table(rows: list[dict]) -> str:
    """The measurement as a markdown table: median (max) milliseconds a generation."""
    names = [f"auto {name}" for name in COSTS] + ["cost fit", "sized refill"] + [f"before {name}" for name in COSTS]
    lines = [
        "| prompts a process (room) | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for row in rows:
        cells = [_cell(row.get(name)) for name in names]
        lines.append(f"| {row['share']:,} ({row['room']:,}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render() -> str:
    """The page from the saved measurement."""
    saved = json.loads((DATA / "planning.json").read_text())
    swept = DATA / "planning_sweep.json"
    choices = ""
    if swept.exists():
        choices = (
            "\n\n## The cost model's choices on a sweep of given costs\n\nRollouts per prompt (first-call prompts, "
            "calls) auto's cost model chooses for 4 prompts a process (room 16, rollouts per prompt 4 to 64), a call "
            "1 s and the rest of a step 0.3 s, by a rollout's cost; auto chose so until 2026-12-02, and now holds "
            f"`pods_n`:\n\n{sweep_table(json.loads(swept.read_text()))}\n\n"
            "Command: `python benchmarks/planning.py --sweep`"
        )
    return STUDY.render(
        f"{__doc__.split(chr(10) + chr(10))[0]}\n\n"
        "Milliseconds of CPU time a generation, median (max) over the generations: auto's search with each cost\n"
        "model, its fit of measured costs on the fullest window of timings, sized refill's first draw, and the exact\n"
        "search as it was (before):\n\n"
        f"{table(saved['rows'])}\n\nCommand: `{saved['command']}`\n\n{saved['environment']}{choices}"
    )


def main() -> None:
    args = PARSER.parse_args()
    if args.report:
        STUDY.write(render())
        return
    if args.sweep:
        (DATA / "planning_sweep.json").write_text(json.dumps(sweep(), indent=1) + "\n")
        STUDY.write(render())
        return
    if args.smoke:
        print(table(measure((16, 32), GENERATIONS[:1], 16)))
        print("smoke run: nothing written")
        return
    rows = measure(SHARES, GENERATIONS, args.before_up_to)
    command = command_line(STUDY.script, PARSER, vars(args))
    saved = {"rows": rows, "command": command, "environment": environment()}
    (DATA / "planning.json").write_text(json.dumps(saved, indent=1) + "\n")
    STUDY.write(render())


if __name__ == "__main__":
    main()

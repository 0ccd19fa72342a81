"""Rollouts generated per budget with budgeted generation on several processes: one budget for all processes (each
process pads to the busiest one's rows) against each process spending its own share (what `PODSGRPOTrainer` does).

Phase 1's real orchestration (`trl_pods.phase1.generate_budgeted`, `SlotFiller`) and the real allocation
(`trl_pods.budget.BudgetedAllocation`, default rule) run for process 0 of P simulated processes; only the engine and
the reward are replaced: a prompt's rollouts succeed with its own fixed probability (a quarter of the prompts never,
the rest spread over 0..1, as on a task being learned), and the other processes' rewards are drawn the same way.
``generated / budget`` is the recorded `pods/rollouts_generated` over ``pods_budget x prompts``, averaged over the
generations after the first (which has no history).

    python benchmarks/budget_padding.py
"""

from __future__ import annotations

import argparse

import _report
import torch

from trl_pods.budget import BudgetedAllocation
from trl_pods.phase1 import GenerationSteps, Phase1Settings, generate_budgeted

M, N, BUDGET, PROMPTS = 4, 16, 8, 64


def _success(prompts: int) -> torch.Tensor:
    """``[prompts]`` success probability of each prompt: a quarter never solved, the rest spread over (0, 1]."""
    p = torch.linspace(0, 1, prompts)
    p[::4] = 0.0
    return p


def one_generation(
    allocation: BudgetedAllocation, prompts: list[int], settings: Phase1Settings, own_share: bool, seed: int
) -> int:
    """Phase 1 of one budgeted generation for process 0 of ``settings.processes``; returns the recorded rollouts
    generated over all processes. ``prompts`` are all processes' prompts, in group order."""
    processes, groups = settings.processes, len(prompts)
    per_process = groups // processes
    success = _success(PROMPTS)[torch.tensor(prompts)]  # [G]
    generator = torch.Generator().manual_seed(seed)
    planned = {}

    def plan(_: int) -> torch.Tensor:
        planned["counts"] = allocation.plan(prompts, processes if own_share else 1)
        return planned["counts"]

    def generate(rows: list[dict], size: int) -> tuple:
        return None, [[0]] * len(rows), None, [""] * len(rows), None, {}, None, []

    def score(rows: list[dict], generation: tuple, real: int) -> tuple[torch.Tensor, dict]:
        counts = planned["counts"]  # every process generates len(rows) rows: its own, then padding
        p = success.repeat_interleave(counts)  # [sum counts]: success probability of each real row
        rewards = torch.full((processes * len(rows), 1), torch.nan)
        first = 0
        for rank, own in enumerate(counts.view(processes, per_process).sum(dim=1).tolist()):
            drawn = (torch.rand(own, generator=generator) < p[first : first + own]).float()
            rewards[rank * len(rows) : rank * len(rows) + own, 0] = drawn
            first += own
        return rewards, {}

    inputs = [{"prompt": prompts[g]} for g in range(per_process) for _ in range(N)]  # process 0's rows
    steps = GenerationSteps(generate=None, score=None, generate_wave=generate, score_wave=score, allocate=plan)
    rollouts = generate_budgeted(inputs, settings, steps)
    allocation.observe(rollouts.rewards_per_func.view(groups, N))
    return rollouts.generated


def generated_per_budget(processes: int, per_process: int, generations: int, own_share: bool) -> float:
    """Mean recorded rollouts generated / budget over ``generations`` generations (the first one excluded)."""
    allocation = BudgetedAllocation(M, N, BUDGET, "expected_signal", capacity=10_000, decay=0.8)
    settings = Phase1Settings(
        n=N, generation="budgeted", n_initial=None, process_index=0, processes=processes,
        reward_weights=torch.ones(1), aggregation="sum_then_normalize", down_sampler=None, down_sampler_name="none",
    )  # fmt: skip
    groups = processes * per_process
    ratios = []
    for step in range(generations):
        prompts = [(step * groups + g) % PROMPTS for g in range(groups)]
        generated = one_generation(allocation, prompts, settings, own_share, seed=step)
        if step:
            ratios.append(generated / (BUDGET * groups))
    return sum(ratios) / len(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--prompts_per_process", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--generations", type=int, default=40)
    args = parser.parse_args()
    rows = []
    for processes in args.processes:
        for per_process in args.prompts_per_process:
            shared = generated_per_budget(processes, per_process, args.generations, own_share=False)
            own = generated_per_budget(processes, per_process, args.generations, own_share=True)
            rows.append(f"| {processes} | {per_process} | {shared:.3f} | {own:.3f} |")
            print(rows[-1], flush=True)
    body = f"""## Budgeted generation on several processes: rollouts generated per budget

Budgeted generation with pods_m {M}, pods_n {N}, pods_budget {BUDGET}: the rollouts generated (recorded by phase 1,
padding included) over the budget, mean over {args.generations - 1} generations after the first, for process 0 of P
simulated processes. Phase 1's orchestration and the allocation are the real code; the engine and the rewards are
simulated (a quarter of the prompts never solved, the rest solved with probabilities spread over 0..1). "One budget":
the allocation spreads one budget over all processes' prompts, and every process generates as many rows as the
busiest (the layout before per-process budgets). "Own share": each process's prompts share its own budget (what the
trainer does).

| processes | prompts per process | one budget | own share |
|---|---|---|---|
{chr(10).join(rows)}

Command: `{_report.command_line("budget_padding.py", parser, args)}`

{_report.environment()}
"""
    _report.write_section("budget-padding", body)


if __name__ == "__main__":
    main()

"""Rollouts generated per budget with budgeted generation on several processes: one budget for all processes (each
process pads to the busiest one's rows) against each process spending its own share (what `PODSGRPOTrainer` does).

Phase 1's real loop (`trl_pods.phase1.generate_and_score`) with the real budgeted mode and allocation
(`trl_pods.budget.BudgetedMode`, default rule) run for process 0 of P simulated processes; only the engine and
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

from trl_pods.budget import BudgetedMode
from trl_pods.phase1 import GenerationSteps, generate_and_score
from trl_pods.rollout_fields import RolloutRows
from trl_pods.selection import Phase1Settings
from trl_pods.waves import Wave, WaveState

M, N, BUDGET, PROMPTS = 4, 16, 8, 64


def _success(prompts: int) -> torch.Tensor:
    """``[prompts]`` success probability of each prompt: a quarter never solved, the rest spread over (0, 1]."""
    p = torch.linspace(0, 1, prompts)
    p[::4] = 0.0
    return p


class OwnShare(BudgetedMode):
    """The trainer's budgeted mode, keeping the counts it allocated (the simulated engine needs them)."""

    def first_wave(self, state: WaveState) -> Wave:
        wave = super().first_wave(state)
        self.counts = wave.sizes
        return wave


class OneBudget(OwnShare):
    """One budget spread over all processes' prompts (each process then pads to the busiest one's rows)."""

    def first_wave(self, state: WaveState) -> Wave:
        self.counts = self.allocation.plan(state.group_keys(), 1)
        return Wave(torch.arange(self.counts.numel()), self.counts, 1)


def one_generation(mode: OwnShare, prompts: list[int], settings: Phase1Settings, seed: int) -> int:
    """Phase 1 of one budgeted generation for process 0 of ``settings.processes``; returns the recorded rollouts
    generated over all processes. ``prompts`` are all processes' prompts, in group order."""
    processes, groups = settings.processes, len(prompts)
    per_process = groups // processes
    success = _success(PROMPTS)[torch.tensor(prompts)]  # [G]
    generator = torch.Generator().manual_seed(seed)

    def keys(_: list[dict]) -> list[int]:
        return prompts

    def generate(rows: list[dict], request: int) -> RolloutRows:
        generation = (None, [[0]] * len(rows), None, [""] * len(rows), None, {}, None, [])
        return RolloutRows([row["prompt"] for row in rows], generation, None)

    def score(rows: list[dict], generated: RolloutRows, real: int) -> tuple[torch.Tensor, dict]:
        counts = mode.counts  # every process generates len(rows) rows: its own, then padding
        p = success.repeat_interleave(counts)  # [sum counts]: success probability of each real row
        rewards = torch.full((processes * len(rows), 1), torch.nan)
        first = 0
        for rank, own in enumerate(counts.view(processes, per_process).sum(dim=1).tolist()):
            drawn = (torch.rand(own, generator=generator) < p[first : first + own]).float()
            rewards[rank * len(rows) : rank * len(rows) + own, 0] = drawn
            first += own
        return rewards, {}

    inputs = [{"prompt": prompts[g]} for g in range(per_process) for _ in range(N)]  # process 0's rows
    rollouts = generate_and_score(inputs, settings, mode, GenerationSteps(generate, score, group_keys=keys))
    return rollouts.generated  # the mode observed the rewards (its metrics)


def generated_per_budget(processes: int, per_process: int, generations: int, own_share: bool) -> float:
    """Mean recorded rollouts generated / budget over ``generations`` generations (the first one excluded)."""
    config = argparse.Namespace(
        pods_m=M, pods_n=N, pods_budget=BUDGET, pods_allocation="expected_signal", pods_history_size=10_000,
        pods_history_decay=0.8,
    )  # fmt: skip
    mode = OwnShare(config) if own_share else OneBudget(config)
    settings = Phase1Settings(
        n=N, process_index=0, processes=processes, reward_weights=torch.ones(1), aggregation="sum_then_normalize",
        down_sampler=None, down_sampler_name="none",
    )  # fmt: skip
    groups = processes * per_process
    ratios = []
    for step in range(generations):
        prompts = [(step * groups + g) % PROMPTS for g in range(groups)]
        generated = one_generation(mode, prompts, settings, seed=step)
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

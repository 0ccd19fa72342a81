"""The trainer's side of phase 1: the steps `trl_pods.phase1` calls and the contexts that flip `GRPOTrainer`'s
state around them (the group size TRL reads, its reward gather, the weights loaded for generation).

Everything here reads or writes a `PODSGRPOTrainer`; the orchestration it serves is pure (`trl_pods.phase1`).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_trainer_module
from tqdm.auto import tqdm
from trl.models import unwrap_model_for_generation

from . import rollout_fields
from .budget import prompt_key
from .rollout_fields import RolloutRows
from .selection import Phase1Settings, selection_seed
from .vllm_engine import engine_awake
from .waves import GenerationTiming


@contextmanager
def generation_layout(trainer: Any):
    """Within the block, TRL sees the batch as generated: groups of `pods_n` rows instead of `pods_m`."""
    if trainer.pods_n is None:
        yield
        return
    kept_batch = trainer.args.generation_batch_size
    trainer.num_generations = trainer.pods_n
    trainer.args.generation_batch_size = kept_batch // trainer.pods_m * trainer.pods_n * trainer._pods_pool
    try:
        yield
    finally:
        trainer.num_generations = trainer.pods_m
        trainer.args.generation_batch_size = kept_batch


@contextmanager
def group_size(trainer: Any, size: int):
    """Within the block, TRL generates groups of ``size`` rows (what vLLM server mode requests per prompt)."""
    trainer.num_generations = size
    try:
        yield
    finally:
        trainer.num_generations = trainer.pods_m


@contextmanager
def rewards_not_gathered():
    """Within the block, TRL's `_calculate_rewards` returns this process's rewards (it skips its final gather)."""
    gather = grpo_trainer_module.gather
    grpo_trainer_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_trainer_module.gather = gather


def take_new(pending: dict[str, list], before: dict[str, int]) -> dict[str, list]:
    """Remove and return what was appended to each list of ``pending`` since the lengths ``before`` were taken."""
    new = {}
    for key, values in pending.items():
        start = before.get(key, 0)
        if len(values) > start:
            new[key] = values[start:]
            del values[start:]
    return new


def generate_call(trainer: Any, parent, in_use: list, rows: list[dict], request: int) -> RolloutRows:
    """One generation call of phase 1 through TRL's batch preparation (`rollout_fields.generate_rows`), ``request``
    rollouts per prompt asked of the engine at once, with environment instances the generation's earlier calls did
    not use (``in_use``, which this call's join)."""
    with group_size(trainer, request), rollout_fields.fresh_environments(trainer, in_use):
        generated = rollout_fields.generate_rows(trainer, parent, rows)
    in_use.extend(generated.environments or [])
    return generated


def score_own_rows(trainer: Any, rows: list[dict], generated: RolloutRows, real: int) -> tuple[torch.Tensor, dict]:
    """Score a call's own rows (the first ``real``), not its padding, and gather them: ``[P * len(rows), F]``, NaN on
    padding rows; with the `log_extra` columns the reward functions logged for the scored rows.

    Reward functions see the rows as TRL would score them: the prompts they were generated from (after environment
    resets), `rollout_func`'s fields, and each row's own environment. They see the process's rows that have a slot,
    or its first padding row when it has none, so every process calls them once per call (a reward model under
    ZeRO-3 needs every process). What they log then describes real rollouts: `log_extra` values go to their slots,
    and each `log_metric` value counts once per rollout scored, so TRL's average over the step is per rollout.
    """
    scored = max(real, 1)
    extra_before = {column: len(values) for column, values in trainer._pending_extra_logs.items()}
    metrics_before = {name: len(values) for name, values in trainer._pending_metrics.items()}
    _, completion_ids, _, completions = generated.generation[:4]
    merged = rollout_fields.scoring_rows(rows, generated.generation[5], scored)
    if generated.environments is not None:
        trainer.environments = generated.environments[:scored]  # TRL's `environments` reward argument
    with rewards_not_gathered():
        local = trainer._calculate_rewards(
            merged, generated.prompts[:scored], completions[:scored], completion_ids[:scored]
        )
    extra = take_new(trainer._pending_extra_logs, extra_before)
    for name, values in take_new(trainer._pending_metrics, metrics_before).items():
        trainer._pending_metrics[name].extend(value for value in values for _ in range(real))
    padded = local.new_full((len(rows), local.size(1)), torch.nan)  # [rows, F]
    padded[:real] = local[:real]
    return trainer.accelerator.gather(padded), extra


def group_keys(trainer: Any, rows: list[dict[str, Any]]) -> list[int]:
    """Budgeted generation: digests of this process's groups' rows (one each; `prompt_key`), gathered over
    processes, so that every process allocates alike."""
    keys = [prompt_key(row) for row in rows]
    return trainer.accelerator.gather(torch.tensor(keys, device=trainer.accelerator.device)).tolist()


@contextmanager
def one_weight_load_per_generation(trainer: Any):
    """Within the block, the generation calls of one generation (rounds, adaptive waves) share one weight load.

    vLLM colocate with sleep mode: the engine stays awake between the calls (`engine_awake`), so the weights are
    pushed once. HF generate under DeepSpeed ZeRO-3 with `ds3_gather_for_generation`: TRL gathers the full weights
    around each `generate` call; they are gathered once for the block instead, as TRL does for one call.
    """
    if trainer.use_vllm:

        def sync() -> None:  # as TRL's generation does once per optimizer step
            trainer.vllm_generation.sync_weights()
            trainer._last_loaded_step = trainer.state.global_step

        with engine_awake(getattr(trainer, "vllm_generation", None), sync):
            yield
        return
    if not (trainer._dist.is_zero3 and trainer.args.ds3_gather_for_generation):
        yield
        return
    with unwrap_model_for_generation(
        trainer.model_wrapped,
        trainer.accelerator,
        gather_deepspeed3_params=True,
        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
    ):
        trainer.args.ds3_gather_for_generation = False
        try:
            yield
        finally:
            trainer.args.ds3_gather_for_generation = True


def draw_prompts(trainer: Any, counts: list[int]) -> tuple[list[int], list[dict[str, Any]]]:
    """Refill: up to ``counts[r]`` further prompts for process ``r`` (the same list on every process), read from the
    epoch's order now (`prompt_order.DrawingSampler`, the same draw on every process, processes served in order).
    Returns how many each process got (fewer once the epoch runs out) and this process's rows, each prompt
    `pods_n` times, each row its own dict as the data loader gives them (TRL writes `rollout_func`'s per-row fields
    into phase 2's rows)."""
    drawn = trainer._epoch_replay.draw(sum(counts))
    got, left = [], len(drawn)
    for count in counts:
        got.append(min(count, left))
        left -= got[-1]
    first = sum(got[: trainer.accelerator.process_index])
    mine = drawn[first : first + got[trainer.accelerator.process_index]]
    return got, [dict(row) for row in mine for _ in range(trainer.pods_n)]


def phase1_settings(trainer: Any) -> Phase1Settings:
    """What phase 1 reads from the trainer's configuration and process layout, for the generation about to start."""
    args = trainer.args
    return Phase1Settings(
        n=trainer.pods_n,
        process_index=trainer.accelerator.process_index,
        processes=trainer.accelerator.num_processes,
        reward_weights=trainer.reward_weights,
        aggregation=trainer.multi_objective_aggregation,
        down_sampler=trainer.down_sampler,
        seed=selection_seed(args.seed, trainer.state.global_step, trainer._step, args.gradient_accumulation_steps),
        down_sampler_name=args.pods_down_sampler,
        cross_group=args.pods_cross_group,
        scale_rewards=trainer.scale_rewards,
        drop_constant_groups=args.pods_drop_constant_groups,
        advantage_scope=args.pods_advantage_scope,
    )


def generation_timing(trainer: Any) -> GenerationTiming | None:
    """The previous generation's timing (`end_generation`) with the seconds since it ended, the most any process
    measured, so that every process plans alike; None for the first generation of a process."""
    previous = trainer._pods_last_generation
    if previous is None:
        return None
    rollouts, seconds, ended = previous
    device = trainer.accelerator.device
    local = torch.tensor([*seconds, time.perf_counter() - ended], dtype=torch.float64, device=device)
    agreed = trainer.accelerator.gather(local.unsqueeze(0)).amax(dim=0).tolist()  # [calls + 1]
    return GenerationTiming(tuple(zip(rollouts, agreed[:-1], strict=True)), agreed[-1])


def end_generation(trainer: Any, rollouts: Any) -> None:
    """After phase 1: keep its calls' timing for a `GenerationMode.timed` mode (`generation_timing`), and print the
    mode's notes on the main process (auto's choice when it changes), on lines of their own beside the progress
    bar."""
    mode = trainer._pods_mode
    if mode.timed:
        processes = trainer.accelerator.num_processes
        per_process = [rows // processes for rows in rollouts.call_rows]
        trainer._pods_last_generation = (per_process, rollouts.call_seconds, time.perf_counter())
    for line in mode.notes():
        if trainer.accelerator.is_main_process:  # through tqdm: on a line of its own beside the progress bar
            tqdm.write(f"[trl_pods] {line}", file=sys.stderr)

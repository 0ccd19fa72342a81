"""Exact resume: what a checkpoint needs beyond TRL's to continue a generation cycle with the same rollouts.

Beside its RNG state each process saves ``pods_state_{process_index}.pt``: the position in the generation cycle
(TRL's micro-step counter), the buffered micro-batches of the current generation (still to be trained on when
`steps_per_generation > gradient_accumulation_steps` or `num_iterations > 1`), the count behind
`pods/tokens_generated` and, with budgeted generation, the prompts' reward history (`budget.PromptHistory`), so that
the resumed run allocates as the uninterrupted one. With HF generate, a resumed run then generates the same rollouts
as an uninterrupted one; with vLLM the engine's sampling state is not in the checkpoint, so a resumed run continues
correctly but re-samples.

A run that resumes at a later epoch also needs that epoch's prompt order: TRL's `RepeatSampler` draws one permutation
per epoch from a generator seeded once, so a resumed run would start the sequence again (`EpochReplay`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)

RESUME_STATE = "pods_state_{}.pt"  # per process index, beside a checkpoint's RNG states


class EpochReplay(Sampler):
    """TRL's `RepeatSampler` whose epoch ``e`` yields the ``e``-th order of its seeded sequence, however training
    got there: before each pass the generator is re-seeded and the permutations of earlier epochs drawn again, so an
    uninterrupted run sees TRL's order and a run resumed at epoch ``e`` the same (Trainer calls `set_epoch`)."""

    def __init__(self, sampler: Any):
        self.sampler, self.epoch = sampler, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        sampler = self.sampler
        if sampler.shuffle and sampler.seed is not None:
            sampler.generator.manual_seed(sampler.seed)
            for _ in range(self.epoch):
                torch.randperm(sampler.num_samples, generator=sampler.generator)
        return iter(sampler)


def cycle_layout(trainer: Any) -> list[int]:
    """What the saved position means something for: steps per generation, iterations, accumulation, processes."""
    return [
        trainer.args.steps_per_generation,
        trainer.num_iterations,
        trainer.args.gradient_accumulation_steps,
        trainer.accelerator.num_processes,
    ]


def save_state(trainer: Any, output_dir: str) -> None:
    """Save this process's PODS state into the checkpoint folder ``output_dir``."""
    state = {
        "layout": cycle_layout(trainer),
        "step": trainer._step,
        "buffered_inputs": trainer._buffered_inputs,
        "tokens_generated": trainer._tokens_generated,
    }
    if trainer._pods_budget is not None:
        state["prompt_history"] = trainer._pods_budget.history.state_dict()
    torch.save(state, os.path.join(output_dir, RESUME_STATE.format(trainer.accelerator.process_index)))


def load_state(trainer: Any, checkpoint: str) -> None:
    """Restore what `save_state` saved in ``checkpoint``. A checkpoint without it (e.g. GRPOTrainer's) or saved
    with another cycle layout starts a new generation, as TRL does; the token count and the prompt history are
    restored in the latter."""
    path = os.path.join(checkpoint, RESUME_STATE.format(trainer.accelerator.process_index))
    if not os.path.isfile(path):
        return
    device = trainer.accelerator.device  # "cpu:0" under torchrun with gloo, which torch.load cannot map to
    state = torch.load(path, map_location="cpu" if device.type == "cpu" else device, weights_only=True)
    trainer._tokens_generated = state["tokens_generated"]
    if trainer._pods_budget is not None and "prompt_history" in state:
        trainer._pods_budget.history.load_state_dict({k: v.cpu() for k, v in state["prompt_history"].items()})
    if state["layout"] != cycle_layout(trainer):
        logger.warning(
            "Resuming with steps_per_generation, num_iterations, gradient_accumulation_steps or the number of "
            "processes changed (%s, was %s): the saved generation is discarded and a new one starts, as in TRL.",
            cycle_layout(trainer),
            state["layout"],
        )
        return
    trainer._step, trainer._buffered_inputs = state["step"], state["buffered_inputs"]

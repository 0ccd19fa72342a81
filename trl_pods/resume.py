"""Exact resume: what a checkpoint needs beyond TRL's to continue a generation cycle with the same rollouts.

Beside its RNG state each process saves ``pods_state_{process_index}.pt``: the position in the generation cycle
(TRL's micro-step counter), the buffered micro-batches of the current generation (still to be trained on when
`steps_per_generation > gradient_accumulation_steps` or `num_iterations > 1`) and the count behind
`pods/tokens_generated`. With HF generate, a resumed run then generates the same rollouts as an uninterrupted one;
with vLLM the engine's sampling state is not in the checkpoint, so a resumed run continues correctly but re-samples.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

logger = logging.getLogger(__name__)

RESUME_STATE = "pods_state_{}.pt"  # per process index, beside a checkpoint's RNG states


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
    torch.save(state, os.path.join(output_dir, RESUME_STATE.format(trainer.accelerator.process_index)))


def load_state(trainer: Any, checkpoint: str) -> None:
    """Restore what `save_state` saved in ``checkpoint``. A checkpoint without it (e.g. GRPOTrainer's) or saved
    with another cycle layout starts a new generation, as TRL does; the token count is restored in the latter."""
    path = os.path.join(checkpoint, RESUME_STATE.format(trainer.accelerator.process_index))
    if not os.path.isfile(path):
        return
    state = torch.load(path, map_location=trainer.accelerator.device, weights_only=True)
    trainer._tokens_generated = state["tokens_generated"]
    if state["layout"] != cycle_layout(trainer):
        logger.warning(
            "Resuming with steps_per_generation, num_iterations, gradient_accumulation_steps or the number of "
            "processes changed (%s, was %s): the saved generation is discarded and a new one starts, as in TRL.",
            cycle_layout(trainer),
            state["layout"],
        )
        return
    trainer._step, trainer._buffered_inputs = state["step"], state["buffered_inputs"]

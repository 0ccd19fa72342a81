"""How TRL's loss types normalise their policy term, and the rescale that makes the sequence-averaged ones count
only the sequences that `pods_drop_constant_groups` keeps in the loss (torch only)."""

from __future__ import annotations

import torch

SEQUENCE_AVERAGE_LOSSES = ("grpo", "sapo", "dr_grpo", "luspo")  # divided by the micro-batch's sequence count
MICRO_BATCH_TOKEN_LOSSES = ("bnpo",)  # divided by the token count of each process's micro-batch


def optimizer_step_totals(per_micro_batch: torch.Tensor, accumulation: int) -> torch.Tensor:
    """For each micro-batch of a generation, the total of its optimizer step.

    Args:
        per_micro_batch: ``[S]`` counts of the generation's ``S`` micro-batches, in the order they are trained;
            ``S`` is a multiple of ``accumulation``, so every optimizer step is ``accumulation`` consecutive ones.
        accumulation: micro-batches per optimizer step (gradient accumulation steps).

    Returns:
        ``[S]`` the sum of each micro-batch's block of ``accumulation``.
    """
    return per_micro_batch.view(-1, accumulation).sum(1).repeat_interleave(accumulation)


def sequence_average_scale(rows: int, accumulation: int, processes: int, step_sequences: torch.Tensor) -> torch.Tensor:
    """Factor that turns TRL's sequence-averaged policy term into an average over the optimizer step's kept sequences.

    TRL divides a micro-batch's sum over its ``rows`` sequences by ``rows * accumulation``, and data parallelism
    averages the ``processes`` gradients: the optimizer step averages over every sequence it holds. Rows dropped
    from the loss add zero to the sum; multiplying by ``rows * accumulation * processes / step_sequences`` makes
    the step average over its ``step_sequences`` remaining sequences (all processes, all micro-batches) instead.

    Returns:
        A scalar tensor (1 when nothing is dropped; the step's count is clamped to at least 1).
    """
    return rows * accumulation * processes / step_sequences.clamp(min=1)


def entropy_bonus(entropies: torch.Tensor, mask: torch.Tensor, accumulation: int) -> torch.Tensor:
    """TRL's entropy-bonus term before its coefficient: the mean entropy over the ``[B, T]`` tokens it acts on
    (``mask``, weights allowed), divided by the accumulation steps, as `GRPOTrainer._compute_loss` computes it."""
    return (entropies * mask).sum() / mask.sum().clamp(min=1.0) / accumulation

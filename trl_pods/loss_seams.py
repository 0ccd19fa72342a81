"""The D3S parts of the loss, behind the TRL seams that `PODSGRPOTrainer` overrides.

- **Dropped constant groups** (`pods_drop_constant_groups`): their rows carry a zero loss mask; with a
  sequence-averaged loss (`trl_pods.losses.SEQUENCE_AVERAGE_LOSSES`) the policy term (with its KL) is rescaled to
  average over the optimizer step's non-dropped sequences on all processes, while the entropy bonus and the MoE
  router loss keep TRL's values (`rescale_policy_term`).
- **Token selection** (`pods_token_fraction`): TRL's token-mask seam `get_high_entropy_mask` returns the loss
  weights of the top tokens by |advantage| x entropy (`token_selection_weights`; the pure rules are in
  `trl_pods.token_selection`).
- **Full-group advantages** (``pods_advantage_scope="all"``): TRL's kept-only advantages are replaced.

Functions take the trainer for what TRL owns (its accelerator, loss settings and metrics).
"""

from __future__ import annotations

from typing import Any

import torch

from .advantages import full_group_advantages
from .losses import entropy_bonus, optimizer_step_totals, sequence_average_scale
from .schedules import scheduled_value
from .token_selection import TOKEN_LEVEL_LOSSES, normaliser_weights, select_top_tokens, token_scores


def token_fraction(args: Any, progress: float) -> float:
    """The fraction of tokens D3S token selection keeps at training ``progress`` (0 to 1)."""
    start, end = args.pods_token_fraction_start, args.pods_token_fraction
    return end if start is None else scheduled_value(start, end, progress, args.pods_schedule)


def token_selection_on(args: Any) -> bool:
    return args.pods_token_fraction < 1.0 or args.pods_token_fraction_start is not None


def use_full_group_advantages(output: dict[str, Any], rewards: torch.Tensor, kept: torch.Tensor, trainer: Any) -> None:
    """``pods_advantage_scope="all"``: replace TRL's kept-only advantages (and the logged ones) by full-group ones
    computed from the ``[G, N]`` rewards, for the ``[G, N]`` kept mask. Only the trained groups (those with a kept
    row) take part: refill and screened leave groups untrained, whose rewards must not enter a batch std."""
    trained = kept.any(dim=1).to(rewards.device)  # [G]
    advantages = full_group_advantages(rewards[trained], trainer.scale_rewards)[kept.to(rewards.device)[trained]]
    local_rows = output["advantages"].size(0)
    start = trainer.accelerator.process_index * local_rows
    output["advantages"] = advantages[start : start + local_rows].to(output["advantages"].device)
    logged = trainer._logs["advantages"]
    for _ in range(min(advantages.numel(), len(logged))):
        logged.pop()
    logged.extend(advantages.tolist())


def annotate_step_sequences(micro_batches: list[dict[str, Any]], accelerator: Any, accumulation: int) -> None:
    """Give each micro-batch of a new generation the number of sequences its optimizer step keeps in the loss,
    over all processes (`pods_step_sequences`, read by `rescale_policy_term`)."""
    local = torch.stack([(~batch["pods_dropped"]).sum() for batch in micro_batches]).float()  # [S]
    counts = accelerator.reduce(local, reduction="sum")  # [S], all processes
    totals = optimizer_step_totals(counts, accumulation)  # [S]
    for batch, total in zip(micro_batches, totals, strict=True):
        batch["pods_step_sequences"] = total


def applied_entropy_coef(trainer: Any) -> float:
    """The entropy-bonus coefficient TRL's `_compute_loss` applies to the coming micro-batch (read before its
    adaptive controller updates the coefficient at the end of an optimizer step)."""
    if not trainer._entropy_bonus_enabled:
        return 0.0
    if trainer.use_adaptive_entropy and trainer._last_world_entropy > trainer.args.entropy_target:
        return 0.0
    return trainer.entropy_coef


def rescale_policy_term(
    trainer: Any, loss: torch.Tensor, inputs: dict[str, Any], forward: dict[str, Any], entropy_coef: float
) -> torch.Tensor:
    """TRL's micro-batch ``loss`` with its policy term (everything but the entropy bonus and the router loss,
    recomputed from the same ``forward``) averaged over the optimizer step's non-dropped sequences."""
    accumulation = trainer.current_gradient_accumulation_steps
    kept_as_is = 0.0
    if entropy_coef:
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)  # [B, T]
        if forward.get("entropy_mask") is not None:
            mask = mask * forward["entropy_mask"]
        kept_as_is = kept_as_is - entropy_coef * entropy_bonus(forward["entropies"], mask, accumulation)
    if trainer.aux_loss_enabled:
        kept_as_is = kept_as_is + trainer.router_aux_loss_coef * forward["aux_loss"] / accumulation
    rows, processes = inputs["advantages"].size(0), trainer.accelerator.num_processes
    scale = sequence_average_scale(rows, accumulation, processes, inputs["pods_step_sequences"])
    return kept_as_is + scale * (loss - kept_as_is)


def token_selection_weights(
    trainer: Any, advantages: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor, fraction: float
) -> torch.Tensor:
    """``[B, T]`` loss weights of D3S token selection: exactly the top ``fraction`` of the valid tokens by
    |advantage ``[B]``| x entropy ``[B, T]``, weighted so that the loss normaliser counts the kept tokens.

    The budget is per process, except for the losses normalised over all processes' tokens (`dapo`, `cispo`,
    `vespo`), where one budget spans every process (ties broken by process, then position). The fraction kept
    over all processes is logged as `pods/token_fraction_kept`.
    """
    scores = token_scores(advantages, entropies.detach())  # [B, T]
    valid = mask.bool()
    global_budget = trainer.loss_type in TOKEN_LEVEL_LOSSES
    if global_budget:
        keep = select_tokens_across_processes(trainer.accelerator, scores, valid, fraction)
    else:
        keep = select_top_tokens(scores, valid, fraction)
    local_counts = torch.stack([keep.sum(), valid.sum()]).float()
    counts = trainer.accelerator.reduce(local_counts.clone(), reduction="sum")  # [kept, valid] over all processes
    mode = "train" if trainer.model.training else "eval"
    trainer._metrics[mode]["pods/token_fraction_kept"].append((counts[0] / counts[1].clamp(min=1.0)).item())
    kept_total, valid_total = (counts if global_budget else local_counts).tolist()
    return normaliser_weights(keep, mask, trainer.loss_type, kept_total, valid_total)


def select_tokens_across_processes(
    accelerator: Any, scores: torch.Tensor, valid: torch.Tensor, fraction: float
) -> torch.Tensor:
    """``[B, T]`` bool: this process's share of one token budget over every process's valid tokens."""
    local = scores[valid].float()  # [V_local]
    padded = accelerator.pad_across_processes(local, pad_index=-1.0)  # [V_max]
    gathered = accelerator.gather(padded)  # [P * V_max]; scores are >= 0, so -1 marks padding
    keep = select_top_tokens(gathered, gathered >= 0, fraction)  # the same on every process
    start = accelerator.process_index * padded.numel()
    selected = torch.zeros_like(valid)
    selected[valid] = keep[start : start + local.numel()]
    return selected

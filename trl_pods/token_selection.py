"""D3S token-level selection: keep, in the policy-gradient loss, the tokens with the largest |advantage| x entropy."""

from __future__ import annotations

import torch

SEQUENCE_MEAN_LOSSES = ("grpo", "sapo")  # normalise each sequence by its own token count
TOKEN_LEVEL_LOSSES = ("dapo", "cispo", "vespo")  # normalise by a token count over all processes
TOKEN_COUNT_LOSSES = ("bnpo", *TOKEN_LEVEL_LOSSES)  # normalise by a token count of the (micro-)batch


def token_scores(advantages: torch.Tensor, entropies: torch.Tensor) -> torch.Tensor:
    """D3S token score ``|A_i,t| * H_i,t``: ``[B]`` or ``[B, T]`` advantages and ``[B, T]`` entropies -> ``[B, T]``."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    return advantages.abs() * entropies


def top_fraction_mask(scores: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """``[B, T]`` bool: valid tokens (``mask``) whose score is at least ``threshold``."""
    return (scores >= threshold) & mask.bool()


def normaliser_weights(
    keep: torch.Tensor, mask: torch.Tensor, loss_type: str, kept_total: float, valid_total: float
) -> torch.Tensor:
    """Per-token loss weights that apply the selection ``keep`` and make the loss normaliser count kept tokens.

    TRL multiplies the per-token loss by this tensor but divides by a count of all valid tokens. Scaling the kept
    tokens by ``valid / kept`` turns that count into the kept count:

    * ``grpo``/``sapo`` (per-sequence mean): per row, ``valid_i / kept_i``;
    * ``bnpo``, ``dapo``, ``cispo``, ``vespo`` (token count of the batch): ``valid_total / kept_total``, the totals
      of the micro-batch (over all processes for the token-level losses, see the caller);
    * ``dr_grpo``, ``luspo`` (constant or sum normalisers): 1, the selection only masks.

    Args:
        keep: ``[B, T]`` bool, the selected tokens (a subset of ``mask``).
        mask: ``[B, T]`` the valid completion tokens.
        loss_type: TRL's ``loss_type``.
        kept_total: selected tokens counted as the loss type's normaliser counts them.
        valid_total: valid tokens counted the same way.

    Returns:
        ``[B, T]`` float weights, 0 on unselected tokens.
    """
    keep = keep.float()
    if loss_type in SEQUENCE_MEAN_LOSSES:
        valid_i = mask.float().sum(1, keepdim=True)
        kept_i = keep.sum(1, keepdim=True)
        return keep * torch.where(kept_i > 0, valid_i / kept_i.clamp(min=1.0), 0.0)
    if loss_type in TOKEN_COUNT_LOSSES:
        return keep * (valid_total / max(kept_total, 1.0))
    return keep

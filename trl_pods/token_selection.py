"""D3S token-level selection: keep, in the policy-gradient loss, the tokens with the largest |advantage| x entropy."""

from __future__ import annotations

import math

import torch

SEQUENCE_MEAN_LOSSES = ("grpo", "sapo")  # normalise each sequence by its own token count
TOKEN_LEVEL_LOSSES = ("dapo", "cispo", "vespo")  # normalise by a token count over all processes
TOKEN_COUNT_LOSSES = ("bnpo", *TOKEN_LEVEL_LOSSES)  # normalise by a token count of the (micro-)batch


def token_scores(advantages: torch.Tensor, entropies: torch.Tensor) -> torch.Tensor:
    """D3S token score ``|A_i,t| * H_i,t``: ``[B]`` or ``[B, T]`` advantages and ``[B, T]`` entropies -> ``[B, T]``."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    return advantages.abs() * entropies


def token_budget(fraction: float, valid: int) -> int:
    """Tokens to keep out of ``valid``: ``round(fraction * valid)`` (halves up), at least one when any is valid."""
    if valid == 0:
        return 0
    return min(valid, max(1, math.floor(fraction * valid + 0.5)))


def select_top_tokens(scores: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Keep exactly ``token_budget(fraction, valid)`` valid tokens, those with the largest scores.

    Every valid token scoring strictly above the budget's last score is kept, then tokens tied with it in index
    order (row-major, earliest first) up to the budget, so the budget holds however many scores tie, e.g. when most
    tokens have zero advantage. Deterministic: a stable sort, no randomness.

    Args:
        scores: ``[B, T]`` (or any shape) token scores.
        mask: the same shape, nonzero on valid tokens.
        fraction: share of the valid tokens to keep, in ``(0, 1]``.

    Returns:
        Bool tensor of the shape of ``scores``, True on the kept tokens (a subset of ``mask``).
    """
    valid = mask.flatten().bool()  # [B * T]
    positions = valid.nonzero().squeeze(1)  # [V]
    order = torch.sort(scores.flatten()[positions], descending=True, stable=True).indices  # [V]
    keep = torch.zeros_like(valid)
    keep[positions[order[: token_budget(fraction, positions.numel())]]] = True
    return keep.view(scores.shape)


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

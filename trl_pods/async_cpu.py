"""CPU support for TRL's asynchronous GRPO trainer: what it needs to train without a GPU (tests, CPU benchmarks).

TRL 1.16's `AsyncGRPOTrainer` assumes CUDA in two places. `use_async_trainer_on_cpu` replaces both, process-wide:

- Its tree attention (`trl.experimental.async_grpo.packing`) runs the flash-attention-3 varlen kernel fetched through
  the `kernels` package, which is CUDA only. `varlen_attention` computes the same thing in plain torch: per packed
  segment, scaled-dot-product attention of its queries over its gathered keys, with a bottom-right causal mask
  (a segment's queries are the last tokens of its key path) and grouped-query heads.
- It reads the device's peak FLOPs for its MFU metric through `get_peak_flops_per_device`, which queries CUDA. On a
  CPU there is no peak to report: the MFU metrics are left out.

Nothing in `trl_pods`' trainers imports this module; a GPU run never goes through it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float | None = None,
) -> torch.Tensor:
    """`flash_attn_varlen_func` in plain torch, for the arguments TRL's tree attention passes.

    Args:
        query: ``[Tq, Hq, D]`` queries of every segment, laid end to end.
        key: ``[Tk, Hk, D]`` keys of every segment's path, laid end to end (``Hq`` a multiple of ``Hk``).
        value: ``[Tk, Hk, D]``.
        cu_seqlens_q: ``[S + 1]`` segment boundaries in ``query``.
        cu_seqlens_k: ``[S + 1]`` path boundaries in ``key``; a path is at least as long as its segment.
        max_seqlen_q, max_seqlen_k: unused (the kernel's launch sizes).
        softmax_scale: scale of the scores (``1 / sqrt(D)`` when None).
        causal: query ``i`` of a segment of ``Lq`` sees the keys ``j <= i + Lk - Lq`` of its path of ``Lk``.
        window_size: ``(left, right)``; ``(-1, -1)`` (no sliding window) is the only one supported.
        softcap: must be None (no logit soft-capping).

    Returns:
        ``[Tq, Hq, D]``.
    """
    if tuple(window_size) != (-1, -1) or softcap:
        raise NotImplementedError("varlen_attention supports neither sliding windows nor logit soft-capping.")
    groups = query.size(1) // key.size(1)
    output = torch.empty_like(query)
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for start_q, end_q, start_k, end_k in zip(bounds_q[:-1], bounds_q[1:], bounds_k[:-1], bounds_k[1:], strict=True):
        q = query[start_q:end_q].transpose(0, 1)  # [Hq, Lq, D]
        k = key[start_k:end_k].transpose(0, 1).repeat_interleave(groups, dim=0)  # [Hq, Lk, D]
        v = value[start_k:end_k].transpose(0, 1).repeat_interleave(groups, dim=0)  # [Hq, Lk, D]
        mask = None
        if causal:
            length_q, length_k = q.size(1), k.size(1)
            rows = torch.arange(length_q, device=q.device).unsqueeze(1)  # [Lq, 1]
            mask = torch.arange(length_k, device=q.device) <= rows + (length_k - length_q)  # [Lq, Lk]
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=softmax_scale)  # [Hq, Lq, D]
        output[start_q:end_q] = attended.transpose(0, 1)
    return output


def use_async_trainer_on_cpu(setattr_: Callable[[Any, str, Any], None] = setattr) -> None:
    """Make TRL's `AsyncGRPOTrainer` run on a CPU (see the module docstring): its tree attention computes with
    `varlen_attention`, and it reports no peak FLOPs. Process-wide, through ``setattr_`` (`setattr`, or pytest's
    ``monkeypatch.setattr`` to undo it after a test); call it before building the trainer."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    kernel = SimpleNamespace(flash_attn_varlen_func=varlen_attention)
    setattr_(packing, "_flash_attn", lambda: kernel)
    setattr_(async_grpo_trainer, "get_peak_flops_per_device", lambda accelerator, dtype: None)

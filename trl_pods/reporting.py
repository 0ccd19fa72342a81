"""What PODS reports: the `pods/*` metrics, the selection log `pods_selections.jsonl`, the completions table (with
``pods_log_all_rollouts``, every generated rollout) and the token counts `num_tokens` and `pods/tokens_generated`.

Functions write into the trainer's TRL-owned logs (`_metrics`, `_logs`, `_pending_extra_logs`, `state`), which they
receive as arguments; `describe_plan` puts a generation plan in plain words.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict, deque
from typing import Any

import torch
from accelerate.utils import gather_object

from .adaptive import generated_slots, has_contrast
from .advantages import nanstd
from .phase1 import Rollouts
from .selection import Selection

SELECTION_LOG = "pods_selections.jsonl"
LENGTH_METRICS = tuple(  # what TRL's `_generate` logs about the completions of each call
    f"completions/{name}"
    for name in ("mean_length", "min_length", "max_length", "clipped_ratio")
    + ("mean_terminated_length", "min_terminated_length", "max_terminated_length")
)


def describe_plan(n: int, m: int, calls: int) -> str:
    """A generation plan in plain words: GRPO ``m`` when it keeps every one of ``n`` rollouts per prompt, PODS
    ``n -> m`` when it down-samples, "with refill" when it may make more than one call (``calls``).

    >>> describe_plan(4, 4, 3)
    'this is GRPO 4 with refill'
    """
    method = f"GRPO {m}" if n == m else f"PODS {n} -> {m}"
    return f"this is {method}{' with refill' if calls > 1 else ''}"


def digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def log_selection(
    metrics: dict[str, list], selection: Selection, rollouts: Rollouts, args: Any, token_fraction: float | None
) -> None:
    """Append one generation's `pods/*` metrics: rewards and zero-std groups over all and kept rollouts, the time
    the rule took, the rollouts generated and trained, the trained groups with contrast (when the mode chose which
    groups to train on), what the generation mode reports (`GenerationMode.metrics`: its calls, padding, waves'
    effect, allocation, draws...), M, the dropped fraction and D3S token selection's token fraction (None: off)."""
    rewards, kept = selection.rewards, selection.kept
    kept_rewards = rewards.masked_fill(~kept, torch.nan)
    trained = kept.any(dim=1)  # [G]: refill and screened leave groups untrained
    generated = rollouts.counts.cpu() > 0  # [G]: refill leaves room for prompts never drawn
    for scope, values in (("all", rewards[generated]), ("kept", kept_rewards[trained])):
        metrics[f"pods/reward_mean_{scope}"].append(torch.nanmean(values).item())
        metrics[f"pods/reward_std_{scope}"].append(nanstd(values).nan_to_num(0.0).item())
        metrics[f"pods/frac_zero_std_groups_{scope}"].append((~has_contrast(values)).float().mean().item())
    metrics["pods/selection_time"].append(selection.seconds)
    metrics["pods/rollouts_generated"].append(float(rollouts.generated))
    if rollouts.chosen is not None:
        metrics["pods/frac_trained_groups_with_contrast"].append(has_contrast(rewards[trained]).float().mean().item())
    for name, value in rollouts.metrics.items():
        metrics[f"pods/{name}"].append(value)
    metrics["pods/rollouts_trained"].append(float(kept.sum()))
    metrics["pods/kept_per_prompt"].append(float(selection.m))
    if args.pods_drop_constant_groups:
        dropped = selection.dropped
        metrics["pods/frac_rollouts_dropped"].append(dropped.float().mean().item() if dropped.numel() else 0.0)
    if token_fraction is not None:
        metrics["pods/token_fraction"].append(token_fraction)


def record_selection(
    output_dir: str,
    is_main_process: bool,
    position: dict[str, int],
    local_prompts: list,
    selection: Selection,
    counts: torch.Tensor,
) -> None:
    """Append this generation's selection to ``output_dir/pods_selections.jsonl`` (written by the main process;
    every process calls it, for the gather).

    One line per generation: the optimizer step and the generation's index within it (``position``: `global_step`,
    `generation`), a digest of each process's prompts, a digest of the gathered rewards, the rollouts generated per
    group and the kept indices per group, so that runs (e.g. resumed ones) can be compared step by step.
    """
    prompt_digests = gather_object([digest(local_prompts)])
    if not is_main_process:
        return
    record = {
        **position,
        "prompts": prompt_digests,
        "rewards": digest(selection.rewards.tolist()),
        "generated": counts.tolist(),
        "kept": [row.nonzero().squeeze(1).tolist() for row in selection.kept],
    }
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, SELECTION_LOG), "a") as f:
        f.write(json.dumps(record) + "\n")


def count_tokens(trainer: Any, tokens_seen: int, generation: tuple, local: list[int]) -> None:
    """`num_tokens` (TRL's `num_input_tokens_seen`) counts the rows trained on, as GRPOTrainer counts the rows it
    generates: prompt and completion tokens of the kept rows (``local``), all processes. TRL's `_generate` counted
    every generated row since ``tokens_seen``; those go to `pods/tokens_generated`. Both are cumulative."""
    state = trainer.state
    trainer._tokens_generated += state.num_input_tokens_seen - tokens_seen
    prompt_ids, completion_ids, tool_mask = generation[:3]  # slot layout: None where nothing was generated
    lengths = [
        len(prompt_ids[i]) + (len(completion_ids[i]) if tool_mask is None else sum(tool_mask[i])) for i in local
    ]
    kept = torch.tensor(sum(lengths), device=trainer.accelerator.device)
    state.num_input_tokens_seen = tokens_seen + trainer.accelerator.reduce(kept, reduction="sum").item()
    trainer._metrics["train"]["num_tokens"] = [state.num_input_tokens_seen]
    trainer._metrics["train"]["pods/tokens_generated"] = [trainer._tokens_generated]


def log_lengths_once(
    metrics: dict[str, list], calls: int, completion_ids: list, tool_mask: list | None, ends: list[int]
) -> None:
    """TRL's `_generate` logged the completion-length metrics once per wave (``calls``); averaged, they would weigh
    a small wave like a large one. Replace them by one entry over every rollout generated (padding excluded). As in
    TRL, a completion's length counts its model tokens (``tool_mask`` 1: not a tool's output), and it ends when its
    last token is in ``ends``."""
    for key in LENGTH_METRICS:
        del metrics[key][-calls:]

    def length_and_clipped(i: int) -> tuple[int, bool]:
        ids = completion_ids[i]
        return len(ids) if tool_mask is None else sum(tool_mask[i]), not ids or ids[-1] not in ends

    rows = gather_object([length_and_clipped(i) for i, ids in enumerate(completion_ids) if ids is not None])
    lengths = torch.tensor([length for length, _ in rows], dtype=torch.float)  # [R]
    clipped = torch.tensor([clip for _, clip in rows])  # [R]
    terminated = lengths[~clipped] if (~clipped).any() else torch.zeros(1)  # TRL's convention when none ended
    for stat in ("mean", "min", "max"):
        metrics[f"completions/{stat}_length"].append(getattr(lengths, stat)().item())
        metrics[f"completions/{stat}_terminated_length"].append(getattr(terminated, stat)().item())
    metrics["completions/clipped_ratio"].append(clipped.float().mean().item())


def log_tool_calls_once(metrics: dict[str, list], call_rows: list[int]) -> None:
    """TRL's `_generate` logged the tool-call metrics once per wave, each over the wave's rows (``call_rows``, all
    processes, padding included); averaged, they would weigh a small wave like a large one. Replace them by one entry
    over all the rows: tool calls per rollout, and the share of the calls that failed."""
    calls = len(call_rows)
    frequencies, failures = (metrics[f"tools/{name}_frequency"][-calls:] for name in ("call", "failure"))
    for name in ("call", "failure"):
        del metrics[f"tools/{name}_frequency"][-calls:]
    tool_calls = [frequency * rows for frequency, rows in zip(frequencies, call_rows, strict=True)]
    failed = sum(share * count for share, count in zip(failures, tool_calls, strict=True))
    metrics["tools/call_frequency"].append(sum(tool_calls) / sum(call_rows))
    metrics["tools/failure_frequency"].append(failed / sum(tool_calls) if sum(tool_calls) else 0.0)


def filter_pending_extra_logs(pending: dict[str, list], local: list[int], local_rows: int) -> None:
    """Columns that reward functions logged for every generated row keep only the kept rows; a column that several
    functions logged holds one block of rows per function, and each block keeps its kept rows."""
    for column, values in pending.items():
        if values and len(values) % local_rows == 0:
            blocks = range(0, len(values), local_rows)
            pending[column] = [values[start + i] for start in blocks for i in local]


def clear_completion_logs(logs: dict[str, Any]) -> None:
    """The completions table holds exactly the generation about to be trained on. TRL's logs only drop old rows
    as new ones push them out, and they are sized for `pods_m`: with a scheduled M below it, rows of the previous
    generation would stay and be labelled with the new step."""
    for rows in (logs["images"], logs["prompt"], logs["completion"], logs["advantages"]):
        rows.clear()
    logs["rewards"].clear()
    logs["extra"].clear()


def gather_all_rollouts(
    prompts: list,
    completions: list,
    rewards_per_func: torch.Tensor,
    counts: torch.Tensor,
    kept: torch.Tensor,
    process_index: int,
    pending_extra_logs: dict[str, list],
) -> dict[str, Any]:
    """``pods_log_all_rollouts``: completions-table columns of every generated rollout, all processes, in slot
    order (advantages are added after phase 2); ``prompts`` are this process's rows' prompts as they were generated
    from (after environment resets). Reads the reward functions' `log_extra` columns before they are cut to the kept
    rows."""
    n, local_rows = kept.size(1), len(prompts)
    generated = generated_slots(counts, n).flatten()  # [G * N]
    first_row = process_index * local_rows
    local = generated[first_row : first_row + local_rows].nonzero().squeeze(1).tolist()
    extra = {}
    for column in sorted(set(gather_object(list(pending_extra_logs)))):  # same order on every process
        values = pending_extra_logs.get(column, [])
        extra[column] = gather_object([values[i] if len(values) == local_rows else None for i in local])
    return {
        "prompt": gather_object([prompts[i] for i in local]),
        "completion": gather_object([completions[i] for i in local]),
        "rewards": rewards_per_func[generated.to(rewards_per_func.device)].cpu(),  # [R, F]
        "kept": kept.flatten()[generated].tolist(),
        "extra": extra,
    }


def log_all_rollouts(logs: dict[str, Any], rows: dict[str, Any], reward_func_names: list[str]) -> None:
    """Swap the completions-table rows TRL logged for this generation's kept rollouts for every generated one,
    with a `kept` column; discarded rows have no advantage (NaN)."""
    kept = rows["kept"]
    size = len(kept)

    def column(values) -> deque:
        return deque(values, maxlen=size)

    logged = list(logs["advantages"])
    kept_advantages = iter(logged[len(logged) - sum(kept) :])  # TRL's, for the kept rows in their order
    logs["prompt"] = column(rows["prompt"])
    logs["completion"] = column(rows["completion"])
    logs["advantages"] = column(next(kept_advantages) if keep else float("nan") for keep in kept)
    rewards = {name: column(rows["rewards"][:, i].tolist()) for i, name in enumerate(reward_func_names)}
    logs["rewards"] = defaultdict(lambda: deque(maxlen=size), rewards)
    extra = {name: column(values) for name, values in rows["extra"].items()}
    logs["extra"] = defaultdict(lambda: deque(maxlen=size), {**extra, "kept": column(kept)})
    logs["images"] = deque(maxlen=size)

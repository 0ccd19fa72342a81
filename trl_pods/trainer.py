"""`PODSGRPOTrainer`: `trl.GRPOTrainer` that generates N rollouts per prompt and trains on M of them.

A training batch goes through two phases, both built from `GRPOTrainer`'s own methods:

1. **Generate and select.** With the group size set to N, the parent's `_generate` produces N rollouts per prompt
   and the parent's `_calculate_rewards` scores each once (gathered over processes). The down-sampler picks M per
   prompt from the gathered ``[groups, N]`` reward matrix, so every process computes the same selection.
2. **Train on the kept rows.** The parent's `_generate_and_score_completions` runs on the kept rows only, with
   `_generate` and `_calculate_rewards` answering from the phase-1 results and the group size at M. Padding,
   masks, old/reference log-probs, the vLLM importance-sampling correction, advantages, metrics and the loss are
   TRL's code, and none of them sees a discarded rollout.

The data loader is sized for the generated rows: each prompt is repeated N times, and each process receives whole
prompt groups (`PODSConfig` checks the layout).

With ``pods_generation="adaptive"``, phase 1 generates in waves (`trl_pods.adaptive`): ``pods_n_initial`` rollouts per
prompt, then more only for the prompts whose rewards are all equal, up to N. The rollouts are laid out in slots (row
``g * N + s`` is the ``s``-th rollout of group ``g``; NaN rewards where nothing was generated), so selection and
phase 2 are unchanged.

Beyond PODS, the same two phases carry D3S: cross-group selection and a scheduled M in phase 1, a zero loss mask
for dropped constant groups (TRL's per-token loss mask, so its token counts skip them, and a sequence-averaged policy
term rescaled to the optimizer step's remaining sequences), and token-level selection through TRL's token-mask seam
`get_high_entropy_mask`, called from the training forward with its entropies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import defaultdict, deque
from contextlib import contextmanager
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_trainer_module
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import get_config_model_id

from .adaptive import gathered_rows, generated_slots, lockstep_groups, top_up_waves, wave_metrics
from .advantages import full_group_advantages, group_objective, nanstd
from .config import PODSConfig
from .down_sampling import get_down_sampler, max_variance_across_groups
from .losses import SEQUENCE_AVERAGE_LOSSES, entropy_bonus, optimizer_step_totals, sequence_average_scale
from .schedules import kept_per_prompt, scheduled_value
from .token_selection import TOKEN_LEVEL_LOSSES, normaliser_weights, select_top_tokens, token_scores
from .vllm_engine import colocate_engine, engine_awake

logger = logging.getLogger(__name__)

_UNSUPPORTED_ARGUMENTS = ("tools", "rollout_func", "environment_factory")
SELECTION_LOG = "pods_selections.jsonl"
RESUME_STATE = "pods_state_{}.pt"  # per process index, beside a checkpoint's RNG states
LENGTH_METRICS = tuple(  # what TRL's `_generate` logs about the completions of each call
    f"completions/{name}"
    for name in ("mean_length", "min_length", "max_length", "clipped_ratio")
    + ("mean_terminated_length", "min_terminated_length", "max_terminated_length")
)


def _take(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[i] for i in rows]


class _SlotLayout:
    """Collects the rows of several `_generate` calls (waves) into slot layout: local row ``g * N + s`` holds the
    ``s``-th rollout of the process's group ``g``, None where nothing was generated. Rows generated only to keep the
    processes in step (target None) are dropped."""

    PER_ROW = (0, 1, 2, 3, 4, 6)  # prompt_ids, completion_ids, tool_mask, completions, logprobs, images

    def __init__(self, rows: int):
        self.rows = rows
        self.items: list = [None] * 8  # the 8-tuple of `_generate`
        self.extra: dict[str, list[list]] = {}  # log_extra column -> one block of rows per reward function

    def add(self, generation: tuple, targets: list[int | None]) -> None:
        for i, values in enumerate(generation):
            if i not in self.PER_ROW:
                self.items[i] = values if self.items[i] is None else self.items[i]  # per call: extra_fields, ...
            elif values is not None:
                self.items[i] = self.items[i] or [None] * self.rows
                for value, target in zip(values, targets, strict=True):
                    if target is not None:
                        self.items[i][target] = value

    def add_extra(self, columns: dict[str, list], scored: int, targets: list[int]) -> None:
        """A wave's `log_extra` columns. Each holds one block of ``scored`` values per reward function that logged
        it; the first ``len(targets)`` rows of a block are the rollouts of those slots (the rest is padding)."""
        for column, values in columns.items():
            blocks = self.extra.setdefault(column, [])
            for b in range(len(values) // scored):
                if b == len(blocks):
                    blocks.append([None] * self.rows)
                for value, target in zip(values[b * scored : b * scored + len(targets)], targets, strict=True):
                    blocks[b][target] = value

    def extra_columns(self) -> dict[str, list]:
        """The `log_extra` columns in slot layout: one block of ``rows`` values per reward function that logged it."""
        return {column: [value for block in blocks for value in block] for column, blocks in self.extra.items()}


class PODSGRPOTrainer(GRPOTrainer):
    """Drop-in replacement for `trl.GRPOTrainer` that trains on a down-sampled subset of the rollouts.

    Takes the same arguments as `GRPOTrainer`; `args` must be a [`PODSConfig`] (without `args`, a default one is
    built, its output directory named as `GRPOTrainer` names it). Evaluation is unchanged (no down-sampling). Tools,
    environments, `rollout_func` and vision inputs are not supported.
    """

    _tag_names = [*GRPOTrainer._tag_names, "pods"]
    # What the overridden seams read. With these class-level values every seam falls through to GRPOTrainer's
    # behaviour on an object that this __init__ did not set up (built by TRL's __init__, or by object.__new__).
    pods_n: int | None = None
    pods_m: int | None = None
    _pods_phase1: dict[str, Any] | None = None  # phase-1 results served to the parent in phase 2
    _loss_advantages: torch.Tensor | None = None  # the micro-batch's advantages, for token selection
    _token_selection: bool = False
    _generation_chunk_size: int | None = None
    _tokens_generated: int = 0  # prompt + completion tokens of every generated row, all processes, cumulative
    _count_step_sequences: bool = False  # dropped groups with a sequence-averaged loss: rescale its policy term
    _loss_forward: dict[str, Any] | None = None  # what the training forward computed, while it is rescaled

    def __init__(self, model, reward_funcs=None, args: PODSConfig | None = None, *trainer_args, **trainer_kwargs):
        if args is None:  # as GRPOTrainer does
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = PODSConfig(f"{model_name.split('/')[-1]}-GRPO")
        if not isinstance(args, PODSConfig):
            raise TypeError(
                f"PODSGRPOTrainer needs `args=trl_pods.PODSConfig(...)`, got {type(args).__name__}. PODSConfig takes "
                "every GRPOConfig parameter plus pods_n, pods_m, pods_down_sampler and pods_advantage_scope."
            )
        unsupported = [name for name in _UNSUPPORTED_ARGUMENTS if trainer_kwargs.get(name)]
        if unsupported:
            raise ValueError(
                f"PODSGRPOTrainer does not support {', '.join(unsupported)}: multi-turn rollouts change the rows "
                "between generation and scoring. Use trl.GRPOTrainer for tool or environment training."
            )
        with colocate_engine(args, grpo_trainer_module):
            super().__init__(model, reward_funcs, args, *trainer_args, **trainer_kwargs)
        if self._is_vlm:
            raise ValueError("PODSGRPOTrainer does not support vision-language models; use trl.GRPOTrainer.")
        self.pods_n, self.pods_m = args.pods_n, args.pods_m
        self.down_sampler = get_down_sampler(args.pods_down_sampler)
        self._generation_chunk_size = args.pods_generation_chunk_size
        self._count_step_sequences = args.pods_drop_constant_groups and args.loss_type in SEQUENCE_AVERAGE_LOSSES
        self._token_selection = args.pods_token_fraction < 1.0 or args.pods_token_fraction_start is not None
        if self._token_selection:
            self.top_entropy_quantile = 0.0  # routes TRL's token-mask seam (get_high_entropy_mask) to D3S

    # ---------------------------------------------------------------- data layout: N rollouts per prompt

    @contextmanager
    def _generation_layout(self):
        """Within the block, TRL sees the batch as generated: groups of `pods_n` rows instead of `pods_m`."""
        if self.pods_n is None:
            yield
            return
        kept_batch = self.args.generation_batch_size
        self.num_generations = self.pods_n
        self.args.generation_batch_size = kept_batch // self.pods_m * self.pods_n
        try:
            yield
        finally:
            self.num_generations = self.pods_m
            self.args.generation_batch_size = kept_batch

    def get_train_dataloader(self):
        # The sampler repeats every prompt pods_n times and each batch holds the prompts of pods_m-sized groups.
        with self._generation_layout():
            return super().get_train_dataloader()

    def _get_dataloader(self, dataset, description, batch_size, *args, **kwargs):
        if kwargs.get("is_training") and self.pods_n is not None:  # sized by TRL for the kept rows: pods_m per prompt
            batch_size = batch_size // self.pods_m * self.pods_n
        return super()._get_dataloader(dataset, description, batch_size, *args, **kwargs)

    # ---------------------------------------------------------------- the two phases

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.pods_n is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if any("image" in row or "images" in row for row in inputs):
            raise ValueError(
                "PODSGRPOTrainer does not support image inputs (an 'image' or 'images' column, which GRPOTrainer "
                "treats as vision inputs even when its values are None). Remove the column from a text-only dataset, "
                "or use trl.GRPOTrainer for a vision-language model."
            )
        phase1 = self._generate_score_and_select(inputs)
        self._clear_completion_logs()
        self._pods_phase1 = phase1
        self.num_generations = phase1["m"]  # the group size TRL's advantage code reads
        try:
            output = super()._generate_and_score_completions(phase1["inputs"])
        finally:
            self._pods_phase1 = None
            self.num_generations = self.pods_m
        if self.args.pods_advantage_scope == "all":
            self._use_full_group_advantages(output, phase1)
        if self.args.pods_drop_constant_groups:
            output["pods_dropped"] = phase1["dropped"].to(output["advantages"].device)
        if self.args.pods_log_all_rollouts:
            self._log_all_rollouts(phase1["all_rollouts"])
        return output

    def _generate(self, prompts: list):
        if self._pods_phase1 is not None:
            return self._pods_phase1["generation"]
        return super()._generate(prompts)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._pods_phase1 is not None:
            return self._pods_phase1["rewards_per_func"]
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_score_and_select(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Phase 1: generate N per prompt (at most N when adaptive), score every rollout once, keep M per prompt
        (same on every rank)."""
        n = self.pods_n
        local_rows = len(inputs)
        prompts = [row["prompt"] for row in inputs]
        tokens_seen = self.state.num_input_tokens_seen
        generation, rewards_per_func, counts = self._generate_and_score(inputs)  # slot layout; [P * B, F]; [G]
        grouped = rewards_per_func.view(-1, n, rewards_per_func.size(1)).detach().cpu()  # [G, N, F], all processes
        rewards = group_objective(grouped, self.reward_weights, "sum_then_normalize")  # [G, N], TRL's reward
        objective = group_objective(grouped, self.reward_weights, self.multi_objective_aggregation)  # [G, N]

        m = self._kept_per_prompt(local_rows // n)
        start = time.perf_counter()
        kept = self._select(objective, m, groups_per_process=local_rows // n, counts=counts)  # [G, N] bool
        selection_time = time.perf_counter() - start

        kept_rows = kept.flatten().nonzero().squeeze(1)  # [kept rows], ordered by group, then rollout
        first_row = self.accelerator.process_index * local_rows
        local = [row - first_row for row in kept_rows.tolist() if first_row <= row < first_row + local_rows]
        dropped = self._constant_groups(grouped, kept).repeat_interleave(n)[kept_rows]  # [kept rows]
        local_dropped = dropped[(kept_rows >= first_row) & (kept_rows < first_row + local_rows)]  # [len(local)]
        if self.args.pods_log_all_rollouts:
            all_rollouts = self._gather_all_rollouts(inputs, generation[3], rewards_per_func, counts, kept)
        self._filter_pending_extra_logs(local, local_rows)
        self._count_tokens(tokens_seen, generation, local)
        self._log_selection(rewards, kept, m, selection_time, dropped, counts)
        if self.args.pods_selection_log:
            self._record_selection(prompts[::n], rewards, kept, counts)
        prompt_ids, completion_ids, tool_mask, completions, logps, extra_fields, images, tool_images = generation
        kept_ids = _take(completion_ids, local)
        if self.args.pods_drop_constant_groups:  # a zero loss mask keeps the rows out of the loss and its normaliser
            drops = local_dropped.tolist()
            tool_mask = [[0 if drop else 1] * len(ids) for ids, drop in zip(kept_ids, drops, strict=True)]
        else:
            tool_mask = _take(tool_mask, local)
        return {
            "inputs": [inputs[i] for i in local],
            "generation": (
                _take(prompt_ids, local),
                kept_ids,
                tool_mask,
                _take(completions, local),
                _take(logps, local),
                extra_fields,
                _take(images, local),
                tool_images,
            ),
            "rewards_per_func": rewards_per_func[kept_rows.to(rewards_per_func.device)],
            "rewards": rewards,
            "kept": kept,
            "counts": counts,
            "m": m,
            "dropped": local_dropped,
            **({"all_rollouts": all_rollouts} if self.args.pods_log_all_rollouts else {}),
        }

    def _generate_and_score(self, inputs: list[dict[str, Any]]) -> tuple[tuple, torch.Tensor, torch.Tensor]:
        """Phase 1's rollouts in slot layout: local row ``g * N + s`` is the ``s``-th rollout of local group ``g``.

        Returns:
            The 8-tuple of `_generate` (per-row entries None where nothing was generated), the rewards per function
            gathered over processes ``[G * N, F]`` (NaN rows where nothing was generated) and the rollouts generated
            per group ``[G]`` (CPU), G counting the groups of all processes.
        """
        if self.args.pods_generation == "adaptive":
            return self._generate_in_waves(inputs)
        prompts = [row["prompt"] for row in inputs]
        with self._generation_layout():
            generation = self._generate(prompts)
        rewards_per_func = self._calculate_rewards(inputs, prompts, generation[3], generation[1])  # [G * N, F]
        return generation, rewards_per_func, torch.full((rewards_per_func.size(0) // self.pods_n,), self.pods_n)

    def _generate_in_waves(self, inputs: list[dict[str, Any]]) -> tuple[tuple, torch.Tensor, torch.Tensor]:
        """`_generate_and_score` for ``pods_generation="adaptive"``: waves decided by `top_up_waves` from the gathered
        rewards, so identical on every rank. In each wave every process generates the same number of rows (its own
        waiting groups, then copies of one of its prompts as padding), since TRL's generation gathers, vLLM server
        mode and tensor-parallel vLLM need equal rows on all processes; only its own rows are scored. The waves share
        one weight load (`_one_weight_load_per_generation`)."""
        n, local_rows = self.pods_n, len(inputs)
        groups_per_process = local_rows // n
        processes = self.accelerator.num_processes
        first_group = self.accelerator.process_index * groups_per_process
        layout = _SlotLayout(local_rows)
        rewards_per_func: torch.Tensor | None = None  # [G * N, F]

        def wave(groups: torch.Tensor, first_slot: int, size: int) -> torch.Tensor:
            nonlocal rewards_per_func
            lockstep = lockstep_groups(groups, groups_per_process, processes)
            own = groups[(groups >= first_group) & (groups < first_group + groups_per_process)] - first_group
            own = own.tolist()
            padded = own + [own[0] if own else 0] * (lockstep - len(own))
            rows = [inputs[group * n] for group in padded for _ in range(size)]
            with self._group_size(size):  # server mode: one request per prompt with n = size
                generation = self._generate([row["prompt"] for row in rows])
            targets = [group * n + first_slot + j for group in own for j in range(size)]
            layout.add(generation, targets + [None] * (len(rows) - len(targets)))
            wave_rewards = self._score_own_rows(rows, generation, targets, layout)  # [P * rows, F]
            ours = wave_rewards[gathered_rows(groups, groups_per_process, lockstep, size).to(wave_rewards.device)]
            if rewards_per_func is None:
                rewards_per_func = wave_rewards.new_full((groups_per_process * processes * n, ours.size(1)), torch.nan)
            slots = (groups.unsqueeze(1) * n + first_slot + torch.arange(size)).flatten()  # [A * size]
            rewards_per_func[slots.to(rewards_per_func.device)] = ours
            per_func = ours.view(-1, size, ours.size(1)).detach().cpu()  # [A, size, F]
            return group_objective(per_func, self.reward_weights, "sum_then_normalize")  # [A, size], TRL's reward

        with self._one_weight_load_per_generation():
            waves = top_up_waves(groups_per_process * processes, self.args.pods_n_initial, n, wave)
        self._pending_extra_logs.update(layout.extra_columns())
        self._log_lengths_once(waves.waves, layout.items[1])
        return tuple(layout.items), rewards_per_func, waves.counts

    def _score_own_rows(self, rows: list[dict], generation: tuple, targets: list[int], layout: _SlotLayout):
        """Score a wave's own rows, not its padding, and gather them: ``[P * len(rows), F]``, NaN on padding rows.

        Reward functions see the process's rows that have a slot (``targets``), or its first padding row when it has
        none, so every process calls them once per wave (a reward model under ZeRO-3 needs every process). What they
        log then describes real rollouts: `log_extra` values go to their slots, and each `log_metric` value counts
        once per rollout scored, so TRL's average over the step is per rollout, as without waves.
        """
        real = len(targets)
        scored = max(real, 1)
        extra_before = {column: len(values) for column, values in self._pending_extra_logs.items()}
        metrics_before = {name: len(values) for name, values in self._pending_metrics.items()}
        prompts = [row["prompt"] for row in rows[:scored]]
        with _rewards_not_gathered():
            local = self._calculate_rewards(rows[:scored], prompts, generation[3][:scored], generation[1][:scored])
        layout.add_extra(_take_new(self._pending_extra_logs, extra_before), scored, targets)
        for name, values in _take_new(self._pending_metrics, metrics_before).items():
            self._pending_metrics[name].extend(value for value in values for _ in range(real))
        padded = local.new_full((len(rows), local.size(1)), torch.nan)  # [rows, F]
        padded[:real] = local[:real]
        return self.accelerator.gather(padded)

    def _log_lengths_once(self, calls: int, completion_ids: list) -> None:
        """TRL's `_generate` logged the completion-length metrics once per wave; averaged, they would weigh a small
        wave like a large one. Replace them by one entry over every rollout generated (padding excluded)."""
        metrics = self._metrics["train"]
        for key in LENGTH_METRICS:
            del metrics[key][-calls:]
        ends = [*self.eos_token_ids, self._tokenizer.pad_token_id]
        rows = gather_object([(len(ids), not ids or ids[-1] not in ends) for ids in completion_ids if ids is not None])
        lengths = torch.tensor([length for length, _ in rows], dtype=torch.float)  # [R]
        clipped = torch.tensor([clip for _, clip in rows])  # [R]
        terminated = lengths[~clipped] if (~clipped).any() else torch.zeros(1)  # TRL's convention when none ended
        for stat in ("mean", "min", "max"):
            metrics[f"completions/{stat}_length"].append(getattr(lengths, stat)().item())
            metrics[f"completions/{stat}_terminated_length"].append(getattr(terminated, stat)().item())
        metrics["completions/clipped_ratio"].append(clipped.float().mean().item())

    @contextmanager
    def _group_size(self, size: int):
        """Within the block, TRL generates groups of ``size`` rows (what vLLM server mode requests per prompt)."""
        self.num_generations = size
        try:
            yield
        finally:
            self.num_generations = self.pods_m

    def _kept_per_prompt(self, prompts_per_process: int) -> int:
        """M for this step: `pods_m`, or the scheduled value (`pods_schedule`), rounded to keep batches even."""
        if self.args.pods_m_start is None:
            return self.pods_m
        target = scheduled_value(self.args.pods_m_start, self.pods_m, self._progress(), self.args.pods_schedule)
        return kept_per_prompt(target, self.pods_m, prompts_per_process, self.args.steps_per_generation)

    def _progress(self) -> float:
        return self.state.global_step / max(self.state.max_steps - 1, 1)

    def _select(self, rewards: torch.Tensor, m: int, groups_per_process: int, counts: torch.Tensor) -> torch.Tensor:
        """``[G, N]`` bool mask of the kept rollouts, computed from the gathered rewards (the same on every rank).

        Per-group rules keep exactly ``m`` per group; with `pods_cross_group` each process's groups share one budget
        of ``groups_per_process * m`` rollouts, chosen on full-group advantages. Only generated slots (the first
        ``counts[g]`` of group ``g``) may be kept.
        """
        g, n = rewards.shape
        generated = generated_slots(counts, n)  # [G, N]
        if self.args.pods_cross_group:
            advantages = full_group_advantages(rewards, self.scale_rewards).masked_fill(rewards.isnan(), torch.nan)
            return max_variance_across_groups(advantages, m, groups_per_process, generated=generated)
        if m == n:
            kept = torch.arange(n).expand(g, -1)
        else:
            generator = torch.Generator().manual_seed(self._selection_seed())
            kept = self.down_sampler(rewards, m, generator=generator)
            if (
                not isinstance(kept, torch.Tensor)
                or tuple(kept.shape) != (g, m)
                or kept.dtype != torch.long
                or (kept.numel() and (kept.min() < 0 or kept.max() >= n))
                or (kept.sort(dim=1).values.diff(dim=1) == 0).any()
            ):
                raise ValueError(
                    f"The down-sampler {self.args.pods_down_sampler!r} must return a LongTensor of shape {(g, m)} "
                    f"with distinct indices in [0, {n}) per row."
                )
        mask = torch.zeros(g, n, dtype=torch.bool).scatter_(1, kept, True)
        if (mask & ~generated).any():
            raise ValueError(
                f"The down-sampler {self.args.pods_down_sampler!r} kept a slot that was never generated: with "
                "pods_generation='adaptive' group g holds only its first counts[g] slots (the rest are NaN). Keep "
                "scored rollouts first, then unscorable (NaN) ones by lowest index, as the built-in rules do."
            )
        return mask

    def _selection_seed(self) -> int:
        """Same on every rank; depends on the seed, the optimizer step and the micro-step within it."""
        micro_step = self._step % self.args.gradient_accumulation_steps
        position = self.state.global_step * self.args.gradient_accumulation_steps + micro_step
        return (self.args.seed * 1_000_003 + position) % (2**63)

    def _constant_groups(self, rewards_per_func: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        """``[G]`` bool: groups whose advantages are all zero, so they carry no signal (`pods_drop_constant_groups`).

        Those are groups whose objective (`group_objective`: the weighted reward sum, or with `normalize_then_sum`
        the sum of normalised rewards) is constant over the kept rollouts (``pods_advantage_scope="kept"``) or over
        all N (``"all"``). ``rewards_per_func`` is ``[G, N, F]``.
        """
        if not self.args.pods_drop_constant_groups:
            return torch.zeros(rewards_per_func.size(0), dtype=torch.bool)
        rows = None if self.args.pods_advantage_scope == "all" else kept
        return _constant_rows(
            group_objective(rewards_per_func, self.reward_weights, self.multi_objective_aggregation, rows)
        )

    def _filter_pending_extra_logs(self, local: list[int], local_rows: int) -> None:
        """Columns that reward functions logged for every generated row keep only the kept rows; a column that several
        functions logged holds one block of rows per function, and each block keeps its kept rows."""
        for column, values in self._pending_extra_logs.items():
            if values and len(values) % local_rows == 0:
                blocks = range(0, len(values), local_rows)
                self._pending_extra_logs[column] = [values[start + i] for start in blocks for i in local]

    def _count_tokens(self, tokens_seen: int, generation: tuple, local: list[int]) -> None:
        """`num_tokens` (TRL's `num_input_tokens_seen`) counts the rows trained on, as GRPOTrainer counts the rows
        it generates: prompt and completion tokens of the kept rows, all processes. TRL's `_generate` counted every
        generated row since ``tokens_seen``; those go to `pods/tokens_generated`. Both are cumulative."""
        self._tokens_generated += self.state.num_input_tokens_seen - tokens_seen
        prompt_ids, completion_ids, tool_mask = generation[:3]  # slot layout: None where nothing was generated
        lengths = [
            len(prompt_ids[i]) + (len(completion_ids[i]) if tool_mask is None else sum(tool_mask[i])) for i in local
        ]
        kept = torch.tensor(sum(lengths), device=self.accelerator.device)
        self.state.num_input_tokens_seen = tokens_seen + self.accelerator.reduce(kept, reduction="sum").item()
        self._metrics["train"]["num_tokens"] = [self.state.num_input_tokens_seen]
        self._metrics["train"]["pods/tokens_generated"] = [self._tokens_generated]

    def _clear_completion_logs(self) -> None:
        """The completions table holds exactly the generation about to be trained on. TRL's logs only drop old rows
        as new ones push them out, and they are sized for `pods_m`: with a scheduled M below it, rows of the previous
        generation would stay and be labelled with the new step."""
        for rows in (self._logs["images"], self._logs["prompt"], self._logs["completion"], self._logs["advantages"]):
            rows.clear()
        self._logs["rewards"].clear()
        self._logs["extra"].clear()

    def _log_selection(
        self,
        rewards: torch.Tensor,
        kept: torch.Tensor,
        m: int,
        selection_time: float,
        dropped: torch.Tensor,
        counts: torch.Tensor,
    ) -> None:
        metrics = self._metrics["train"]
        kept_rewards = rewards.masked_fill(~kept, torch.nan)
        for scope, values in (("all", rewards), ("kept", kept_rewards)):
            metrics[f"pods/reward_mean_{scope}"].append(torch.nanmean(values).item())
            metrics[f"pods/reward_std_{scope}"].append(nanstd(values).nan_to_num(0.0).item())
            metrics[f"pods/frac_zero_std_groups_{scope}"].append(_constant_rows(values).float().mean().item())
        metrics["pods/selection_time"].append(selection_time)
        if self.args.pods_generation == "adaptive":
            groups_per_process = rewards.size(0) // self.accelerator.num_processes
            waves = wave_metrics(rewards, counts, self.args.pods_n_initial, self.pods_n, groups_per_process)
            for name, value in waves.items():  # rollouts_generated, waves, padding, fractions topped up / contrast
                metrics[f"pods/{name}"].append(value)
        else:
            metrics["pods/rollouts_generated"].append(float(rewards.numel()))
        metrics["pods/rollouts_trained"].append(float(kept.sum()))
        metrics["pods/kept_per_prompt"].append(float(m))
        if self.args.pods_drop_constant_groups:
            metrics["pods/frac_rollouts_dropped"].append(dropped.float().mean().item() if dropped.numel() else 0.0)
        if self.args.pods_token_fraction_start is not None or self.args.pods_token_fraction < 1.0:
            metrics["pods/token_fraction"].append(self._token_fraction())

    def _record_selection(
        self, local_prompts: list, rewards: torch.Tensor, kept: torch.Tensor, counts: torch.Tensor
    ) -> None:
        """Append this generation's selection to ``output_dir/pods_selections.jsonl`` (main process).

        One line per generation: the optimizer step and the generation's index within it, a digest of each rank's
        prompts, a digest of the gathered rewards, the rollouts generated per group and the kept indices per group,
        so that runs (e.g. resumed ones) can be compared step by step.
        """
        prompt_digests = gather_object([_digest(local_prompts)])
        if not self.accelerator.is_main_process:
            return
        record = {
            "global_step": self.state.global_step,
            "generation": self._step % self.args.gradient_accumulation_steps,
            "prompts": prompt_digests,
            "rewards": _digest(rewards.tolist()),
            "generated": counts.tolist(),
            "kept": [row.nonzero().squeeze(1).tolist() for row in kept],
        }
        os.makedirs(self.args.output_dir, exist_ok=True)
        with open(os.path.join(self.args.output_dir, SELECTION_LOG), "a") as f:
            f.write(json.dumps(record) + "\n")

    def _gather_all_rollouts(
        self,
        inputs: list[dict[str, Any]],
        completions: list,
        rewards_per_func: torch.Tensor,
        counts: torch.Tensor,
        kept: torch.Tensor,
    ) -> dict[str, Any]:
        """``pods_log_all_rollouts``: completions-table columns of every generated rollout, all processes, in slot
        order (advantages are added after phase 2). Reads the reward functions' `log_extra` columns before they are
        cut to the kept rows."""
        n, local_rows = self.pods_n, len(inputs)
        generated = generated_slots(counts, n).flatten()  # [G * N]
        first_row = self.accelerator.process_index * local_rows
        local = generated[first_row : first_row + local_rows].nonzero().squeeze(1).tolist()
        extra = {}
        for column in sorted(set(gather_object(list(self._pending_extra_logs)))):  # same order on every rank
            values = self._pending_extra_logs.get(column, [])
            extra[column] = gather_object([values[i] if len(values) == local_rows else None for i in local])
        return {
            "prompt": gather_object([inputs[i]["prompt"] for i in local]),
            "completion": gather_object([completions[i] for i in local]),
            "rewards": rewards_per_func[generated.to(rewards_per_func.device)].cpu(),  # [R, F]
            "kept": kept.flatten()[generated].tolist(),
            "extra": extra,
        }

    def _log_all_rollouts(self, rows: dict[str, Any]) -> None:
        """Swap the completions-table rows TRL logged for this generation's kept rollouts for every generated one,
        with a `kept` column; discarded rows have no advantage (NaN)."""
        kept = rows["kept"]
        size = len(kept)

        def column(values) -> deque:
            return deque(values, maxlen=size)

        logged = list(self._logs["advantages"])
        kept_advantages = iter(logged[len(logged) - sum(kept) :])  # TRL's, for the kept rows in their order
        self._logs["prompt"] = column(rows["prompt"])
        self._logs["completion"] = column(rows["completion"])
        self._logs["advantages"] = column(next(kept_advantages) if keep else float("nan") for keep in kept)
        rewards = {name: column(rows["rewards"][:, i].tolist()) for i, name in enumerate(self.reward_func_names)}
        self._logs["rewards"] = defaultdict(lambda: deque(maxlen=size), rewards)
        extra = {name: column(values) for name, values in rows["extra"].items()}
        self._logs["extra"] = defaultdict(lambda: deque(maxlen=size), {**extra, "kept": column(kept)})
        self._logs["images"] = deque(maxlen=size)

    def _use_full_group_advantages(self, output: dict[str, Any], phase1: dict[str, Any]) -> None:
        """``pods_advantage_scope="all"``: replace TRL's kept-only advantages by full-group ones."""
        rewards, kept = phase1["rewards"], phase1["kept"].to(phase1["rewards"].device)
        advantages = full_group_advantages(rewards, self.scale_rewards)[kept]  # [kept rows], all processes
        local_rows = output["advantages"].size(0)
        start = self.accelerator.process_index * local_rows
        output["advantages"] = advantages[start : start + local_rows].to(output["advantages"].device)
        logged = self._logs["advantages"]
        for _ in range(min(advantages.numel(), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    # ---------------------------------------------------------------- loss: dropped groups, D3S token selection

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        if not self._count_step_sequences:
            return super()._prepare_inputs(generation_batch)
        buffered = self._buffered_inputs
        inputs = super()._prepare_inputs(generation_batch)
        if self._buffered_inputs is not buffered:  # a new generation, shuffled and split into micro-batches
            self._annotate_step_sequences(self._buffered_inputs)
        return inputs

    def _annotate_step_sequences(self, micro_batches: list[dict[str, Any]]) -> None:
        """Give each micro-batch of a new generation the number of sequences its optimizer step keeps in the loss,
        over all processes (`pods_drop_constant_groups` with a sequence-averaged loss; see `_compute_loss`)."""
        local = torch.stack([(~batch["pods_dropped"]).sum() for batch in micro_batches]).float()  # [S]
        counts = self.accelerator.reduce(local, reduction="sum")  # [S], all processes
        totals = optimizer_step_totals(counts, self.args.gradient_accumulation_steps)  # [S]
        for batch, total in zip(micro_batches, totals, strict=True):
            batch["pods_step_sequences"] = total

    def _compute_loss(self, model, inputs):
        """TRL's loss; with dropped constant groups, a sequence-averaged policy term (with its KL) averages over the
        optimizer step's non-dropped sequences on all processes. The entropy bonus (a mean over the non-dropped
        tokens already) and the MoE router loss keep TRL's values."""
        step_sequences = inputs.get("pods_step_sequences")  # [] set by _annotate_step_sequences
        entropy_coef = self._applied_entropy_coef() if step_sequences is not None else 0.0
        self._loss_advantages = inputs["advantages"]  # read by get_high_entropy_mask (token selection)
        self._loss_forward = {} if step_sequences is not None else None
        try:
            loss = super()._compute_loss(model, inputs)
            forward = self._loss_forward
        finally:
            self._loss_advantages = self._loss_forward = None
        if step_sequences is None:
            return loss
        kept_as_is = self._entropy_and_router_terms(inputs, forward, entropy_coef)
        accumulation, processes = self.current_gradient_accumulation_steps, self.accelerator.num_processes
        scale = sequence_average_scale(inputs["advantages"].size(0), accumulation, processes, step_sequences)
        return kept_as_is + scale * (loss - kept_as_is)

    def _applied_entropy_coef(self) -> float:
        """The entropy-bonus coefficient TRL's `_compute_loss` applies to the coming micro-batch (read before its
        adaptive controller updates the coefficient at the end of an optimizer step)."""
        if not self._entropy_bonus_enabled:
            return 0.0
        if self.use_adaptive_entropy and self._last_world_entropy > self.args.entropy_target:
            return 0.0
        return self.entropy_coef

    def _entropy_and_router_terms(
        self, inputs: dict[str, Any], forward: dict[str, Any], entropy_coef: float
    ) -> torch.Tensor | float:
        """The entropy bonus and the MoE router loss as TRL's `_compute_loss` added them, from the same forward."""
        accumulation = self.current_gradient_accumulation_steps
        terms = 0.0
        if entropy_coef:
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)  # [B, T]
            if forward.get("entropy_mask") is not None:
                mask = mask * forward["entropy_mask"]
            terms = terms - entropy_coef * entropy_bonus(forward["entropies"], mask, accumulation)
        if self.aux_loss_enabled:
            terms = terms + self.router_aux_loss_coef * forward["aux_loss"] / accumulation
        return terms

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._loss_forward is not None:  # the training forward of a micro-batch whose policy term is rescaled
            self._loss_forward.update(entropies=entropies, aux_loss=aux_loss)
        return logps, entropies, aux_loss

    def _token_fraction(self) -> float:
        start = self.args.pods_token_fraction_start
        end = self.args.pods_token_fraction
        return end if start is None else scheduled_value(start, end, self._progress(), self.args.pods_schedule)

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        """With D3S token selection, TRL's entropy-mask seam keeps exactly the top `pods_token_fraction` of tokens by
        |advantage| x entropy instead, as loss weights whose normaliser counts the kept tokens.

        The budget is per process, except for the losses normalised over all processes' tokens (`dapo`, `cispo`,
        `vespo`), where one budget spans every process (ties broken by process, then position). The fraction kept
        over all processes is logged as `pods/token_fraction_kept`.
        """
        if self._token_selection:
            weights = self._token_selection_weights(entropies, mask)
        else:
            weights = super().get_high_entropy_mask(entropies, mask, threshold)
        if self._loss_forward is not None:  # the entropy bonus of a rescaled micro-batch acts on these tokens
            self._loss_forward["entropy_mask"] = weights
        return weights

    def _token_selection_weights(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` loss weights of D3S token selection (see `get_high_entropy_mask`)."""
        scores = token_scores(self._loss_advantages, entropies.detach())  # [B, T]
        valid = mask.bool()
        global_budget = self.loss_type in TOKEN_LEVEL_LOSSES
        if global_budget:
            keep = self._select_tokens_across_processes(scores, valid, self._token_fraction())
        else:
            keep = select_top_tokens(scores, valid, self._token_fraction())
        local_counts = torch.stack([keep.sum(), valid.sum()]).float()
        counts = self.accelerator.reduce(local_counts.clone(), reduction="sum")  # [kept, valid] over all processes
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["pods/token_fraction_kept"].append((counts[0] / counts[1].clamp(min=1.0)).item())
        kept_total, valid_total = (counts if global_budget else local_counts).tolist()
        return normaliser_weights(keep, mask, self.loss_type, kept_total, valid_total)

    def _select_tokens_across_processes(
        self, scores: torch.Tensor, valid: torch.Tensor, fraction: float
    ) -> torch.Tensor:
        """``[B, T]`` bool: this process's share of one token budget over every process's valid tokens."""
        local = scores[valid].float()  # [V_local]
        padded = self.accelerator.pad_across_processes(local, pad_index=-1.0)  # [V_max]
        gathered = self.accelerator.gather(padded)  # [P * V_max]; scores are >= 0, so -1 marks padding
        keep = select_top_tokens(gathered, gathered >= 0, fraction)  # the same on every process
        start = self.accelerator.process_index * padded.numel()
        selected = torch.zeros_like(valid)
        selected[valid] = keep[start : start + local.numel()]
        return selected

    # ---------------------------------------------------------------- resume: the position in the generation cycle

    def _save_rng_state(self, output_dir: str) -> None:
        """Beside its RNG state, each process saves what an exact resume needs beyond TRL's checkpoint: the position
        in the generation cycle (TRL's micro-step counter), the buffered micro-batches of the current generation
        (still to be trained on when `steps_per_generation > gradient_accumulation_steps` or `num_iterations > 1`)
        and the count behind `pods/tokens_generated`."""
        super()._save_rng_state(output_dir)
        if self.pods_n is None:
            return
        state = {
            "layout": self._cycle_layout(),
            "step": self._step,
            "buffered_inputs": self._buffered_inputs,
            "tokens_generated": self._tokens_generated,
        }
        torch.save(state, os.path.join(output_dir, RESUME_STATE.format(self.accelerator.process_index)))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        """Trainer calls this once when it resumes, just before the first step: restore what `_save_rng_state`
        saved, so that a checkpoint inside a generation cycle continues with the same rollouts."""
        super()._load_rng_state(checkpoint)
        if checkpoint is None or self.pods_n is None:
            return
        path = os.path.join(checkpoint, RESUME_STATE.format(self.accelerator.process_index))
        if not os.path.isfile(path):  # e.g. a GRPOTrainer checkpoint: TRL's behaviour, a new generation
            return
        state = torch.load(path, map_location=self.accelerator.device, weights_only=True)
        self._tokens_generated = state["tokens_generated"]
        if state["layout"] != self._cycle_layout():
            logger.warning(
                "Resuming with steps_per_generation, num_iterations, gradient_accumulation_steps or the number of "
                "processes changed (%s, was %s): the saved generation is discarded and a new one starts, as in TRL.",
                self._cycle_layout(),
                state["layout"],
            )
            return
        self._step, self._buffered_inputs = state["step"], state["buffered_inputs"]

    def _cycle_layout(self) -> list[int]:
        return [
            self.args.steps_per_generation,
            self.num_iterations,
            self.args.gradient_accumulation_steps,
            self.accelerator.num_processes,
        ]

    # ---------------------------------------------------------------- generation in rounds (micro-groups)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        chunk = self._generation_chunk_size
        if chunk is None or len(prompt_ids) <= chunk:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, **kwargs)
        completion_ids = []
        with self._one_weight_load_per_generation():
            for first in range(0, len(prompt_ids), chunk):  # peak generation memory is set by `chunk`, not by N
                ids, _ = super()._generate_single_turn(
                    prompt_ids[first : first + chunk], images, multimodal_fields, num_generations, **kwargs
                )
                completion_ids.extend(ids)
        return completion_ids, None

    @contextmanager
    def _one_weight_load_per_generation(self):
        """Within the block, the generation calls of one generation (rounds, adaptive waves) share one weight load.

        vLLM colocate with sleep mode: the engine stays awake between the calls (`engine_awake`), so the weights are
        pushed once. HF generate under DeepSpeed ZeRO-3 with `ds3_gather_for_generation`: TRL gathers the full weights
        around each `generate` call; they are gathered once for the block instead, as TRL does for one call.
        """
        if self.use_vllm:
            with engine_awake(getattr(self, "vllm_generation", None), self._sync_engine_weights):
                yield
            return
        if not (self._dist.is_zero3 and self.args.ds3_gather_for_generation):
            yield
            return
        with unwrap_model_for_generation(
            self.model_wrapped,
            self.accelerator,
            gather_deepspeed3_params=True,
            gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
        ):
            self.args.ds3_gather_for_generation = False
            try:
                yield
            finally:
                self.args.ds3_gather_for_generation = True

    def _sync_engine_weights(self) -> None:
        """Push the weights to the vLLM engine, as TRL's generation does once per optimizer step."""
        self.vllm_generation.sync_weights()
        self._last_loaded_step = self.state.global_step


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _constant_rows(rewards: torch.Tensor) -> torch.Tensor:
    """``[G]`` bool: rows whose non-NaN values are all equal (or that have none)."""
    high = torch.nan_to_num(rewards, nan=-torch.inf).amax(1)
    low = torch.nan_to_num(rewards, nan=torch.inf).amin(1)
    return (high - low).nan_to_num(0.0) <= 0


@contextmanager
def _rewards_not_gathered():
    """Within the block, TRL's `_calculate_rewards` returns this process's rewards (it skips its final gather)."""
    gather = grpo_trainer_module.gather
    grpo_trainer_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_trainer_module.gather = gather


def _take_new(pending: dict[str, list], before: dict[str, int]) -> dict[str, list]:
    """Remove and return what was appended to each list of ``pending`` since the lengths ``before`` were taken."""
    new = {}
    for key, values in pending.items():
        start = before.get(key, 0)
        if len(values) > start:
            new[key] = values[start:]
            del values[start:]
    return new

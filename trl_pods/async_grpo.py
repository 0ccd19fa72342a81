"""PODS in TRL's asynchronous GRPO trainer: the rollout worker generates N rollouts per prompt and queues M.

TRL 1.16's `trl.experimental.async_grpo.AsyncGRPOTrainer` trains while a rollout worker, a spawned child process,
generates against a `vllm serve` and queues scored rows for the trainer. `PODSAsyncGRPOTrainer` swaps in a worker
whose loop overrides one seam, `_score_group`, the one place where all rollouts of a prompt and their rewards are
present:

1. TRL's `_score_group` scores the group's `pods_n` rollouts (reward functions, environments) and builds its rows.
2. `select_rollouts` keeps `pods_m` of them with the configured down-sampler (the registry of
   `trl_pods.down_sampling`) and recomputes their advantages with TRL's asynchronous normalisation
   (`population_group_advantages`), over the kept M (`pods_advantage_scope="kept"`) or over all N (`"all"`).
3. With `pods_generation="refill"` (dynamic sampling), a group whose rewards are all equal is dropped: nothing of it
   is queued, and the worker, which never stops generating, simply goes on to the next prompt.

Only what the worker queues reaches the trainer, so the trainer's batch sizes count kept rows and a dropped group
never costs it a forward pass. A multi-turn conversation that forked into several rows is kept or dropped whole.

The trainer side adds what selection changes: a checkpoint's resume position counts dropped prompts as visited (TRL
counts trained ones only, and would regenerate every prompt after the first dropped one), and the worker's `pods/*`
metrics reach the logs (`docs/async.md`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import queue
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
from trl.experimental.async_grpo.async_rollout_worker import (
    AsyncRolloutWorker,
    RolloutGroup,
    RolloutSample,
    _AsyncRolloutLoop,
)

from .adaptive import has_contrast
from .advantages import population_group_advantages
from .config import ADVANTAGE_SCOPES, _resolve_group_sizes
from .down_sampling import DownSampler, get_down_sampler

ASYNC_GENERATION_MODES = ("fixed", "refill")
DROPPED_GROUPS = "pods/dropped_group_ids"  # worker -> trainer, in the metrics queue; never logged


@dataclass
class PODSAsyncGRPOConfig(AsyncGRPOConfig):
    r"""
    Configuration for [`PODSAsyncGRPOTrainer`]: every [`trl.experimental.async_grpo.AsyncGRPOConfig`] parameter, with
    its TRL meaning, plus the parameters below.

    The rollout worker generates `pods_n` rollouts per prompt, scores them, and queues the `pods_m` the down-sampler
    keeps; `num_generations` is `pods_m`, the group size the trainer sees. The trainer's batch sizes
    (`per_device_train_batch_size`, `token_budget`) count queued rows, i.e. kept ones. An automatic
    `max_inflight_tasks` (-1) is scaled by `pods_n / pods_m`, since each kept row now costs that many rollouts.

    Parameters:
        > Parameters that control PODS in the rollout worker

        pods_n (`int`, *optional*):
            Rollouts generated and scored per prompt (N). Defaults to `4 * pods_m`.
        pods_m (`int`, *optional*):
            Rollouts per prompt queued for training (M). Defaults to `num_generations` (8 if neither is set).
        pods_down_sampler (`str`, *optional*, defaults to `"max_variance"`):
            Rule that picks the M kept rollouts, from the registry of `trl_pods.down_sampling` or a dotted path.
        pods_advantage_scope (`str`, *optional*, defaults to `"kept"`):
            Rewards the advantage mean and std are taken over: the M kept (`"kept"`) or all N (`"all"`).
        pods_generation (`str`, *optional*, defaults to `"fixed"`):
            `"fixed"`: every prompt's M kept rollouts are queued. `"refill"` (dynamic sampling): a prompt whose N
            rewards are all equal is dropped, and the worker goes on to the next prompt.
    """

    num_generations: int | None = field(
        default=None,
        metadata={"help": "Group size the trainer sees. With PODS this is `pods_m`; set either one (8 if neither)."},
    )
    pods_n: int | None = field(
        default=None,
        metadata={"help": "Rollouts the worker generates and scores per prompt (N). Defaults to 4 * pods_m."},
    )
    pods_m: int | None = field(
        default=None,
        metadata={
            "help": "Rollouts per prompt the worker queues for training (M). Defaults to num_generations; the two "
            "may not disagree."
        },
    )
    pods_down_sampler: str = field(
        default="max_variance",
        metadata={
            "help": "Rule choosing the kept rollouts: 'max_variance', 'max_reward', 'random', a registered name, or a "
            "dotted import path to fn(rewards[G, N], m, *, generator=None) -> indices[G, m]."
        },
    )
    pods_advantage_scope: str = field(
        default="kept",
        metadata={
            "help": "Rewards the advantage mean/std are computed over: 'kept' (the M kept) or 'all' (all N).",
            "choices": list(ADVANTAGE_SCOPES),
        },
    )
    pods_generation: str = field(
        default="fixed",
        metadata={
            "help": "'fixed': queue every prompt's M kept rollouts. 'refill' (dynamic sampling): drop prompts whose "
            "N rewards are all equal; the worker goes on to the next prompt.",
            "choices": list(ASYNC_GENERATION_MODES),
        },
    )

    def __post_init__(self):
        _resolve_group_sizes(self)  # the synchronous config's rule for pods_n, pods_m and num_generations
        super().__post_init__()
        get_down_sampler(self.pods_down_sampler)  # raises with the list of known names
        if self.pods_advantage_scope not in ADVANTAGE_SCOPES:
            raise ValueError(
                f"pods_advantage_scope must be one of {ADVANTAGE_SCOPES}; got {self.pods_advantage_scope!r}."
            )
        if self.pods_generation not in ASYNC_GENERATION_MODES:
            raise ValueError(
                f"pods_generation must be one of {ASYNC_GENERATION_MODES} in the asynchronous trainer; got "
                f"{self.pods_generation!r}. Adaptive, budgeted and screened generation decide per batch, which the "
                "asynchronous worker does not have: use PODSGRPOTrainer for them (docs/async.md)."
            )
        if self.temperature == 0 or self.top_k == 1:
            raise ValueError(
                f"temperature={self.temperature}, top_k={self.top_k} makes generation greedy, so the pods_n rollouts "
                "of a prompt are identical and carry no signal. Sample (temperature > 0, top_k != 1)."
            )


@dataclass(frozen=True)
class GroupSelection:
    """What the worker keeps of G groups: ``kept`` ``[G, M]`` rollout indices (ascending), their ``advantages``
    ``[G, M]``, and ``contrast`` ``[G]`` (bool: the group's scored rewards are not all equal)."""

    kept: torch.Tensor
    advantages: torch.Tensor
    contrast: torch.Tensor


def select_rollouts(
    rewards: torch.Tensor,
    m: int,
    down_sampler: DownSampler,
    advantage_scope: str,
    generator: torch.Generator | None = None,
) -> GroupSelection:
    """Keep ``m`` rollouts per group with ``down_sampler`` and give them TRL's asynchronous advantages.

    Args:
        rewards: ``[G, N]`` float64 rewards, NaN for an unscorable rollout.
        m: rollouts kept per group.
        down_sampler: a rule of `trl_pods.down_sampling`.
        advantage_scope: ``"kept"`` (mean and std of the kept rewards) or ``"all"`` (of all N).
        generator: for randomised rules.
    """
    kept = down_sampler(rewards, m, generator=generator)  # [G, M]
    if advantage_scope == "all":
        advantages = population_group_advantages(rewards).gather(1, kept)  # [G, M]
    else:
        advantages = population_group_advantages(rewards.gather(1, kept))  # [G, M]
    return GroupSelection(kept, advantages, has_contrast(rewards))


class PODSRolloutLoop(_AsyncRolloutLoop):
    """TRL's rollout loop (in the worker's child process), generating `pods_n` rollouts per prompt (its
    `num_generations`) and queuing the `pods_m` that `select_rollouts` keeps (see the module docstring)."""

    def __init__(
        self,
        *,
        pods_m: int,
        pods_down_sampler: str,
        pods_advantage_scope: str,
        pods_generation: str,
        pods_seed: int,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pods_m = pods_m
        self.down_sampler = get_down_sampler(pods_down_sampler)
        self.advantage_scope = pods_advantage_scope
        self.drop_without_contrast = pods_generation == "refill"
        self.generator = torch.Generator().manual_seed(pods_seed)
        self._dropped_groups: list[int] = []

    async def _score_group(self, group: RolloutGroup) -> list[RolloutSample]:
        samples = await super()._score_group(group)  # every conversation's rows, in order, TRL's advantages
        counts = [len(sequences) for sequences in group.completions_sequences]  # rows per conversation
        starts = [0, *itertools.accumulate(counts)]
        first_rows = zip(starts[:-1], counts, strict=True)  # a conversation with no trainable row cannot be kept
        rewards = torch.tensor(
            [[samples[start].metrics["reward"] if count else math.nan for start, count in first_rows]],
            dtype=torch.float64,
        )  # [1, N]
        selection = select_rollouts(rewards, self.pods_m, self.down_sampler, self.advantage_scope, self.generator)
        dropped = self.drop_without_contrast and not bool(selection.contrast[0])
        self._count(group.group_id, rewards, selection, dropped)
        if dropped:
            return []
        kept = []
        for index, advantage in zip(selection.kept[0].tolist(), selection.advantages[0].tolist(), strict=True):
            for sample in samples[starts[index] : starts[index + 1]]:
                sample.advantage = advantage
                kept.append(sample)
        return kept

    def _count(self, group_id: int, rewards: torch.Tensor, selection: GroupSelection, dropped: bool) -> None:
        """Add one scored group to the metrics the next push sends: counters (`*_total`, summed over a logging
        window) and rates (numerator, denominator). A dropped group's id goes to the trainer with them."""
        kept_rewards = rewards.gather(1, selection.kept)  # [1, M]
        self._counters["pods/rollouts_generated_total"] += rewards.numel()
        self._counters["pods/groups_scored_total"] += 1
        self._counters["pods/groups_dropped_total"] += dropped
        self._counters["pods/rollouts_queued_total"] += 0 if dropped else kept_rewards.numel()
        scopes = [("all", rewards)] + ([] if dropped else [("kept", kept_rewards)])
        for scope, values in scopes:
            scored = values[~torch.isnan(values)]
            self._add_rate(f"pods/reward_mean_{scope}", scored.sum().item(), scored.numel())
            self._add_rate(f"pods/group_reward_std_{scope}", scored.std(correction=0).nan_to_num(0.0).item(), 1)
            self._add_rate(f"pods/frac_zero_std_groups_{scope}", float(not has_contrast(values)[0]), 1)
        if dropped:
            self._dropped_groups.append(group_id)

    def _add_rate(self, key: str, numerator: float, denominator: float) -> None:
        rate = self._rates[key]
        rate[0] += numerator
        rate[1] += denominator

    def _push_metrics(self, values: dict[str, float | tuple[float, float]]) -> None:
        if self._dropped_groups:
            values = {**values, DROPPED_GROUPS: tuple(self._dropped_groups)}
            self._dropped_groups = []
        super()._push_metrics(values)


class PODSRolloutWorker(AsyncRolloutWorker):
    """TRL's rollout worker running `PODSRolloutLoop` in its child process; the `pods_*` keyword arguments reach
    the loop."""

    _loop_cls = PODSRolloutLoop


class PODSAsyncGRPOTrainer(AsyncGRPOTrainer):
    """TRL's `AsyncGRPOTrainer` with PODS in its rollout worker: takes a [`PODSAsyncGRPOConfig`], and every other
    argument with TRL's meaning. An injected ``rollout_worker`` is used as given (it does its own selection)."""

    def __init__(self, model: str, reward_funcs: Any = None, args: PODSAsyncGRPOConfig | None = None, **kwargs):
        if args is None:
            args = PODSAsyncGRPOConfig(f"{model.split('/')[-1]}-PODSAsyncGRPO")
        if not isinstance(args, PODSAsyncGRPOConfig):
            raise TypeError(
                f"PODSAsyncGRPOTrainer needs a PODSAsyncGRPOConfig (got {type(args).__name__}): it carries pods_n and "
                "pods_m; every AsyncGRPOConfig parameter keeps its meaning there."
            )
        automatic_inflight = args.max_inflight_tasks < 0
        super().__init__(model, reward_funcs, args, **kwargs)
        self._dropped_groups: set[int] = set()
        if automatic_inflight:  # TRL sized it in kept rows; each costs pods_n / pods_m rollouts
            self.args.max_inflight_tasks = math.ceil(self.args.max_inflight_tasks * args.pods_n / args.pods_m)
        if self.accelerator.is_main_process and kwargs.get("rollout_worker") is None:
            self.rollout_worker = self._pods_worker(self.rollout_worker)
            self.rollout_queue = self.rollout_worker.rollout_buffer

    def _pods_worker(self, worker: AsyncRolloutWorker) -> PODSRolloutWorker:
        """The worker TRL built (not started yet), as a `PODSRolloutWorker` with the same settings."""
        loop_kwargs = dict(worker._loop_kwargs)
        queue_maxsize = loop_kwargs.pop("queue_maxsize")
        args = self.args
        loop_kwargs.update(
            num_generations=args.pods_n,
            max_inflight_tasks=args.max_inflight_tasks,
            pods_m=args.pods_m,
            pods_down_sampler=args.pods_down_sampler,
            pods_advantage_scope=args.pods_advantage_scope,
            pods_generation=args.pods_generation,
            pods_seed=args.seed,
        )
        return PODSRolloutWorker(
            queue_maxsize=queue_maxsize, child_ready_timeout=worker._child_ready_timeout, **loop_kwargs
        )

    def _drain_worker_metrics(self) -> None:
        """Move what the worker pushed into the metric sink (as TRL's `log` does), keeping the dropped groups' ids
        apart."""
        if not (self.accelerator.is_main_process and self.rollout_worker):
            return
        while True:
            try:
                payload = self.rollout_worker.metrics_queue.get_nowait()
            except queue.Empty:
                return
            self._dropped_groups.update(payload.pop(DROPPED_GROUPS, ()))
            for key, value in payload.items():
                self._metrics["train"][key].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._drain_worker_metrics()
        super().log(logs, start_time)

    def _log_step_metrics(self) -> None:
        # TRL's `batch/samples_per_step`, which it reconstructs as forwarded tokens / mean length: a float count
        self._metrics["train"]["pods/rollouts_trained"].append(float(round(self._step_samples)))
        super()._log_step_metrics()

    def _save_checkpoint(self, model, trial) -> None:
        """TRL's checkpoint; its resume position (`rollout_state.json`) then counts dropped prompts as visited."""
        super()._save_checkpoint(model, trial)
        if not (self.accelerator.is_main_process and isinstance(self.rollout_worker, AsyncRolloutWorker)):
            return
        self._drain_worker_metrics()
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        path = os.path.join(folder, "rollout_state.json")
        with open(path) as f:
            rollout_state = json.load(f)
        visited = self._trained_groups | self._dropped_groups
        first_open = next(g for g in itertools.count() if g not in visited)
        rollout_state["prompt_index"] = self.rollout_worker._loop_kwargs["dataset_start_index"] + first_open
        with open(path, "w") as f:
            json.dump(rollout_state, f)

"""PODS in TRL's asynchronous GRPO trainer: the rollout worker decides the rollouts of each prompt, and queues M.

TRL 1.16's `trl.experimental.async_grpo.AsyncGRPOTrainer` trains while a rollout worker, a spawned child process,
generates against a `vllm serve` and queues scored rows for the trainer. `PODSAsyncGRPOTrainer` swaps in a worker
whose loop overrides two seams of TRL's rollout loop, both of which TRL's own loops override too:

1. `_repeat_iterator`, the work TRL's generate loop draws from whenever a rollout finishes. TRL's `num_generations`
   is 1, so each work item is one rollout, and `trl_pods.streaming.PromptStream` decides which: it runs the
   generation mode (`pods_generation`) over windows of prompts, so that a prompt is piloted and topped up
   (adaptive), piloted and then committed or dropped (screened), given a count from its history (budgeted), or given
   `pods_n` (fixed, refill). TRL's generate loop carries every rollout out as its own: environments drawn and reset
   per rollout, tools, the in-flight cap. The work items have the shape of TRL's (`work_like_trl`): ``(id, row)``
   in TRL 1.16, ``(id, row index, row)`` once TRL's iterator yields a row index (huggingface/trl#7176).
2. `_score_group`, which TRL's score loop calls for each finished rollout. Once a prompt's part of a wave is back,
   TRL's `_score_group` scores it (reward functions, environments' rewards) and builds its rows; the stream shows
   the mode the rewards. When the mode is done with a window, `select_rollouts` keeps `pods_m` of each trained
   prompt's rollouts with the configured down-sampler (the registry of `trl_pods.down_sampling`) and recomputes
   their advantages with TRL's asynchronous normalisation (`population_group_advantages`), over the kept M
   (`pods_advantage_scope="kept"`) or over all the prompt's rollouts (`"all"`). A prompt the mode does not train
   on (screened's unchosen, refill's groups without contrast) is dropped. A short group, of fewer than `pods_m`
   rollouts (lost ones, once TRL scores groups that lost some: huggingface/trl#7176), keeps them all; a prompt with
   fewer than 2 scored rollouts cannot train (its group-relative advantage is 0) and is dropped
   (`pods/groups_too_small_total`).

Only what the worker queues reaches the trainer, so the trainer's batch sizes count kept rows and a dropped group
never costs it a forward pass. A multi-turn conversation that forked into several rows is kept or dropped whole.

The trainer side adds what dropping changes (`docs/async.md`). A checkpoint's resume position (TRL's `prompt_index`
in `rollout_state.json`, also in a `save_only_model` checkpoint) counts dropped prompts as visited, and so those whose
rows TRL's queue discarded as stale (`StaleGroupWatch`): TRL counts trained ones only, and would regenerate every
prompt after the first dropped one. The worker reports its dropped groups through `DroppedGroupReports`, which no lost
message holds back. The checkpoint also keeps the number of prompts trained before its position, which an epoch-driven
run resumes its count from: an epoch is, as in TRL, `len(train_dataset)` trained prompts.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import itertools
import json
import math
import multiprocessing
import os
import queue
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import torch
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
from trl.experimental.async_grpo.async_rollout_worker import (
    AsyncRolloutWorker,
    RolloutGroup,
    RolloutSample,
    _AsyncRolloutLoop,
)

from .adaptive import has_contrast
from .advantages import population_group_advantages
from .budget import prompt_key
from .config import _check_budgeted_generation, _check_max_steps, _resolve_group_sizes, _resolve_n_initial
from .down_sampling import DownSampler, get_down_sampler
from .fields import ADVANTAGE_SCOPES, PODSFields
from .streaming import PromptStream, StreamGroup, WindowResult, build_stream_mode, window_size

ROLLOUT_STATE = "rollout_state.json"  # TRL's file of a checkpoint's resume position


@dataclass
class PODSAsyncGRPOConfig(PODSFields, AsyncGRPOConfig):
    r"""
    Configuration for [`PODSAsyncGRPOTrainer`]: every [`trl.experimental.async_grpo.AsyncGRPOConfig`] parameter, with
    its TRL meaning, plus the parameters below.

    The rollout worker generates up to `pods_n` rollouts per prompt, as `pods_generation` decides, scores them, and
    queues the `pods_m` the down-sampler keeps; `num_generations` is `pods_m`, the group size the trainer sees. The
    trainer's batch sizes (`per_device_train_batch_size`, `token_budget`) count queued rows, i.e. kept ones. An
    automatic `max_inflight_tasks` (-1) is scaled by `pods_n / pods_m`, since each kept row costs about that many
    rollouts.

    Parameters:
        > The PODS parameters both trainers take (`trl_pods.fields.PODSFields`): `num_generations`, `pods_n`,
        > `pods_m`, `pods_down_sampler`, `pods_advantage_scope`, `pods_generation`, `pods_n_initial`, `pods_budget`,
        > `pods_allocation`, `pods_history_size`, `pods_history_decay`, `pods_screen_ratio`, `pods_screen_rule`,
        > `pods_draw_coverage` (refused here: the worker draws nothing). In
        > the rollout worker (`trl_pods.streaming`) a mode decides each window of prompts; refill drops a prompt
        > whose rewards are all equal (the stream goes on to the next), screened drops the pilots it does not
        > choose, and a mode that draws further prompts into a generation (auto) is refused.

        > Parameters of the rollout worker only

        pods_window (`int`, *optional*):
            Prompts the worker decides for together, in place of a batch: budgeted shares `pods_budget x
            pods_window` rollouts among them; screened trains on the `pods_window` its rule picks of
            `pods_screen_ratio x pods_window` piloted. Defaults to 8 for those two, 1 (each prompt alone) otherwise.
    """

    pods_window: int | None = field(
        default=None,
        metadata={
            "help": "Prompts the worker decides for together, in place of a batch: budgeted shares pods_budget x "
            "pods_window rollouts among them; screened trains on the pods_window its rule picks of pods_screen_ratio "
            "x pods_window piloted. Default: 8 for budgeted and screened, 1 (each prompt alone) otherwise."
        },
    )

    def __post_init__(self):
        _check_max_steps(self)
        _resolve_group_sizes(self)  # the synchronous config's rule for pods_n, pods_m and num_generations
        super().__post_init__()
        get_down_sampler(self.pods_down_sampler)  # raises with the list of known names
        if self.pods_advantage_scope not in ADVANTAGE_SCOPES:
            raise ValueError(
                f"pods_advantage_scope must be one of {ADVANTAGE_SCOPES}; got {self.pods_advantage_scope!r}."
            )
        _check_stream_generation(self)
        if self.temperature == 0 or self.top_k == 1:
            raise ValueError(
                f"temperature={self.temperature}, top_k={self.top_k} makes generation greedy, so the pods_n rollouts "
                "of a prompt are identical and carry no signal. Sample (temperature > 0, top_k != 1)."
            )


def _check_stream_generation(config: PODSAsyncGRPOConfig) -> None:
    """The generation mode's settings, checked as the synchronous config checks them, and the window."""
    if config.pods_draw_coverage is not None:
        raise ValueError(
            "pods_draw_coverage sizes the prompts a synchronous generation draws; the asynchronous worker draws none "
            "(it goes on to the next prompts of its stream): unset it."
        )
    _resolve_n_initial(config)
    _check_budgeted_generation(config)
    if config.pods_window is None:
        config.pods_window = window_size(config.pods_generation)
    for name, least in (("pods_screen_ratio", 2), ("pods_window", 1)):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} counts prompts: give a whole number >= {least} (got {value!r}).")
    build_stream_mode(config)  # raises for an unknown mode or rule, and for a mode that draws prompts


@dataclass(frozen=True)
class GroupSelection:
    """What the worker keeps of G groups: ``kept`` ``[G, M]`` rollout indices (ascending) and their ``advantages``
    ``[G, M]``."""

    kept: torch.Tensor
    advantages: torch.Tensor


def select_rollouts(
    rewards: torch.Tensor,
    m: int,
    down_sampler: DownSampler,
    advantage_scope: str,
    generator: torch.Generator | None = None,
) -> GroupSelection:
    """Keep ``m`` rollouts per group with ``down_sampler`` and give them TRL's asynchronous advantages.

    Args:
        rewards: ``[G, N]`` float64 rewards, NaN for an unscorable rollout or one not generated (after the others).
        m: rollouts kept per group.
        down_sampler: a rule of `trl_pods.down_sampling`.
        advantage_scope: ``"kept"`` (mean and std of the kept rewards) or ``"all"`` (of all scored rollouts).
        generator: for randomised rules.
    """
    kept = down_sampler(rewards, m, generator=generator)  # [G, M]
    if advantage_scope == "all":
        advantages = population_group_advantages(rewards).gather(1, kept)  # [G, M]
    else:
        advantages = population_group_advantages(rewards.gather(1, kept))  # [G, M]
    return GroupSelection(kept, advantages)


class DroppedGroupReports:
    """The rollout worker's reports of the groups it dropped, to the trainer, such that no lost report holds a group
    back and no report grows with the run.

    The worker numbers its dropped groups in the order it drops them. ``received``, shared and written by the trainer
    alone, is the number up to which the trainer holds them all; it never decreases. After every group it scores, the
    worker sends the groups numbered above the ``received`` it reads (if there are any), tagged with the number of the
    last. The trainer reads the reports in order. One tagged k holds every group above a ``received`` the trainer had
    already reached, so the trainer then holds all up to k, and confirms k. Hence:

    - a report refused by a full channel (the worker never waits for room) is superseded: the next report read, sent
      after the next scored group, repeats its groups;
    - only groups the worker dropped are ever sent, so a position computed from them never skips a prompt that was
      neither trained nor dropped;
    - a report holds the groups dropped since the trainer last read, which it does every optimizer step, and the
      channel holds ``maxsize`` reports at most.

    Args:
        reports: the channel, a queue (`put_nowait`, `get_nowait`).
        received: the trainer's confirmation, a shared integer (``.value``).
    """

    def __init__(self, reports: queue.Queue | MPQueue, received: Synchronized):
        self._reports = reports
        self._received = received
        self._dropped = 0  # worker side: groups dropped so far
        self._unconfirmed: collections.deque[tuple[int, int]] = collections.deque()  # worker side: (number, group id)

    @classmethod
    def between_processes(cls, maxsize: int = 256) -> DroppedGroupReports:
        """Reports from a spawned rollout worker to the trainer's process, ``maxsize`` of them in the channel."""
        context = multiprocessing.get_context("spawn")
        return cls(context.Queue(maxsize=maxsize), context.Value("q", 0))

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled only in the worker's child, as it is spawned. A report still unflushed when the child exits is
        # dropped rather than holding up its exit: the trainer has stopped reading by then.
        self.__dict__.update(state)
        self._reports.cancel_join_thread()

    def report(self, dropped_groups: Iterable[int]) -> None:
        """Worker side, after every window of groups it is done with: record the ids of those it dropped, then send
        every dropped group the trainer has not confirmed, unless there is none or the channel is full."""
        for group in dropped_groups:
            self._dropped += 1
            self._unconfirmed.append((self._dropped, group))
        received = self._received.value
        while self._unconfirmed and self._unconfirmed[0][0] <= received:
            self._unconfirmed.popleft()
        if not self._unconfirmed:
            return
        try:
            self._reports.put_nowait((self._dropped, tuple(group for _, group in self._unconfirmed)))
        except queue.Full:
            pass  # a later report repeats these groups

    def receive(self) -> set[int]:
        """Trainer side: the groups of the reports sent since the last call (some maybe again), now confirmed."""
        groups: set[int] = set()
        received = self._received.value
        while True:
            try:
                last, dropped = self._reports.get_nowait()
            except queue.Empty:
                break
            groups.update(dropped)
            received = max(received, last)
        self._received.value = received
        return groups


class StaleGroupWatch:
    """The rollout queue as TRL's trainer reads it (`RolloutQueueDataset`), noting the groups whose rows TRL discards
    as stale: a row more than `max_staleness` policy versions behind the trainer's when it is taken from the queue.
    All of a prompt's rows carry one version, so such a group is never trained; unnoted, it would be neither trained
    nor dropped, and every later checkpoint would resume at it.

    Args:
        rollout_queue: the worker's queue of scored rows.
        trainer: its `model_version` and ``args.max_staleness`` are read as TRL's dataset reads them, right after
            each row is taken (in the same thread).
    """

    def __init__(self, rollout_queue: Any, trainer: Any):
        self._queue, self._trainer = rollout_queue, trainer
        self.groups: set[int] = set()

    def get(self, *args: Any, **kwargs: Any) -> RolloutSample:
        sample = self._queue.get(*args, **kwargs)
        if self._trainer.model_version - sample.model_version > self._trainer.args.max_staleness:  # TRL's drop
            self.groups.add(sample.group_id)
        return sample

    def __getattr__(self, name: str) -> Any:  # the rest (qsize, ...) is the queue's
        return getattr(self._queue, name)


def resume_position(trained: set[int], dropped: set[int]) -> tuple[int, int]:
    """Where a run would resume among its groups, and how many of them it trained before that point.

    Args:
        trained: ids of the groups trained on (TRL's, counted when a first row of the group is collated).
        dropped: ids of the groups never to be trained: dropped by the worker (e.g. without contrast), or discarded
            by TRL's queue as stale.

    Returns:
        The first group id that is neither trained nor dropped (so every group below it is one or the other), and the
        number of trained groups below it. Trained groups above it are generated and trained again after a resume,
        and counted then.
    """
    first_open = next(group for group in itertools.count() if group not in trained and group not in dropped)
    return first_open, sum(1 for group in trained if group < first_open)


def work_like_trl(
    stream_work: Callable[[Iterator[tuple[int, Any]]], Iterator[tuple[int, Any]]], trl_items: Iterator[tuple]
) -> Iterator[tuple]:
    """The prompt stream's work items, in the shape of TRL's work iterator's items.

    Args:
        stream_work: `PromptStream.work`, which reads ``(prompt id, row)`` and yields ``(work id, row)``.
        trl_items: TRL's `_repeat_iterator`, one item per prompt (its ``num_generations`` is 1): ``(group id, row)``
            in TRL 1.16, ``(group id, row index, row)`` with huggingface/trl#7176.

    Yields:
        ``(work id, row)``, or ``(work id, 0, row)`` where TRL's items carry a row index: each work item is a group
        of one rollout, its row 0.
    """
    first = next(trl_items)
    work = stream_work((item[0], item[-1]) for item in itertools.chain([first], trl_items))
    if len(first) == 2:
        yield from work
    else:
        for work_id, row in work:
            yield work_id, 0, row


def merged_rollouts(groups: list[RolloutGroup]) -> RolloutGroup:
    """One group of the rollouts of ``groups`` (one prompt's), in order, for one call of TRL's scoring: their
    per-rollout lists and reward keyword lists joined, and the oldest policy version among them (TRL stamps a group
    with the version its first rollout started under)."""
    values = {}
    for spec in dataclasses.fields(RolloutGroup):
        column = [getattr(group, spec.name) for group in groups]
        if isinstance(column[0], list):
            values[spec.name] = [item for value in column for item in value]
        elif isinstance(column[0], dict):
            values[spec.name] = {key: [item for value in column for item in value[key]] for key in column[0]}
        else:
            values[spec.name] = column[0]
    values["model_version"] = min(group.model_version for group in groups)
    return RolloutGroup(**values)


class PODSRolloutLoop(_AsyncRolloutLoop):
    """TRL's rollout loop (in the worker's child process), with one rollout per work item (its `num_generations` is
    1) and the prompt stream deciding which (see the module docstring); it queues the `pods_m` rollouts that
    `select_rollouts` keeps of each prompt trained on, and reports the prompts it drops through ``dropped_groups``."""

    def __init__(
        self,
        *,
        pods_n: int,
        pods_m: int,
        pods_down_sampler: str,
        pods_advantage_scope: str,
        pods_mode: Any,
        pods_window: int,
        pods_seed: int,
        dropped_groups: DroppedGroupReports,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pods_m = pods_m
        self.down_sampler = get_down_sampler(pods_down_sampler)
        self.advantage_scope = pods_advantage_scope
        self.generator = torch.Generator().manual_seed(pods_seed)
        self.stream = PromptStream(pods_mode, pods_n, pods_m, pods_window, pods_seed, key=prompt_key)
        self.dropped_groups = dropped_groups

    def _repeat_iterator(self) -> Iterator[tuple]:
        return work_like_trl(self.stream.work, super()._repeat_iterator())  # TRL's: one per prompt

    async def _score_group(self, group: RolloutGroup) -> list[RolloutSample]:
        part = self.stream.generated(group.group_id, group)  # ``group`` is one rollout; its id, the work item's
        if part is None:  # the prompt's part of the wave is not back yet
            return []
        window, index, rollouts = part
        samples = await super()._score_group(merged_rollouts(rollouts))  # every conversation's rows, in order
        rows, rewards = [], []
        for rollout in rollouts:  # a conversation with no trainable row cannot be kept
            count = len(rollout.completions_sequences[0])
            rows.append(samples[:count])
            rewards.append(samples[0].metrics["reward"] if count else math.nan)
            samples = samples[count:]
        done = self.stream.scored(window, index, rewards, rows)
        return [] if done is None else self._queue(done)

    def _queue(self, done: WindowResult) -> list[RolloutSample]:
        """The rows to queue of a window the mode is done with; its dropped prompts reported, its metrics counted."""
        queued, dropped = [], []
        for group in done.groups:
            too_small = group.trained and int((~torch.isnan(group.rewards)).sum()) < 2  # no contrast can exist
            rows, kept = self._kept_rows(group) if group.trained and not too_small else ([], None)
            self._count(group, kept)
            self._counters["pods/groups_too_small_total"] += too_small
            queued += rows
            if kept is None:
                dropped.append(group.prompt)
        self.dropped_groups.report(dropped)
        self._push_metrics(
            {
                f"pods/{name}": value if {"min", "max"} & set(name.split("_")) else (value, 1.0)  # TRL's reduction
                for name, value in done.metrics.items()
                if math.isfinite(value)
            }
        )
        return queued

    def _kept_rows(self, group: StreamGroup) -> tuple[list[RolloutSample], torch.Tensor]:
        """The rows of the M rollouts kept of a prompt trained on (all of a short group's, of fewer than M), with their
        advantages, the prompt's id, the oldest policy version among its rollouts and TRL's `reward_std` (the
        population std of all the prompt's rewards); and the kept rewards of the rollouts with rows. A row's advantage
        depends on every rollout of its prompt, so its rows carry the version of the first one, as TRL stamps a
        group, and TRL's staleness limit keeps or discards them together."""
        rewards = group.rewards[: len(group.rollouts)].unsqueeze(0).double()  # [1, rollouts generated]
        m = min(self.pods_m, rewards.size(1))
        selection = select_rollouts(rewards, m, self.down_sampler, self.advantage_scope, self.generator)
        scored = rewards[~torch.isnan(rewards)]
        reward_std = scored.std(correction=0).item() if scored.numel() else math.nan
        version = min((sample.model_version for rows in group.rollouts for sample in rows), default=0)
        rows, queued = [], []
        for index, advantage in zip(selection.kept[0].tolist(), selection.advantages[0].tolist(), strict=True):
            for sample in group.rollouts[index]:
                sample.advantage, sample.group_id, sample.model_version = advantage, group.prompt, version
                sample.metrics["reward_std"] = reward_std
                rows.append(sample)
            if group.rollouts[index]:
                queued.append(index)
        return rows, rewards[0, queued]

    def _count(self, group: StreamGroup, kept: torch.Tensor | None) -> None:
        """Add one prompt (``kept``: the rewards of its kept rollouts with rows, None if dropped) to the metrics the
        next push sends:
        counters (`*_total`, summed over a logging window) and rates (numerator, denominator)."""
        self._counters["pods/rollouts_generated_total"] += len(group.rollouts)
        self._counters["pods/groups_scored_total"] += 1
        self._counters["pods/groups_dropped_total"] += kept is None
        self._counters["pods/rollouts_queued_total"] += 0 if kept is None else kept.numel()
        scopes = [("all", group.rewards[: len(group.rollouts)].double())] + ([] if kept is None else [("kept", kept)])
        for scope, values in scopes:
            scored = values[~torch.isnan(values)]
            self._add_rate(f"pods/reward_mean_{scope}", scored.sum().item(), scored.numel())
            self._add_rate(f"pods/group_reward_std_{scope}", scored.std(correction=0).nan_to_num(0.0).item(), 1)
            self._add_rate(f"pods/frac_zero_std_groups_{scope}", float(not has_contrast(values.unsqueeze(0))[0]), 1)

    def _add_rate(self, key: str, numerator: float, denominator: float) -> None:
        rate = self._rates[key]
        rate[0] += numerator
        rate[1] += denominator


class PODSRolloutWorker(AsyncRolloutWorker):
    """TRL's rollout worker running `PODSRolloutLoop` in its child process: the `pods_*` keyword arguments reach the
    loop, and ``dropped_groups`` carries the loop's reports of the groups it dropped to the trainer."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.dropped_groups = DroppedGroupReports.between_processes()
        # TRL test-pickles the loop's keyword arguments before spawning the child, and a queue pickles only while a
        # process is spawned: the channel reaches the loop bound to its class, which only the spawn pickles.
        self._loop_cls = functools.partial(PODSRolloutLoop, dropped_groups=self.dropped_groups)


class PODSAsyncGRPOTrainer(AsyncGRPOTrainer):
    """TRL's `AsyncGRPOTrainer` with PODS in its rollout worker: takes a [`PODSAsyncGRPOConfig`], and every other
    argument, positional or named, as TRL's trainer takes it. An injected ``rollout_worker`` is used as given: a
    `PODSRolloutWorker` gets PODS's resume position, any other does its own selection and keeps TRL's."""

    def __init__(
        self,
        model: str,
        reward_funcs: Any = None,
        args: PODSAsyncGRPOConfig | None = None,
        *trl_args: Any,
        **trl_kwargs: Any,
    ):
        if args is None:
            args = PODSAsyncGRPOConfig(f"{model.split('/')[-1]}-PODSAsyncGRPO")
        if not isinstance(args, PODSAsyncGRPOConfig):
            raise TypeError(
                f"PODSAsyncGRPOTrainer needs a PODSAsyncGRPOConfig (got {type(args).__name__}): it carries pods_n and "
                "pods_m; every AsyncGRPOConfig parameter keeps its meaning there."
            )
        trl_arguments = inspect.signature(AsyncGRPOTrainer).bind(model, reward_funcs, args, *trl_args, **trl_kwargs)
        automatic_inflight = args.max_inflight_tasks < 0
        super().__init__(model, reward_funcs, args, *trl_args, **trl_kwargs)
        self._dropped_groups: set[int] = set()
        if automatic_inflight:  # TRL sized it in kept rows; each costs pods_n / pods_m rollouts
            self.args.max_inflight_tasks = math.ceil(self.args.max_inflight_tasks * args.pods_n / args.pods_m)
        if self.accelerator.is_main_process and trl_arguments.arguments.get("rollout_worker") is None:
            self.rollout_worker = self._pods_worker(self.rollout_worker)
        if isinstance(self.rollout_worker, PODSRolloutWorker):  # built here or injected: its resume position is PODS's
            self.rollout_queue = StaleGroupWatch(self.rollout_worker.rollout_buffer, self)

    def _pods_worker(self, worker: AsyncRolloutWorker) -> PODSRolloutWorker:
        """The worker TRL built (not started yet), as a `PODSRolloutWorker` with the same settings."""
        loop_kwargs = dict(worker._loop_kwargs)
        queue_maxsize = loop_kwargs.pop("queue_maxsize")
        args = self.args
        loop_kwargs.update(
            num_generations=1,  # rollouts per work item: the prompt stream decides them one by one
            max_inflight_tasks=args.max_inflight_tasks,
            pods_n=args.pods_n,
            pods_m=args.pods_m,
            pods_down_sampler=args.pods_down_sampler,
            pods_advantage_scope=args.pods_advantage_scope,
            pods_mode=build_stream_mode(args),  # pickled into the worker's child, with its rules
            pods_window=args.pods_window,
            pods_seed=args.seed,
        )
        return PODSRolloutWorker(
            queue_maxsize=queue_maxsize, child_ready_timeout=worker._child_ready_timeout, **loop_kwargs
        )

    def _receive_dropped_groups(self) -> None:
        """Add the groups the worker reported dropped since the last call, and confirm them to it."""
        if self.accelerator.is_main_process and isinstance(self.rollout_worker, PODSRolloutWorker):
            self._dropped_groups |= self.rollout_worker.dropped_groups.receive()

    def _log_step_metrics(self) -> None:
        self._receive_dropped_groups()  # every step, so that the worker's reports stay small
        # TRL's `batch/samples_per_step`, which it reconstructs as forwarded tokens / mean length: a float count
        self._metrics["train"]["pods/rollouts_trained"].append(float(round(self._step_samples)))
        super()._log_step_metrics()

    def _save_rng_state(self, output_dir: str) -> None:
        """Trainer's RNG state, then PODS's resume position (`_write_resume_position`). Trainer saves the RNG state
        after the model and the optimizer, and before what completes the checkpoint: the trainer state, the Hub push
        and the rotation of older checkpoints. So no complete checkpoint holds TRL's position."""
        super()._save_rng_state(output_dir)
        self._write_resume_position(output_dir)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Trainer's, and in a `save_only_model` checkpoint (one that TRL wrote its position to) PODS's resume
        position: Trainer saves no RNG state there, and resumes from it all the same."""
        super().save_model(output_dir, _internal_call)
        if self.args.save_only_model and output_dir and os.path.isfile(os.path.join(output_dir, ROLLOUT_STATE)):
            self._write_resume_position(output_dir)

    def _write_resume_position(self, output_dir: str) -> None:
        """PODS's resume position in the checkpoint's `rollout_state.json`, which TRL wrote first: the first prompt
        neither trained nor dropped (by the worker, or as stale by TRL's queue: `StaleGroupWatch`), and the prompts
        trained before it (`groups_trained`)."""
        if not (self.accelerator.is_main_process and isinstance(self.rollout_worker, PODSRolloutWorker)):
            return
        self._receive_dropped_groups()
        first_open, trained = resume_position(self._trained_groups, self._dropped_groups | self.rollout_queue.groups)
        path = os.path.join(output_dir, ROLLOUT_STATE)
        with open(path) as f:
            rollout_state = json.load(f)
        rollout_state["prompt_index"] = self.rollout_worker._loop_kwargs["dataset_start_index"] + first_open
        rollout_state["groups_trained"] = self._groups_before_resume + trained
        with open(path, "w") as f:
            json.dump(rollout_state, f)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        """Trainer's RNG state, then the count of trained prompts an epoch-driven run resumes from. TRL takes it to be
        the checkpoint's `prompt_index`, which with PODS counts dropped prompts too. Trainer restores the RNG state
        once before the first step of a resumed run, after TRL read `rollout_state.json`; a checkpoint of TRL's own
        trainer has no `groups_trained` and keeps TRL's count."""
        super()._load_rng_state(checkpoint)
        if checkpoint is None or not isinstance(self.rollout_worker, PODSRolloutWorker):
            return
        path = os.path.join(checkpoint, ROLLOUT_STATE)
        if os.path.isfile(path):
            with open(path) as f:
                self._groups_before_resume = json.load(f).get("groups_trained", self._groups_before_resume)

"""PODS in TRL's asynchronous trainer, without a server: the config, the selection rule, the worker's seams (TRL's
own rollout loop, fed a scripted engine or hand-made rollouts; tests/async_worker.py) and the CPU attention. The
generation modes in the worker are in tests/test_async_modes.py; the real-server runs in
tests/test_async_grpo_vllm.py."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import inspect
import itertools
import json
import queue
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from async_worker import (
    ScriptedEngine,
    ScriptedTRLLoop,
    first_token_reward,
    pods_loop,
    prompts,
    pushed_metrics,
    reports,
    rollout_loop,
    run_until,
)
from datasets import Dataset
from trl.experimental.async_grpo import async_rollout_worker
from trl.experimental.async_grpo.async_rollout_worker import (
    RolloutGroup,
    RolloutSample,
    TrainingSequence,
    _AsyncRolloutLoop,
)
from vllm_real import async_tokenizer

from trl_pods.advantages import population_group_advantages
from trl_pods.async_cpu import use_async_trainer_on_cpu, varlen_attention
from trl_pods.async_grpo import (
    ROLLOUT_STATE,
    PODSAsyncGRPOConfig,
    PODSAsyncGRPOTrainer,
    PODSRolloutLoop,
    resume_position,
    select_rollouts,
)
from trl_pods.down_sampling import get_down_sampler
from trl_pods.generation_modes import GENERATION_MODES
from trl_pods.streaming import StreamGroup, WindowResult
from trl_pods.waves import FixedMode


class DrawingMode(FixedMode):
    """A mode that draws further prompts into its generation (as the synchronous refill does)."""

    draws = True


def test_config_counts_kept_rows_and_refuses_what_the_worker_cannot_do(tmp_path, monkeypatch):
    """`pods_m` is the group size the trainer sees (num_generations), N defaults to 4M; every built-in mode is
    accepted with the synchronous trainer's checks of its settings, and a window of prompts that defaults to 8 for
    budgeted and screened and to one prompt otherwise; a mode that draws prompts, greedy sampling and unknown rules
    are refused with what to change."""
    config = PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, use_cpu=True)
    assert (config.pods_n, config.pods_m, config.num_generations, config.pods_window) == (8, 2, 2, 1)
    adaptive = PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_generation="adaptive", use_cpu=True)
    assert (adaptive.pods_n_initial, adaptive.pods_window) == (2, 1)
    screened = PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_generation="screened", use_cpu=True)
    assert (screened.pods_n_initial, screened.pods_window, screened.pods_screen_ratio) == (2, 8, 2)
    budgeted = PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_generation="budgeted", pods_budget=3, use_cpu=True)
    assert budgeted.pods_window == 8
    refused = {
        "disagree": dict(num_generations=4),
        "between pods_m": dict(pods_generation="adaptive", pods_n_initial=1),
        "needs pods_budget": dict(pods_generation="budgeted"),
        "only applies to": dict(pods_n_initial=4),
        "pods_window counts prompts": dict(pods_generation="screened", pods_window=0),
        "pods_screen_ratio counts prompts": dict(pods_generation="screened", pods_screen_ratio=1),
        "frontier": dict(pods_generation="screened", pods_screen_rule="nope"),
        "greedy": dict(temperature=0.0),
        "max_variance": dict(pods_down_sampler="nope"),
        "pods_advantage_scope": dict(pods_advantage_scope="some"),
    }
    for message, settings in refused.items():
        with pytest.raises(ValueError, match=message):
            PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, use_cpu=True, **settings)
    monkeypatch.setitem(GENERATION_MODES, "drawing", DrawingMode)
    with pytest.raises(ValueError, match="draws further prompts"):
        PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_generation="drawing", use_cpu=True)


def test_select_rollouts_keeps_the_max_variance_subset_with_trls_async_advantages():
    """The kept M have the largest variance of any M; their advantages are TRL's asynchronous normalisation over the
    kept rewards ("kept") or over all N ("all"), rollouts not generated (NaN after the others) left out."""
    rewards = torch.tensor([[0.0, 3.0, 1.0, 0.5, 2.0, 3.0], [1.0, 2.0, 5.0, *[torch.nan] * 3]], dtype=torch.float64)
    selection = select_rollouts(rewards, 3, get_down_sampler("max_variance"), "kept")
    best = max(itertools.combinations(range(6), 3), key=lambda c: rewards[0, list(c)].var().item())
    assert torch.isclose(rewards[0, selection.kept[0]].var(), rewards[0, list(best)].var())
    assert selection.kept[1].tolist() == [0, 1, 2]
    kept = rewards.gather(1, selection.kept)
    assert torch.allclose(selection.advantages, population_group_advantages(kept))
    everything = select_rollouts(rewards, 2, get_down_sampler("max_variance"), "all")
    assert torch.allclose(everything.advantages, population_group_advantages(rewards).gather(1, everything.kept))


def test_worker_with_n_equal_to_m_queues_exactly_what_trls_worker_queues(tiny_model_path):
    """pods_n == pods_m (fixed) is TRL's asynchronous GRPO: run by TRL's generate and score loops on the same
    scripted engine, TRL's loop (4 rollouts per group) and PODS's (one per work item, grouped back by prompt) queue
    the same rows of the same prompts, with the same advantages and policy versions."""
    tokenizer = async_tokenizer(tiny_model_path)

    def script(i: int, k: int, text: str) -> int:
        return 10 + (i * 7 + k * 3) % 5

    trl = rollout_loop(ScriptedTRLLoop, tokenizer, prompts(20), 4, script=script)
    trl_rows = run_until(trl, lambda: trl.rollout_buffer.qsize() >= 12)
    pods = pods_loop(tokenizer, prompts(20), pods_n=4, pods_m=4, script=script)
    pods_rows = run_until(pods, lambda: len(pods.windows) >= 3)

    def rows(queued: list) -> list:
        return sorted(
            (s.group_id, s.input_ids.tolist(), round(s.advantage, 12), s.model_version)
            for s in queued
            if s.group_id < 3
        )

    assert len(rows(pods_rows)) == 12 and rows(pods_rows) == rows(trl_rows)


def _rollout(token: int, work_id: int, forked: bool = False) -> RolloutGroup:
    """One generated rollout as TRL's generate loop hands it to `_score_group`: its work item's id, a completion that
    starts with ``token`` (its reward), and one row (two, ``forked``: a conversation that forked)."""
    rows = [TrainingSequence([5, 6, token, 7], [0, 0, 1, 1], [0.0, 0.0, -1.0, -2.0], "r") for _ in range(1 + forked)]
    return RolloutGroup(
        prompts=[[{"role": "user", "content": "prompt 0"}]],
        reward_kwargs={},
        completions=[[{"role": "assistant", "content": str(token)}]],
        completions_ids=[[token, 7]],
        completions_sequences=[rows],
        tool_call_counts=[0],
        tool_failure_counts=[0],
        model_version=0,
        group_id=work_id,
        env_rewards=[None],
        rollout_rewards=[None],
    )


def _rollouts(loop: _AsyncRolloutLoop, work, tokens: list[int], forked: int | None = None) -> list[RolloutGroup]:
    """The next prompt's rollouts, one per work item the loop's work iterator ``work`` yields (refill: a prompt's N
    come in a row), rollout ``i`` starting with ``tokens[i]``."""
    return [_rollout(token, next(work)[0], i == forked) for i, token in enumerate(tokens)]


POD = dict(pods_down_sampler="max_variance", pods_advantage_scope="kept")


def test_worker_keeps_m_of_n_whole_conversations_and_drops_groups_without_contrast(tiny_model_path):
    """N = 6, M = 2: the worker queues the two extreme rollouts (a forked conversation with both its rows), with
    advantages over the two and the prompt's id; with pods_generation="refill" a constant group queues nothing, is
    counted in the `pods/*` metrics, and its id reaches the trainer as a dropped group."""
    tokenizer = async_tokenizer(tiny_model_path)
    channel = reports()
    loop = pods_loop(tokenizer, prompts(4), channel, pods_n=6, pods_m=2, pods_generation="refill", **POD)
    work = loop._repeat_iterator()

    def score(rollouts: list[RolloutGroup]) -> list:
        return [row for rollout in rollouts for row in loop._loop.run_until_complete(loop._score_group(rollout))]

    try:
        samples = score(_rollouts(loop, work, [9, 2, 4, 30, 5, 6], forked=3))
        assert [s.input_ids[2] for s in samples] == [2, 30, 30] and {s.group_id for s in samples} == {0}
        assert [s.advantage for s in samples] == pytest.approx([-1.0, 1.0, 1.0])
        assert score(_rollouts(loop, work, [8] * 6)) == []
    finally:
        loop._loop.close()
        loop._tool_pool.shutdown()
    assert channel.receive() == {1}
    metrics = pushed_metrics(loop)
    assert sum(metrics["pods/groups_dropped_total"]) == 1 and sum(metrics["pods/rollouts_queued_total"]) == 2
    assert sum(metrics["pods/rollouts_generated_total"]) == 12
    assert metrics["pods/frac_zero_std_groups_all"] == [(0.0, 1), (1.0, 1)]
    assert metrics["pods/reward_mean_kept"] == [(32.0, 2)]


def test_short_groups_keep_every_scored_rollout_and_one_rollout_is_dropped(tiny_model_path):
    """A prompt can come back with fewer than pods_m scored rollouts: unscorable ones (a reward of None, a
    conversation with no trainable row) today, rollouts that failed or were cancelled once TRL scores short groups
    (huggingface/trl#7176). N = 6, M = 4: with 3 scored, all 3 are queued with advantages over the 3 (and counted as
    3 queued, not 4), as are the 3 of a group that came back with 3 rollouts; with 1 scored, a group-relative
    advantage cannot train it: the prompt queues nothing, is reported dropped (so the resume position passes it) and
    counted in `pods/groups_too_small_total`."""
    tokenizer = async_tokenizer(tiny_model_path)
    channel = reports()
    loop = pods_loop(tokenizer, prompts(4), channel, pods_n=6, pods_m=4, **POD)
    work = loop._repeat_iterator()

    def score(tokens: list[int | None]) -> list:
        """Score the next prompt's rollouts; ``None``: a rollout with no trainable row (its reward is NaN)."""
        rollouts = []
        for token in tokens:
            rollout = _rollout(token or 1, next(work)[0])
            if token is None:
                rollout.completions_sequences[0].clear()
            rollouts.append(rollout)
        return [row for rollout in rollouts for row in loop._loop.run_until_complete(loop._score_group(rollout))]

    try:
        samples = score([9, None, 2, None, 4, None])
        assert sorted(s.input_ids[2] for s in samples) == [2, 4, 9]
        kept = torch.tensor([9.0, 2.0, 4.0], dtype=torch.float64)
        expected = population_group_advantages(kept.unsqueeze(0))[0].tolist()
        assert [s.advantage for s in samples] == pytest.approx(expected)
        assert score([None, 7, None, None, None, None]) == []
        lost = torch.tensor([1.0, 0.0, 3.0, *[torch.nan] * 3], dtype=torch.float64)  # 3 of 6 came back
        short = StreamGroup(2, lost, [[_rollout_row(2, 0)] for _ in range(3)], trained=True)
        assert [s.advantage for s in loop._queue(WindowResult([short], {}))] == pytest.approx(
            population_group_advantages(lost[:3].unsqueeze(0))[0].tolist()
        )
    finally:
        loop._loop.close()
        loop._tool_pool.shutdown()
    assert channel.receive() == {1}
    metrics = pushed_metrics(loop)
    assert sum(metrics["pods/rollouts_queued_total"]) == 6 and sum(metrics["pods/groups_too_small_total"]) == 1
    assert sum(metrics["pods/groups_dropped_total"]) == 1


class RowIndexTRLLoop(_AsyncRolloutLoop):
    """TRL's loop as huggingface/trl#7176 changes its work iterator: ``(group id, row index, row)``, the row index
    counting a group's rollouts (here always 0: the PODS loop's groups are one rollout each)."""

    def _repeat_iterator(self):
        return ((group, 0, row) for group, row in super()._repeat_iterator())


class RowIndexPODSLoop(ScriptedEngine, PODSRolloutLoop, RowIndexTRLLoop):
    """The PODS loop on top of `RowIndexTRLLoop` (its ``super()`` is #7176's loop)."""


def test_work_items_keep_the_shape_of_trls_work_iterator(tiny_model_path):
    """PODS's work iterator hands TRL's generate loop what TRL's own iterator yields: ``(work id, row)`` from TRL
    1.16's, and ``(work id, row index, row)`` once TRL's iterator yields a row index (huggingface/trl#7176), the
    work ids and rows unchanged; so the day TRL merges #7176 the seam needs no rewrite."""
    tokenizer = async_tokenizer(tiny_model_path)
    plain = pods_loop(tokenizer, prompts(4), pods_n=2, pods_m=2)
    first = list(itertools.islice(plain._repeat_iterator(), 4))
    indexed = pods_loop(tokenizer, prompts(4), pods_n=2, pods_m=2, loop_class=RowIndexPODSLoop)
    try:
        assert [len(item) for item in first] == [2] * 4
        assert list(itertools.islice(indexed._repeat_iterator(), 4)) == [(i, 0, row) for i, row in first]
    finally:
        for loop in (plain, indexed):
            loop._loop.close()
            loop._tool_pool.shutdown()


def test_dropped_groups_reach_the_trainer_past_full_queues(tiny_model_path):
    """TRL's score loop (`_score_loop`: score, push metrics, queue the kept rows) with PODS's drops, its metrics queue
    full throughout, and a report channel with room for one report: a report the channel refused is superseded by the
    next one sent, so the trainer's resume position catches up with every drop instead of stopping at the first lost
    one; it never passes a group neither trained nor dropped; a report repeats only the drops the trainer has not
    confirmed."""
    tokenizer = async_tokenizer(tiny_model_path)
    metrics = queue.Queue(maxsize=1)
    metrics.put({"filled": 1.0})
    channel = reports(maxsize=1)
    loop = pods_loop(tokenizer, prompts(8), channel, pods_n=4, pods_m=2, pods_generation="refill", metrics=metrics,
                     score_queue_maxsize=64)  # fmt: skip
    work = loop._repeat_iterator()
    constant, contrast = [5, 5, 5, 5], [1, 2, 3, 4]

    def score(*groups: list[int]) -> list[int]:
        """Run TRL's score loop over the next prompts' rollouts (their rewards); the ids of the prompts it queued."""
        for rewards in groups:
            for rollout in _rollouts(loop, work, rewards):
                loop._groups_to_score.put_nowait(rollout)
        loop._groups_to_score.put_nowait(None)
        loop._loop.run_until_complete(loop._score_loop(asyncio.Event()))
        return sorted({loop.rollout_buffer.get_nowait().group_id for _ in range(loop.rollout_buffer.qsize())})

    trained, dropped = set(), set()
    try:
        trained.update(score(constant, constant, contrast, constant))
        dropped |= channel.receive()
        assert (trained, dropped) == ({2}, {0}), "the channel had room for the first report only"
        assert resume_position(trained, dropped) == (1, 0), "behind, but never past group 1 (dropped, not known)"
        trained.update(score(contrast, constant))
        dropped |= channel.receive()
        assert dropped == {0, 1, 3}, "the first report sent after the trainer read repeats the refused drops"
        assert resume_position(trained, dropped) == (5, 2)
        trained.update(score(contrast))
        assert channel._reports.queue[0] == (4, (5,)), "only the drop the trainer has not confirmed is repeated"
        dropped |= channel.receive()
        assert resume_position(trained, dropped) == (7, 3)
        assert list(metrics.queue) == [{"filled": 1.0}], "every metrics push was lost"
    finally:
        loop._loop.close()
        loop._tool_pool.shutdown()


class NoWeightTransfer:
    """No server here: TRL's trainer probes none when given a weight transfer of its own."""

    def init_weight_transfer(self) -> None:
        pass

    def destroy(self) -> None:
        pass


def _rollout_row(group: int, version: int) -> RolloutSample:
    return RolloutSample(
        prompt=[], completion=[], input_ids=np.array([1, 2, 3, 4]), completion_mask=np.array([0, 0, 1, 1]),
        old_log_probs=np.zeros(4), advantage=1.0, model_version=version, group_id=group, metrics={"reward": 1.0},
    )  # fmt: skip


STALE = (0, 2)  # groups whose rows are 5 versions old when taken, with max_staleness 1


def _cpu_async_trainer(
    patch: pytest.MonkeyPatch, model: Path, output_dir: Path, **trainer_args
) -> PODSAsyncGRPOTrainer:
    """A `PODSAsyncGRPOTrainer` of the tiny model on 8 prompts, PODS 4 -> 2, its worker built but not started (no
    vLLM, no server), with TRL's trainer patched for the CPU through ``patch``."""
    patch.setattr(async_rollout_worker, "is_vllm_available", lambda: True)  # needed only once it starts
    patch.setattr(async_rollout_worker, "is_aiohttp_available", lambda: True)
    use_async_trainer_on_cpu(patch.setattr)
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"prompt {i}"}] for i in range(8)]})
    config = PODSAsyncGRPOConfig(
        str(output_dir), pods_n=4, pods_m=2, use_cpu=True, max_steps=2, report_to=[], save_only_model=True,
        token_budget=0, per_device_train_batch_size=2, max_staleness=1,
    )  # fmt: skip
    return PODSAsyncGRPOTrainer(
        str(model), first_token_reward, config, data, processing_class=async_tokenizer(model),
        weight_transfer=NoWeightTransfer(), **trainer_args,
    )  # fmt: skip


@pytest.fixture(scope="module")
def consumed(tiny_model_path, tmp_path_factory):
    """A `PODSAsyncGRPOTrainer` (save_only_model, its worker built but not started: no vLLM, no server) whose
    rollout queue holds 2 rows of each of groups 0-6, groups 0 and 2 of policy version 0, the others of version 5,
    the trainer's. TRL's own data loader (its `RolloutQueueDataset`, batcher, collator and accelerate's dispatcher)
    takes two micro-batches: it discards groups 0 and 2 as stale and collates 1, 3 and, one micro-batch ahead, 4."""
    with pytest.MonkeyPatch.context() as patch:
        trainer = _cpu_async_trainer(patch, tiny_model_path, tmp_path_factory.mktemp("async-run"))
        for group in range(7):
            for _ in range(2):
                trainer.rollout_worker.rollout_buffer.put(_rollout_row(group, 0 if group in STALE else 5))
        trainer.model_version = 5
        batches = iter(trainer.get_train_dataloader())
        next(batches), next(batches)
        yield trainer


def test_a_group_discarded_as_stale_does_not_pin_the_resume_position(consumed, tmp_path):
    """TRL's queue discards a row more than `max_staleness` versions old, and PODS stamps all of a prompt's rows with
    its oldest rollout's version, so a whole group can go: neither trained nor reported dropped, it pinned every later
    checkpoint's resume position at it (here group 0). The trainer now notes the groups TRL discards as stale, and the
    position passes them: groups 0-4 were each trained or discarded, 3 of them trained."""
    (tmp_path / ROLLOUT_STATE).write_text(json.dumps({"prompt_index": 0, "model_version": 5}))  # TRL's, first
    consumed._save_rng_state(str(tmp_path))
    state = json.loads((tmp_path / ROLLOUT_STATE).read_text())
    assert (state["prompt_index"], state["groups_trained"]) == (5, 3)
    assert consumed._trained_groups == {1, 3, 4} and consumed.rollout_queue.groups == set(STALE)


def test_a_save_only_model_checkpoint_holds_the_pods_resume_position(consumed):
    """Transformers resumes a `save_only_model` checkpoint (the docs said it could not), but saves no RNG state in it,
    where PODS wrote its resume position: such a checkpoint held TRL's position, the first untrained prompt (here 0,
    discarded as stale) and no count of trained prompts. It now holds PODS's."""
    consumed._save_checkpoint(consumed.model, None)
    checkpoint = Path(consumed.args.output_dir) / "checkpoint-0"
    assert not (checkpoint / "rng_state.pth").exists() and (checkpoint / "model.safetensors").exists()
    state = json.loads((checkpoint / ROLLOUT_STATE).read_text())
    assert (state["prompt_index"], state["groups_trained"]) == (5, 3)


def test_an_injected_pods_worker_checkpoints_with_the_pods_resume_position(consumed, tiny_model_path, tmp_path):
    """A `PODSRolloutWorker` passed as ``rollout_worker`` crashed the first checkpoint (`'Queue' object has no
    attribute 'groups'`): only the worker the trainer built had its queue watched for stale groups. Any PODS worker's
    queue is watched now, and its checkpoint holds PODS's resume position."""
    with pytest.MonkeyPatch.context() as patch:
        injected = consumed._pods_worker(consumed.rollout_worker)
        trainer = _cpu_async_trainer(patch, tiny_model_path, tmp_path / "run", rollout_worker=injected)
        assert trainer.rollout_worker is injected
        trainer._trained_groups.update({0, 1})
        (tmp_path / ROLLOUT_STATE).write_text(json.dumps({"prompt_index": 0, "model_version": 0}))  # TRL's, first
        trainer._save_rng_state(str(tmp_path))
    state = json.loads((tmp_path / ROLLOUT_STATE).read_text())
    assert (state["prompt_index"], state["groups_trained"]) == (2, 2)


def test_a_dropped_prompt_is_not_an_untrained_one_and_is_not_counted_trained(consumed, tmp_path):
    """TRL's fix of the stale-drop resume bug (huggingface/trl#7294, for #7274, which PODS had too) rests on one rule:
    a dropped prompt is not an untrained one (the resume position passes it), and it is not a trained one either (a
    separate count of trained prompts, which an epoch-driven run resumes from; an older checkpoint without the count
    keeps TRL's). PODS keeps the same rule, for its worker's drops as for TRL's stale ones: 0 discarded as stale, 2
    dropped by the worker, 1 and 3 trained, 4 still out: resume at 4 with 2 trained; 5, trained above it, is trained
    again after the resume and counted then."""
    assert resume_position(trained={1, 3, 5}, dropped={0, 2}) == (4, 2)
    assert resume_position(trained={1, 3, 5}, dropped=set()) == (0, 0), "TRL 1.16's rule without the drops"
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    for saved, resumed in ((dict(groups_trained=2), 2), ({}, 4)):
        (checkpoint / ROLLOUT_STATE).write_text(json.dumps({"prompt_index": 4, "model_version": 1, **saved}))
        consumed._groups_before_resume = 4  # as TRL's `_inner_training_loop` sets it: the checkpoint's prompt_index
        consumed._load_rng_state(str(checkpoint))
        assert consumed._groups_before_resume == resumed


def test_varlen_attention_equals_causal_attention_of_each_sample():
    """TRL's tree layout of two samples sharing a 3-token prefix (segments: the prefix, each tail; each segment's
    keys: its root-to-segment path): the CPU kernel gives every token what plain causal attention over its own
    sample gives it, with grouped-query heads (4 query heads, 2 key/value heads)."""
    torch.manual_seed(0)
    prefix, tails = 3, (2, 4)
    length = prefix + sum(tails)
    q, k, v = torch.randn(length, 4, 8), torch.randn(length, 2, 8), torch.randn(length, 2, 8)
    paths = [list(range(3)), list(range(3)) + [3, 4], list(range(3)) + [5, 6, 7, 8]]
    kv_index = torch.tensor(list(itertools.chain(*paths)))
    cu_q = torch.tensor([0, 3, 5, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 8, 15], dtype=torch.int32)
    out = varlen_attention(q, k.index_select(0, kv_index), v.index_select(0, kv_index), cu_q, cu_k, 4, 7)
    for path in paths[1:]:
        index = torch.tensor(path)
        qs, ks, vs = (x[index].transpose(0, 1) for x in (q, k, v))  # [H, L, D]
        reference = torch.nn.functional.scaled_dot_product_attention(
            qs, ks.repeat_interleave(2, 0), vs.repeat_interleave(2, 0), is_causal=True
        )
        assert torch.allclose(out[index], reference.transpose(0, 1), atol=1e-6)


ROOT = Path(__file__).parent.parent
ASYNC_RECIPES = sorted((ROOT / "recipes" / "async").glob("*.yaml"))


def _header_commands(recipe: Path) -> list[list[str]]:
    """The commands of a recipe header (`#   ` lines, backslash continuations joined), as argument lists."""
    header = recipe.read_text().split("\n\n", 1)[0]
    lines = [line[1:].strip() for line in header.splitlines() if line.startswith("#   ")]
    commands, current = [], ""
    for line in lines:
        current += " " + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            commands.append(shlex.split(current))
            current = ""
    return commands


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = dict(word.split("=", 1) for word in itertools.takewhile(lambda w: re.fullmatch(r"[A-Z_]+=\S*", w), words))
    return env, words[len(env) :]


@pytest.mark.parametrize("recipe", ASYNC_RECIPES, ids=lambda p: p.stem)
def test_async_recipe_server_and_training_commands_fit_together(recipe, tmp_path, monkeypatch):
    """The header's `vllm serve` has what TRL's asynchronous trainer needs (dev mode, runtime LoRA, room for
    max_staleness + 2 adapters of the recipe's rank, the recipe's dtype and port, the context for prompt and
    completion); its GPUs and the training processes' GPUs are disjoint; the training command parses into a
    `PODSAsyncGRPOConfig` through the launch script."""
    from trl import TrlParser
    from trl.experimental.async_grpo.async_grpo_trainer import round_lora_rank

    (serve_env, serve), (train_env, train) = (_split_env(words) for words in _header_commands(recipe))
    assert serve[:2] == ["vllm", "serve"] and train[:2] == ["accelerate", "launch"]
    script = train[train.index("--num_processes") + 2]
    spec = importlib.util.spec_from_file_location("train_pods_async", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    parser = TrlParser((module.ScriptArguments, PODSAsyncGRPOConfig, module.ModelArguments))
    args = train[train.index(script) + 1 :]
    args[args.index("--config") + 1] = str(ROOT / args[args.index("--config") + 1])
    overrides = ["--use_cpu", "true", "--bf16", "false", "--output_dir", str(tmp_path)]
    _, config, model = parser.parse_args_and_config(args=[*args, *overrides])
    assert (ROOT / train[train.index("--config_file") + 1]).is_file()

    def flag(name: str) -> str:
        return serve[serve.index(name) + 1]

    assert serve[2] == model.model_name_or_path and flag("--dtype") == config.dtype
    assert serve_env["VLLM_SERVER_DEV_MODE"] == serve_env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    assert "--enable-lora" in serve and int(flag("--max-loras")) >= config.max_staleness + 2
    assert model.use_peft and int(flag("--max-lora-rank")) >= round_lora_rank(model.lora_r)
    assert flag("--logprobs-mode") == "processed_logprobs", "log-probs after temperature, as the trainer computes"
    assert int(flag("--max-model-len")) >= config.max_completion_length + 512
    assert config.vllm_server_base_url.endswith(f":{flag('--port')}")
    server_gpus, train_gpus = (set(env["CUDA_VISIBLE_DEVICES"].split(",")) for env in (serve_env, train_env))
    assert len(server_gpus) == int(flag("--data-parallel-size")) and not server_gpus & train_gpus
    assert len(train_gpus) == int(train[train.index("--num_processes") + 1])
    assert config.pods_n > config.pods_m and config.num_generations == config.pods_m


def _in_order(source: str, *parts: str) -> bool:
    """Whether ``source`` holds every one of ``parts``, in this order."""
    positions = [source.find(part) for part in parts]
    return -1 not in positions and positions == sorted(positions)


def test_trl_async_seams_that_pods_relies_on():
    """TRL 1.16's asynchronous trainer internals that PODS overrides or reads: if an upgrade moves one, this fails
    instead of PODS silently queuing every rollout or resuming at the wrong prompt. The worker class is a class
    attribute, handed to the spawned child with the loop's keyword arguments (only the latter test-pickled), and the
    loop receives the worker's extra keyword arguments; the generate loop draws its work from `_repeat_iterator`
    (``num_generations`` items per prompt) and hands a group to the score loop's `_score_group`, a coroutine of the
    group, once ``num_generations`` rollouts of its id are back; a group holds per-rollout lists (and keyword lists)
    and three scalars, which PODS joins; metrics go through `_counters` and `_rates`; the trainer builds TRL's worker
    itself, writes `rollout_state.json` before Trainer's checkpoint, reads it back into the worker's start and the
    epoch count, and looks up the attention kernel and the peak FLOPs by module-level name; its data loader takes
    rows from the trainer's `rollout_queue` and discards one more than `max_staleness` versions behind right after
    taking it. Trainer saves the RNG state before what completes a checkpoint (and the model before it, the only
    thing saved with `save_only_model`), and restores it once before the first step of a resumed run (TRL skips no
    data)."""
    from transformers import Trainer
    from trl.experimental.async_grpo import async_grpo_trainer, async_rollout_worker, packing
    from trl.experimental.async_grpo.async_grpo_trainer import AsyncGRPOTrainer
    from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

    assert AsyncRolloutWorker._loop_cls is _AsyncRolloutLoop
    worker_parameters = list(inspect.signature(AsyncRolloutWorker).parameters)
    assert worker_parameters == ["queue_maxsize", "child_ready_timeout", "loop_kwargs"]
    start = inspect.getsource(AsyncRolloutWorker.start)
    assert "pickle.dumps(self._loop_kwargs)" in start and _in_order(start, "self._loop_cls,", "self._loop_kwargs,")
    assert "rollout_loop = loop_cls(\n        **loop_kwargs," in inspect.getsource(async_rollout_worker._child_main)
    assert inspect.iscoroutinefunction(_AsyncRolloutLoop._score_group)
    assert list(inspect.signature(_AsyncRolloutLoop._score_group).parameters) == ["self", "group"]
    generate = inspect.getsource(_AsyncRolloutLoop._generate_loop)
    assert _in_order(generate, "work_iter = self._repeat_iterator()", "group_id, row = next(work_iter)")
    assert "if pending_completed[group_id] == self.num_generations:" in generate
    assert "samples = await self._score_group(group)" in inspect.getsource(_AsyncRolloutLoop._score_loop)
    repeat = inspect.getsource(_AsyncRolloutLoop._repeat_iterator)
    assert _in_order(repeat, "for _ in range(self.num_generations):", "yield group_id, row", "group_id += 1")
    per_rollout = {"prompts", "completions", "completions_ids", "completions_sequences", "tool_call_counts"}
    per_rollout |= {"tool_failure_counts", "env_rewards", "rollout_rewards", "reward_kwargs"}
    per_group = {"model_version", "group_id", "queued_at"}
    assert {spec.name for spec in dataclasses.fields(RolloutGroup)} == per_rollout | per_group
    init = inspect.getsource(_AsyncRolloutLoop.__init__)
    assert "self._counters" in init and "self._rates" in init
    assert "self.rollout_worker = AsyncRolloutWorker(" in inspect.getsource(AsyncGRPOTrainer.__init__)
    save = inspect.getsource(AsyncGRPOTrainer._save_checkpoint)
    assert _in_order(save, "first_untrained = next(", '"rollout_state.json"', "super()._save_checkpoint(")
    resume = inspect.getsource(AsyncGRPOTrainer._inner_training_loop)
    assert _in_order(resume, '"dataset_start_index"] = rollout_state["prompt_index"]', "super()._inner_training_loop(")
    assert 'self._groups_before_resume = rollout_state["prompt_index"]' in resume
    epoch_stop = inspect.getsource(async_grpo_trainer._EpochStopCallback.on_step_end)
    assert "self._trainer._groups_before_resume + len(self._trainer._trained_groups)" in epoch_stop
    assert "self.args.ignore_data_skip = True" in inspect.getsource(AsyncGRPOTrainer.__init__)
    checkpoint = inspect.getsource(Trainer._save_checkpoint)
    completion = ("self.state.save_to_json(", "self._push_from_checkpoint(", "rotate_checkpoints(")
    assert _in_order(checkpoint, "self._save_rng_state(output_dir)", *completion)
    model_only = ("self.save_model(output_dir, _internal_call=True)", "if not self.args.save_only_model:")
    assert _in_order(checkpoint, *model_only, "self._save_rng_state(output_dir)")
    stale = inspect.getsource(async_grpo_trainer.RolloutQueueDataset.__iter__)
    taken = ("sample = self.queue.get(timeout=self.poll_interval_s)", "version = self.model_version_fn()")
    assert _in_order(stale, *taken, "if staleness > self.max_staleness:")
    loader = inspect.getsource(AsyncGRPOTrainer.get_train_dataloader)
    for argument in ("rollout_queue=self.rollout_queue,", "model_version_fn=lambda: self.model_version,"):
        assert argument in loader, argument
    assert "max_staleness=self.args.max_staleness," in loader
    epoch = inspect.getsource(Trainer._run_epoch)
    assert _in_order(
        epoch, "elif steps_trained_in_current_epoch == 0:", "self._load_rng_state(resume_from_checkpoint)"
    )
    assert "self._step_samples = 0.0" in inspect.getsource(AsyncGRPOTrainer._log_step_metrics)
    assert "_flash_attn().flash_attn_varlen_func(" in inspect.getsource(packing.tree_attention)
    assert "get_peak_flops_per_device(" in inspect.getsource(AsyncGRPOTrainer.__init__)
    assert hasattr(async_grpo_trainer, "get_peak_flops_per_device")


def test_docs_name_every_async_config_field():
    """docs/async.md documents every field PODSAsyncGRPOConfig adds to AsyncGRPOConfig or gives another default."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    trl_defaults = {f.name: f.default for f in dataclasses.fields(AsyncGRPOConfig)}
    page = (ROOT / "docs" / "async.md").read_text()
    fields = [
        f.name
        for f in dataclasses.fields(PODSAsyncGRPOConfig)
        if f.name not in trl_defaults or trl_defaults[f.name] != f.default
    ]
    assert fields and [name for name in fields if f"| `{name}` |" not in page] == []

"""PODS in TRL's asynchronous trainer, without a server: the config, the selection rule, the worker's scoring seam
(TRL's own rollout loop, fed hand-made groups) and the CPU attention. The real-server runs are in
tests/test_async_grpo_vllm.py."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import multiprocessing
import queue
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate.state import PartialState
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, TrainingSequence, _AsyncRolloutLoop
from vllm_real import async_tokenizer

from trl_pods.advantages import population_group_advantages
from trl_pods.async_cpu import varlen_attention
from trl_pods.async_grpo import (
    DroppedGroupReports,
    PODSAsyncGRPOConfig,
    PODSRolloutLoop,
    resume_position,
    select_rollouts,
)
from trl_pods.down_sampling import get_down_sampler


def test_config_counts_kept_rows_and_refuses_what_the_worker_cannot_do(tmp_path):
    """`pods_m` is the group size the trainer sees (num_generations), N defaults to 4M; modes the asynchronous
    worker does not have, greedy sampling and unknown rules are refused with what to change."""
    config = PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, use_cpu=True)
    assert (config.pods_n, config.pods_m, config.num_generations) == (8, 2, 2)
    with pytest.raises(ValueError, match="disagree"):
        PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, num_generations=4, use_cpu=True)
    with pytest.raises(ValueError, match="PODSGRPOTrainer"):
        PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_generation="adaptive", use_cpu=True)
    with pytest.raises(ValueError, match="greedy"):
        PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, temperature=0.0, use_cpu=True)
    with pytest.raises(ValueError, match="max_variance"):
        PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_down_sampler="nope", use_cpu=True)
    with pytest.raises(ValueError, match="pods_advantage_scope"):
        PODSAsyncGRPOConfig(str(tmp_path), pods_m=2, pods_advantage_scope="some", use_cpu=True)


def test_select_rollouts_keeps_the_max_variance_subset_with_trls_async_advantages():
    """The kept M have the largest variance of any M; their advantages are TRL's asynchronous normalisation over the
    kept rewards ("kept") or over all N ("all"); contrast marks groups whose rewards are not all equal."""
    rewards = torch.tensor([[0.0, 3.0, 1.0, 0.5, 2.0, 3.0], [1.0] * 6], dtype=torch.float64)
    selection = select_rollouts(rewards, 3, get_down_sampler("max_variance"), "kept")
    best = max(itertools.combinations(range(6), 3), key=lambda c: rewards[0, list(c)].var().item())
    assert torch.isclose(rewards[0, selection.kept[0]].var(), rewards[0, list(best)].var())
    kept = rewards.gather(1, selection.kept)
    assert torch.allclose(selection.advantages, population_group_advantages(kept))
    everything = select_rollouts(rewards, 3, get_down_sampler("max_variance"), "all")
    assert torch.allclose(everything.advantages, population_group_advantages(rewards).gather(1, everything.kept))
    assert selection.contrast.tolist() == [True, False]


def first_token_reward(completion_ids, **kwargs) -> list[float]:
    """The first completion token's id, so a test chooses each rollout's reward."""
    return [float(ids[0]) for ids in completion_ids]


def _loop(cls, tokenizer, n: int, metrics: queue.Queue | None = None, **pods) -> _AsyncRolloutLoop:
    """TRL's rollout loop (or a subclass), in this process: a plain queue for the rollouts and one for the metrics,
    and nothing to generate with (the tests hand it generated groups). Accelerate's state is set up first, as TRL's
    child process does: the loop logs through accelerate."""
    PartialState()
    return cls(
        model_name="tiny",
        dataset=[],
        reward_funcs=[first_token_reward],
        processing_class=tokenizer,
        eos_token_ids=[tokenizer.eos_token_id],
        rollout_buffer=queue.Queue(),
        model_version_value=None,
        heartbeat_value=SimpleNamespace(value=0.0),
        failed_event=None,
        exception_info_queue=None,
        metrics_queue=queue.Queue() if metrics is None else metrics,
        num_generations=n,
        max_inflight_tasks=1,
        **pods,
    )


def _reports(maxsize: int = 0) -> DroppedGroupReports:
    """The worker-to-trainer report channel, both ends in this process: a plain queue, a real shared integer."""
    return DroppedGroupReports(queue.Queue(maxsize=maxsize), multiprocessing.get_context("spawn").Value("q", 0))


def _group(rewards: list[int], group_id: int = 0, forked: int | None = None) -> RolloutGroup:
    """A scored-to-be group whose rollout ``i`` starts with token ``rewards[i]``; rollout ``forked`` has two rows."""
    n = len(rewards)
    sequences = []
    for i, token in enumerate(rewards):
        rows = 2 if i == forked else 1
        sequences.append(
            [TrainingSequence([5, 6, token, 7], [0, 0, 1, 1], [0.0, 0.0, -1.0, -2.0], f"r{i}") for _ in range(rows)]
        )
    return RolloutGroup(
        prompts=[[{"role": "user", "content": "q"}]] * n,
        reward_kwargs={},
        completions=[[{"role": "assistant", "content": str(r)}] for r in rewards],
        completions_ids=[[token, 7] for token in rewards],
        completions_sequences=sequences,
        tool_call_counts=[0] * n,
        tool_failure_counts=[0] * n,
        model_version=0,
        group_id=group_id,
        env_rewards=[None] * n,
        rollout_rewards=[None] * n,
    )


def _score(loop: _AsyncRolloutLoop, group: RolloutGroup) -> list:
    try:
        return loop._loop.run_until_complete(loop._score_group(group))
    finally:
        loop._loop.close()
        loop._tool_pool.shutdown()


POD = dict(pods_down_sampler="max_variance", pods_advantage_scope="kept", pods_seed=0)


def test_worker_with_n_equal_to_m_queues_exactly_what_trls_worker_queues(tiny_model_path):
    """pods_n == pods_m is TRL's asynchronous GRPO: the same rows with the same advantages."""
    tokenizer = async_tokenizer(tiny_model_path)
    rewards = [3, 1, 4, 1]
    trl = _score(_loop(_AsyncRolloutLoop, tokenizer, 4), _group(rewards))
    pods = _loop(PODSRolloutLoop, tokenizer, 4, pods_m=4, pods_generation="fixed", dropped_groups=_reports(), **POD)
    pods = _score(pods, _group(rewards))
    assert [s.advantage for s in pods] == pytest.approx([s.advantage for s in trl], abs=1e-12)
    assert [s.input_ids.tolist() for s in pods] == [s.input_ids.tolist() for s in trl]


def test_worker_keeps_m_of_n_whole_conversations_and_drops_groups_without_contrast(tiny_model_path):
    """N = 6, M = 2: the worker queues the two extreme rollouts (a forked conversation with both its rows), with
    advantages over the two; with pods_generation="refill" a constant group queues nothing, is counted in the `pods/*`
    metrics, and its id reaches the trainer as a dropped group."""
    tokenizer = async_tokenizer(tiny_model_path)
    reports = _reports()
    loop = _loop(PODSRolloutLoop, tokenizer, 6, pods_m=2, pods_generation="refill", dropped_groups=reports, **POD)
    samples = loop._loop.run_until_complete(loop._score_group(_group([9, 2, 4, 30, 5, 6], forked=3)))
    assert [s.input_ids[2] for s in samples] == [2, 30, 30]
    assert [s.advantage for s in samples] == pytest.approx([-1.0, 1.0, 1.0])
    assert _score(loop, _group([8] * 6, group_id=1)) == []
    assert reports.receive() == {1}
    loop._push_metrics({})
    payload = loop._metrics_queue.get_nowait()
    assert payload["pods/groups_dropped_total"] == 1 and payload["pods/rollouts_queued_total"] == 2
    assert payload["pods/rollouts_generated_total"] == 12
    assert payload["pods/frac_zero_std_groups_all"] == (1.0, 2)
    assert payload["pods/reward_mean_kept"] == (32.0, 2)


def test_dropped_groups_reach_the_trainer_past_full_queues(tiny_model_path):
    """TRL's score loop (`_score_loop`: score, push metrics, queue the kept rows) with PODS's drops, its metrics queue
    full throughout, and a report channel with room for one report: a report the channel refused is superseded by the
    next one sent, so the trainer's resume position catches up with every drop instead of stopping at the first lost
    one; it never passes a group neither trained nor dropped; a report repeats only the drops the trainer has not
    confirmed."""
    tokenizer = async_tokenizer(tiny_model_path)
    metrics = queue.Queue(maxsize=1)
    metrics.put({"filled": 1.0})
    reports = _reports(maxsize=1)
    loop = _loop(
        PODSRolloutLoop, tokenizer, 4, metrics, pods_m=2, pods_generation="refill", dropped_groups=reports, **POD
    )
    constant, contrast = [5, 5, 5, 5], [1, 2, 3, 4]

    def score(*groups: tuple[int, list[int]]) -> list[int]:
        """Run TRL's score loop over these (group id, rewards); the ids of the groups it queued rows of."""
        for group_id, rewards in groups:
            loop._groups_to_score.put_nowait(_group(rewards, group_id=group_id))
        loop._groups_to_score.put_nowait(None)
        loop._loop.run_until_complete(loop._score_loop(asyncio.Event()))
        return sorted({loop.rollout_buffer.get_nowait().group_id for _ in range(loop.rollout_buffer.qsize())})

    trained, dropped = set(), set()
    try:
        trained.update(score((0, constant), (1, constant), (2, contrast), (3, constant)))
        dropped |= reports.receive()
        assert (trained, dropped) == ({2}, {0}), "the channel had room for the first report only"
        assert resume_position(trained, dropped) == (1, 0), "behind, but never past group 1 (dropped, not known)"
        trained.update(score((4, contrast), (5, constant)))
        dropped |= reports.receive()
        assert dropped == {0, 1, 3}, "the first report sent after the trainer read repeats the refused drops"
        assert resume_position(trained, dropped) == (5, 2)
        trained.update(score((6, contrast)))
        assert reports._reports.queue[0] == (4, (5,)), "only the drop the trainer has not confirmed is repeated"
        dropped |= reports.receive()
        assert resume_position(trained, dropped) == (7, 3)
        assert list(metrics.queue) == [{"filled": 1.0}], "every metrics push was lost"
    finally:
        loop._loop.close()
        loop._tool_pool.shutdown()


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
    loop receives the worker's extra keyword arguments; `_score_group` is a coroutine of the group; metrics go through
    `_counters` and `_rates`; the trainer builds TRL's worker itself, writes `rollout_state.json` before Trainer's
    checkpoint, reads it back into the worker's start and the epoch count, and looks up the attention kernel and the
    peak FLOPs by module-level name. Trainer saves the RNG state before what completes a checkpoint, and restores it
    once before the first step of a resumed run (TRL skips no data)."""
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
    import dataclasses

    from trl.experimental.async_grpo import AsyncGRPOConfig

    trl_defaults = {f.name: f.default for f in dataclasses.fields(AsyncGRPOConfig)}
    page = (ROOT / "docs" / "async.md").read_text()
    fields = [
        f.name
        for f in dataclasses.fields(PODSAsyncGRPOConfig)
        if f.name not in trl_defaults or trl_defaults[f.name] != f.default
    ]
    assert fields and [name for name in fields if f"| `{name}` |" not in page] == []

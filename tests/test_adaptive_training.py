"""Adaptive over-generation end to end on the tiny model (1 process): waves with HF generate (chunked too) and both
vLLM modes through the stand-in, rollouts scored once, selection inside what was generated, metrics, the selection
log, the all-rollouts completions table and same-seed determinism."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
import torch
from helpers import constant_for_even_prompts, load, pods_config, prompts_dataset, record_generate_sizes
from test_trainer import SpyTrainer
from vllm_standin import FakeVLLMGeneration, install

from trl_pods import PODSGRPOTrainer, register_down_sampler
from trl_pods.adaptive import generated_slots

N, M, N_INITIAL = 8, 2, 2  # waves of 2, 2 and 4 rollouts: counts 2 -> 4 -> 8
ROLES = ("easy", "late", "zero", "none")
EXPECTED_COUNT = {"easy": 2, "late": 8, "zero": 8, "none": 8}


def _prompt_index(prompt) -> int:
    return int(prompt[0]["content"].split()[2])  # "What is i plus i+1?"


class RoleReward:
    """A reward whose groups behave by prompt (index i % 4, one of each per generation of the 4-prompt data set):
    "easy" prompts always disagree (the rollout's slot plus a tenth of its token sum mod 7), "late" ones score 0 for
    their first 5 rollouts of a generation and 1 after (contrast only in the third wave), "zero" ones always 0 and
    "none" ones are unscorable (None). Logs each row's role with `log_extra`; records every row it scores."""

    __name__ = "role_reward"

    def __init__(self):
        self.calls: list[list[int]] = []
        self.seen: Counter = Counter()  # (step, prompt) -> rollouts scored in that generation

    def __call__(self, prompts, completion_ids, trainer_state, log_extra, **kwargs):
        indices = [_prompt_index(p) for p in prompts]
        self.calls.append(indices)
        rewards = []
        for i, ids in zip(indices, completion_ids, strict=True):
            role = ROLES[i % 4]
            slot = self.seen[trainer_state.global_step, i]
            self.seen[trainer_state.global_step, i] += 1
            rewards.append(
                {"easy": slot + (sum(ids) % 7) / 10, "late": float(slot >= 5), "zero": 0.0, "none": None}[role]
            )
        log_extra("role", [ROLES[i % 4] for i in indices])
        return rewards


def _train(model_path, out, reward, trainer_cls=SpyTrainer, max_steps=2, **options):
    model, tokenizer = load(model_path)
    config = pods_config(
        out,
        pods_n=N,
        pods_m=M,
        pods_generation="adaptive",
        pods_n_initial=N_INITIAL,
        per_device_train_batch_size=8,  # 4 prompts x 2 kept rows: every generation holds the 4 prompts
        max_steps=max_steps,
        **options,
    )
    trainer = trainer_cls(model, reward, config, train_dataset=prompts_dataset(4), processing_class=tokenizer)
    trainer.train()
    return trainer


def _check_waves(trainer: SpyTrainer, reward: RoleReward) -> None:
    """What every adaptive run must show, whatever the engine."""
    assert len(trainer.selections) == 2
    calls = iter(reward.calls)
    for phase1 in trainer.selections:
        group_prompts = [_prompt_index(row["prompt"]) for row in phase1["group_inputs"]]
        roles = [ROLES[i % 4] for i in group_prompts]
        counts = phase1["counts"].tolist()
        assert counts == [EXPECTED_COUNT[role] for role in roles]
        wave_1, wave_2, wave_3 = next(calls), next(calls), next(calls)
        assert Counter(wave_1) == {i: 2 for i in group_prompts}, "first wave: n_initial for every prompt"
        topped_up = {i: 2 for i, role in zip(group_prompts, roles, strict=True) if role != "easy"}
        assert Counter(wave_2) == topped_up, "second wave: +2 for groups without contrast only"
        assert Counter(wave_3) == {i: 4 for i in topped_up}, "third wave: +4 (8 in all); 'late' found contrast"
        filled = generated_slots(phase1["counts"], N)
        rewards = phase1["rewards"].cpu()
        assert not rewards[~filled].isfinite().any(), "unfilled slots are NaN"
        assert phase1["kept"].sum(1).tolist() == [M] * len(counts)
        assert not (phase1["kept"] & ~filled).any(), "a kept slot was never generated"
        for group, role in enumerate(roles):
            kept_rewards = rewards[group][phase1["kept"][group]]
            if role == "late":
                assert sorted(kept_rewards.tolist()) == [0.0, 1.0], "max variance keeps the contrast found late"
            if role == "none":
                assert kept_rewards.isnan().all()
    history = [e for e in trainer.state.log_history if "pods/waves" in e]
    assert [e["pods/waves"] for e in history] == [3.0, 3.0]
    assert [e["pods/rollouts_generated"] for e in history] == [sum(s["counts"].tolist()) for s in trainer.selections]
    assert all(e["pods/frac_groups_topped_up"] == 0.75 for e in history), "late, zero, none: 3 of 4 groups"
    assert all(e["pods/frac_topped_up_with_contrast"] == pytest.approx(1 / 3) for e in history), "late only"
    assert all(e["pods/rollouts_padding"] == 0.0 for e in history), "one process never pads"
    for entry, phase1 in zip(history, trainer.selections, strict=True):  # one entry per generation, not per wave
        lengths = torch.tensor([len(ids) for ids in phase1["generated_ids"]], dtype=torch.float)
        assert len(lengths) == sum(phase1["counts"].tolist())
        assert entry["completions/mean_length"] == pytest.approx(lengths.mean().item())
        assert (entry["completions/min_length"], entry["completions/max_length"]) == (lengths.min(), lengths.max())


class WaveSpy(SpyTrainer):
    """SpyTrainer that also keeps one input row per group and every generated completion of each generation."""

    def _generate_and_score(self, inputs, settings):
        rollouts = super()._generate_and_score(inputs, settings)
        self.generated_ids = [ids for ids in rollouts.generation[1] if ids is not None]
        return rollouts

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        phase1["group_inputs"] = inputs[:: self.pods_n]
        phase1["generated_ids"] = self.generated_ids
        return phase1


@pytest.mark.parametrize("chunk", [None, 4], ids=["one-call", "chunked"])
def test_hf_generate_tops_up_only_groups_without_contrast(tiny_model_path, tmp_path, monkeypatch, chunk):
    """HF generate: the first wave gives every prompt n_initial rollouts, later waves only the prompts whose scored
    rewards are all equal (None counts as no reward), doubling up to N; every rollout is scored exactly once, kept
    rows lie inside what was generated, max variance keeps the late contrast, and phase 2 trains on M per prompt.
    With pods_generation_chunk_size every generate call of every wave holds at most `chunk` sequences."""
    sizes = record_generate_sizes(monkeypatch)
    reward = RoleReward()
    trainer = _train(tiny_model_path, tmp_path, reward, WaveSpy, pods_generation_chunk_size=chunk)
    _check_waves(trainer, reward)
    if chunk is None:
        assert sizes == [8, 6, 12] * 2, "one call per wave: 4 x 2, 3 x 2, 3 x 4 rows"
    else:
        assert sizes == [4, 4, 4, 2, 4, 4, 4] * 2
    kept_per_pass = [rows for kind, rows in trainer.logp_passes if kind == "train"]
    assert sum(kept_per_pass) == 2 * 4 * M, "the update sees M rows per prompt"
    for phase1 in trainer.selections:  # kept rows carry their own completions: rewards recomputed from the tokens
        kept_rewards = phase1["rewards_per_func"][:, 0].tolist()
        for row, ids, value in zip(phase1["inputs"], phase1["generation"][1], kept_rewards, strict=True):
            if ROLES[_prompt_index(row["prompt"]) % 4] == "easy":
                assert round(value % 1 * 10) == sum(ids) % 7


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_waves(tiny_model_path, tmp_path, monkeypatch, mode):
    """vLLM (stand-in, TRL's real VLLMGeneration): each wave is one engine call (server: each waiting prompt once
    with n = the wave's size), and the importance-sampling ratio stays 1, so vLLM log-probs follow their rows
    through the slots."""
    install(monkeypatch)
    reward = RoleReward()
    trainer = _train(tiny_model_path, tmp_path, reward, WaveSpy, use_vllm=True, vllm_mode=mode)
    _check_waves(trainer, reward)
    engine = FakeVLLMGeneration.instances[-1]
    if mode == "server":
        calls = [(len(prompts), n) for prompts, n in engine.vllm_client.calls]
        assert calls == [(4, 2), (3, 2), (3, 4)] * 2
        assert all(len({tuple(p) for p in prompts}) == len(prompts) for prompts, _ in engine.vllm_client.calls)
    else:
        assert [(c["requests"], c["n"]) for c in engine.llm.calls] == [(8, 1), (6, 1), (12, 1)] * 2
    key = "sampling/importance_sampling_ratio/mean"
    ratios = [e[key] for e in trainer.state.log_history if key in e]
    assert ratios == pytest.approx([1.0, 1.0], abs=1e-3)


def test_sleep_mode_engine_takes_one_weight_push_per_adaptive_generation(tiny_model_path, tmp_path, monkeypatch):
    """With vllm_enable_sleep_mode, TRL puts the colocate engine to sleep (level 2: weights discarded) after every
    generate call and pushes the full weights again before the next: 3 waves x 2 steps cost 6 pushes. The engine
    stays awake across the waves of one generation: one push per generation, and the engine still samples from the
    current weights (IS ratio 1)."""
    install(monkeypatch)
    trainer = _train(tiny_model_path, tmp_path, RoleReward(), WaveSpy, use_vllm=True, vllm_enable_sleep_mode=True)
    llm = FakeVLLMGeneration.instances[-1].llm
    assert len(llm.calls) == 6, "3 waves per generation"
    assert llm.prefix_cache_resets == 2, "weights pushed once per generation"
    assert llm.events[-1] == "sleep2", "asleep between generations"
    key = "sampling/importance_sampling_ratio/mean"
    assert [e[key] for e in trainer.state.log_history if key in e] == pytest.approx([1.0, 1.0], abs=1e-3)


def test_selection_log_records_rollouts_per_group_and_same_seed_reproduces(tiny_model_path, tmp_path):
    """The selection log records how many rollouts each group got; a second run with the same seed reproduces the
    waves (counts), rewards and selections line by line."""
    logs = []
    for run in ("a", "b"):
        _train(tiny_model_path, tmp_path / run, RoleReward(), PODSGRPOTrainer)
        logs.append([json.loads(line) for line in (tmp_path / run / "pods_selections.jsonl").read_text().splitlines()])
    assert logs[0] == logs[1] and len(logs[0]) == 2
    assert all(sorted(record["generated"]) == [2, 8, 8, 8] for record in logs[0])
    assert all(all(max(kept) < count for kept, count in zip(r["kept"], r["generated"], strict=True)) for r in logs[0])


@pytest.mark.parametrize("all_rollouts", [False, True])
def test_completions_table_shows_every_rollout_with_kept_column(tiny_model_path, tmp_path, all_rollouts):
    """With pods_log_all_rollouts the completions table holds every generated rollout of the generation (prompt,
    completion, rewards, reward-function extra columns, advantage NaN when discarded) and a `kept` column; by
    default it is TRL's table of the kept rows."""
    import pandas as pd

    trainer = _train(
        tiny_model_path,
        tmp_path,
        RoleReward(),
        WaveSpy,
        max_steps=1,
        log_completions=True,
        pods_log_all_rollouts=all_rollouts,
    )
    table = pd.read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    phase1 = trainer.selections[0]
    if not all_rollouts:
        assert len(table) == 4 * M and "kept" not in table
        return
    assert len(table) == sum(phase1["counts"].tolist()) == 2 + 8 + 8 + 8
    assert table["kept"].sum() == 4 * M
    assert table.loc[~table["kept"], "advantage"].isna().all()
    assert table.loc[table["kept"], "advantage"].notna().all()
    prompts = [_prompt_index(p) for p in table["prompt"]]
    assert list(table["role"]) == [ROLES[i % 4] for i in prompts], "extra columns stay with their rows"
    per_prompt = defaultdict(int)
    for i in prompts:
        per_prompt[ROLES[i % 4]] += 1
    assert dict(per_prompt) == EXPECTED_COUNT
    rewards = phase1["rewards"].cpu()[generated_slots(phase1["counts"], N)]
    assert torch.allclose(torch.tensor(table["role_reward"].tolist()), rewards, equal_nan=True)


def test_rejects_a_user_rule_that_keeps_an_unfilled_slot(tiny_model_path, tmp_path):
    """A user down-sampler that picks slots beyond what a group got fails loudly, naming the rule."""

    @register_down_sampler("test_last_slots")
    def last_slots(rewards, m, *, generator=None):
        return torch.arange(rewards.size(1) - m, rewards.size(1)).expand(rewards.size(0), -1)

    with pytest.raises(ValueError, match="'test_last_slots' kept a slot that was never generated"):
        _train(tiny_model_path, tmp_path, RoleReward(), PODSGRPOTrainer, pods_down_sampler="test_last_slots")


def _logging_reward(name: str):
    """`constant_for_even_prompts` (even prompts' groups are constant, so they are topped up in waves) that logs each
    completion's text to the column "text" (every function to the same one) and to a column of its own, and the mean
    reward of each call with `log_metric`."""

    def reward(prompts, completions, completion_ids, log_extra, log_metric, **kwargs):
        texts = [c[0]["content"] for c in completions]
        log_extra("text", texts)
        log_extra(f"text_{name}", texts)
        rewards = constant_for_even_prompts(prompts, completion_ids)
        log_metric(f"mean_{name}", sum(rewards) / len(rewards))
        return rewards

    reward.__name__ = name
    return reward


def test_wave_logs_follow_their_rollouts(tiny_model_path, tmp_path):
    """Adaptive waves call the reward functions once per wave. A column that two functions log lands on the
    completions-table rows of its own rollouts (it was mis-ordered across waves), and a `log_metric` value counts
    once per rollout it describes, so the logged mean over waves of 2, 2 and 4 rollouts equals the mean over every
    rollout generated (a per-call average weighed a small wave like a large one)."""
    import pandas as pd

    trainer = _train(
        tiny_model_path,
        tmp_path,
        [_logging_reward("first"), _logging_reward("second")],
        PODSGRPOTrainer,
        max_steps=1,
        log_completions=True,
        pods_log_all_rollouts=False,
        reward_weights=[1.0, 0.0],
    )
    entry = next(e for e in trainer.state.log_history if "pods/waves" in e)
    assert entry["pods/waves"] == 3.0
    assert entry["mean_first"] == pytest.approx(entry["pods/reward_mean_all"], abs=1e-6)
    table = pd.read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    completions = [c[0]["content"] for c in table["completion"]]
    assert len(completions) == 4 * M
    for column in ("text", "text_first", "text_second"):
        assert table[column].tolist() == completions, column

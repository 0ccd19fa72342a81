"""Budgeted generation end to end on the tiny model (1 process): counts allocated from each prompt's history before
anything is generated, within the budget and the bounds; prompts whose history shows no contrast get pods_m; one
generation call on every engine (HF generate, vLLM colocate and server, through the stand-in); every rollout scored
once; selection inside what was generated; the allocation metrics."""

from __future__ import annotations

import pytest
from helpers import RoleReward, load, pods_config, prompt_index, prompts_dataset, record_generate_sizes
from test_trainer import SpyTrainer
from vllm_standin import FakeVLLMGeneration, install

from trl_pods.adaptive import generated_slots

N, M, BUDGET, PROMPTS = 8, 2, 4, 4  # 16 rollouts per generation for 4 prompts, each between 2 and 8
ROLES = ("right", "wrong", "half", "rare")
STEPS = 4


def _train(model_path, out, **options) -> tuple[SpyTrainer, RoleReward]:
    model, tokenizer = load(model_path)
    config = pods_config(
        out,
        pods_n=N,
        pods_m=M,
        pods_generation="budgeted",
        pods_budget=BUDGET,
        pods_history_decay=1.0,
        per_device_train_batch_size=PROMPTS * M,  # every generation holds the 4 prompts
        max_steps=STEPS,
        **options,
    )
    reward = RoleReward(ROLES)
    trainer = SpyTrainer(model, reward, config, train_dataset=prompts_dataset(PROMPTS), processing_class=tokenizer)
    trainer.train()
    return trainer, reward


def _roles(phase1) -> list[str]:
    return [ROLES[prompt_index(row["prompt"]) % 4] for row in phase1["inputs"][::M]]


def _check_allocation(trainer: SpyTrainer, reward: RoleReward) -> list[list[int]]:
    """What every budgeted run must show, whatever the engine; returns the counts per generation."""
    assert len(trainer.selections) == STEPS
    all_counts = []
    for step, phase1 in enumerate(trainer.selections):
        counts = phase1["counts"]
        roles = _roles(phase1)
        by_role = dict(zip(roles, counts.tolist(), strict=True))
        assert counts.sum() <= BUDGET * PROMPTS and counts.min() >= M and counts.max() <= N
        if step == 0:
            assert by_role == dict.fromkeys(ROLES, BUDGET), "no history yet: the budget is spread evenly"
        else:  # p (1 - p)^2 values a prompt never solved until its history is long enough, one always solved never
            assert by_role["right"] == M and by_role["wrong"] < min(by_role["half"], by_role["rare"])
            assert counts.sum() == BUDGET * PROMPTS
        if step == STEPS - 1:
            assert by_role["wrong"] == M, "no contrast over three visits: pods_m"
        prompts = [prompt_index(row["prompt"]) for row in phase1["inputs"][::M]]
        assert [reward.seen[step, i] for i in prompts] == counts.tolist(), "every rollout is scored exactly once"
        filled = generated_slots(counts, N)
        assert not phase1["rewards"][~filled].isfinite().any() and not (phase1["kept"] & ~filled).any()
        assert phase1["kept"].sum(1).tolist() == [M] * PROMPTS
        all_counts.append(counts.tolist())
    logs = [e for e in trainer.state.log_history if "pods/allocation_mean" in e]
    assert [e["pods/rollouts_generated"] for e in logs] == [sum(c) for c in all_counts]
    assert [e["pods/allocation_min"] for e in logs] == [BUDGET] + [M] * (STEPS - 1)
    assert [e["pods/allocation_max"] for e in logs] == [max(c) for c in all_counts]
    assert [e["pods/budget_share_no_history"] for e in logs] == [1.0] + [0.0] * (STEPS - 1)
    assert "pods/predicted_contrast" not in logs[0], "nothing to predict from before the first generation"
    assert all(0 < e["pods/predicted_contrast"] < 1 for e in logs[1:])
    assert [e["pods/observed_contrast"] for e in logs] == [0.5] * STEPS, "half and rare show contrast"
    return all_counts


def test_hf_generate_allocates_from_history_in_one_call(tiny_model_path, tmp_path, monkeypatch):
    """HF generate: one generate call per generation holding exactly the allocated rollouts; the update trains on M
    per prompt."""
    sizes = record_generate_sizes(monkeypatch)
    trainer, reward = _train(tiny_model_path, tmp_path)
    counts = _check_allocation(trainer, reward)
    assert sizes == [sum(c) for c in counts]
    logs = [e for e in trainer.state.log_history if "pods/generation_calls" in e]
    assert [e["pods/generation_calls"] for e in logs] == [1.0] * STEPS
    assert sum(rows for kind, rows in trainer.logp_passes if kind == "train") == STEPS * PROMPTS * M


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_budgeted_calls(tiny_model_path, tmp_path, monkeypatch, mode):
    """vLLM (stand-in, TRL's real VLLMGeneration): both modes send the whole allocation in one engine call, every
    row its own request (n = 1; server mode through TRL's gather, deduplication and scatter). The
    importance-sampling ratio stays 1, so vLLM log-probs follow their rows into the slots."""
    install(monkeypatch)
    trainer, reward = _train(tiny_model_path, tmp_path, use_vllm=True, vllm_mode=mode)
    counts = _check_allocation(trainer, reward)
    engine = FakeVLLMGeneration.instances[-1]
    if mode == "server":
        assert [(len(prompts), n) for prompts, n in engine.vllm_client.calls] == [(sum(c), 1) for c in counts]
    else:
        assert [(c["requests"], c["n"]) for c in engine.llm.calls] == [(sum(c), 1) for c in counts]
    key = "sampling/importance_sampling_ratio/mean"
    assert [e[key] for e in trainer.state.log_history if key in e] == pytest.approx([1.0] * STEPS, abs=1e-3)

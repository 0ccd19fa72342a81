"""The vLLM paths (colocate and server) through a stand-in engine that runs TRL's real VLLMGeneration code."""

import pytest
from helpers import load, pods_config, prompts_dataset, token_sum_reward
from test_trainer import SpyTrainer
from vllm_standin import FakeVLLMGeneration, install


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_generates_n_per_prompt_and_trains_on_m(tiny_model_path, tmp_path, monkeypatch, mode):
    """N completions per prompt reach vLLM (server: once per unique prompt with n=N), the IS correction stays
    aligned with the kept rows, and the old-log-prob pass sees only kept rows."""
    install(monkeypatch)
    n, m = 8, 4
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=n,
        pods_m=m,
        per_device_train_batch_size=8,
        max_steps=2,
        use_vllm=True,
        vllm_mode=mode,
        temperature=1.0,
    )
    trainer = SpyTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()

    engine = FakeVLLMGeneration.instances[-1]
    if mode == "server":
        calls = engine.vllm_client.calls
        assert [len(prompts) for prompts, _ in calls] == [2, 2], "one request per unique prompt"
        assert all(count == n for _, count in calls), "n = pods_n completions per prompt"
        assert all(prompts[0] != prompts[1] for prompts, _ in calls), "deduplicated with stride N"
    else:
        assert engine.llm.calls == [(2 * n, 1), (2 * n, 1)], "colocate: one n=1 request per generated row"
    assert len(engine.synced_at) == 2, "weights synced once per optimizer step"
    old = [rows for kind, rows in trainer.logp_passes if kind == "old"]
    assert sum(old) == 2 * 2 * m, "the IS correction's old-log-prob pass runs on kept rows only"
    ratios = [
        e["sampling/importance_sampling_ratio/mean"]
        for e in trainer.state.log_history
        if "sampling/importance_sampling_ratio/mean" in e
    ]
    assert len(ratios) == 2
    assert ratios == pytest.approx([1.0, 1.0], abs=1e-3), "vLLM log-probs must stay aligned with their kept rows"

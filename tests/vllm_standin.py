"""A stand-in for vLLM that keeps TRL's real `VLLMGeneration` code in the loop (vLLM itself needs a GPU).

Only vLLM's own objects are replaced: `vllm.LLM` (colocate), TRL's `VLLMClient` (server) and `SamplingParams`.
Everything of TRL's runs for real:

- colocate: `VLLMGeneration._init_vllm` builds the engine with the arguments TRL chose (`max_num_seqs`,
  `tensor_parallel_size`, `max_num_batched_tokens`, sleep mode...), and the engine enforces vLLM's own check that
  `max_num_batched_tokens >= max_num_seqs`;
- server: the gather of prompts to rank 0, the deduplication (`prompts[::num_generations]`, `n=num_generations`),
  the broadcast and the per-rank slicing;
- both: `sync_weights` (PEFT adapters merged, names mapped to vLLM's, DeepSpeed gathers) and the log-prob
  extraction.

Like vLLM, each engine owns a separate copy of the model, loaded from `model.name_or_path`, that only TRL's weight
sync updates, and it reports processed log-probs. So the importance-sampling ratio of a correct trainer is 1 up to
float error, and a stale engine (a missed sync, an adapter that was not merged, weights dropped by sleep mode) or
mis-aligned rows show up as a ratio far from 1. Sleep level 2 discards the engine's weights (they become NaN) until
the next sync, as in vLLM.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM
from trl.generation import vllm_generation
from trl.generation.vllm_generation import VLLMGeneration

DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # set by TRL's colocate init


@dataclass
class Logprob:
    logprob: float
    rank: int = 1


@dataclass
class CompletionOutput:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]]


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


@dataclass
class SamplingParams:
    """vLLM's SamplingParams as TRL's colocate path builds it (keyword arguments only)."""

    n: int = 1
    extra: dict = field(default_factory=dict)

    def __init__(self, n: int = 1, **kwargs):
        self.n, self.extra = n, kwargs


class EngineModel:
    """The engine's own copy of the weights, updated only through vLLM's `load_weights([(name, tensor)])`."""

    def __init__(self, path: str):
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.params = dict(self.model.named_parameters())
        self.loaded: list[str] = []

    def load_weights(self, weights):
        with torch.no_grad():
            for name, tensor in weights:
                if name not in self.params:  # vLLM fails on a name it does not know (e.g. a LoRA matrix)
                    raise KeyError(f"vLLM model has no parameter {name!r}")
                self.params[name].copy_(tensor)
                self.loaded.append(name)

    def discard(self):
        with torch.no_grad():
            for param in self.params.values():
                param.fill_(torch.nan)

    def sample(self, prompt_ids: list[int], n: int, max_tokens: int, temperature: float):
        """n completions of one prompt with their per-token processed log-probs, like a vLLM engine."""
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids] * n),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                max_new_tokens=max_tokens,
                output_scores=True,
                return_dict_in_generate=True,
            )
        eos = self.model.generation_config.eos_token_id
        results = []
        for row in range(n):
            tokens, logps = [], []
            for step, scores in enumerate(out.scores):
                token = int(out.sequences[row, len(prompt_ids) + step])
                tokens.append(token)
                logps.append(float(torch.log_softmax(scores[row].float(), dim=-1)[token]))
                if token == eos:
                    break
            results.append((tokens, logps))
        return results


class FakeLLM:
    """vllm.LLM for colocate mode: built by TRL's `_init_vllm`, one request per prompt row, `n` from the params."""

    def __init__(self, model: str, max_num_seqs: int, max_num_batched_tokens: int, tensor_parallel_size: int, **kw):
        if max_num_batched_tokens < max_num_seqs:  # vLLM's SchedulerConfig check
            raise ValueError(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to max_num_seqs "
                f"({max_num_seqs})."
            )
        self.max_num_seqs, self.tensor_parallel_size, self.kwargs = max_num_seqs, tensor_parallel_size, kw
        self.engine = EngineModel(model)
        self.llm_engine = llm_holding(self.engine).llm_engine
        self.calls: list[dict] = []  # per generate call: requests, n, sequences, decode waves
        self.prefix_cache_resets = 0
        self.events: list[str] = []  # sleep / wake_up

    def generate(self, prompts, sampling_params: SamplingParams, use_tqdm: bool = False):
        assert all(set(p) == {"prompt_token_ids"} for p in prompts), "text-only requests carry token ids only"
        sequences = len(prompts) * sampling_params.n
        waves = math.ceil(sequences / self.max_num_seqs)  # the scheduler runs at most max_num_seqs at once
        self.calls.append(dict(requests=len(prompts), n=sampling_params.n, sequences=sequences, waves=waves))
        params = sampling_params.extra
        outputs = []
        for request in prompts:
            samples = self.engine.sample(
                request["prompt_token_ids"], sampling_params.n, params["max_tokens"], params["temperature"]
            )
            completions = [
                CompletionOutput(tokens, [{t: Logprob(lp)} for t, lp in zip(tokens, logps, strict=True)])
                for tokens, logps in samples
            ]
            outputs.append(RequestOutput(request["prompt_token_ids"], completions))
        return outputs

    def reset_prefix_cache(self):
        self.prefix_cache_resets += 1  # TRL resets it after every weight sync

    def sleep(self, level: int = 1):
        self.events.append(f"sleep{level}")
        if level == 2:
            self.engine.discard()

    def wake_up(self, tags: list[str] | None = None):
        self.events.append("wake_up:" + ",".join(tags or []))


class _Path:
    """Attribute path `llm.llm_engine.model_executor.driver_worker.model_runner.model` that TRL's sync walks."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def llm_holding(model) -> _Path:
    """An object with the attribute path `llm.llm_engine.model_executor.driver_worker.model_runner.model` to ``model``,
    which TRL's sync and trl_pods's CPU engine check walk."""
    return _Path(llm_engine=_Path(model_executor=_Path(driver_worker=_Path(model_runner=_Path(model=model)))))


class FakeVLLMClient:
    """trl's VLLMClient against `trl vllm-serve`: called on rank 0 with the unique prompts and n per prompt."""

    def __init__(self, path: str):
        self.engine = EngineModel(path)
        self.calls: list[tuple[list[list[int]], int]] = []
        self.prefix_cache_resets = 0

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def update_named_params(self, metadata, params):
        self.engine.load_weights(params)

    def reset_prefix_cache(self):
        self.prefix_cache_resets += 1

    def generate(self, prompts, features=None, n=1, max_tokens=16, logprobs=0, temperature=1.0, **sampling):
        assert features is None, "text-only prompts send no image features"
        self.calls.append((prompts, n))
        completion_ids, completion_logps = [], []
        for prompt in prompts:
            for tokens, logps in self.engine.sample(prompt, n, max_tokens, temperature):
                completion_ids.append(tokens)
                completion_logps.append([[lp] for lp in logps])
        token_ids = [[[t] for t in tokens] for tokens in completion_ids]
        return {
            "prompt_ids": prompts,
            "completion_ids": completion_ids,
            "logprobs": completion_logps,
            "logprob_token_ids": token_ids,
        }


class FakeVLLMGeneration(VLLMGeneration):
    """TRL's VLLMGeneration; in server mode the client that would connect to `trl vllm-serve` is the stand-in."""

    instances: list[FakeVLLMGeneration] = []

    def _init_vllm(self):
        FakeVLLMGeneration.instances.append(self)
        if self.mode != "server":
            return super()._init_vllm()  # TRL's own colocate init, building FakeLLM
        if self.accelerator.is_main_process:
            self.vllm_client = FakeVLLMClient(self.model.name_or_path)
        self.accelerator.wait_for_everyone()


def _patch(setattr_) -> None:
    import trl.trainer.grpo_trainer as grpo_trainer

    setattr_(grpo_trainer, "VLLMGeneration", FakeVLLMGeneration)
    setattr_(vllm_generation, "SamplingParams", SamplingParams)
    setattr_(vllm_generation, "LLM", FakeLLM)
    setattr_(vllm_generation, "is_vllm_available", lambda *args, **kwargs: True)


def install(monkeypatch) -> None:
    """Route GRPOTrainer's vLLM backend to the stand-in for one test (TRL's colocate init sets distributed
    environment variables; they are restored afterwards)."""
    FakeVLLMGeneration.instances = []
    _patch(lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False))
    for key in DISTRIBUTED_ENV:  # record the current state, so teardown restores it
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.setenv(key, "")
            monkeypatch.delenv(key)


def patch_trl() -> None:
    """Route GRPOTrainer's vLLM backend to the stand-in for the rest of this process (worker scripts)."""
    _patch(setattr)

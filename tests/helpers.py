"""Shared pieces of the trainer tests: a small prompt set, a deterministic reward, a quiet config."""

from __future__ import annotations

from datasets import Dataset
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from trl_pods import PODSConfig

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


def slow_token_sum_reward(completion_ids, **kwargs) -> list[float]:
    """`token_sum_reward` that takes half a second, so a test can kill a run between two steps."""
    import time

    time.sleep(0.5)
    return token_sum_reward(completion_ids)


def rare_reward(completion_ids, **kwargs) -> list[float]:
    """1 when the token ids sum to a multiple of 10, else 0: groups are often constant (adaptive generation)."""
    return [float(sum(ids) % 10 == 0) for ids in completion_ids]


def slow_rare_reward(completion_ids, **kwargs) -> list[float]:
    """`rare_reward` that takes half a second, so a test can kill a run between two steps."""
    import time

    time.sleep(0.5)
    return rare_reward(completion_ids)

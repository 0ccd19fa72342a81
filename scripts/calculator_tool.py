"""Calculator-tool example: PODS with TRL's tool calling, offline, on a CPU in about a minute.

    python scripts/calculator_tool.py --output_dir calculator-run [--steps 10] [--warmup_steps 120]

A random model never emits a parsable tool call, so the example first builds a tiny one that does:

1. **Tool-calling model, offline.** A byte-level BPE tokenizer trained on rendered calculator conversations, with
   TRL's Qwen3 chat template (`trl.chat_template_utils.qwen3_chat_template`; GRPOTrainer swaps in its
   prefix-preserving training version and parses tool calls with its response template), and a tiny random Qwen2
   (head_dim 32, which vLLM's CPU attention also accepts). A supervised warm-up of ~120 steps (~10 s on one thread)
   on whole conversations (user "What is a plus b?" -> assistant `<tool_call>{"name": "add", ...}</tool_call>` ->
   tool result -> assistant answer) makes it call `add` for most sampled completions, with arguments that are
   often wrong: it has not learned to read the numbers, so rewards vary inside a group.
2. **PODS with the tool.** `PODSGRPOTrainer(..., tools=[add])`, 8 rollouts per prompt, 4 kept (max-variance).
   TRL's tool loop runs for all 8 rollouts (parse the call, run `add`, append the result, generate again); the
   reward (`calculator_reward`) scores all 8; the 4 kept rows train with their tool masks, so the tool's output
   tokens stay out of the loss.

It writes `calculator_summary.json` (reward and tool-call frequency per step) to the output directory and prints
it. The same module provides the model, tool and reward to the tests (tests/tool_model.py).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl.chat_template_utils import qwen3_chat_template

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.cpu import set_cpu_threads

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
]  # fmt: skip


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def question(a: int, b: int) -> list[dict]:
    return [{"role": "user", "content": f"What is {a} plus {b}?"}]


def tool_conversation(a: int, b: int) -> list[dict]:
    """A whole calculator conversation: the question, the tool call, the tool's result and the answer."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}
    return [
        *question(a, b),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "add", "content": str(a + b)},
        {"role": "assistant", "content": str(a + b)},
    ]


def _render(tokenizer: PreTrainedTokenizerFast, messages: list[dict], **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tools=[add], tokenize=False, **kwargs)


def build_tool_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on rendered calculator conversations, with TRL's Qwen3 chat template."""
    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), eos_token="<|im_end|>")
    renderer.chat_template = qwen3_chat_template
    corpus = [_render(renderer, tool_conversation(a, b)) for a in range(10) for b in range(10)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>")
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


def tiny_qwen2(tokenizer: PreTrainedTokenizerFast, seed: int) -> Qwen2ForCausalLM:
    """A random-weight Qwen2 for ``tokenizer``: 2 layers, hidden size 64, 2 heads of 32 (~110k parameters)."""
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tool_model(path: str | Path, steps: int = 120, seed: int = 0) -> Path:
    """Fine-tune a tiny Qwen2 on calculator conversations (loss on the assistant side: everything after the
    question) and save it with its tokenizer to ``path``."""
    tokenizer = build_tool_tokenizer()
    sequences = []
    for a in range(10):
        for b in range(10):
            conversation = tool_conversation(a, b)
            prompt = tokenizer(_render(tokenizer, conversation[:1], add_generation_prompt=True))["input_ids"]
            full = tokenizer(_render(tokenizer, conversation))["input_ids"]
            sequences.append((full, len(prompt)))
    length = max(len(full) for full, _ in sequences)
    input_ids = torch.full((len(sequences), length), tokenizer.pad_token_id)
    labels = torch.full((len(sequences), length), -100)
    attention_mask = torch.zeros(len(sequences), length, dtype=torch.long)
    for i, (full, prompt_length) in enumerate(sequences):
        input_ids[i, : len(full)] = torch.tensor(full)
        labels[i, prompt_length : len(full)] = torch.tensor(full[prompt_length:])
        attention_mask[i, : len(full)] = 1
    model = tiny_qwen2(tokenizer, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = torch.randint(0, len(sequences), (16,), generator=generator)
        loss = model(input_ids=input_ids[batch], attention_mask=attention_mask[batch], labels=labels[batch]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def calculator_reward(completions: list[list[dict]], answer: list[str], **kwargs) -> list[float]:
    """1 for a final answer equal to ``answer``, 0.5 for a wrong answer after a tool call, else 0."""
    rewards = []
    for messages, expected in zip(completions, answer, strict=True):
        called = any(message["role"] == "tool" for message in messages)
        rewards.append(1.0 if messages[-1]["content"].strip() == expected else 0.5 if called else 0.0)
    return rewards


def calculator_dataset(size: int, seed: int = 0) -> Dataset:
    """``size`` questions "What is a plus b?" with single digits a, b, and their ``answer`` column."""
    generator = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, 10, (size, 2), generator=generator).tolist()
    return Dataset.from_dict({"prompt": [question(a, b) for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="calculator-run")
    parser.add_argument("--steps", type=int, default=10, help="PODS optimizer steps")
    parser.add_argument("--warmup_steps", type=int, default=120, help="supervised warm-up steps of the tool model")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    output = Path(args.output_dir)
    model_path = build_tool_model(output / "tool-model", steps=args.warmup_steps)
    model = Qwen2ForCausalLM.from_pretrained(model_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)  # not AutoTokenizer: it would swap the class
    config = PODSConfig(
        output_dir=str(output), pods_n=8, pods_m=4, per_device_train_batch_size=8, max_steps=args.steps,
        max_completion_length=48, learning_rate=1e-4, use_cpu=True, bf16=False, gradient_checkpointing=False,
        report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
    )  # fmt: skip
    trainer = PODSGRPOTrainer(
        model,
        calculator_reward,
        config,
        train_dataset=calculator_dataset(64),
        processing_class=tokenizer,
        tools=[add],
    )
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    summary = {
        "tool_call_frequency": [entry["tools/call_frequency"] for entry in steps],
        "reward_all_rollouts": [entry["pods/reward_mean_all"] for entry in steps],
        "reward_kept_rollouts": [entry["pods/reward_mean_kept"] for entry in steps],
    }
    (output / "calculator_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    set_cpu_threads()  # the process is the script's: the threads `trl-pods train` takes
    main()

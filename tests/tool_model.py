"""A tiny Qwen2 that really calls a calculator tool: built locally and fine-tuned for a few seconds on CPU.

A random model never emits a parsable tool call, so the tool tests start from this one: a byte-level BPE tokenizer
with TRL's Qwen3 chat template (`trl.chat_template_utils.qwen3_chat_template`, which GRPOTrainer swaps for its
prefix-preserving training version and parses with its response template), and a tiny Qwen2 (head_dim 32, which
vLLM's CPU attention needs) trained by supervised fine-tuning on whole tool conversations:
user "What is a plus b?" -> assistant `<tool_call>{"name": "add", ...}</tool_call>` -> tool result -> assistant
answer. After ~120 steps (~10 s on one thread) it emits a well-formed `add` call for most sampled completions, with
arguments that are often wrong (it has not learned to read the numbers), so rewards vary inside a group.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch
from tiny_model import tiny_qwen2
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from trl.chat_template_utils import qwen3_chat_template

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
    model = tiny_qwen2(
        tokenizer, seed, hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1
    )
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


def counting_add(calls: list[tuple[int, int]]) -> Callable[[int, int], int]:
    """The `add` tool (same name and schema) recording each call's arguments in ``calls``."""

    @functools.wraps(add)
    def recorded(a: int, b: int) -> int:
        calls.append((a, b))
        return add(a, b)

    return recorded


def calculator_reward(completions: list[list[dict]], answer: list[str], **kwargs) -> list[float]:
    """1 for a final answer equal to ``answer``, 0.5 for a wrong answer after a tool call, else 0."""
    rewards = []
    for messages, expected in zip(completions, answer, strict=True):
        called = any(message["role"] == "tool" for message in messages)
        rewards.append(1.0 if messages[-1]["content"].strip() == expected else 0.5 if called else 0.0)
    return rewards

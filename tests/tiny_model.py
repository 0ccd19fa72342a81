"""A real (tiny, random-weight) Qwen2 causal LM and byte-level BPE tokenizer, built locally: no hub needed."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CORPUS = [
    "What is 12 plus 7? The answer is 19. #### 19",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "<think>I add the numbers.</think><answer>42</answer> \\boxed{42} 0 1 2 3 4 5 6 7 8 9 + - * / =",
    "Solve the problem step by step and put the final answer after ####.",
]


def seeded_model(model_class: type, config, tokenizer: PreTrainedTokenizerFast, seed: int):
    """``model_class(config)`` with its random weights drawn from ``seed``, generating until ``tokenizer``'s EOS and
    padding with its pad token."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>", bos_token=None, unk_token=None
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_qwen2(tokenizer: PreTrainedTokenizerFast, seed: int = 0, **overrides) -> Qwen2ForCausalLM:
    """A random-weight Qwen2 causal LM for ``tokenizer`` (~100k parameters unless ``overrides`` change the sizes)."""

    sizes = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        **{**sizes, **overrides},
    )
    return seeded_model(Qwen2ForCausalLM, config, tokenizer, seed)


def tiny_qwen2_moe(tokenizer: PreTrainedTokenizerFast, router_aux_loss_coef: float = 0.5) -> Qwen2MoeForCausalLM:
    """A random-weight Qwen2-MoE causal LM (4 experts, 2 per token) for ``tokenizer``: a model with a router
    auxiliary loss. Router logits stay off in the config (generation does not support them); TRL asks for them in
    its training forward."""

    config = Qwen2MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        output_router_logits=False,
        router_aux_loss_coef=router_aux_loss_coef,
    )
    return seeded_model(Qwen2MoeForCausalLM, config, tokenizer, 0)


def build_tiny_model(path: str | Path, seed: int = 0, **overrides) -> Path:
    """Save `tiny_qwen2` and its tokenizer to ``path``; return the path."""
    path = Path(path)
    tokenizer = build_tokenizer()
    tiny_qwen2(tokenizer, seed, **overrides).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path

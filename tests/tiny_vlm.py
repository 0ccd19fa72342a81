"""Tiny random vision-language models and their processors, built locally: no hub needed.

Two of the families TRL 1.16's GRPO tests train (`tiny-LlavaForConditionalGeneration`,
`tiny-Gemma3ForConditionalGeneration`):

- **LLaVA**: a CLIP vision tower and a Qwen2 text model. A 28x28 image is 2x2 patches of 14 pixels: 4 image tokens.
- **Gemma 3**: a SigLIP vision tower pooled to 1 image token, and a Gemma 3 text model; its processor also returns
  per-token `token_type_ids` (1 on image tokens), which TRL carries into the forward.

Qwen2-VL / Qwen2.5-VL / SmolVLM processors cannot be built here: transformers 5.23 checks their video processor's
class, which needs torchvision, and torchvision is not installed (it would pull another torch). These two processors
have an image processor and a tokenizer only (PIL backends without torchvision).
"""

from __future__ import annotations

from tiny_model import CORPUS, seeded_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    CLIPImageProcessorPil,
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3ImageProcessorPil,
    Gemma3Processor,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GEMMA3_TEMPLATE = CHAT_TEMPLATE.replace("<image>", "<start_of_image>")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
IMAGE_SIZE = 28
FAMILIES = ("llava", "gemma3")


def _tokenizer(special: dict[str, str], chat_template: str, **tokens: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with the chat specials, the family's image tokens ``special`` and its template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [*SPECIAL_TOKENS, *special.values(), *tokens.values()]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([*CORPUS, "user assistant What color is this picture?"] * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>", extra_special_tokens=special, **tokens
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def build(family: str) -> tuple:
    """``(model, processor)`` of a tiny random model of ``family`` (`FAMILIES`)."""
    if family == "llava":
        processor = build_processor()
        return tiny_llava(processor), processor
    special = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
    tokenizer = _tokenizer(special, GEMMA3_TEMPLATE, bos_token="<bos>")
    image_processor = Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, do_pan_and_scan=False)
    processor = Gemma3Processor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=GEMMA3_TEMPLATE, image_seq_length=1
    )
    ids = tokenizer.convert_tokens_to_ids
    text = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=ids("<bos>"), sliding_window=64,
    )  # fmt: skip
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=IMAGE_SIZE,
        patch_size=14,
    )  # fmt: skip
    config = Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=1, image_token_id=ids("<image_soft_token>"),
        boi_token_id=ids("<start_of_image>"), eoi_token_id=ids("<end_of_image>"),
    )  # fmt: skip
    return seeded_model(Gemma3ForConditionalGeneration, config, tokenizer, 0), processor


def build_processor() -> LlavaProcessor:
    tokenizer = _tokenizer({"image_token": "<image>"}, CHAT_TEMPLATE)
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


def tiny_llava(processor: LlavaProcessor, seed: int = 0) -> LlavaForConditionalGeneration:
    """A random-weight LLaVA for ``processor`` (~70k parameters)."""
    tokenizer = processor.tokenizer
    text = dict(
        model_type="qwen2", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, tie_word_embeddings=True,
    )  # fmt: skip
    vision = dict(
        model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=14, projection_dim=32,
    )  # fmt: skip
    config = LlavaConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )
    return seeded_model(LlavaForConditionalGeneration, config, tokenizer, seed)

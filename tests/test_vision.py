"""PODS with vision-language models (tiny random LLaVA and Gemma 3, built locally, `tiny_vlm`): each kept row carries
exactly its own image and pixel inputs, and phase 2's forwards see the kept rows only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers import RowSpy, assert_phase2_has_the_kept_rows, pods_config
from PIL import Image
from tiny_vlm import FAMILIES, IMAGE_SIZE, build

from trl_pods import PODSGRPOTrainer

COLORS = [(250, 0, 0), (0, 250, 0), (0, 0, 250), (120, 120, 0)]


def color_dataset() -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "What color is this picture?"}]] * len(COLORS),
            "image": [Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), color) for color in COLORS],
        }
    )


def red_reward(completion_ids, image, **kwargs) -> list[float]:
    """Depends on the row's image and completion: its red channel plus the token sum, modulo 7."""
    return [
        float((picture.getpixel((0, 0))[0] + sum(ids)) % 7) for picture, ids in zip(image, completion_ids, strict=True)
    ]


class ForwardSpy(RowSpy):
    """`RowSpy` that also records the rows of every forward's token ids and pixel values."""

    forwards: list[tuple[int, int]]

    def _get_per_token_logps_and_entropies(self, model, input_ids, *args, pixel_values=None, **kwargs):
        rows = None if pixel_values is None else pixel_values.size(0)
        self.forwards = [*getattr(self, "forwards", []), (input_ids.size(0), rows)]
        return super()._get_per_token_logps_and_entropies(model, input_ids, *args, pixel_values=pixel_values, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_vlm_kept_rows_carry_their_images(tmp_path, family):
    """N=4 -> M=2, 2 prompts with different images per generation: phase 1 generates 8 rows with their prompt's
    image; phase 2's pixel values are the image processor's output for the kept rows' images, in order (Gemma 3:
    its token_type_ids mark exactly the kept rows' image tokens); every training forward sees kept rows only, with
    one image each; the logged images and rewards are the kept rows' own."""
    model, processor = build(family)
    config = pods_config(
        tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=2, log_completions=False
    )
    trainer = ForwardSpy(model, red_reward, config, train_dataset=color_dataset(), processing_class=processor)
    assert trainer._is_vlm
    trainer.train()
    assert len(trainer.records) == 2
    for record in trainer.records:
        assert_phase2_has_the_kept_rows(record, processor.tokenizer.pad_token_id)
        inputs, local = record["inputs"], record["phase1"]["local"]
        kept_images = [inputs[i]["image"] for i in local]
        expected = processor.image_processor(images=kept_images, return_tensors="pt")["pixel_values"]
        assert record["output"]["pixel_values"].shape == expected.shape == (4, 3, IMAGE_SIZE, IMAGE_SIZE)
        assert np.allclose(record["output"]["pixel_values"].numpy(), expected.numpy())
        assert record["output"]["num_images"] == [1] * 4
        if family == "gemma3":
            output, image_token = record["output"], model.config.image_token_id
            prompt_types = output["token_type_ids"][:, : output["prompt_ids"].size(1)]
            assert torch.equal(prompt_types.bool().cpu(), output["prompt_ids"].cpu() == image_token)
            assert (
                prompt_types.sum().item() == 4
                and not output["token_type_ids"][:, output["prompt_ids"].size(1) :].any()
            )
        generated = record["phase1"]["rollouts"].generation[6]
        assert [np.array(generated[i][0]).tolist() for i in local] == [np.array(p).tolist() for p in kept_images]
    assert {rows for rows, _ in trainer.forwards} == {4}, "phase 2's training forwards see kept rows only"
    assert all(pixels == 4 for _, pixels in trainer.forwards)
    last = trainer.records[-1]
    kept_pictures = [last["inputs"][i]["image"] for i in last["phase1"]["local"]]
    assert [np.array(p[0]).tolist() for p in trainer._logs["images"]] == [np.array(p).tolist() for p in kept_pictures]
    kept_ids = [last["phase1"]["rollouts"].generation[1][i] for i in last["phase1"]["local"]]
    assert list(trainer._logs["rewards"]["red_reward"]) == red_reward(kept_ids, kept_pictures)


def test_vlm_refused_where_phase1_cannot_carry_images(tmp_path):
    """Generation chunks cannot carry a batch's pixel inputs: refused at construction."""
    model, processor = build("llava")
    config = pods_config(
        tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=1, pods_generation_chunk_size=2
    )
    with pytest.raises(ValueError, match="pods_generation_chunk_size cannot split"):
        PODSGRPOTrainer(model, red_reward, config, train_dataset=color_dataset(), processing_class=processor)

"""Tools with PODS on a real vLLM colocate engine (vLLM's CPU build): TRL's tool loop generates through the engine
for all N rollouts, and the kept rows carry their tool masks and the engine's sampling log-probs."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_phase2_has_the_kept_rows
from test_agents import tool_trainer
from tool_model import counting_add

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.usefixtures("real_vllm")]


def test_tools_on_a_colocate_engine(tool_model_path, tmp_path):
    """PODS 4 -> 2 with a calculator tool on a colocate engine: the tool really executes; phase 2's rows are the
    kept rows with their tool masks and their vLLM log-probs (0 on tool-output tokens, as TRL writes them)."""
    calls: list[tuple[int, int]] = []
    options = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=320)
    trainer = tool_trainer(tool_model_path, tmp_path, counting_add(calls), **options)
    tokenizer = trainer.processing_class
    trainer.train()
    assert calls, "the fine-tuned model never called the tool through the engine"
    tool_rows = 0
    for record in trainer.records:
        assert_phase2_has_the_kept_rows(record, tokenizer.pad_token_id)
        generation, local, output = (
            record["phase1"]["rollouts"].generation,
            record["phase1"]["local"],
            record["output"],
        )
        logps, tool_mask = generation[4], generation[2]
        width = output["sampling_per_token_logps"].size(1)
        expected = torch.tensor([logps[i] + [0.0] * (width - len(logps[i])) for i in local])
        assert torch.allclose(output["sampling_per_token_logps"].cpu(), expected)
        for i in local:
            tool_rows += 0 in tool_mask[i]
            assert all(lp == 0.0 for lp, keep in zip(logps[i], tool_mask[i], strict=True) if not keep)
    assert tool_rows > 0

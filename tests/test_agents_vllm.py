"""Tools with PODS on a real vLLM colocate engine (vLLM's CPU build): TRL's tool loop generates through the engine
for every rollout of every wave, and the kept rows carry their tool masks and the engine's sampling log-probs."""

from __future__ import annotations

import gc

import pytest
import torch
from helpers import assert_phase2_has_the_kept_rows
from test_agents import tool_trainer
from test_agents_modes import check_tool_rollouts, train_with_tools
from tool_model import counting_add

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.usefixtures("real_vllm")]
COLOCATE = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=320)


@pytest.fixture(autouse=True)
def engine_shut_down():
    """Shut each test's colocate engine down when the test ends. A trainer is freed by the garbage collector (it holds
    reference cycles), and vLLM's shutdown destroys its process groups (`destroy_model_parallel`): left to a later
    collection, it ran in the middle of the next test's engine build, which then failed compiling the model
    ("'NoneType' object has no attribute 'rank'", guard on `parallel_state._PP.rank`)."""
    yield
    gc.collect()


def check_engine_rows(record: dict) -> int:
    """Phase 2's rows are the kept rows with their vLLM sampling log-probs (0 on tool-output tokens, as TRL writes
    them); returns how many kept rows hold a tool's output."""
    generation, local, output = record["phase1"]["rollouts"].generation, record["phase1"]["local"], record["output"]
    logps, tool_mask = generation[4], generation[2]
    width = output["sampling_per_token_logps"].size(1)
    expected = torch.tensor([logps[i] + [0.0] * (width - len(logps[i])) for i in local])
    assert torch.allclose(output["sampling_per_token_logps"].cpu(), expected)
    for i in local:
        assert all(lp == 0.0 for lp, keep in zip(logps[i], tool_mask[i], strict=True) if not keep)
    return sum(0 in tool_mask[i] for i in local)


def test_tools_on_a_colocate_engine(tool_model_path, tmp_path):
    """PODS 4 -> 2 with a calculator tool on a colocate engine: the tool really executes; phase 2's rows are the
    kept rows with their tool masks and their vLLM log-probs (0 on tool-output tokens, as TRL writes them)."""
    calls: list[tuple[int, int]] = []
    trainer = tool_trainer(tool_model_path, tmp_path, counting_add(calls), **COLOCATE)
    trainer.train()
    assert calls, "the fine-tuned model never called the tool through the engine"
    tool_rows = 0
    for record in trainer.records:
        assert_phase2_has_the_kept_rows(record, trainer.processing_class.pad_token_id)
        tool_rows += check_engine_rows(record)
    assert tool_rows > 0


@pytest.mark.parametrize("mode", ["refill", "screened"])
def test_tools_on_a_colocate_engine_in_refill_and_screened(tool_model_path, tmp_path, mode):
    """Refill and screened with a calculator tool on a colocate engine (test_agents_modes' setup: every other prompt
    earns a constant reward, so refill draws a further prompt for it; screened pilots a pool and commits): each wave's
    tool loop generates through the engine, the tool runs once per call generated, every generated rollout is scored
    once with its own row, TRL's tool-call frequency and lengths describe every rollout generated; phase 2's rows are
    the kept rows with their tool masks and their own vLLM log-probs."""
    trainer = train_with_tools(mode, tmp_path, tool_model_path, **COLOCATE)
    check_tool_rollouts(mode, trainer)
    assert sum(check_engine_rows(record) for record in trainer.records) > 0

"""Tools and environments on two real processes (torchrun, CPU, gloo): the same selection on both ranks, and an
exact resume after SIGKILL."""

from pathlib import Path

import pytest
from test_kill_resume import _logged, _selections, kill_after_checkpoint
from test_multiprocess import run_worker, torchrun_command

WORKER = Path(__file__).with_name("agents_run.py")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("feature", ["tools", "environment"])
def test_two_processes_select_alike_and_resume_exactly_after_sigkill(tool_model_path, tmp_path, feature):
    """Two ranks, one prompt (4 rollouts, 2 kept) each per step, 4 steps. The uninterrupted run: both ranks compute
    the same gathered rewards and kept mask, each trains its 2 kept rows, tools really run, and every rollout's
    environment is reset once per generation. Then both ranks are SIGKILLed after the step-2 checkpoint and resumed:
    the selections (rewards, kept rows), losses and token counts equal the uninterrupted run's."""
    options = (feature, "--steps", "4", "--save-steps", "2", "--slow")
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    ranks = run_worker(tool_model_path, reference, 2, *options, worker=WORKER)
    assert len(ranks[0]["records"]) == len(ranks[1]["records"]) == 4
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["rewards"] == r1["rewards"] and r0["kept"] == r1["kept"]
        assert len(r0["rewards"]) == 2 and all(sum(row) == 2 for row in r0["kept"])
        assert r0["kept_rows"] == r1["kept_rows"] == 2
    assert sum(rank["calls"] for rank in ranks) > 0, "no tool call was executed"
    if feature == "environment":
        assert [rank["resets"] for rank in ranks] == [16, 16]

    killed.mkdir()
    kill_after_checkpoint(torchrun_command(WORKER, tool_model_path, killed, 2, *options), killed, 2, 4)
    run_worker(tool_model_path, killed, 2, *options, "--resume", worker=WORKER)
    expected, resumed = _selections(reference), _selections(killed)
    assert sorted(expected) == sorted(resumed) and len(expected) == 4
    for key in expected:
        for field in ("prompts", "rewards", "kept", "generated"):
            assert resumed[key][field] == expected[key][field], (key, field)
    assert _logged(killed) == _logged(reference), "the resumed run diverged from the uninterrupted one"

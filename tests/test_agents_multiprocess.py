"""Tools and environments on two real processes (torchrun, CPU, gloo): standalone tools in fixed generation, and an
environment whose method is the tool in the modes that choose which prompts to train on (refill, screened, several
generation calls, refill's padding): the same selection on both ranks, and an exact resume after SIGKILL."""

from pathlib import Path

import pytest
from test_kill_resume import _logged, _selections, kill_after_checkpoint
from test_multiprocess import run_worker, torchrun_command

WORKER = Path(__file__).with_name("agents_run.py")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("feature", "mode"),
    [
        ("tools", "fixed"),
        pytest.param(
            "environment",
            "refill",
            marks=pytest.mark.skip(
                reason="the resumed 2-process run hung once in CI (600 s, ranks out of step?) after passing in two "
                "CI runs: an intermittent hang under investigation (issue 34's closing note)"
            ),
        ),
        ("environment", "screened"),
    ],
)
def test_two_processes_select_alike_and_resume_exactly_after_sigkill(tool_model_path, tmp_path, feature, mode):
    """Two ranks, one trained prompt (2 of its 4 rollouts kept) each per step, 4 steps. The uninterrupted run: both
    ranks compute the same gathered rewards and kept mask, each trains its 2 kept rows, tools really run, and every
    rollout's environment is reset once per generation: each rank resets one environment per rollout it generated,
    padding included (refill: a rank that draws no prompt while the other does pads its call). Refill really draws and
    screened pilots a pool of 2 prompts per rank, then commits 1. Then both ranks are SIGKILLed after the step-2
    checkpoint and resumed: the selections (rewards, kept rows), losses and token counts equal the uninterrupted
    run's. In refill and screened the environment's `add` method is the tool: TRL's tool loop runs environment methods
    and standalone tools alike (one tool dictionary per rollout), so one run covers tools and environments."""
    options = (feature, "--mode", mode, "--steps", "4", "--save-steps", "2", "--slow")
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    ranks = run_worker(tool_model_path, reference, 2, *options, worker=WORKER)
    assert len(ranks[0]["records"]) == len(ranks[1]["records"]) == 4
    groups = {"fixed": 2, "refill": 4, "screened": 4}[mode]  # laid out: refill's room for 1 draw per rank, a pool
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["rewards"] == r1["rewards"] and r0["kept"] == r1["kept"] and r0["counts"] == r1["counts"]
        assert len(r0["rewards"]) == groups and sum(sum(row) == 2 for row in r0["kept"]) == 2
        assert r0["kept_rows"] == r1["kept_rows"] == 2
        assert r0["generated"] == sum(r0["counts"]) + r0["padding"]
    assert sum(rank["calls"] for rank in ranks) > 0, "no tool call was executed"
    if feature == "environment":
        generated = sum(record["generated"] for record in ranks[0]["records"])
        assert [rank["resets"] for rank in ranks] == [generated // 2] * 2, "one reset per rollout, padding included"
    counts = [record["counts"] for record in ranks[0]["records"]]
    if mode == "refill":
        assert any(sum(c > 0 for c in record) > 2 for record in counts), f"refill never drew: {counts}"
        assert any(record["padding"] for record in ranks[0]["records"]), "no rank ever padded: nothing is tested"
    if mode == "screened":
        assert all(sorted(record) == [2, 2, 4, 4] for record in counts), counts

    killed.mkdir()
    kill_after_checkpoint(torchrun_command(WORKER, tool_model_path, killed, 2, *options), killed, 2, 4)
    run_worker(tool_model_path, killed, 2, *options, "--resume", worker=WORKER)
    expected, resumed = _selections(reference), _selections(killed)
    assert sorted(expected) == sorted(resumed) and len(expected) == 4
    for key in expected:
        for field in ("prompts", "rewards", "kept", "generated"):
            assert resumed[key][field] == expected[key][field], (key, field)
    assert _logged(killed) == _logged(reference), "the resumed run diverged from the uninterrupted one"

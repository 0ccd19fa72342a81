"""Tools and environments on two real processes (torchrun, CPU, gloo): standalone tools in fixed generation, and an
environment whose method is the tool in the modes that choose which prompts to train on (refill, screened, several
generation calls, refill's padding): the same selection on both ranks, and an exact resume after SIGKILL."""

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import torchrun, worker_env
from test_kill_resume import _logged, _selections, kill_after_checkpoint
from test_multiprocess import run_workers, torchrun_command

WORKER = Path(__file__).with_name("agents_run.py")
pytestmark = pytest.mark.slow
CASES = [("tools", "fixed"), ("environment", "refill"), ("environment", "screened")]  # (feature, mode)


def _options(feature: str, mode: str) -> tuple[str, ...]:
    return (feature, "--mode", mode, "--steps", "4", "--save-steps", "2")


@pytest.fixture(scope="session")
def agent_runs(tool_model_path, tmp_path_factory) -> dict[tuple[str, str], tuple[list[dict], Path, Path]]:
    """Each of `CASES` on 2 processes, 4 steps: uninterrupted (all in one launch: its rank records and output
    folder), and SIGKILLed once the step-2 checkpoint looks complete, with rank 1 saving its states late (a launch of
    its own), then resumed (all in one launch): its output folder."""
    root = tmp_path_factory.mktemp("agents-kill-resume")
    folders = {case: (root / "-".join(case) / "reference", root / "-".join(case) / "killed") for case in CASES}
    uninterrupted = {reference: _options(*case) for case, (reference, _) in folders.items()}
    references = run_workers(tool_model_path, 2, uninterrupted, worker=WORKER)
    for case, (_, killed) in folders.items():
        killed.mkdir(parents=True)
        late = torchrun_command(WORKER, tool_model_path, killed, 2, *_options(*case), "--late-save")
        kill_after_checkpoint(late, killed, 2, 4)
    resumed = {killed: (*_options(*case), "--resume") for case, (_, killed) in folders.items()}
    run_workers(tool_model_path, 2, resumed, worker=WORKER)
    return {case: (references[ref], ref, killed) for case, (ref, killed) in folders.items()}


@pytest.mark.xdist_group("agents_kill_resume")
@pytest.mark.parametrize(("feature", "mode"), CASES)
def test_two_processes_select_alike_and_resume_exactly_after_sigkill(
    agent_runs, tool_model_path, tmp_path, feature, mode
):
    """Two ranks, one trained prompt (2 of its 4 rollouts kept) each per step, 4 steps. The uninterrupted run: both
    ranks compute the same gathered rewards and kept mask, each trains its 2 kept rows, tools really run, and every
    rollout's environment is reset once per generation: each rank resets one environment per rollout it generated,
    padding included (refill: a rank that draws no prompt while the other does pads its call). Refill really draws and
    screened pilots a pool of 2 prompts per rank, then commits 1. Then both ranks are SIGKILLed after the step-2
    checkpoint and resumed: the selections (rewards, kept rows), losses and token counts equal the uninterrupted
    run's. In refill and screened the environment's `add` method is the tool: TRL's tool loop runs environment methods
    and standalone tools alike (one tool dictionary per rollout), so one run covers tools and environments.

    The killed run's rank 1 saves its states late: the kill comes as soon as rank 0 has marked the checkpoint complete,
    which must be after every rank saved (a checkpoint without rank 1's state resumed rank 1 at another position:
    refill's ranks then waited on each other for ever, a hang seen in CI). Refill: a checkpoint that lacks a rank's
    state is refused on resume with a clear error, on every rank, instead."""
    ranks, reference, killed = agent_runs[(feature, mode)]
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

    saved = {path.name for path in (killed / "checkpoint-2").iterdir()}
    assert {"rng_state_1.pth", "pods_state_1.pt"} <= saved, f"complete before rank 1 saved its states: {saved}"
    expected, resumed = _selections(reference), _selections(killed)
    assert sorted(expected) == sorted(resumed) and len(expected) == 4
    for key in expected:
        for field in ("prompts", "rewards", "kept", "generated"):
            assert resumed[key][field] == expected[key][field], (key, field)
    assert _logged(killed) == _logged(reference), "the resumed run diverged from the uninterrupted one"
    if mode == "refill":
        _assert_refused_without_rank_1_state(
            tool_model_path, reference, tmp_path / "incomplete", _options(feature, mode)
        )


def _assert_refused_without_rank_1_state(model_path, reference: Path, out: Path, options: tuple) -> None:
    """Resuming a copy of ``reference``'s step-2 checkpoint without rank 1's PODS state fails before training (no
    hang: both ranks refuse it at the same point), saying what to do."""
    shutil.copytree(reference / "checkpoint-2", out / "checkpoint-2")
    (out / "checkpoint-2" / "pods_state_1.pt").unlink()
    command = [*torchrun(2), str(WORKER), str(model_path), str(out), *options, "--resume"]
    result = subprocess.run(command, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "lacks the PODS state of process [1]" in result.stderr, result.stderr[-3000:]
    assert "resume from an earlier checkpoint" in result.stderr

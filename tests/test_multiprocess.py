"""Real multi-process runs (torchrun, CPU, gloo): row layout, selection, advantages and vLLM server mode."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import step_losses

from trl_pods.token_selection import token_budget

WORKER = Path(__file__).with_name("multiprocess_run.py")
pytestmark = pytest.mark.slow


def run_worker(model_path, out: Path, processes: int, *options: str) -> list[dict]:
    """Run tests/multiprocess_run.py under torchrun and return each rank's record."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
        "--master_port", str(29500 + os.getpid() % 1000), str(WORKER), str(model_path), str(out), *options,
    ]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(processes)]


@pytest.mark.parametrize("sampler", ["random", "max_variance"])
def test_two_processes_match_one_process(tiny_model_path, tmp_path, sampler):
    """With identical rollouts (deterministic sampling), 2 processes reproduce a 1-process run over the same global
    batch: groups never span ranks, both ranks compute the 1-process selection, each trains an equal share, and the
    advantages and the global token count (num_items_in_batch) are the same; logged metrics agree across ranks."""
    ranks = run_worker(tiny_model_path, tmp_path / "two", 2, "--sampler", sampler, "--generation", "deterministic")
    (single,) = run_worker(tiny_model_path, tmp_path / "one", 1, "--sampler", sampler, "--generation", "deterministic")
    assert len(single["records"]) == len(ranks[0]["records"]) == len(ranks[1]["records"]) == 2
    for one, r0, r1 in zip(single["records"], ranks[0]["records"], ranks[1]["records"], strict=True):
        assert not set(r0["prompts"]) & set(r1["prompts"]), "a prompt's rollouts were split across ranks"
        assert all(r["prompts"].count(p) == 8 for r in (r0, r1) for p in r["prompts"])
        assert r0["prompts"] + r1["prompts"] == one["prompts"]
        assert r0["rewards"] == r1["rewards"] == one["rewards"]
        assert r0["kept"] == r1["kept"] == one["kept"], "ranks disagree with each other or with one process"
        assert len(r0["kept_prompts"]) == len(r1["kept_prompts"]) == 4, "each rank trains an equal share"
        assert r0["advantages"] + r1["advantages"] == pytest.approx(one["advantages"], abs=1e-6)
        assert r0["num_items_in_batch"] == r1["num_items_in_batch"] == one["num_items_in_batch"]
    local_timings = ("pods/selection_time",)  # wall time, measured by each rank
    logs = [[{k: v for k, v in e.items() if k not in local_timings} for e in rank["logs"]] for rank in ranks]
    assert logs[0] == logs[1], "logged metrics differ across ranks"


def test_vllm_server_mode_with_two_processes(tiny_model_path, tmp_path):
    """Server mode across 2 ranks (vLLM stand-in, TRL's real gather/dedup/scatter): the engine gets each unique
    prompt once with n = pods_n, and each rank gets back its own prompts' completions (prompt ids match, and the
    importance-sampling ratio against the rank's own model is 1)."""
    ranks = run_worker(tiny_model_path, tmp_path, 2, "--generation", "vllm-server")
    assert ranks[0]["server_calls"] == [[2, 8], [2, 8]], "2 unique prompts per generation, n = 8 each"
    for rank in ranks:
        assert all(record["prompt_ids_match"] for record in rank["records"])
        ratios = [
            e["sampling/importance_sampling_ratio/mean"]
            for e in rank["logs"]
            if "sampling/importance_sampling_ratio/mean" in e
        ]
        assert ratios == pytest.approx([1.0, 1.0], abs=1e-3)
    assert ranks[0]["records"][0]["kept"] == ranks[1]["records"][0]["kept"]


@pytest.mark.parametrize("option", [["--m-start", "2"], ["--cross-group"]], ids=["m-schedule", "cross-group"])
def test_changing_or_cross_group_kept_counts_stay_equal_per_rank(tiny_model_path, tmp_path, option):
    """When the schedule changes M (2 then 4) or cross-group selection moves rows between prompts, both ranks still
    keep the same number of rows, and the same selection."""
    ranks = run_worker(tiny_model_path, tmp_path, 2, "--generation", "deterministic", *option)
    counts = [[len(r["kept_prompts"]) for r in rank["records"]] for rank in ranks]
    assert counts[0] == counts[1]
    assert counts[0] == ([2, 4] if option[0] == "--m-start" else [4, 4])
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["kept"] == r1["kept"]


def test_dropped_groups_are_counted_over_all_processes(tiny_model_path, tmp_path):
    """Dropping constant groups with a sequence-averaged loss (grpo, with KL), 2 processes x 2 accumulation steps:
    rank 0 holds only dropped rows, rank 1 none. The optimizer step's loss (mean over ranks of the summed
    micro-batches) still averages over the step's non-dropped sequences, as TRL's loss on those rows taken as one
    batch; a per-rank rescale made rank 0 count as half the step while contributing nothing."""
    ranks = run_worker(tiny_model_path, tmp_path, 2, "--drop-constant", "--loss-type", "grpo", "--accumulation", "2")
    records = [rank["loss_records"] for rank in ranks]
    assert [r["kept"] for r in records[0]] == [0] * 4 and [r["kept"] for r in records[1]] == [2] * 4
    for loss, reference in step_losses(records):
        assert loss == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_token_budget_spans_all_processes_for_token_level_losses(tiny_model_path, tmp_path):
    """D3S token selection with dapo (normalised over all processes' tokens): the two ranks together keep exactly
    the budget of their pooled valid tokens, and both log the same kept fraction."""
    ranks = run_worker(tiny_model_path, tmp_path, 2, "--token-fraction", "0.25", "--loss-type", "dapo")
    counts = [rank["token_counts"] for rank in ranks]
    assert len(counts[0]) == len(counts[1]) == 2
    for a, b in zip(*counts, strict=True):
        assert a["kept"] + b["kept"] == token_budget(0.25, a["valid"] + b["valid"])
    fractions = [
        [e["pods/token_fraction_kept"] for e in rank["logs"] if "pods/token_fraction_kept" in e] for rank in ranks
    ]
    assert fractions[0] == fractions[1] and len(fractions[0]) == 2

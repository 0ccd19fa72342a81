"""Real multi-process runs (torchrun, CPU, gloo): row layout, selection, advantages and vLLM server mode. The runs are
made once, in two launches (one per process count), and the tests read their records (`runs`)."""

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest
from helpers import join_runs, step_losses, torchrun, worker_env

from trl_pods.token_selection import token_budget

WORKER = Path(__file__).with_name("multiprocess_run.py")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]


def torchrun_command(worker: Path, model_path, out: Path, processes: int, *options: str) -> list[str]:
    return [*torchrun(processes), str(worker), str(model_path), str(out), *options]


def run_worker(
    model_path, out: Path, processes: int, *options: str, timeout: float = 600, worker: Path = WORKER
) -> list[dict]:
    """Run ``worker`` (tests/multiprocess_run.py) under torchrun and return each rank's record. A run that outlives
    `timeout` (e.g. ranks waiting on each other's collectives) fails the test, and all its processes are killed."""
    return run_workers(model_path, processes, {out: options}, timeout, worker)[out]


def run_workers(
    model_path, processes: int, runs: dict[Path, Sequence[str]], timeout: float = 600, worker: Path = WORKER
) -> dict[Path, list[dict]]:
    """`run_worker` for several ``runs`` (output folder -> options) in turn in one torchrun launch: the processes
    start, import and join their process group once. Returns each run's rank records."""
    for out in runs:
        out.mkdir(parents=True, exist_ok=True)
    command = [*torchrun(processes), str(worker), str(model_path)]
    command += join_runs([[str(out), *options] for out, options in runs.items()])
    process = subprocess.Popen(command, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        workers = psutil.Process(process.pid).children(recursive=True)  # torchrun gives each its own session
        for child in [process, *workers]:
            child.kill()
        process.communicate()
        pytest.fail(f"the {processes}-process run did not finish within {timeout} s (ranks out of step?)")
    assert process.returncode == 0, stderr[-4000:]
    return {out: [json.loads((out / f"rank{r}.json").read_text()) for r in range(processes)] for out in runs}


BUDGETED = ("--budgeted", "--reward", "zero-solved", "--prompts", "4", "--prompts-per-step", "4", "--steps", "3")
DETERMINISTIC = ("--generation", "deterministic")
ADAPTIVE = ("--adaptive", "--reward", "sevens-constant")
RUNS = {  # name -> (processes, options of tests/multiprocess_run.py): every run of the tests below
    **{f"{sampler}-{p}": (p, ("--sampler", sampler, *DETERMINISTIC)) for sampler in ("random", "max_variance")
       for p in (1, 2)},
    "vllm-server": (2, ("--generation", "vllm-server")),
    "vllm-colocate-tp2": (2, ("--generation", "vllm-colocate-tp2")),
    "m-schedule": (2, (*DETERMINISTIC, "--m-start", "2")),
    "cross-group": (2, (*DETERMINISTIC, "--cross-group")),
    **{f"adaptive-{p}": (p, (*DETERMINISTIC, *ADAPTIVE)) for p in (1, 2)},
    **{f"adaptive-{g}": (2, ("--generation", g, *ADAPTIVE)) for g in ("vllm-server", "vllm-colocate-tp2")},
    **{f"budgeted-{p}": (p, (*DETERMINISTIC, *BUDGETED)) for p in (1, 2)},
    "budgeted-vllm-server": (2, ("--generation", "vllm-server", *BUDGETED)),
    **{f"{d}-vllm-server": (2, ("--generation", "vllm-server", "--dynamic", d, "--reward", "sevens-constant"))
       for d in ("refill", "screened")},
    "auto": (2, ("--dynamic", "auto", "--reward", "sevens-constant", "--steps", "5", "--prompts", "24")),
    "dropped-groups": (2, ("--drop-constant", "--loss-type", "grpo", "--accumulation", "2")),
    "token-budget": (2, ("--token-fraction", "0.25", "--loss-type", "dapo")),
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tiny_model_path, tmp_path_factory) -> dict[str, list[dict]]:
    """Each run of `RUNS`: its rank records. The 1-process runs take one torchrun launch and the 2-process runs
    another (`run_workers`), so the tests pay for starting processes twice, not once a run; the module is one
    xdist group, so the runs are made once."""
    folder, found = tmp_path_factory.mktemp("multiprocess"), {}
    for processes in (1, 2):
        mine = {folder / name: options for name, (count, options) in RUNS.items() if count == processes}
        found |= {out.name: ranks for out, ranks in run_workers(tiny_model_path, processes, mine, 1200).items()}
    return found


def _ratios(logs: list[dict]) -> list[float]:
    """The mean vLLM importance-sampling ratio of every logged step."""
    key = "sampling/importance_sampling_ratio/mean"
    return [e[key] for e in logs if key in e]


@pytest.mark.parametrize("sampler", ["random", "max_variance"])
def test_two_processes_match_one_process(runs, sampler):
    """With identical rollouts (deterministic sampling), 2 processes reproduce a 1-process run over the same global
    batch: groups never span ranks, both ranks compute the 1-process selection, each trains an equal share, and the
    advantages and the global token count (num_items_in_batch) are the same; logged metrics agree across ranks."""
    ranks, (single,) = runs[f"{sampler}-2"], runs[f"{sampler}-1"]
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


def test_vllm_server_mode_with_two_processes(runs):
    """Server mode across 2 ranks (vLLM stand-in, TRL's real gather/dedup/scatter): the engine gets each unique
    prompt once with n = pods_n, and each rank gets back its own prompts' completions (prompt ids match, and the
    importance-sampling ratio against the rank's own model is 1)."""
    ranks = runs["vllm-server"]
    assert ranks[0]["server_calls"] == [[2, 8], [2, 8]], "2 unique prompts per generation, n = 8 each"
    for rank in ranks:
        assert all(record["prompt_ids_match"] for record in rank["records"])
        assert _ratios(rank["logs"]) == pytest.approx([1.0, 1.0], abs=1e-3)
    assert ranks[0]["records"][0]["kept"] == ranks[1]["records"][0]["kept"]


def test_vllm_colocate_tensor_parallel_engine_is_sized_for_the_tp_group(runs):
    """Colocate mode with vllm_tensor_parallel_size=2 on 2 ranks (stand-in engines, TRL's real TP subgroups,
    all-gather and slicing): each engine decodes both ranks' N-layout rows in one wave (max_num_seqs = 2 x 8 rows),
    and each rank trains on its own prompts' completions (prompt ids match, IS ratio 1)."""
    ranks = runs["vllm-colocate-tp2"]
    for rank in ranks:
        rows = 8  # per rank: 4 kept rows = 1 prompt x M=4, generated as 1 prompt x N=8
        assert rank["engine"]["max_num_seqs"] == 2 * rows
        assert [(c["sequences"], c["waves"]) for c in rank["engine"]["calls"]] == [(2 * rows, 1)] * 2
        assert all(record["prompt_ids_match"] for record in rank["records"])
        assert _ratios(rank["logs"]) == pytest.approx([1.0, 1.0], abs=1e-3)


@pytest.mark.parametrize("name", ["m-schedule", "cross-group"])
def test_changing_or_cross_group_kept_counts_stay_equal_per_rank(runs, name):
    """When the schedule changes M (2 then 4) or cross-group selection moves rows between prompts, both ranks still
    keep the same number of rows, and the same selection."""
    ranks = runs[name]
    counts = [[len(r["kept_prompts"]) for r in rank["records"]] for rank in ranks]
    assert counts[0] == counts[1]
    assert counts[0] == ([2, 4] if name == "m-schedule" else [4, 4])
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["kept"] == r1["kept"]


def test_adaptive_two_processes_match_one_process(runs):
    """Adaptive generation with identical rollouts on 1 and 2 processes: the same waves (rollouts per group),
    rewards, selections, advantages and global token count, also in a generation where only one rank's group has
    no contrast (the other rank pads the wave and nothing hangs); logged metrics agree across ranks."""
    ranks, (single,) = runs["adaptive-2"], runs["adaptive-1"]
    counts = [record["counts"] for record in single["records"]]
    assert counts == [[4, 8], [8, 4]], "each rank alone tops up once (prompts 0 and 7 land on ranks 1, then 0)"
    for one, r0, r1 in zip(single["records"], ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["counts"] == r1["counts"] == one["counts"]
        assert json.dumps(r0["rewards"]) == json.dumps(r1["rewards"]) == json.dumps(one["rewards"])  # NaN-padded
        assert r0["kept"] == r1["kept"] == one["kept"]
        assert len(r0["kept_prompts"]) == len(r1["kept_prompts"]) == 4
        assert r0["advantages"] + r1["advantages"] == pytest.approx(one["advantages"], abs=1e-6)
        assert r0["num_items_in_batch"] == r1["num_items_in_batch"] == one["num_items_in_batch"]
    logs = [[{k: v for k, v in e.items() if k != "pods/selection_time"} for e in rank["logs"]] for rank in ranks]
    assert logs[0] == logs[1], "logged metrics differ across ranks"
    padding = [e["pods/rollouts_padding"] for e in logs[0] if "pods/rollouts_padding" in e]
    assert padding == [4.0, 4.0], "the idle rank pads the second wave with 4 rollouts"
    assert [e["pods/rollouts_padding"] for e in single["logs"] if "pods/rollouts_padding" in e] == [0.0, 0.0]


@pytest.mark.parametrize("generation", ["vllm-server", "vllm-colocate-tp2"])
def test_adaptive_vllm_with_two_processes(runs, generation):
    """vLLM stand-in (TRL's real gather/dedup/broadcast for the server, all-gather/slice within a tensor-parallel
    group for colocate) with adaptive waves over 2 ranks, including a wave only one rank needs: every wave sends
    equal rows from each rank, completions come back to the right rows (prompt ids match, importance-sampling
    ratio 1), and ranks agree on the selection."""
    ranks = runs[f"adaptive-{generation}"]
    assert [record["counts"] for record in ranks[0]["records"]] == [[4, 8], [8, 4]], "each rank alone tops up once"
    if generation == "vllm-server":  # both ranks' rows, deduplicated: 2 prompts per wave, n = 4 each
        assert ranks[0]["server_calls"] == [[2, 4]] * 4
    else:  # each TP rank's engine sees both ranks' 4 rows per wave
        assert all([(c["requests"], c["n"]) for c in rank["engine"]["calls"]] == [(8, 1)] * 4 for rank in ranks)
    for rank in ranks:
        assert all(record["prompt_ids_match"] for record in rank["records"])
        assert _ratios(rank["logs"]) == pytest.approx([1.0, 1.0], abs=1e-3)
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["kept"] == r1["kept"] and r0["counts"] == r1["counts"]


def test_budgeted_two_processes_spend_their_own_budgets_without_padding(runs):
    """Budgeted generation on 2 ranks (two prompts each, all four every step, identical rollouts): both ranks compute
    the same allocation, each spends exactly its own share (12 rollouts), so no rank pads; once prompt 0's history
    shows it always solved it gets 4 (as on one process) and its rank's other prompt 8 (one process spreads what
    prompt 0 leaves over all three others); rewards and selections agree across ranks, and the logged metrics too."""
    ranks, (single,) = runs["budgeted-2"], runs["budgeted-1"]
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["counts"] == r1["counts"]
        assert json.dumps(r0["rewards"]) == json.dumps(r1["rewards"])  # NaN-padded
        assert r0["kept"] == r1["kept"]
        assert [sum(r0["counts"][:2]), sum(r0["counts"][2:])] == [12, 12], "each rank spends its own share"
    records = zip(ranks[0]["records"], ranks[1]["records"], strict=True)
    two = [(r0["prompts"] + r1["prompts"], r0["counts"]) for r0, r1 in records]
    one = [(record["prompts"], record["counts"]) for record in single["records"]]
    for run, (prompts, counts) in [("two", step) for step in two[1:]] + [("one", step) for step in one[1:]]:
        groups = prompts[::8]  # each group's prompt (8 rows each)
        solved = next(g for g, prompt in enumerate(groups) if prompt.startswith("What is 0 "))
        assert counts[solved] == 4 and sum(counts) == 24, (run, groups, counts)
        if run == "two":  # what prompt 0 leaves of its rank's share goes to the other prompt of that rank
            assert counts[solved ^ 1] == 8, (groups, counts)
    logs = [[{k: v for k, v in e.items() if k != "pods/selection_time"} for e in rank["logs"]] for rank in ranks]
    assert logs[0] == logs[1], "logged metrics differ across ranks"
    assert [e["pods/rollouts_padding"] for e in logs[0] if "pods/rollouts_padding" in e] == [0.0] * 3
    assert [e["pods/rollouts_generated"] for e in logs[0] if "pods/rollouts_generated" in e] == [24.0] * 3


def test_budgeted_vllm_server_with_two_processes(runs):
    """vLLM server mode (stand-in; TRL's real gather, dedup and scatter) with budgeted generation on 2 ranks: one call
    per generation with every rank's rows, each its own request (n = 1), and the completions back in the right rows
    (prompt ids match, importance-sampling ratio 1)."""
    ranks = runs["budgeted-vllm-server"]
    counts = [record["counts"] for record in ranks[0]["records"]]
    assert counts[0] == [6, 6, 6, 6] and all(sum(c) == 24 for c in counts)
    assert ranks[0]["server_calls"] == [[24, 1]] * 3, "one call per generation: both ranks' rows, n = 1 each"
    for rank in ranks:
        assert all(record["prompt_ids_match"] for record in rank["records"])
        assert _ratios(rank["logs"]) == pytest.approx([1.0] * 3, abs=1e-3)
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["kept"] == r1["kept"] and r0["counts"] == r1["counts"]


@pytest.mark.parametrize("dynamic", ["refill", "screened"])
def test_dynamic_sampling_vllm_server_with_two_processes(runs, dynamic):
    """Refill and screened in vLLM server mode (stand-in; TRL's real gather, dedup and scatter) on 2 ranks: every
    call asks for its rollouts per prompt (a draw: N; the pilot: 4, then the commit: the other 4), both ranks choose
    alike and train on equal rows, and completions come back to their rows (importance-sampling ratio 1)."""
    ranks = runs[f"{dynamic}-vllm-server"]
    calls = ranks[0]["server_calls"]
    if dynamic == "screened":
        assert calls == [[4, 4], [2, 4]] * 2, "pilot of the pool (4 prompts), then the 2 chosen"
    else:
        assert all(n == 8 for _, n in calls) and 2 <= len(calls) <= 4, calls
    for rank in ranks:
        assert all(record["prompt_ids_match"] for record in rank["records"])
        assert _ratios(rank["logs"]) == pytest.approx([1.0] * 2, abs=1e-3)
        assert all(len(record["kept_prompts"]) == 4 for record in rank["records"]), "one trained prompt x M rows"
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["kept"] == r1["kept"] and r0["counts"] == r1["counts"]


def test_auto_plans_alike_on_two_processes_from_measured_costs(runs):
    """Auto generation with costs measured on 2 ranks, whose timings differ: each generation's timing is the most
    either rank measured, so both explore for the same three generations, then plan alike from the fitted costs
    (the same rollouts per prompt and draws on both ranks, no collective out of step), and both select alike."""
    ranks = runs["auto"]
    plans = [[(e["pods/exploring"], e["pods/rollouts_per_prompt"]) for e in r["logs"] if "pods/exploring" in e]
             for r in ranks]  # fmt: skip
    assert plans[0] == plans[1] and [exploring for exploring, _ in plans[0]] == [1.0, 1.0, 1.0, 0.0, 0.0], plans
    for r0, r1 in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert r0["kept"] == r1["kept"] and r0["counts"] == r1["counts"]


def test_dropped_groups_are_counted_over_all_processes(runs):
    """Dropping constant groups with a sequence-averaged loss (grpo, with KL), 2 processes x 2 accumulation steps:
    rank 0 holds only dropped rows, rank 1 none. The optimizer step's loss (mean over ranks of the summed
    micro-batches) still averages over the step's non-dropped sequences, as TRL's loss on those rows taken as one
    batch; a per-rank rescale made rank 0 count as half the step while contributing nothing."""
    ranks = runs["dropped-groups"]
    records = [rank["loss_records"] for rank in ranks]
    assert [r["kept"] for r in records[0]] == [0] * 4 and [r["kept"] for r in records[1]] == [2] * 4
    for loss, reference in step_losses(records):
        assert loss == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_token_budget_spans_all_processes_for_token_level_losses(runs):
    """D3S token selection with dapo (normalised over all processes' tokens): the two ranks together keep exactly
    the budget of their pooled valid tokens, and both log the same kept fraction."""
    ranks = runs["token-budget"]
    counts = [rank["token_counts"] for rank in ranks]
    assert len(counts[0]) == len(counts[1]) == 2
    for a, b in zip(*counts, strict=True):
        assert a["kept"] + b["kept"] == token_budget(0.25, a["valid"] + b["valid"])
    fractions = [
        [e["pods/token_fraction_kept"] for e in rank["logs"] if "pods/token_fraction_kept" in e] for rank in ranks
    ]
    assert fractions[0] == fractions[1] and len(fractions[0]) == 2

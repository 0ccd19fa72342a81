"""The benchmarks (`benchmarks/`): every generated page is its script's rendering of the committed data, each page's
command gives its measurement back, the harness measures every planned run once and resumes, and each study's smoke
mode runs the code path of a full run on tiny sizes and writes nothing (the scripts run for real only on a GPU or for
hours, so this keeps them from rotting)."""

import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
BENCHMARKS = REPO / "benchmarks"
DOCS = REPO / "docs"
GENERATED = re.compile(r"<!-- Written by `python benchmarks/(\w+)\.py --report` from docs/benchmarks/data/\S+\*;")
PAGES = sorted(page for page in (DOCS / "benchmarks").glob("*.md") if GENERATED.search(page.read_text()))


def _module(name: str):
    """``benchmarks/<name>.py``, imported as the scripts import each other (benchmarks/ on the path)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_generated_page_is_its_script_rendering_of_the_committed_data(page):
    """A page whose marker names its script is exactly what that script's `render` writes from the committed data in
    docs/benchmarks/data/ and the notes beside it: a table edited by hand, data changed without ``--report``, or a
    report that needs anything but the data (the machine it runs on, a training run) fails here."""
    script = GENERATED.search(page.read_text()).group(1)
    assert _module(script).render() == page.read_text(), f"run: python benchmarks/{script}.py --report"


@pytest.mark.parametrize("script", ["learning_efficiency", "dynamic_sampling"])
def test_each_measurement_command_asks_for_its_runs_settings_and_data_file(script):
    """The commands a page gives for a measurement, read by the script's own command line, measure exactly the
    (method, seed) runs saved, with the settings they were measured with (flags left at their defaults included),
    into the same data file: a command that dropped a flag, asked for seeds a method did not run, or a renamed data
    file, would measure something else."""
    study = _module(script)
    for path, runs in study.STUDY.measurements().items():
        sentence = re.search(r"Commands?: (`.*?`)\.", study.section(runs, path)).group(1)
        planned, saved = set(), {**study.DEFAULTS, **runs[0].get("settings", {})}
        for command in re.findall(r"`(.*?)`", sentence):
            args = study.PARSER.parse_args(shlex.split(command)[2:])
            planned |= {(method, seed) for method in args.methods for seed in range(args.seeds)}
            assert {key: getattr(args, key) for key in study.SETTINGS} == {key: saved[key] for key in study.SETTINGS}
            assert study.data_file(args).stem == path.stem
        assert planned == {(r["method"], r["seed"]) for r in runs}


def test_measure_saves_each_planned_run_once_with_its_settings_and_resumes(tmp_path):
    """`harness.measure` measures the planned runs not saved yet and saves each with the measurement's settings and
    machine, so a measurement started again after a stop measures only what is missing; smoke mode measures every
    run and saves none; runs of other settings, or an earlier measurement under the same name, are refused."""
    harness = _module("harness")
    store, planned, measured = harness.RunStore(tmp_path / "runs.jsonl", ("method", "seed")), [("a", 0), ("b", 0)], []

    def run(method: str, seed: int) -> dict:
        measured.append((method, seed))
        return {"method": method, "seed": seed}

    smoke = harness.measure(store, planned, run, {"steps": 2}, smoke=True)
    assert [(r["method"], r["seed"]) for r in smoke] == planned and not store.path.exists()
    measured.clear()
    harness.measure(store, planned[:1], run, {"steps": 2}, smoke=False)  # stopped after its first run
    runs = harness.measure(store, planned, run, {"steps": 2}, smoke=False)
    assert measured == planned
    assert [(r["method"], r["seed"], r["settings"]) for r in runs] == [("a", 0, {"steps": 2}), ("b", 0, {"steps": 2})]
    assert all(r["environment"].startswith("- Versions: Python ") for r in runs)
    with pytest.raises(SystemExit, match="other settings"):
        harness.measure(store, planned, run, {"steps": 3}, smoke=False)
    (tmp_path / "earlier.json").write_text('{"args": {}, "runs": []}')
    with pytest.raises(SystemExit, match="earlier measurement"):
        harness.measure(harness.RunStore(tmp_path / "earlier.jsonl", ("method", "seed")), planned, run, {}, False)


def _files(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _run_smoke(script: str, *options: str, env: dict[str, str] | None = None) -> str:
    """Run ``benchmarks/<script> --smoke``; assert that it succeeds and leaves docs/ untouched; its stdout."""
    before = _files(DOCS)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path]), **(env or {})}
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--smoke", *options],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "smoke run: nothing written" in result.stdout
    assert _files(DOCS) == before
    return result.stdout


def _first_table(out: str) -> dict[str, dict[str, str]]:
    """The first markdown table of ``out``: each row's cells by column header, by the row's first cell."""
    lines = re.search(r"^(\|.*\|\n)+", out, re.MULTILINE).group(0).splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


@pytest.mark.slow
@pytest.mark.parametrize("model", [[], ["--shape", "SmolLM2-135M", "--lora"]], ids=["qwen2-full", "llama-lora"])
def test_gpu_cost_curve_smoke_mode_times_every_size_and_fits_both_phases(model):
    """`benchmarks/gpu_cost_curve.py --smoke` times a generate call per rollout count and an optimizer step per row
    count on a tiny model (a fully trained Qwen2, or a Llama trained through the demo's LoRA adapters), in rounds,
    fits both phases, and leaves docs/ untouched."""
    out = _run_smoke("gpu_cost_curve.py", "--rounds", "1", "--rollouts", "2", "8", "--rows", "2", "4", *model)
    trained = re.search(r"\(([\d,]+) parameters, ([\d,]+) trained;", out).groups()
    parameters, trainable = (int(n.replace(",", "")) for n in trained)
    assert (trainable < parameters / 2) if model else (trainable == parameters)
    assert re.findall(r"^\| (generation \| \d+ rollouts|update \| \d+ rows) \|", out, re.M) == [
        "generation | 2 rollouts",
        "generation | 8 rollouts",
        "update | 2 rows",
        "update | 4 rows",
    ]
    assert len(re.findall(r"^round 1 ", out, re.M)) == 4, "one measured round of every size, after the warm-up"
    assert re.search(r"Fits: generation = .* ms × rollouts \+ .* s per call; update = .* ms × rows", out)


@pytest.mark.slow
def test_dynamic_sampling_smoke_mode_trains_every_kind_of_method_from_scratch():
    """`benchmarks/dynamic_sampling.py --smoke` trains GRPO, PODS, refill, screened and budgeted generation a few
    steps from scratch (8 prompts per step), counts the rollouts each generates (screened: its pilot for twice the
    prompts and the rest for half of them; budgeted: within its budget), and leaves docs/ untouched."""
    methods = ["GRPO 4", "GRPO 4 + refill", "budgeted 4-16 (mean 8)", "PODS 16->4", "screened 2x4->16->4"]
    out = _run_smoke("dynamic_sampling.py", "--seeds", "1", "--steps", "4", "--eval_every", "2", "--methods", *methods)
    rows = _first_table(out)
    assert list(rows) == methods
    rollouts = {method: float(row["rollouts / step"]) for method, row in rows.items()}
    assert rollouts["GRPO 4"] == 8 * 4 and rollouts["PODS 16->4"] == 8 * 16
    assert rollouts["screened 2x4->16->4"] == 2 * 8 * 4 + 8 * 12
    assert rollouts["budgeted 4-16 (mean 8)"] <= 8 * 8 and rollouts["GRPO 4 + refill"] >= 8 * 4
    assert all(row["rollouts to 0.4"] for row in rows.values())


def test_auto_is_read_against_the_fastest_fixed_arm_it_could_have_been_every_run_counted():
    """Each auto arm of a from-scratch measurement is read in minutes to a target against the fastest fixed arm with
    at most its rollouts per prompt (auto 4->4 never against PODS 16->4), a run that misses counted at its last
    minutes; a pair where no run of either reached the target says so instead of a ratio of minutes at the budget."""
    study = _module("dynamic_sampling")

    def run(method, seed, minutes, reached):  # evaluations: [step, minutes, greedy, sampled, rollouts]
        return {"method": method, "seed": seed,
                "curve": [[0, 0.0, 0.0, 0.0, 0], [50, minutes / 2, 0.5 if reached else 0.1, 0.1, 10],
                          [100, minutes, 0.6 if reached else 0.2, 0.1, 20]]}  # fmt: skip

    runs = [
        *(run("PODS 16->4", s, 4.0 + s, True) for s in range(3)),  # reaches 0.4 at half its minutes: 2.5 on average
        *(run("GRPO 4 + sized refill", s, 2.0, s > 0) for s in range(3)),  # 1.0, 1.0 and a miss at 2.0: 1.33
        *(run("auto 16->4", s, 2.0, True) for s in range(3)),  # 1.0
        *(run("auto 4->4", s, 3.0, False) for s in range(3)),  # every run a miss at 3.0
    ]
    methods = ["PODS 16->4", "GRPO 4 + sized refill", "auto 16->4", "auto 4->4"]
    assert study.minutes_to(runs[0], 0.4) == 2.0 and study.minutes_to(runs[3], 0.4) == 2.0
    lines = study.auto_against_fixed(runs, methods, 0.4).splitlines()
    assert lines[2].startswith("- `auto 16->4` 1.00 (0 of 3 runs missed) against `GRPO 4 + sized refill`'s 1.33 "
                               "(1 of 3 runs missed): 0.75× (")  # fmt: skip
    assert lines[3].startswith("- `auto 4->4` 3.00 (3 of 3 runs missed) against `GRPO 4 + sized refill`'s 1.33")
    assert study.auto_against_fixed(runs, methods, 0.9).splitlines()[2:] == [
        "- `auto 16->4` against `GRPO 4 + sized refill`: no run of either reached it",
        "- `auto 4->4` against `GRPO 4 + sized refill`: no run of either reached it",
    ]
    assert study.auto_against_fixed(runs, ["PODS 16->4", "auto 4->4"], 0.4) == ""


def test_auto_floor_is_read_against_the_fastest_other_fixed_arm():
    """Where a learning check runs auto's floor (sized refill at its ``pods_n``, found by its settings), the page also
    reads the floor against the fastest of the other fixed arms, so that a gap auto shares with its floor can be told
    from one of its own; auto itself is still read against every fixed arm, the floor included, and a measurement
    without another fixed arm gets no floor line."""
    study = _module("dynamic_sampling")
    assert study.floor_of("auto 16->4") == "PODS 16->4 + sized refill"
    assert study.floor_of("auto 4->4") == "GRPO 4 + sized refill"

    def run(method, seed, minutes):  # reaches 0.4 at half its minutes
        curve = [[0, 0.0, 0.0, 0.0, 0], [50, minutes / 2, 0.5, 0.1, 10], [100, minutes, 0.6, 0.1, 20]]
        return {"method": method, "seed": seed, "curve": curve}

    runs = [
        *(run("PODS 16->4", s, 2.0 + s) for s in range(3)),  # 1.5 on average
        *(run("PODS 16->4 + sized refill", s, 3.0 + s) for s in range(3)),  # 2.0
        *(run("auto 16->4", s, 4.0 + s) for s in range(3)),  # 2.5
    ]
    methods = ["PODS 16->4", "PODS 16->4 + sized refill", "auto 16->4"]
    text = study.auto_against_fixed(runs, methods, 0.4)
    assert "and auto's floor (sized refill at its `pods_n`) against the fastest of the others" in text
    lines = text.splitlines()[2:]
    assert lines[0].startswith("- `auto 16->4` 2.50 (0 of 3 runs missed) against `PODS 16->4`'s 1.50 (0 of 3 runs "
                               "missed): 1.67× (")  # fmt: skip
    assert lines[1].startswith("- `PODS 16->4 + sized refill` 2.00 (0 of 3 runs missed) against `PODS 16->4`'s 1.50 "
                               "(0 of 3 runs missed): 1.33× (")  # fmt: skip
    alone = study.auto_against_fixed(runs, methods[1:], 0.4)
    assert "floor" not in alone and len(alone.splitlines()) == 3


@pytest.mark.slow
def test_learning_efficiency_smoke_mode_trains_the_demo_model_and_renders_its_section(smollm2_cache):
    """`benchmarks/learning_efficiency.py --smoke` evaluates the base model, trains GRPO 4 and PODS 8 -> 4 on the
    demo's arguments (the tiny model standing in for SmolLM2), evaluates every checkpoint, and renders the section a
    full run writes, with the rollouts each method generated, leaving docs/ untouched."""
    out = _run_smoke(
        "learning_efficiency.py", "--seeds", "1", "--steps", "2", "--eval_every", "1", "--methods", "GRPO 4",
        "PODS 8->4", env={"TRL_PODS_CACHE": str(smollm2_cache), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert "## add1: GRPO 4 vs PODS 8->4\n" in out
    rows = _first_table(out)
    assert {method: row["rollouts / step"] for method, row in rows.items()} == {"GRPO 4": "4.0", "PODS 8->4": "8.0"}
    assert {row["runs reaching 0.75"][-2:] for row in rows.values()} == {"/1"}


def test_planning_smoke_mode_times_auto_and_refill_and_the_exact_search():
    """`benchmarks/planning.py --smoke` times auto's search with both cost models, its fit of measured costs, sized
    refill's draw and the exact search as it was, at 16 and 32 prompts a process, prints the table and writes
    nothing."""
    table = _first_table(_run_smoke("planning.py"))
    assert set(table) == {"16 (64)", "32 (128)"} and "cost fit" in table["16 (64)"]
    assert all(
        re.fullmatch(r"[\d.,]+ \([\d.,]+\)", table["16 (64)"][column])
        for column in table["16 (64)"]
        if column != "prompts a process (room)"
    )
    assert table["32 (128)"]["before H200"] == "not timed"


@pytest.mark.slow
def test_reasoning_gym_base_smoke_mode_reads_each_task_both_ways(tiny_model_path):
    """`benchmarks/reasoning_gym_base.py --smoke` generates greedily on a numeric and a text task's held-out problems
    with the tiny model, scores them raw and through `extract_answer`, prints the table and leaves docs/ untouched."""
    out = _run_smoke("reasoning_gym_base.py", "--model", str(tiny_model_path))
    rows = _first_table(out)
    assert list(rows) == ["chain_sum", "spell_backward"]
    for row in rows.values():
        assert 0 <= float(row["raw accuracy"]) <= 1 and 0 <= float(row["extracted accuracy"].split()[0]) <= 1
        assert 0 < float(row["one answer to all"]) <= 1


def test_one_answer_to_all_scores_the_share_of_the_most_common_answer():
    """`reasoning_gym_base.constant_accuracy` is what a policy that gives one answer to every problem scores at best:
    the share of the most common gold answer (the race's candidates must keep it under 10%)."""
    base = _module("reasoning_gym_base")
    assert base.constant_accuracy(["1", "1", "2", "1", "3"]) == 0.6
    assert base.constant_accuracy(["4", "5"]) == 0.5


def test_race_rg_replay_fits_the_grid_point_of_least_squared_error():
    """`race_rg_replay.fit_beta`, which scores the whole grid at once on tensors, returns the grid point whose squared
    error, scored one point at a time with the planner's own `trl_pods.contrast.contrast_rate`, is the least: the
    same point or its mirror (``Beta(a, b)`` and ``Beta(b, a)`` have the same contrast rates, rounding picks one)."""
    from trl_pods.contrast import contrast_rate

    replay = _module("race_rg_replay")
    rates = (0.3, 0.41, 0.5)

    def error(a: float, b: float) -> float:
        return sum((contrast_rate(a, b, n) - r) ** 2 for n, r in zip(replay.LADDER, rates, strict=True))

    least = min(((a, b) for a in replay.GRID for b in replay.GRID), key=lambda ab: error(*ab))
    fitted = replay.fit_beta(rates)
    assert fitted in (least, least[::-1]) and error(*fitted) == pytest.approx(error(*least), rel=1e-12)


def test_race_rg_replay_takes_auto_states_from_a_race_log_and_reproduces_their_plans():
    """`benchmarks/race_rg_replay.py` takes from a race log only auto's planning lines, each with the task and seed of
    the run it belongs to (the summary line a run ends with) and the plan it announced; replayed as raced, the
    committed states give the rollouts per prompt auto announced in every state and its whole plan in at least 4 of
    5 (the fitted ``Beta(a, b)`` stands in for the run's own fit; the others are near-ties, a prompt or a call apart,
    the log rounding the rates to 2 decimals), so the variants' table speaks for what auto would have done."""
    replay = _module("race_rg_replay")
    line = (
        "[trl_pods] pods_generation='auto': this is PODS 8 -> 4 (8 rollouts per prompt, 11 prompts per process in the "
        "first call, at most 1 call): expected 1.00 calls, 3.95 of 4 groups with contrast, 13 s a step (0.303 groups "
        "with contrast a second per process); costs: 1.53 s a call, 34.3 ms a rollout, 8.48 s the rest of a step "
        "(measured); contrast rate 0.42 at 4, 0.57 at 8, 0.69 at 16 rollouts"
    )
    log = "\r".join([f" 5%|   | 3/60 {line}", "reasoning_gym:basic_arithmetic auto 16->4 seed 1: 0: 0.160, 10: 0.220",
                     line, "reasoning_gym:products PODS 16->4 seed 1: 0: 0.225, 10: 0.310"])  # fmt: skip
    (state,) = replay.extract(log)
    assert (state["task"], state["seed"], state["plan"]) == ("reasoning_gym:basic_arithmetic", 1, [8, 11, 1])
    assert [state["call"], state["rollout"], state["step"], *state["rates"]] == pytest.approx(
        [1.53, 0.0343, 8.48, 0.42, 0.57, 0.69]
    )
    committed = replay.read_states()
    same, same_n = replay.agreement(committed)
    assert same_n == len(committed) and same >= 0.8 * len(committed), (same, same_n, len(committed))

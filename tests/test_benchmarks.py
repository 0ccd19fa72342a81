"""The benchmarks (`benchmarks/`): every generated page is its script's rendering of the committed data, each race's
figure draws the same accuracies its equal-compute table reads and comes out the same from the same data, and the GPU
cost curve's smoke mode runs the code path of a full measurement on tiny sizes and writes nothing (it runs for real
only on a GPU)."""

import importlib
import os
import re
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


def _run_smoke(script: str, *options: str) -> str:
    """Run ``benchmarks/<script> --smoke``; assert that it succeeds and leaves docs/ untouched; its stdout."""
    before = {path: path.read_bytes() for path in sorted(DOCS.rglob("*")) if path.is_file()}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke", *options], env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "smoke run: nothing written" in result.stdout
    assert {path: path.read_bytes() for path in sorted(DOCS.rglob("*")) if path.is_file()} == before
    return result.stdout


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
        "generation | 2 rollouts", "generation | 8 rollouts", "update | 2 rows", "update | 4 rows"]  # fmt: skip
    assert len(re.findall(r"^round 1 ", out, re.M)) == 4, "one measured round of every size, after the warm-up"
    assert re.search(r"Fits: generation = .* ms × rollouts \+ .* s per call; update = .* ms × rows", out)

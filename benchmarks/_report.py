"""Shared pieces of the benchmark scripts: the machine and versions, and rewriting one section of the report.

Each benchmark owns the part of ``docs/benchmarks.md`` between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
and rewrites only that part, so the scripts can be re-run independently in any order.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import re
import shlex
import statistics
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
REPORT = DOCS / "benchmarks.md"

INTRO = """# Benchmarks

Measurements of `trl_pods`, on a 2-core CPU unless a section says otherwise. Each section below is written by one
script, which states the exact command that produced it, the versions and the machine; re-running a script rewrites
only its own section and figure. The sections follow the order in which they were measured; the table first says what
they settled. Two sections were measured on an H200 GPU (random-weight models of real shapes, HF `generate`; vLLM could
not be brought there); small CPU models with few seeds show directions, not the paper's numbers.
"""
"""The opening of a new docs/benchmarks.md. The "What to choose" table that follows it there is written by hand from
the sections' results (each row links to its section), and no script rewrites it."""

if str(REPO) not in sys.path:  # `python benchmarks/<name>.py` puts benchmarks/, not the repository, on the path
    sys.path.insert(0, str(REPO))


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def versions(packages: tuple[str, ...] = ("torch", "trl", "transformers")) -> dict[str, str]:
    """Each package's installed version, or '(not installed)'."""
    found = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "(not installed)"
    return found


def environment() -> str:
    """Markdown lines with the versions and the machine."""
    installed = ", ".join(f"{package} {v}" for package, v in versions().items())
    return (
        f"- Versions: Python {platform.python_version()}, {installed}.\n"
        f"- Machine: {cpu_model()} ({os.cpu_count()} logical cores visible, shared with other jobs while measured), "
        f"{platform.system()} {platform.machine()}; no GPU, everything runs on the CPU."
    )


def write_section(name: str, body: str) -> None:
    """Replace the ``name`` section of docs/benchmarks.md with ``body`` (appended if absent; file created if missing).

    The file is locked while it is rewritten, so benchmarks run side by side do not lose each other's sections.
    """
    DOCS.mkdir(exist_ok=True)
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    with open(REPORT, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read() or INTRO
        if pattern.search(text):
            text = pattern.sub(lambda _: block, text)
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        f.seek(0)
        f.truncate()
        f.write(text)
    print(f"wrote the {name!r} section of {REPORT.relative_to(REPO)}")


def figure_path(name: str) -> Path:
    """Where a benchmark's figure goes (docs/NAME), creating docs/ if needed."""
    DOCS.mkdir(exist_ok=True)
    return DOCS / name


def fmt_time(seconds: float) -> str:
    """A duration with a unit that keeps 3 significant digits readable: ns, µs, ms or s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def saved_runs(raw: Path, args: argparse.Namespace) -> list[dict]:
    """The runs of an earlier measurement of the same section (``--keep_runs``), which must have used the same
    settings; only its seeds below ``--seeds`` and the chosen ``--methods``."""
    saved = json.loads(raw.read_text())
    ignored = ("seeds", "keep_runs", "smoke")
    earlier = {k: v for k, v in saved["args"].items() if k not in ignored}
    now = {k: v for k, v in vars(args).items() if k not in ignored}
    if earlier != now:
        raise SystemExit(f"--keep_runs: {raw} was measured with other settings ({earlier}); drop --keep_runs.")
    return [r for r in saved["runs"] if r["seed"] < args.seeds and r["method"] in args.methods]


def command_line(script: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The command that reproduces ``args``: ``python benchmarks/SCRIPT`` with the flags that differ from defaults."""
    defaults = vars(parser.parse_args([]))
    flags = [
        part
        for key, value in vars(args).items()
        if value != defaults[key]
        for part in (f"--{key}", *([] if value is True else value if isinstance(value, list) else [value]))
    ]
    return shlex.join(["python", f"benchmarks/{script}", *map(str, flags)])


def plot_accuracy_curves(runs: list[dict], path: Path, ylabel: str, minutes_label: str, marker: str | None) -> None:
    """Mean accuracy per method (thin lines: each seed) against optimizer steps and training minutes. A run's
    ``curve`` holds (step, minutes, accuracy, ...) points at the same steps for every seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, method in enumerate(dict.fromkeys(r["method"] for r in runs)):
        curves = [r["curve"] for r in runs if r["method"] == method]
        steps = [point[0] for point in curves[0]]
        mean_accuracy = [statistics.mean(c[k][2] for c in curves) for k in range(len(steps))]
        mean_minutes = [statistics.mean(c[k][1] for c in curves) for k in range(len(steps))]
        for axis, xs, x in ((axes[0], steps, 0), (axes[1], mean_minutes, 1)):
            axis.plot(xs, mean_accuracy, marker=marker, color=f"C{i}", label=method)
            for c in curves:
                axis.plot([p[x] for p in c], [p[2] for p in c], color=f"C{i}", alpha=0.2)
    axes[0].set(xlabel="optimizer step", ylabel=ylabel, ylim=(0, 1))
    axes[1].set(xlabel=minutes_label, ylim=(0, 1))
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)

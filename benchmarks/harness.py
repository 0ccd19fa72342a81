"""The benchmarks' harness: what every study shares, so that a study's script says only what it measures.

A study is a script ``benchmarks/<name>.py`` (`Study`). It saves what it measures under ``docs/benchmarks/data/`` and
writes its page, ``docs/benchmarks/<page>.md``, whole, from those files alone: ``--report`` rewrites the page without
measuring, and ``tests/test_benchmarks.py`` re-renders every generated page from the committed data. What a data file
cannot hold (the versions of runs saved before they recorded them, a reading written by hand) lives beside it in
``<name>.notes.md`` (`notes`), which the page includes.

* The command line: `Study.parser` (``--smoke``, ``--report``; for studies of runs ``--seeds``, ``--methods``,
  ``--tag`` and their sizes) and `command_line`, the command that gives a measurement's settings back.
* Runs: `RunStore` (JSON lines appended as each run ends, under a lock; claims, so that processes share a
  measurement), `measure` (the planned runs not saved yet, with resume), `load_runs` (a data file's runs),
  `mean_logged` (a metric of the trainer's log).
* Timing: `interleaved` (rounds of every job, the order rotated each round).
* Statistics over seeds: `mean_of`, `spread` (mean or median, with min–max), `first_reaching`, `ratio_ci` (ratio
  of means with `bootstrap_ratio_ci` and `permutation_p`, exact or over sampled splits).
* The machine: `cpu_model`, `versions`, `environment`.
* Writing: `Study.render` and `Study.write` (the page under its generated marker), `Study.render_runs` (a study of
  runs: a section per measurement), `plot_accuracy_curves`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import itertools
import json
import math
import os
import platform
import random
import shlex
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = DOCS / "benchmarks"
DATA = PAGES / "data"
if str(REPO) not in sys.path:  # `python benchmarks/<name>.py` puts benchmarks/, not the repository, on the path
    sys.path.insert(0, str(REPO))

T = TypeVar("T")
RUN_FLAGS = {  # the sizes of a study of runs (methods x seeds, each run some optimizer steps): flag, help
    "seeds": "seeds 0..SEEDS-1 of every method (a seed fixes a run's data order, sampling and initial weights)",
    "steps": "optimizer steps per run",
    "eval_every": "optimizer steps between held-out evaluations",
    "prompts_per_step": "prompts per optimizer step",
}


@dataclasses.dataclass(frozen=True)
class Study:
    """A study: its script ``benchmarks/<script>``, its page ``docs/benchmarks/<page>.md`` and the page's title, and
    its data files ``docs/benchmarks/data/<data>*``."""

    script: str
    page: str
    title: str
    data: str

    def files(self, *suffixes: str) -> list[Path]:
        """The study's data files ending in one of ``suffixes``, by name."""
        return sorted(path for path in DATA.glob(f"{self.data}*") if path.name.endswith(suffixes))

    def parser(self, doc: str, methods: Sequence[str] = (), default_methods: Sequence[str] = (), **sizes: int):
        """The command line every study shares: ``--smoke`` and ``--report``; with ``methods``, a study of runs:
        ``--methods``, ``--tag`` and the `RUN_FLAGS` given in ``sizes`` (their defaults)."""
        parser = argparse.ArgumentParser(description=doc.split("\n")[0])
        parser.add_argument("--smoke", action="store_true", help="tiny sizes: print the results, write nothing")
        parser.add_argument("--report", action="store_true", help=f"write docs/benchmarks/{self.page}.md and its "
                            "figures from the saved data, measuring nothing")  # fmt: skip
        for flag, default in sizes.items():
            parser.add_argument(f"--{flag}", type=int, default=default, help=RUN_FLAGS[flag])
        if methods:
            parser.add_argument("--methods", nargs="+", choices=list(methods),
                                default=list(default_methods or methods))  # fmt: skip
            parser.add_argument("--tag", default="", help="a name of its own for this measurement: its data file "
                                "and its section")  # fmt: skip
        return parser

    def render(self, body: str) -> str:
        """The page: its title, the marker saying which script writes it from which data, and ``body``."""
        return (
            f"# {self.title}\n\n<!-- Written by `python benchmarks/{self.script} --report` from "
            f"docs/benchmarks/data/{self.data}*; do not edit. -->\n\n{body.strip()}\n"
        )

    def measurements(self) -> dict[Path, list[dict]]:
        """A study of runs: every saved measurement's runs (`load_runs`), by its data file."""
        return {path: load_runs(path) for path in self.files(".json", ".jsonl")}

    def render_runs(self, intro: str, section: Callable[[list[dict], Path], str]) -> str:
        """The page of a study of runs: ``intro``, then each saved measurement's ``section``."""
        return self.render("\n\n".join([intro, *(section(runs, path) for path, runs in self.measurements().items())]))

    def write(self, page: str) -> None:
        """Write the rendered page."""
        path = PAGES / f"{self.page}.md"
        path.write_text(page)
        print(f"wrote {path.relative_to(REPO)}")


def notes(name: str, runs: Sequence[dict] = ()) -> str:
    """What a page gives under a measurement besides its tables: the machines its ``runs`` recorded (`environment`,
    once each; runs saved before the run store recorded none), then what is written by hand beside its data file
    ``name`` (``docs/benchmarks/data/<name>.notes.md``)."""
    machines = "\n".join(dict.fromkeys(run["environment"] for run in runs if "environment" in run))
    path = DATA / f"{name}.notes.md"
    return "\n\n".join(part for part in (machines, path.read_text().strip() if path.exists() else "") if part)


def command_line(script: str, parser: argparse.ArgumentParser, settings: dict) -> str:
    """``python benchmarks/<script>`` with the flags of ``settings`` that differ from the parser's defaults (settings
    it has no flag for, ``--smoke`` and ``--report`` left out)."""
    defaults = vars(parser.parse_args([]))
    flags = []
    for key, value in settings.items():
        if key in ("smoke", "report") or key not in defaults or value == defaults[key]:
            continue
        flags += [f"--{key}", *([] if value is True else value if isinstance(value, list) else [value])]
    return shlex.join(["python", f"benchmarks/{script}", *map(str, flags)])


def measurement_commands(script: str, parser: argparse.ArgumentParser, settings: dict, runs: Sequence[dict],
                         methods: Sequence[str]) -> str:  # fmt: skip
    """The commands that measure ``runs`` of a study of runs (`command_line`): one per number of seeds its
    ``methods`` ran (``--seeds`` takes seeds 0..SEEDS-1 of every method it names), fewest seeds first, as
    ``Command: `...`.`` or ``Commands: `...`; `...`.``."""
    seeds = {method: len({run["seed"] for run in runs if run["method"] == method}) for method in methods}
    groups = {count: [method for method in methods if seeds[method] == count] for count in sorted(set(seeds.values()))}
    commands = [command_line(script, parser, {**settings, "seeds": n, "methods": ms}) for n, ms in groups.items()]
    return f"Command{'s' if len(commands) > 1 else ''}: {'; '.join(f'`{c}`' for c in commands)}."


# ----------------------------------------------------------------------------------------------------------- runs


class RunStore:
    """Runs as JSON lines in ``path``, each a dict whose ``key`` fields name it (e.g. task, method, seed).

    Claims live beside the file (``<path>.claims/``): a claim is a file holding the claiming process's id, created
    (or, when the process that made it is gone, taken over) under an exclusive lock of ``<path>.claims/.lock``, so
    that two processes never both hold it; the saved runs are read once the claim is held.
    """

    def __init__(self, path: Path, key: Sequence[str]):
        self.path, self.key = Path(path), tuple(key)
        self.claims = self.path.with_name(self.path.name + ".claims")

    def runs(self) -> list[dict]:
        """Every saved run, in the order saved."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def done(self) -> set[tuple]:
        return {self.key_of(run) for run in self.runs()}

    def key_of(self, run: dict) -> tuple:
        return tuple(run[k] for k in self.key)

    def append(self, run: dict) -> None:
        """Save one run, locked so that processes sharing the file do not interleave their lines."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(json.dumps(run) + "\n")

    @contextlib.contextmanager
    def claim(self, key: tuple) -> Iterator[bool]:
        """Within the block, ``key`` is this process's to measure (True), or another live process's or already saved
        (False). The claim ends with the block. It is taken before the saved runs are read: a process that measured
        and saved the run released its claim only after saving, so the run is seen and not measured again."""
        self.claims.mkdir(parents=True, exist_ok=True)
        marker = self.claims / key_name(key)
        held = _create_claim(marker, self.claims / ".lock")
        if held and key in self.done():
            marker.unlink()
            held = False
        try:
            yield held
        finally:
            if held:
                marker.unlink(missing_ok=True)


def key_name(key: tuple) -> str:
    """A file name for a run's key: its parts joined by ``__``, slashes and spaces as ``_``."""
    return "__".join(str(part).replace("/", "_").replace(" ", "_") for part in key)


def _create_claim(marker: Path, lock: Path) -> bool:
    """Create ``marker`` holding this process's id, or take it over when the process that made it is gone, under an
    exclusive lock of ``lock``: reading a marker, judging its process and writing ours is one step for every
    process, so none reads a marker half written or takes over one another process has just taken."""
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            owner = int(marker.read_text() or 0)
        except (FileNotFoundError, ValueError):
            owner = 0  # no claim, or one cut short before its id was written: its process is gone
        if owner and _alive(owner):
            return False
        marker.write_text(str(os.getpid()))
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def load_runs(path: Path) -> list[dict]:
    """The runs saved in ``path``: JSON lines (a `RunStore`'s), or one JSON document ``{"args": ..., "runs": [...]}``
    (how studies saved their runs before the run store), whose arguments become each run's ``settings``."""
    if path.suffix == ".jsonl":
        return RunStore(path, ()).runs()
    document = json.loads(path.read_text())
    return [{**run, "settings": document["args"]} for run in document["runs"]]


def measure(store: RunStore, planned: Iterable[tuple], run: Callable[..., dict], settings: dict, smoke: bool):
    """Every planned run (its key, the values of ``store.key``) measured by ``run(*key)``, and the measurement's runs.

    Smoke mode measures them all and saves none. Otherwise a run already saved is not measured again (an interrupted
    measurement goes on where it stopped), a run is claimed while measured (processes can share the plan), and each
    is saved as it ends with ``settings`` and `environment`; a store holding runs of other settings is refused.
    """
    if not smoke:
        if store.path.with_suffix(".json").exists():
            raise SystemExit(f"{store.path.with_suffix('.json')} holds an earlier measurement: give another --tag.")
        other = [run["settings"] for run in store.runs() if run.get("settings") != settings]
        if other:
            raise SystemExit(f"{store.path} holds runs of other settings ({other[0]}): give another --tag.")
    runs = []
    for key in planned:
        if smoke:
            runs.append({**run(*key), "settings": settings})
            continue
        with store.claim(key) as mine:
            if mine:
                store.append({**run(*key), "settings": settings, "environment": environment()})
    return runs if smoke else store.runs()


def mean_logged(history: list[dict], key: str, default: float | None = None) -> float:
    """Mean of a metric over the trainer's log entries that hold it (``default`` when none does)."""
    values = [entry[key] for entry in history if key in entry]
    return statistics.mean(values) if values or default is None else default


def interleaved(jobs: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, job): every job once a round, the order rotated by one each round, so that a change in the machine's
    load spreads over all jobs."""
    for round_ in range(rounds):
        shift = round_ % len(jobs)
        for job in [*jobs[shift:], *jobs[:shift]]:
            yield round_, job


# ----------------------------------------------------------------------------------------------------- statistics


def spread(values: Sequence[float], digits: int = 2, center: Callable = statistics.mean) -> str:
    """``center (min–max)`` of ``values``, the value alone when there is one, '–' when none."""
    if not values:
        return "–"
    middle = f"{center(values):.{digits}f}"
    return middle if len(values) == 1 else f"{middle} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def mean_of(values: Sequence[float], digits: int) -> str:
    """The mean of ``values`` with ``digits`` decimals, '–' when there are none."""
    return f"{statistics.mean(values):.{digits}f}" if values else "–"


def first_reaching(curve: Sequence[Sequence[float]], target: float, accuracy: int = 2) -> Sequence[float] | None:
    """The first point of ``curve`` whose entry ``accuracy`` is at or above ``target``, or None."""
    return next((point for point in curve if point[accuracy] >= target), None)


def resampled_mean(rng: random.Random, values: Sequence[float], k: int | None = None) -> float:
    """The mean of ``k`` of ``values`` (default: as many as there are) drawn with replacement by ``rng``."""
    return statistics.fmean(rng.choices(values, k=k or len(values)))


def bootstrap_ratio_ci(
    numerator: Sequence[float], *denominators: Sequence[float], level: float = 0.9, draws: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(numerator) / mean(denominator)``: each draw resamples the seeds of
    each arm with replacement, independently. With several ``denominators``, over the lowest of their means in each
    draw, so the interval carries the luck of choosing the fastest too. Deterministic for a given ``seed``."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        ratios.append(resampled_mean(rng, numerator) / min(resampled_mean(rng, values) for values in denominators))
    ratios.sort()
    tail = (1 - level) / 2
    return ratios[int(tail * (draws - 1))], ratios[int(round((1 - tail) * (draws - 1)))]


EXACT_SPLITS = 200_000
"""`permutation_p` counts every split up to this many (10 seeds a side: 184,756), samples `SAMPLED_SPLITS` beyond."""
SAMPLED_SPLITS = 100_000


def permutation_p(first: Sequence[float], second: Sequence[float], seed: int = 0) -> float:
    """Two-sided permutation p-value of the difference of means: the share of the ways of splitting the pooled values
    into groups of the two sizes whose |difference of means| is at least the observed one. Exact (every split) up to
    `EXACT_SPLITS` splits; beyond (20 seeds a side: 1.4e11), over `SAMPLED_SPLITS` random splits drawn with ``seed``
    and the observed one, so that a sampled p is never 0."""
    pooled, n = [*first, *second], len(first)
    observed = abs(statistics.fmean(first) - statistics.fmean(second))
    whole = sum(pooled)
    exact = math.comb(len(pooled), n) <= EXACT_SPLITS
    if exact:
        splits: Iterable[Sequence[int]] = itertools.combinations(range(len(pooled)), n)
    else:
        rng = random.Random(seed)
        splits = (rng.sample(range(len(pooled)), n) for _ in range(SAMPLED_SPLITS))
    total = extreme = 0 if exact else 1  # a sample counts the observed split too
    for picked in splits:
        part = sum(pooled[i] for i in picked)
        difference = abs(part / n - (whole - part) / (len(pooled) - n))
        extreme += difference >= observed - 1e-12
        total += 1
    return extreme / total


def ratio_ci(arm: Sequence[float], baseline: Sequence[float]) -> str:
    """``mean(arm) / mean(baseline)`` with its bootstrap 90% interval over seeds and the exact permutation p."""
    low, high = bootstrap_ratio_ci(arm, baseline)
    ratio = statistics.fmean(arm) / statistics.fmean(baseline)
    return f"{ratio:.2f}× ({low:.2f}–{high:.2f}), p {permutation_p(arm, baseline):.2f}"


# -------------------------------------------------------------------------------------------------------- machine


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


# -------------------------------------------------------------------------------------------------------- figures


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
    plt.close(fig)

"""The benchmarks' harness: what every study shares, so that a study's script says only what it measures.

A study saves what it measures under ``docs/benchmarks/data/`` and writes its pages from those files alone: a script's
``PAGES`` maps each page it writes to the function rendering it (`generated`, `write_pages`), ``--report`` rewrites
them, and ``tests/test_benchmarks.py`` renders every generated page again from the committed data; what a data file
cannot hold lives beside it in ``<name>.notes.md`` (`notes`; a page's prose, filled from the data, in
``<study>_page.notes.md``). Runs: `RunStore` (JSON lines, claims shared by
processes); timing: `interleaved`; statistics over seeds: `spread`, bootstrap intervals
(`ratio`, `mean_ci`, `difference`), `permutation_p`, `holm`, `binomial_se`, `detectable`, `runs_for`.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import math
import os
import platform
import random
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar

import numpy as np

REPO = Path(__file__).resolve().parent.parent
PAGES = REPO / "docs" / "benchmarks"
DATA = PAGES / "data"
if str(REPO) not in sys.path:  # `python benchmarks/<name>.py` puts benchmarks/, not the repository, on the path
    sys.path.insert(0, str(REPO))

T = TypeVar("T")


def generated(title: str, script: str, data: str, body: str) -> str:
    """A page: its title, the marker naming the script that writes it and its data files, and ``body``."""
    return (
        f"# {title}\n\n<!-- Written by `python benchmarks/{script} --report` from docs/benchmarks/data/{data}*; "
        f"do not edit. -->\n\n{body.strip()}\n"
    )


def write_pages(pages: dict[str, Callable[[], str]]) -> None:
    """Write each page of ``pages`` (its name: the rendering function)."""
    for name, render in pages.items():
        path = PAGES / f"{name}.md"
        path.write_text(render())
        print(f"wrote {path.relative_to(REPO)}")


def notes(name: str, **fields) -> str:
    """What is written by hand beside the data file ``name`` (``docs/benchmarks/data/<name>.notes.md``), if any; a
    page's prose (``<study>_page.notes.md``) filled with ``fields``."""
    path = DATA / f"{name}.notes.md"
    text = path.read_text().strip() if path.exists() else ""
    return text.format(**fields) if fields else text


# ----------------------------------------------------------------------------------------------------------- runs


class RunStore:
    """Runs as JSON lines in ``path``, each named by its ``key`` fields; claims beside it (``<path>.claims/``: files
    holding the claiming process's id, made or taken over from a dead process under an exclusive lock)."""

    def __init__(self, path: Path, key: Sequence[str]):
        self.path, self.key = Path(path), tuple(key)
        self.claims = self.path.with_name(self.path.name + ".claims")

    def runs(self) -> list[dict]:
        """Every saved run, in the order saved."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def done(self) -> set[tuple]:
        return {tuple(run[k] for k in self.key) for run in self.runs()}

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
    except PermissionError:  # alive, another user's
        pass
    return True


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


def resampled_means(*samples: Sequence[float], draws: int = 10_000, seed: int = 0) -> list[np.ndarray]:
    """Each sample's mean in each of ``draws`` bootstrap resamples (with replacement, the samples independently):
    ``[draws]`` per sample. Drawn from one ``random.Random(seed)`` exactly as ``random.choices`` draws, sample after
    sample within a draw, so that the intervals are those of a loop over ``choices``, at numpy's speed."""
    rng, sizes = random.Random(seed), [len(s) for s in samples]
    uniform = np.array([rng.random() for _ in range(draws * sum(sizes))]).reshape(draws, sum(sizes))
    found, start = [], 0
    for values, n in zip(samples, sizes, strict=True):
        picks = np.floor(uniform[:, start : start + n] * n).astype(int)  # [draws, n]
        found.append(np.asarray(values, dtype=float)[picks].mean(axis=1))
        start += n
    return found


def interval(found: np.ndarray, level: float = 0.9) -> tuple[float, float]:
    """The percentile interval of bootstrap statistics ``found`` ([draws])."""
    ordered, tail = np.sort(found), (1 - level) / 2
    return float(ordered[int(tail * (len(found) - 1))]), float(ordered[int(round((1 - tail) * (len(found) - 1)))])


def ratio(arm: Sequence[float], *bases: Sequence[float]) -> tuple[float, float, float, float]:
    """``(ratio, CI low, CI high, permutation p)`` of ``mean(arm)`` to the lowest mean of ``bases``: the bootstrap
    90% interval chooses the lowest again in every draw (the fastest of several noisy arms reads faster than it is,
    and that luck belongs in the interval); p against that lowest."""
    base = min(bases, key=statistics.fmean)
    means = resampled_means(arm, *bases)
    low, high = interval(means[0] / np.min(means[1:], axis=0))
    return statistics.fmean(arm) / statistics.fmean(base), low, high, permutation_p(arm, base)


def ratio_text(arm: Sequence[float], *bases: Sequence[float]) -> str:
    """`ratio` as ``ratio× (low–high), p``."""
    value, low, high, p = ratio(arm, *bases)
    return f"{value:.2f}× ({low:.2f}–{high:.2f}), p {p:.2f}"


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Bootstrap 90% interval of the mean of ``values`` (seeds resampled)."""
    return interval(resampled_means(values)[0])


def difference(arm: Sequence[float], base: Sequence[float]) -> tuple[float, float, float, float]:
    """``(mean(arm) - mean(base), CI low, CI high, permutation p)``, the seeds of each resampled independently."""
    first, second = resampled_means(arm, base)
    return (statistics.fmean(arm) - statistics.fmean(base), *interval(first - second), permutation_p(arm, base))


EXACT_SPLITS = 200_000
"""`permutation_p` counts every split up to this many (10 seeds a side: 184,756), samples `SAMPLED_SPLITS` beyond."""
SAMPLED_SPLITS = 100_000


def permutation_p(first: Sequence[float], second: Sequence[float], seed: int = 0) -> float:
    """Two-sided permutation p of the difference of means: the share of the splits of the pooled values into groups
    of the two sizes whose |difference| reaches the observed one; every split up to `EXACT_SPLITS`, else
    `SAMPLED_SPLITS` random ones drawn with ``seed`` and the observed one (a sampled p is never 0)."""
    pooled, n = np.asarray([*first, *second], dtype=float), len(first)
    observed = abs(statistics.fmean(first) - statistics.fmean(second))
    splits = math.comb(len(pooled), n)
    if splits <= EXACT_SPLITS:
        every = itertools.chain.from_iterable(itertools.combinations(range(len(pooled)), n))
        picked = np.fromiter(every, dtype=int, count=splits * n).reshape(splits, n)  # [splits, n]
    else:
        rng = random.Random(seed)
        picked = np.array([rng.sample(range(len(pooled)), n) for _ in range(SAMPLED_SPLITS)])  # [splits, n]
    part = pooled[picked].sum(axis=1)
    extreme = int((abs(part / n - (pooled.sum() - part) / (len(pooled) - n)) >= observed - 1e-12).sum())
    return extreme / splits if splits <= EXACT_SPLITS else (extreme + 1) / (SAMPLED_SPLITS + 1)


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's adjustment of ``ps`` (in their order) for their number: the k-th smallest times (m - k + 1), never
    below an adjusted smaller one, at most 1. A family of m tests whose adjusted p are under a level has, together,
    at most that chance of holding any false finding."""
    order = sorted(range(len(ps)), key=ps.__getitem__)
    adjusted, running = [0.0] * len(ps), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - k) * ps[i]))
        adjusted[i] = running
    return adjusted


def binomial_se(accuracy: float, problems: int) -> float:
    """One evaluation's standard error, of an accuracy on ``problems`` problems, where only the accuracy is at hand (a
    page's mean over seeds); a run's evaluations take `trl_pods.evaluate.standard_error` of their scores."""
    return math.sqrt(accuracy * (1 - accuracy) / problems)


POWER, ALPHA = 0.8, 0.05
_Z = statistics.NormalDist().inv_cdf(1 - ALPHA / 2) + statistics.NormalDist().inv_cdf(POWER)


def detectable(sd: float, first: int, second: int) -> float:
    """The smallest difference of two means that a two-sided test at `ALPHA` finds with chance `POWER` (normal
    approximation), where one run's standard deviation is ``sd`` and the arms have ``first`` and ``second`` runs."""
    return _Z * sd * math.sqrt(1 / first + 1 / second)


def runs_for(difference_: float, sd: float) -> int:
    """Runs a side that `detectable` needs to find ``difference_``."""
    return math.ceil(2 * (_Z * sd / difference_) ** 2)


# -------------------------------------------------------------------------------------------------------- machine


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def versions(packages: tuple[str, ...] = ("torch", "transformers", "trl", "peft", "vllm")) -> dict[str, str]:
    """Each package's installed version, or '(not installed)'."""
    return {package: _version(package) for package in packages}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "(not installed)"

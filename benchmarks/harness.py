"""The benchmarks' shared harness: the store of runs with resume, and the statistics over seeds.

* `RunStore`: a study's runs as JSON lines, appended under a lock as each run ends, so an interrupted measurement goes
  on where it stopped and several processes can share it; a run in progress is claimed (`RunStore.claim`), so two
  processes never train the same one.
* Statistics over seeds: `bootstrap_ratio_ci` (the ratio of two arms' means, resampling seeds within each arm) and
  `permutation_p` (exact, two-sided, on the difference of means).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import random
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["RunStore", "bootstrap_ratio_ci", "permutation_p"]


class RunStore:
    """Runs as JSON lines in ``path``, each a dict whose ``key`` fields name it (e.g. task, method, seed).

    Claims live beside the file (``<path>.claims/``): a claim is a file created exclusively, holding the claiming
    process's id; a claim whose process is gone is stale and taken over.
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
        (False). The claim ends with the block."""
        self.claims.mkdir(parents=True, exist_ok=True)
        marker = self.claims / "__".join(str(part).replace("/", "_").replace(" ", "_") for part in key)
        owned = False
        try:
            owned = key not in self.done() and _create_claim(marker)
            yield owned
        finally:
            if owned:
                marker.unlink(missing_ok=True)


def _create_claim(marker: Path) -> bool:
    """Create ``marker`` for this process; take it over when the process that made it is gone."""
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                owner = int(marker.read_text() or 0)
            except (FileNotFoundError, ValueError):
                owner = 0
            if owner and _alive(owner):
                return False
            marker.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def bootstrap_ratio_ci(
    numerator: Sequence[float], denominator: Sequence[float], level: float = 0.9, draws: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(numerator) / mean(denominator)``: each draw resamples the seeds of
    each arm with replacement, independently. Deterministic for a given ``seed``."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        top = statistics.fmean(rng.choices(numerator, k=len(numerator)))
        bottom = statistics.fmean(rng.choices(denominator, k=len(denominator)))
        ratios.append(top / bottom)
    ratios.sort()
    tail = (1 - level) / 2
    return ratios[int(tail * (draws - 1))], ratios[int(round((1 - tail) * (draws - 1)))]


def permutation_p(first: Sequence[float], second: Sequence[float]) -> float:
    """Exact two-sided permutation p-value of the difference of means: the share of all ways of splitting the pooled
    values into groups of the two sizes whose |difference of means| is at least the observed one."""
    pooled, n = [*first, *second], len(first)
    observed = abs(statistics.fmean(first) - statistics.fmean(second))
    total, extreme = 0, 0
    whole = sum(pooled)
    for picked in itertools.combinations(range(len(pooled)), n):
        part = sum(pooled[i] for i in picked)
        difference = abs(part / n - (whole - part) / (len(pooled) - n))
        extreme += difference >= observed - 1e-12
        total += 1
    return extreme / total

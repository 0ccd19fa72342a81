r"""How fast are the math rewards at PODS's N? Completions per second of `gsm8k_reward` and `accuracy_reward`.

PODS scores all N rollouts of a prompt before it keeps M, so scoring grows with N, not M. In TRL every process scores
its own rows; `trl_pods.rewards` parses and verifies them in persistent math-verify worker subprocesses, one after
another in each worker, and splits a large call over up to `reward_workers()` workers. This script measures that
path as the trainer calls it, with one worker (``TRL_PODS_REWARD_WORKERS=1``, the cost per core) and with
``--workers`` workers (default: `reward_workers()` on this machine):

* ``gsm8k_reward`` on GSM8K rows (gold: the ``answer`` column, ``"… #### 72"``);
* ``accuracy_reward`` on MATH rows (gold: the ``solution`` column only, with its ``\boxed{}``, as in the MATH
  training split, which has no ``answer`` column).

Completions are built from the real rows in tests/data/gsm8k_sample.jsonl and tests/data/math_sample.jsonl the way a
``<think>``/``<answer>`` model writes them: a reasoning part made of an opening, the problem restated and the worked
solution (GSM8K's ``<<48/2=24>>`` calculator annotations kept in half of them, stripped in the other half),
repeated with "let me double-check" passes until it reaches a length drawn from 200–500 tokens (at an assumed
`CHARS_PER_TOKEN` characters per token), then one ending, drawn with the weights of `KIND_WEIGHTS`:

* ``correct``:     ``</think><answer>`` + the right final answer in one of a few written forms + ``</answer>``;
* ``wrong``:       the same with the answer perturbed (one number shifted or scaled; a fraction may be flipped);
* ``unparsable``:  an ``<answer>`` with text and no number in it;
* ``truncated``:   cut at 30–95% of the reasoning (hit the length limit): no closing tags, no answer, so the reward
  parses the last characters of the completion;
* ``untagged``:    the reasoning and ``So the final answer is \boxed{…}.`` without tags.

Each timed call scores one batch of a recipe's size (and 1024) with a fresh batch per repeat; the workers are warmed
up (started, math-verify imported) before timing. Every repeat times every (reward, batch size, workers) once, order
rotated between repeats; reported are the medians over repeats, of wall time and of CPU time (this process and its
worker processes, read from ``/proc``: the cost on an idle core). Every timed call's rewards are checked against what
its completions were built to score (``correct``/``untagged``: 1.0; ``wrong``/``unparsable``: 0.0, or 0.2 of format
credit for ``gsm8k_reward``), so the table times a reward that works. A second table scores batches of one kind
each on one worker, to show which endings cost what.

The recipes' share of a GPU step uses the PODS paper's step times (not measured here): about 10.1 s per step for
PODS on 1×L40S (Qwen2.5-3B, LoRA) and on 8×H100 (Qwen2.5-3B, full fine-tuning).

Run from the repository root; rewrites the ``reward_throughput`` section of docs/benchmarks.md::

    python benchmarks/reward_throughput.py           # batches of 32, 64, 128, 256, 1024; 7 repeats (2-4 min here)
    python benchmarks/reward_throughput.py --smoke   # batches of 4 and 32, 2 repeats; prints, writes nothing
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _report

from trl_pods.rewards import (
    MAX_DEFAULT_REWARD_WORKERS,
    MIN_ITEMS_PER_WORKER,
    accuracy_reward,
    gsm8k_reward,
    reward_workers,
)

SECTION = "reward_throughput"
DATA = _report.REPO / "tests" / "data"
CHARS_PER_TOKEN = 4
TOKENS = (200, 500)  # length of the reasoning part, drawn uniformly
KIND_WEIGHTS = {"correct": 0.35, "wrong": 0.25, "unparsable": 0.1, "truncated": 0.2, "untagged": 0.1}
FORMAT_CREDIT = 0.2  # gsm8k_reward for a wrong answer whose four tags each occur once
THRESHOLD = 0.05  # share of a GPU step above which scoring would need more than one core

OPENINGS = (
    "Okay, let's see.",
    "Let me work through this step by step.",
    "First, I need to understand what the problem is asking.",
)
CHECKS = (
    "Wait, let me double-check that.",
    "Let me verify each step again.",
    "Hmm, let me re-read the problem to make sure I have the numbers right.",
)
UNPARSABLE = ("I am not sure.", "I could not solve this problem.", "See the reasoning above.")


@dataclass(frozen=True)
class Task:
    """One benchmark task: its reward, the gold column it is scored against and how a model writes its answer."""

    name: str
    reward: Callable[..., list[float | None]]
    gold_column: str
    answer_forms: tuple[str, ...]  # format strings with {a}: how a completion writes its final answer
    step_lines: Callable[[dict], list[str]]  # the worked solution, one line per step
    final: Callable[[dict], str]  # the right final answer as a model writes it
    prompt_key: str


def _gsm8k_lines(row: dict) -> list[str]:
    return [line for line in row["answer"].split("####")[0].splitlines() if line.strip()]


def _math_lines(row: dict) -> list[str]:
    return [line for line in row["solution"].splitlines() if line.strip()]


TASKS = {
    "gsm8k": Task(
        name="GSM8K",
        reward=gsm8k_reward,
        gold_column="answer",
        answer_forms=("{a}", "\\boxed{{{a}}}", "The answer is {a}."),
        step_lines=_gsm8k_lines,
        final=lambda row: row["answer"].rsplit("####", 1)[1].strip(),
        prompt_key="question",
    ),
    "math": Task(
        name="MATH",
        reward=accuracy_reward,
        gold_column="solution",
        answer_forms=("{a}", "\\boxed{{{a}}}", "${a}$"),
        step_lines=_math_lines,
        final=lambda row: row["answer"],
        prompt_key="problem",
    ),
}


def load_rows(task: str) -> list[dict]:
    path = DATA / f"{task}_sample.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def strip_annotations(text: str) -> str:
    """GSM8K's calculator annotations removed: ``48/2 = <<48/2=24>>24`` -> ``48/2 = 24``."""
    return re.sub(r"<<[^>]*>>", "", text)


def perturb(answer: str, rng: random.Random) -> str:
    r"""A wrong answer that looks like the right one: a ``\frac{a}{b}`` flipped, or one number shifted or scaled."""
    if "\\frac{" in answer and rng.random() < 0.5:
        return re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"\\frac{\2}{\1}", answer, count=1)
    numbers = list(re.finditer(r"\d+", answer))
    match = rng.choice(numbers)
    value = int(match.group())
    changed = value * 10 if rng.random() < 0.2 else max(0, value + rng.choice((-2, -1, 1, 2)))
    if changed == value:
        changed = value + 1
    return answer[: match.start()] + str(changed) + answer[match.end() :]


def reasoning(task: Task, row: dict, rng: random.Random) -> str:
    """The ``<think>`` part: opening, problem, worked solution, then re-checks, until 200–500 tokens long."""
    lines = task.step_lines(row)
    if task.gold_column == "answer" and rng.random() < 0.5:
        lines = [strip_annotations(line) for line in lines]
    target = rng.randint(*TOKENS) * CHARS_PER_TOKEN
    parts = [rng.choice(OPENINGS), f"The problem: {row[task.prompt_key]}", *lines]
    length = sum(len(p) + 1 for p in parts)
    while length < target:
        parts.append(rng.choice(CHECKS))
        for line in lines:
            parts.append(line)
            length += len(line) + 1
            if length >= target:
                break
    return "\n".join(parts)


def completion(task: Task, row: dict, kind: str, rng: random.Random) -> str:
    """One completion of ``kind`` (a key of `KIND_WEIGHTS`) for ``row``."""
    think = reasoning(task, row, rng)
    right = task.final(row)
    if kind == "truncated":
        return "<think>\n" + think[: int(len(think) * rng.uniform(0.3, 0.95))]
    if kind == "untagged":
        return f"{think}\n\nSo the final answer is \\boxed{{{right}}}."
    answer = {
        "correct": lambda: rng.choice(task.answer_forms).format(a=right),
        "wrong": lambda: rng.choice(task.answer_forms).format(a=perturb(right, rng)),
        "unparsable": lambda: rng.choice(UNPARSABLE),
    }[kind]()
    return f"<think>\n{think}\n</think>\n<answer>\n{answer}\n</answer>"


@dataclass
class Batch:
    completions: list[str]
    golds: list[str]
    kinds: list[str]


def make_batch(task: Task, rows: list[dict], size: int, seed: int, kind: str | None = None) -> Batch:
    """``size`` completions over ``rows`` (round robin); kinds drawn with `KIND_WEIGHTS` unless ``kind`` is given."""
    rng = random.Random(seed)
    kinds = [kind] * size if kind else rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()), k=size)
    picked = [rows[i % len(rows)] for i in range(size)]
    return Batch(
        completions=[completion(task, row, k, rng) for row, k in zip(picked, kinds, strict=True)],
        golds=[row[task.gold_column] for row in picked],
        kinds=kinds,
    )


def score(task: Task, batch: Batch) -> tuple[float, list[float | None]]:
    """Seconds for one reward call on the batch, and its rewards."""
    start = time.perf_counter()
    rewards = task.reward(batch.completions, **{task.gold_column: batch.golds})
    return time.perf_counter() - start, rewards


def check(task: Task, batch: Batch, rewards: list[float | None]) -> None:
    """Every reward is what its completion was built to score (``truncated`` ones: any valid reward)."""
    wrong_score = FORMAT_CREDIT if task.reward is gsm8k_reward else 0.0
    expected = {"correct": 1.0, "untagged": 1.0, "wrong": wrong_score, "unparsable": wrong_score}
    for text, kind, reward in zip(batch.completions, batch.kinds, rewards, strict=True):
        if reward is None or not (
            0.0 <= reward <= 1.0 if kind == "truncated" else math.isclose(reward, expected[kind], abs_tol=1e-9)
        ):
            raise AssertionError(f"{task.name} {kind} completion scored {reward}: ...{text[-300:]!r}")


@dataclass
class Setting:
    sizes: tuple[int, ...]
    repeats: int
    kind_size: int
    workers: int | None  # the parallel measurement's TRL_PODS_REWARD_WORKERS; None: this machine's default


FULL = Setting(sizes=(32, 64, 128, 256, 1024), repeats=7, kind_size=256, workers=None)
SMOKE = Setting(sizes=(4, 32), repeats=2, kind_size=2, workers=2)  # 32 items: split over 2 workers

# (recipe, GPU setting of the paper's step time, task, completions scored per process per generation)
RECIPES = (
    ("single-GPU LoRA, GSM8K (`gsm8k_qwen2.5-3b_lora_pods.yaml`: 1 prompt × N = 64)", "1×L40S", "gsm8k", 64),
    ("single-GPU LoRA, MATH (`math_qwen2.5-3b_lora_pods.yaml`: 1 prompt × N = 32)", "1×L40S", "math", 32),
    (
        "8-GPU full FT, GSM8K (`gsm8k_qwen2.5-3b_full_pods.yaml`: 2 prompts × N = 128; the 7B recipe, on 8×A100, "
        "scores as many in a longer step)",
        "8×H100",
        "gsm8k",
        256,
    ),
    ("vLLM server, GSM8K (`gsm8k_qwen2.5-3b_full_pods_server.yaml`: 2 prompts × N = 128)", "8×H100", "gsm8k", 256),
    (
        "2 nodes, GSM8K (`gsm8k_qwen2.5-7b_full_pods_2node.yaml`: 1 prompt × N = 128; a 7B step is longer than this "
        "3B one)",
        "8×H100",
        "gsm8k",
        128,
    ),
)
PAPER_STEP_S = {"1×L40S": 10.1, "8×H100": 10.1}  # PODS paper, seconds per step (one generation + update) of PODS


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and its live child processes (the reward workers); Linux only."""
    me, tick, total = os.getpid(), os.sysconf("SC_CLK_TCK"), time.process_time()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        if int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total


@dataclass
class Timing:
    seconds: list[float]
    cpu: list[float]


def measure(setting: Setting, workers: int) -> tuple[dict, list[int]]:
    """{(task, size, workers): Timing} for 1 and ``workers`` workers, {(task, kind): Timing} on 1 worker, and the
    mixed batches' completion lengths in characters."""
    rows = {key: load_rows(key) for key in TASKS}
    counts = sorted({1, workers})
    jobs = [(key, size, n) for key in TASKS for size in setting.sizes for n in counts]
    kind_jobs = [(key, kind) for key in TASKS for kind in KIND_WEIGHTS]
    times = {job: Timing([], []) for job in jobs + kind_jobs}
    lengths = []

    def timed(job: tuple, task: Task, batch: Batch, n: int) -> None:
        os.environ["TRL_PODS_REWARD_WORKERS"] = str(n)
        cpu = cpu_seconds()
        seconds, rewards = score(task, batch)
        times[job].cpu.append(cpu_seconds() - cpu)
        times[job].seconds.append(seconds)
        check(task, batch, rewards)

    for key, task in TASKS.items():  # start every worker and import math-verify before anything is timed
        os.environ["TRL_PODS_REWARD_WORKERS"] = str(workers)
        score(task, make_batch(task, rows[key], workers * MIN_ITEMS_PER_WORKER, seed=-1))
    for repeat in range(setting.repeats):
        for job in jobs[repeat % len(jobs) :] + jobs[: repeat % len(jobs)]:
            key, size, n = job
            batch = make_batch(TASKS[key], rows[key], size, seed=1000 * repeat + size)
            timed(job, TASKS[key], batch, n)
            lengths += [len(text) for text in batch.completions] if n == 1 else []
        for job in kind_jobs[repeat % len(kind_jobs) :] + kind_jobs[: repeat % len(kind_jobs)]:
            key, kind = job
            batch = make_batch(TASKS[key], rows[key], setting.kind_size, seed=1000 * repeat + 7, kind=kind)
            timed(job, TASKS[key], batch, 1)
        print(f"repeat {repeat + 1}/{setting.repeats} done", file=sys.stderr)
    return times, lengths


def _rate(size: int, seconds: float) -> str:
    return f"{size / seconds:,.0f}"


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def _header(left: int, *columns: str) -> str:
    """A markdown table header whose first ``left`` columns are left-aligned and the others right-aligned."""
    return f"| {' | '.join(columns)} |\n|" + "---|" * left + "---:|" * (len(columns) - left)


def _median_seconds(times: dict, key: str, size: int, n: int, setting: Setting, cpu: bool = False) -> float:
    """Median seconds (wall, or CPU) to score ``size`` completions; in smoke mode, where a recipe's size is not
    measured, scaled from the largest batch measured."""
    measured = size if size in setting.sizes else max(setting.sizes)
    timing = times[key, measured, n]
    return statistics.median(timing.cpu if cpu else timing.seconds) * size / measured


def report(setting: Setting, workers: int, times: dict, lengths: list[int], loads: tuple, command: str) -> str:
    rows = []
    for key, task in TASKS.items():
        for size in setting.sizes:
            serial, parallel = times[key, size, 1], times[key, size, workers]
            med, cpu, par = (statistics.median(x) for x in (serial.seconds, serial.cpu, parallel.seconds))
            rows.append(
                f"| `{task.reward.__name__}` | {task.name} | {size} | {_report.fmt_time(med)} | {_rate(size, med)} "
                f"| {_rate(size, max(serial.seconds))}–{_rate(size, min(serial.seconds))} "
                f"| {_report.fmt_time(cpu / size)} | {_rate(size, par)} | {med / par:.2f}× |"
            )
    kind_rows = []
    for kind, weight in KIND_WEIGHTS.items():
        cells = [_rate(setting.kind_size, statistics.median(times[key, kind].seconds)) for key in TASKS]
        kind_rows.append(f"| {kind} | {weight:.0%} | " + " | ".join(cells) + " |")

    recipe_rows, worst = [], (0.0, 0.0, "")
    for recipe, gpu, key, size in RECIPES:
        step = PAPER_STEP_S[gpu]
        serial = _median_seconds(times, key, size, 1, setting)
        cpu = _median_seconds(times, key, size, 1, setting, cpu=True)
        parallel = _median_seconds(times, key, size, workers, setting)
        slowest = max(statistics.median(times[key, kind].seconds) for kind in KIND_WEIGHTS) / setting.kind_size
        worst = max(worst, (serial / step, cpu / step, recipe))
        recipe_rows.append(
            f"| {recipe} | `{TASKS[key].reward.__name__}` | {size} | {step:g} s ({gpu}) | {_report.fmt_time(serial)} "
            f"| {serial / step:.1%} | {cpu / step:.1%} | {slowest * size / step:.1%} | {_report.fmt_time(parallel)} "
            f"| {parallel / step:.1%} |"
        )
    largest = max(setting.sizes)
    math_share = _median_seconds(times, "math", 256, 1, setting) / PAPER_STEP_S["8×H100"]
    verdicts = ["below" if share < THRESHOLD else "above" for share in worst[:2]]

    tokens = sorted(n / CHARS_PER_TOKEN for n in lengths)
    quartiles = statistics.quantiles(tokens, n=4)
    load_before, load_after = loads
    mix = ", ".join(f"{kind} {weight:.0%}" for kind, weight in KIND_WEIGHTS.items())
    return f"""## Scoring at N: reward throughput

Completions per second of the math rewards as the trainer calls them, on realistic `<think>`/`<answer>` model
output built from the real rows in `tests/data/` (the script's docstring gives the recipe: worked solutions with
re-checks, 200–500 tokens of reasoning, endings mixed as
{mix};
wrong answers are perturbed numbers or flipped fractions, truncated ones have no answer at all). `gsm8k_reward` is
scored against GSM8K's `answer` column, `accuracy_reward` against MATH's `solution` column. Each call is timed with
one math-verify worker process (`TRL_PODS_REWARD_WORKERS=1`: items scored one after another, as before parallel
scoring existed) and with {workers} (`TRL_PODS_REWARD_WORKERS={workers}`); workers are started and warm before
timing.

```bash
{command}
```

- Method: {setting.repeats} repeats, each scoring one fresh batch per (reward, batch size, workers), order rotated
  between repeats; times are medians over repeats (range: slowest–fastest repeat). CPU time is that of this process
  and its worker processes during the call (`/proc`), i.e. the cost on an idle core, without waiting for a busy
  one. Every call's rewards are checked against what its completions were built to score.
- Completion length: median {statistics.median(tokens):.0f} tokens (quartiles {quartiles[0]:.0f}–{quartiles[2]:.0f}),
  at an assumed {CHARS_PER_TOKEN} characters per token.
- Load: `os.getloadavg()` (1 / 5 / 15 min) {_load(load_before)} before and {_load(load_after)} after the measurement,
  on {os.cpu_count()} logical cores shared with other jobs: wall times here are what a busy core gives, and
  {workers} workers cannot show the speed-up of a GPU host's idle cores.
{_report.environment()}

{
        _header(
            2,
            "reward",
            "data",
            "batch",
            "1 worker: time per batch",
            "completions/s",
            "range",
            "CPU per completion",
            f"{workers} workers: completions/s",
            "speed-up",
        )
    }
{chr(10).join(rows)}

By ending (batches of {setting.kind_size} completions of one kind, 1 worker; completions/s, median over repeats).
A right answer verifies on its first reading, in well under a millisecond. A wrong or unparsable one is read a
second time, wrapped in `\\boxed{{}}` (so that a bare `6-5i` is read whole), and each reading is compared with the
gold symbolically; prose in the answer (`73 clips`, `The answer is 73.`, `I am not sure.`) is then parsed as LaTeX
(`73 clips` becomes the product 73·c·i·l·p·s), about 10 ms per completion. Wrong and unparsable endings take most
of the mix's scoring time.

| ending | share in the mix | `gsm8k_reward`, GSM8K | `accuracy_reward`, MATH |
|---|---:|---:|---:|
{chr(10).join(kind_rows)}

**Share of a GPU step, per recipe (an estimate).** Scoring blocks the step: TRL scores a generation's completions
before it computes advantages, and PODS selects only after every rollout is scored. The step time is **the PODS
paper's, not ours**: about 10.1 s per PODS step (one generation + update) on 1×L40S (Qwen2.5-3B, LoRA, N = 64) and
on 8×H100 (Qwen2.5-3B, full fine-tuning, N = 128); no GPU step of this project has been measured yet. A 7B model or
longer completions make the step longer and the share smaller. Each training process scores only its own rows with
its own workers. Columns: scoring with 1 worker (wall time here, and CPU time only), the bound for a batch made
entirely of the costliest ending above (1 worker), and scoring with {workers} workers here.

{
        _header(
            2,
            "recipe",
            "reward",
            "per process",
            "PODS step (paper)",
            "1 worker",
            "share",
            "share, CPU time",
            "share, all slowest ending",
            f"{workers} workers",
            "share",
        )
    }
{chr(10).join(recipe_rows)}

Largest share with 1 worker ({worst[2]}): {worst[0]:.1%} of the step in wall time ({verdicts[0]} the
{THRESHOLD:.0%} threshold) and {worst[1]:.1%} in CPU time ({verdicts[1]} it). No recipe scores MATH at more
than 32 per process; one that scored 256 would spend {math_share:.1%} of a 10.1 s step with 1 worker (rate of
MATH batches of {256 if 256 in setting.sizes else largest}). `trl_pods.rewards` therefore splits a call of at least
{2 * MIN_ITEMS_PER_WORKER} completions over up to `reward_workers()` worker processes (`TRL_PODS_REWARD_WORKERS`;
default: the usable cores divided by the training processes on the host, at most {MAX_DEFAULT_REWARD_WORKERS}), each
shard with the same per-item deadline; with 8 workers a 256-completion batch is 32 completions per worker.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="batches of 4 and 32, 2 repeats; prints, writes nothing")
    parser.add_argument("--workers", type=int, help="workers of the parallel measurement (default: reward_workers())")
    args = parser.parse_args()
    setting = SMOKE if args.smoke else FULL
    workers = args.workers or setting.workers or reward_workers()
    command = " ".join(
        ["python benchmarks/reward_throughput.py", *(["--smoke"] if args.smoke else [])]
        + ([f"--workers {args.workers}"] if args.workers else [])
    )

    load_before = os.getloadavg()
    times, lengths = measure(setting, workers)
    load_after = os.getloadavg()
    section = report(setting, workers, times, lengths, (load_before, load_after), command)
    if args.smoke:
        print(section)
        print("smoke run: section rendered, nothing written")
        return
    _report.write_section(SECTION, section)


if __name__ == "__main__":
    main()

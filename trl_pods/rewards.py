r"""Math reward functions for GRPO/PODS with TRL's signature ``f(completions, **kwargs) -> list[float | None]``.

* `accuracy_reward`: 1.0 if the final answer equals the gold answer according to math-verify, else 0.0.
* `format_reward`: 1.0 for a ``<think>…</think><answer>…</answer>`` completion, else 0.0.
* `gsm8k_reward`: the PODS paper's GSM8K composite, correctness plus partial credit for the four tags.

The gold answer comes from the dataset's ``answer`` column (GSM8K ``"… #### 72"``, or a plain final answer such as
``"72"`` or ``"\frac{1}{2}"``) or, when a row has no ``answer``, its ``solution`` column (MATH, with ``\boxed{}``).
A row whose gold cannot be parsed is unscorable: its reward is ``None``, which TRL treats as NaN.

Hang-proofing. math-verify can run forever on hostile completions (``\boxed{10^{10^{10}}}`` makes sympy compute a
ten-billion-digit integer inside one C call), and its own timeout relies on ``signal.alarm``, which cannot interrupt
a C call and fails outside the main thread (TRL runs async reward functions on a background thread). So:

1. The answer text is cut to its last `MAX_ANSWER_CHARS` characters before parsing; string handling in this process
   is linear-time (``str.find``/``str.count``, no regular expressions), so megabyte completions are cheap.
2. Parsing and verification run in persistent worker subprocesses (`trl_pods.sandbox.Sandbox`: ``python -c``,
   importing only this module and math-verify, never torch or the training script). A worker gets its items in one
   message and answers one message per item, in order. Each item gets `reward_timeout()` seconds of wall-clock time
   (the deadline restarts with every answer); when it runs out, the worker is killed, that item scores 0.0, a fresh
   worker is started and the remaining items are sent to it. Every worker has its own pipe, so no answer of a killed
   worker can be mistaken for an answer of its replacement. Worst case, a worker's n items return after about
   n * (timeout + worker start-up, ~1 s); a normal item takes one to a few milliseconds.
3. PODS scores N rollouts per prompt, hundreds per process and generation, so a call of at least
   2 * `MIN_ITEMS_PER_WORKER` items is split into interleaved shards over up to `reward_workers()` workers, each
   driven by its own thread, and the answers are put back in the caller's order (the measurements behind this:
   docs/benchmarks/reward-throughput.md). Workers are independent, so a hanging item stalls and restarts only its
   own worker.
4. Processes never outlive the interpreter (`trl_pods.sandbox`): ``atexit`` kills the workers; an idle worker
   exits when its pipe closes (e.g. the trainer was killed); a busy one also caps its own CPU time per item
   (``RLIMIT_CPU``, timeout + 2 s), so the kernel ends it even when nobody is left to. The threads driving extra
   workers are daemon threads, so the interpreter never waits for a batch at exit.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from functools import lru_cache

from .sandbox import Sandbox

__all__ = [
    "MAX_ANSWER_CHARS",
    "REWARD_FUNCS",
    "REWARD_TIMEOUT_S",
    "accuracy_reward",
    "completion_text",
    "format_reward",
    "gsm8k_reward",
    "reward_timeout",
    "reward_workers",
]

RewardFunc = Callable[..., list[float | None]]

REWARD_TIMEOUT_S = 5.0
"""Default wall-clock seconds math-verify may spend on one completion; ``TRL_PODS_REWARD_TIMEOUT`` overrides it."""

MAX_DEFAULT_REWARD_WORKERS = 8
"""Most worker processes one training process uses by default; ``TRL_PODS_REWARD_WORKERS`` overrides it."""

MIN_ITEMS_PER_WORKER = 16
"""A call is split over several workers only with at least this many items per worker."""

MAX_ANSWER_CHARS = 1000
"""Only the last this-many characters of an answer (the ``<answer>`` content, else the completion) are parsed."""

_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_TAG_CREDIT = 0.05  # gsm8k_reward: per tag that occurs exactly once, for a wrong answer


def reward_timeout() -> float:
    """Seconds one completion may take in math-verify: ``$TRL_PODS_REWARD_TIMEOUT``, else `REWARD_TIMEOUT_S`.

    Raises:
        ValueError: the configured value is not a positive, finite number.
    """
    value = os.environ.get("TRL_PODS_REWARD_TIMEOUT", REWARD_TIMEOUT_S)
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"TRL_PODS_REWARD_TIMEOUT must be a positive, finite number of seconds, got {value!r}.")
    return seconds


def _usable_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def reward_workers() -> int:
    """Worker processes one reward call may use: ``$TRL_PODS_REWARD_WORKERS``, else this process's share of the cores.

    The default divides the usable cores by the training processes on this host (``$LOCAL_WORLD_SIZE``, set by
    torchrun and accelerate; 1 if unset), at least 1 and at most `MAX_DEFAULT_REWARD_WORKERS`.

    Raises:
        ValueError: the configured value is not a positive integer.
    """
    value = os.environ.get("TRL_PODS_REWARD_WORKERS")
    if value is None:
        local = os.environ.get("LOCAL_WORLD_SIZE", "1")
        local_processes = int(local) if local.isdecimal() and int(local) > 0 else 1
        return max(1, min(MAX_DEFAULT_REWARD_WORKERS, _usable_cores() // local_processes))
    if not (value.strip().isdecimal() and int(value) > 0):
        raise ValueError(f"TRL_PODS_REWARD_WORKERS must be a positive whole number of processes, got {value!r}.")
    return int(value)


# ----------------------------------------------------------------------------------------------------------------
# Text handling (this process; linear time on any input)
# ----------------------------------------------------------------------------------------------------------------


def completion_text(completion: object) -> str:
    """The text of a completion: a string, or the last assistant message of a conversation ("" if none)."""
    if isinstance(completion, str):
        return completion
    messages = [completion] if isinstance(completion, dict) else completion
    if not isinstance(messages, list):
        return ""
    messages = [m for m in messages if isinstance(m, dict)]
    assistant = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
    content = assistant[-1].get("content") if assistant else None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def _as_text(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):  # e.g. pandas' NaN for a missing value
        return ""
    return str(value).strip() if isinstance(value, str | int | float) else ""


def _gold_text(answer: object, solution: object) -> str | None:
    r"""What math-verify parses as gold: the text after GSM8K's last ``####``, a MATH solution from its last
    ``\boxed``, or a plain final answer wrapped in ``\boxed{}``; None when the row has no gold at all."""
    text = _as_text(answer) or _as_text(solution)
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
    elif (boxed := text.rfind("\\boxed")) >= 0:
        text = text[boxed:]
    elif text:
        text = f"\\boxed{{{text}}}"
    return text[:MAX_ANSWER_CHARS] or None


def _answer_candidates(text: str) -> tuple[str, ...]:
    r"""Readings of the model's final answer; the completion is correct if any of them verifies.

    The content of the last ``<answer>…</answer>`` if there is one: as written (math-verify finds a number or
    ``\boxed{}`` in it) and, unless it already has a ``\boxed``, wrapped in ``\boxed{}`` so that a bare expression
    such as ``6-5i`` or ``(3, \frac{\pi}{2})`` is read whole. Otherwise the completion itself, for math-verify to
    find its ``\boxed{}`` or last number.
    """
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    if start < 0:
        return (text[-MAX_ANSWER_CHARS:],)
    region = text[start + len("<answer>") : end][-MAX_ANSWER_CHARS:]
    return (region,) if "\\boxed" in region else (region, f"\\boxed{{{region}}}")


def _has_format(text: str) -> bool:
    """``<think>…</think><answer>…</answer>``: each tag exactly once, in this order, only whitespace around."""
    if any(text.count(tag) != 1 for tag in _TAGS):
        return False
    think, think_end, answer, answer_end = (text.find(tag) for tag in _TAGS)
    return (
        think < think_end < answer < answer_end
        and not text[:think].strip()
        and not text[think_end + len("</think>") : answer].strip()
        and not text[answer_end + len("</answer>") :].strip()
    )


# ----------------------------------------------------------------------------------------------------------------
# The math-verify worker
# ----------------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> list:
    from math_verify import parse

    return parse(gold, parsing_timeout=None)


def _verify_item(gold: str, candidates: tuple[str, ...]) -> float | None:
    """Worker side: None if the gold does not parse, 1.0 if a candidate verifies against it, else 0.0."""
    from math_verify import parse, verify

    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return None
    for candidate in candidates:
        if verify(gold_parsed, parse(candidate, parsing_timeout=None), timeout_seconds=None):
            return 1.0
    return 0.0


def _verify(item: tuple[str, tuple[str, ...]]) -> float:
    """Worker side (`trl_pods.sandbox.Sandbox`): `_verify_item` of one ``(gold, candidates)`` item, NaN for an
    unscorable gold (None stands for an item that raised or ran out of time)."""
    score = _verify_item(*item)
    return math.nan if score is None else score


def _prepare_worker() -> None:
    """Worker side: import and warm up math-verify before the first item's clock starts."""
    logging.disable(logging.WARNING)  # math-verify warns that its own (signal-based) timeouts are off
    _verify_item("\\boxed{1}", ("1",))


def _worker() -> Sandbox:
    """A math-verify worker: `_verify` in a `Sandbox` of its own."""
    return Sandbox("rewards", "_verify", prepare="_prepare_worker")


def _worker_score(worker: Sandbox, items: list[tuple[str, tuple[str, ...]]], timeout: float) -> list[float | None]:
    """``worker``'s scores of ``items``: 0.0 for an item that raised or timed out, None for an unscorable gold."""
    return [0.0 if score is None else None if math.isnan(score) else score for score in worker.run(items, timeout)]


_WORKER = _worker()  # scores every call; the first shard of a split one
_EXTRA_WORKERS: list[Sandbox] = []  # the other shards' workers, started when a call first needs them
_EXTRA_WORKERS_LOCK = threading.Lock()


def _reset_after_fork() -> None:
    # The workers forget their parent's processes themselves (`Sandbox`); a lock some other thread held at fork time
    # must not stay held in the child.
    global _EXTRA_WORKERS_LOCK
    _EXTRA_WORKERS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _shard_count(n_items: int, workers: int) -> int:
    """Shards to split ``n_items`` into: one per `MIN_ITEMS_PER_WORKER` items, at least 1, at most ``workers``."""
    return max(1, min(workers, n_items // MIN_ITEMS_PER_WORKER))


def _score(items: list[tuple[str, tuple[str, ...]]], timeout: float) -> list[float | None]:
    """`_worker_score` over up to `reward_workers()` workers at once: shard k is ``items[k::shards]``."""
    shards = _shard_count(len(items), reward_workers())
    if shards == 1:
        return _worker_score(_WORKER, items, timeout)
    with _EXTRA_WORKERS_LOCK:
        _EXTRA_WORKERS.extend(_worker() for _ in range(shards - 1 - len(_EXTRA_WORKERS)))
        workers = [_WORKER, *_EXTRA_WORKERS[: shards - 1]]
    answers: list[list[float | None] | BaseException | None] = [None] * shards

    def run(k: int) -> None:
        try:
            answers[k] = _worker_score(workers[k], items[k::shards], timeout)
        except BaseException as err:  # re-raised in the caller's thread below
            answers[k] = err

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(1, shards)]
    for thread in threads:
        thread.start()
    answers[0] = _worker_score(workers[0], items[0::shards], timeout)
    for thread in threads:
        thread.join()
    results: list[float | None] = [None] * len(items)
    for k, shard in enumerate(answers):
        if isinstance(shard, BaseException):
            raise shard
        results[k::shards] = shard
    return results


def _correctness(completions: list, answer: list | None, solution: list | None) -> list[float | None]:
    if answer is None and solution is None:
        raise ValueError("Math rewards need the gold answer: an `answer` or `solution` dataset column.")
    n = len(completions)
    golds = [_gold_text(a, s) for a, s in zip(answer or [None] * n, solution or [None] * n, strict=True)]
    todo = [i for i, gold in enumerate(golds) if gold is not None]
    items = [(golds[i], _answer_candidates(completion_text(completions[i]))) for i in todo]
    rewards: list[float | None] = [None] * n
    for i, reward in zip(todo, _score(items, reward_timeout()) if items else [], strict=True):
        rewards[i] = reward
    return rewards


# ----------------------------------------------------------------------------------------------------------------
# Reward functions
# ----------------------------------------------------------------------------------------------------------------


def accuracy_reward(
    completions: list, answer: list | None = None, solution: list | None = None, **kwargs
) -> list[float | None]:
    r"""1.0 if the completion's final answer equals the gold answer according to math-verify, else 0.0.

    The model's answer is the content of its last ``<answer>…</answer>`` if present, else the whole completion
    (math-verify takes its ``\boxed{}`` or last number). Equality is math-verify's: ``72.0`` = ``72``,
    ``0.5`` = ``\frac{1}{2}``, ``1,000`` = ``1000``.

    Args:
        completions: Strings, or conversations (lists of ``{"role", "content"}`` messages) whose last assistant
            message is scored.
        answer: Gold per completion: a GSM8K answer (``"… #### 72"``), a MATH solution, or a plain final answer.
        solution: Gold per completion when ``answer`` is absent or empty for a row: a MATH solution with
            ``\boxed{}`` or a plain final answer.
        **kwargs: Other dataset columns and TRL's extras (``prompts``, ``trainer_state``, ...), ignored.

    Returns:
        One reward per completion: ``None`` where the gold cannot be parsed (unscorable), 0.0 where the completion
        is wrong, has no parsable answer or ran past `reward_timeout()`.

    Raises:
        ValueError: neither ``answer`` nor ``solution`` was given.
        RuntimeError: the math-verify worker process could not be started.
    """
    return _correctness(completions, answer, solution)


def format_reward(completions: list, **kwargs) -> list[float]:
    """1.0 if the completion is ``<think>…</think><answer>…</answer>``, else 0.0.

    Each of the four tags must occur exactly once and in this order, with only whitespace before ``<think>``,
    between ``</think>`` and ``<answer>``, and after ``</answer>``.

    Args:
        completions: Strings or conversations, as for `accuracy_reward`.
        **kwargs: Dataset columns and TRL's extras, ignored.
    """
    return [float(_has_format(completion_text(c))) for c in completions]


def gsm8k_reward(
    completions: list, answer: list | None = None, solution: list | None = None, **kwargs
) -> list[float | None]:
    """The PODS paper's GSM8K reward: correctness with partial credit for the format.

    Rule, per completion: 1.0 if `accuracy_reward` is 1.0; otherwise 0.05 for each of ``<think>``, ``</think>``,
    ``<answer>`` and ``</answer>`` that occurs exactly once (order not checked), so a wrong answer earns at most 0.2.
    ``None`` when the gold cannot be parsed, as for `accuracy_reward`.

    Args:
        completions: Strings or conversations, as for `accuracy_reward`.
        answer: Gold per completion, as for `accuracy_reward`.
        solution: Gold per completion, as for `accuracy_reward`.
        **kwargs: Other dataset columns and TRL's extras, ignored.
    """
    rewards = _correctness(completions, answer, solution)
    texts = [completion_text(c) for c in completions]
    return [
        r if r is None or r == 1.0 else _TAG_CREDIT * sum(text.count(tag) == 1 for tag in _TAGS)
        for r, text in zip(rewards, texts, strict=True)
    ]


REWARD_FUNCS: dict[str, RewardFunc] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "gsm8k": gsm8k_reward,
}

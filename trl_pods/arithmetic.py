"""A built-in, offline arithmetic task for PODS/GRPO: seeded problems, an exact reward and a held-out split.

Rows are conversational, as TRL's GRPO trainers expect::

    {"prompt": [{"role": "user", "content": "What is 7 + 5?"}], "answer": "12"}

`arithmetic_reward` gives 1.0 when the integer the completion ends with (its last integer) equals the gold answer,
else 0.0. It is pure and fast (one regular expression per completion), so it adds nothing to a training step.

Difficulty knob (``difficulty``):

* ``"add1"``: single-digit addition ``a + b`` (a, b in 0..9);
* ``"add2x1"``: two-digit plus one-digit addition;
* ``"add2"``: two-digit addition;
* ``"mul1"``: single-digit multiplication (a, b in 2..9);
* ``"mul2x1"``: two-digit times one-digit multiplication (a in 10..99, b in 2..9);
* ``"sub1"``: single-digit subtraction with a non-negative result.

An integer ``difficulty`` is the number of digits of both operands of an addition (1 → ``"add1"``, 2 → ``"add2"``,
3 → three-digit addition...).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable

__all__ = [
    "DIFFICULTIES",
    "arithmetic_reward",
    "extract_answer",
    "make_arithmetic_dataset",
    "make_problem",
    "train_test_arithmetic",
]

# (a, operator symbol, b, result)
_Problem = tuple[int, str, int, int]


def _digits(rng: random.Random, n: int) -> int:
    return rng.randint(0 if n == 1 else 10 ** (n - 1), 10**n - 1)


def _add(da: int, db: int) -> Callable[[random.Random], _Problem]:
    def sample(rng: random.Random) -> _Problem:
        a, b = _digits(rng, da), _digits(rng, db)
        if rng.random() < 0.5 and da != db:
            a, b = b, a
        return a, "+", b, a + b

    return sample


def _mul1(rng: random.Random) -> _Problem:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return a, "*", b, a * b


def _mul2x1(rng: random.Random) -> _Problem:
    a, b = rng.randint(10, 99), rng.randint(2, 9)
    return a, "*", b, a * b


def _sub1(rng: random.Random) -> _Problem:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    a, b = max(a, b), min(a, b)
    return a, "-", b, a - b


DIFFICULTIES: dict[str, Callable[[random.Random], _Problem]] = {
    "add1": _add(1, 1),
    "add2x1": _add(2, 1),
    "add2": _add(2, 2),
    "mul1": _mul1,
    "mul2x1": _mul2x1,
    "sub1": _sub1,
}

TEMPLATE = "What is {a} {op} {b}?"


def _sampler(difficulty: str | int) -> Callable[[random.Random], _Problem]:
    if isinstance(difficulty, int) and not isinstance(difficulty, bool):
        if difficulty < 1:
            raise ValueError(f"An integer difficulty is a number of digits (>= 1); got {difficulty}.")
        return _add(difficulty, difficulty)
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"Unknown difficulty {difficulty!r}; choose one of {sorted(DIFFICULTIES)} or an int.")
    return DIFFICULTIES[difficulty]


def make_problem(rng: random.Random, difficulty: str | int = "add1", template: str = TEMPLATE) -> dict:
    """One row: ``{"prompt": [{"role": "user", "content": ...}], "answer": "<int>"}``."""
    a, op, b, result = _sampler(difficulty)(rng)
    return {"prompt": [{"role": "user", "content": template.format(a=a, op=op, b=b)}], "answer": str(result)}


def _problems(n: int, seed: int, difficulty: str | int, template: str, exclude: set[str] = frozenset()) -> list[dict]:
    rng = random.Random(f"trl_pods.arithmetic:{seed}:{difficulty}")
    rows, attempts = [], 0
    while len(rows) < n:
        attempts += 1
        if attempts > 1000 * n + 1000:
            raise ValueError(f"Could not draw {n} problems of difficulty {difficulty!r} outside the excluded set.")
        row = make_problem(rng, difficulty, template)
        if row["prompt"][0]["content"] not in exclude:
            rows.append(row)
    return rows


def make_arithmetic_dataset(n: int = 1000, seed: int = 0, difficulty: str | int = "add1", template: str = TEMPLATE):
    """A `datasets.Dataset` of ``n`` seeded problems (repeats allowed: small difficulties have few distinct ones)."""
    from datasets import Dataset

    return Dataset.from_list(_problems(n, seed, difficulty, template))


def train_test_arithmetic(
    n_train: int = 1000,
    n_test: int = 50,
    seed: int = 0,
    difficulty: str | int = "add1",
    template: str = TEMPLATE,
    disjoint: bool | None = None,
):
    """``(train, test)`` datasets drawn with different seeds.

    The test set holds ``n_test`` distinct questions. With ``disjoint=True`` no training question is also a test
    question. That is the default whenever the difficulty has at least ``2 * n_test`` distinct questions; otherwise
    (e.g. ``"add1"``, 100 questions, with ``n_test > 50``) training questions may reappear in the test set.
    """
    from datasets import Dataset

    distinct = _num_distinct(difficulty)
    if n_test > distinct:
        raise ValueError(f"Difficulty {difficulty!r} has only {distinct} distinct questions; n_test={n_test}.")
    if disjoint is None:
        disjoint = distinct >= 2 * n_test
    elif disjoint and distinct <= n_test:
        raise ValueError(f"Difficulty {difficulty!r} has only {distinct} distinct questions: none left to train on.")
    test_rows, seen = [], set()
    for row in _problems(50 * n_test + 500, seed + 1_000_003, difficulty, template):
        question = row["prompt"][0]["content"]
        if question not in seen:
            seen.add(question)
            test_rows.append(row)
            if len(test_rows) == n_test:
                break
    if len(test_rows) < n_test:
        raise ValueError(f"Could not draw {n_test} distinct test questions of difficulty {difficulty!r}.")
    train_rows = _problems(n_train, seed, difficulty, template, exclude=seen if disjoint else frozenset())
    return Dataset.from_list(train_rows), Dataset.from_list(test_rows)


def _num_distinct(difficulty: str | int) -> int:
    if isinstance(difficulty, int) and not isinstance(difficulty, bool):
        return (10**difficulty - (10 ** (difficulty - 1) if difficulty > 1 else 0)) ** 2
    return {"add1": 100, "add2x1": 1800, "add2": 8100, "mul1": 64, "mul2x1": 720, "sub1": 55}[_name(difficulty)]


def _name(difficulty: str) -> str:
    _sampler(difficulty)  # validates
    return difficulty


_INTEGER = re.compile(r"-?\d+(?:,\d{3})*(?!\d)")


def extract_answer(text: str) -> int | None:
    """The last integer in ``text`` ("The answer is 1,234." -> 1234; "7 + 5 = 12" -> 12), or None if there is none."""
    matches = _INTEGER.findall(text)
    if not matches:
        return None
    return int(matches[-1].replace(",", ""))


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, Iterable):  # conversational: a list of messages
        return "".join(_text(message) for message in completion)
    return str(completion)


def arithmetic_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 where the completion's last integer equals the gold ``answer``, else 0.0.

    ``completions`` are strings or conversational message lists (TRL passes either); ``answer`` is the dataset
    column of gold integers (strings or ints). Truncated completions that stop mid-explanation usually end with an
    operand rather than the result, so they earn nothing, which rewards short, direct answers.
    """
    rewards = []
    for completion, gold in zip(completions, answer, strict=True):
        predicted = extract_answer(_text(completion))
        rewards.append(1.0 if predicted is not None and predicted == int(str(gold).strip()) else 0.0)
    return rewards

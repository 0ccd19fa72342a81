r"""Any reasoning-gym dataset as a trl_pods task: ``--task reasoning_gym:<name>``, scored by the dataset's own scorer.

reasoning-gym (``pip install 'trl-pods[tasks]'``) generates problems procedurally, each with a scorer
(``dataset.score_answer(answer, entry)`` in [0, 1]). This module makes them TRL conversational datasets and rewards.

Problems. ``create_dataset(name, seed=seed, **task_config)`` gives a seeded stream of items. The held-out problems
are the first ``n_test`` *distinct* questions of the stream; the training problems are the next ``n_train`` items
of the same stream whose question is not held out (repeats allowed: small settings have few distinct questions). So
the same seed, settings and ``n_test`` give the same held-out problems, which no training problem shares, whatever
``n_train``. (A dataset's item ``i`` is drawn from ``Random(seed + i)``, so one stream, not two seeds, keeps the
splits apart.)

Prompt. reasoning-gym's own ``"direct"`` system prompt (answer between ``<answer>`` tags, no preamble), then the
question as the user message.

Extraction rule (`extract_answer`, used by the reward, `trl-pods eval` and the benchmark alike): the answer is the
content of the last ``<answer>…</answer>``, stripped, if the completion has one; else, where the task's gold answers
are numbers (every held-out gold is one), the last number in the text (commas dropped); else its last non-empty
line, stripped.

Safety. Several scorers evaluate the answer as code (`EVALUATING_SCORERS`): Python's ``eval`` or sympy's
``parse_expr``, which can run ``__import__('os').system(...)``. An answer reaches such a scorer only when
`admissible` accepts it: a plain Python literal (what ``ast.literal_eval`` accepts) for the ``eval`` scorers, or text
made only of the characters of the task's gold answers, with which ``eval``/``parse_expr`` can read a number or a
name and call nothing but whitelisted maths functions. Anything else scores 0.0 unseen. Every scorer runs in a
worker process (`trl_pods.sandbox.Sandbox`) under `SCORE_TIMEOUT_S` seconds per answer; one that raises or runs out
of time scores 0.0.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import json
import math
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from .rewards import completion_text
from .sandbox import Sandbox

__all__ = [
    "EVALUATING_SCORERS",
    "INSTALL_HINT",
    "PREFIX",
    "SCORE_TIMEOUT_S",
    "admissible",
    "check_reasoning_gym_task",
    "dataset_name",
    "extract_answer",
    "is_reasoning_gym",
    "load_reasoning_gym",
    "parse_task_config",
    "reasoning_gym_format_reward",
    "reasoning_gym_reward",
    "score_answers",
    "split_items",
]

PREFIX = "reasoning_gym:"
"""A task named ``reasoning_gym:<name>`` is reasoning-gym's dataset ``<name>``."""

INSTALL_HINT = "pip install 'trl-pods[tasks]' (or pip install reasoning-gym)"

SCORE_TIMEOUT_S = 5.0
"""Wall-clock seconds a scorer may spend on one answer (as math-verify's default) before the answer scores 0.0."""

_EXAMPLE = """'{"min_terms": 2, "max_terms": 2}'"""
_RESERVED = ("seed", "size")  # settings trl_pods sets itself: the run's seed and the split sizes

_EVAL_LITERAL = "eval"  # the scorer calls Python's eval on the answer: only literals, or the gold's alphabet
_SYMPY = "sympy"  # the scorer calls sympy's parse_expr on the answer: only the gold's alphabet and maths names

EVALUATING_SCORERS: dict[str, str] = {
    # reasoning_gym 0.1.25, <dataset>.score_answer: where the model's answer is evaluated as code
    "string_insertion": _EVAL_LITERAL,  # algorithmic/string_insertion.py: "".join(eval(answer))
    "spiral_matrix": _EVAL_LITERAL,  # algorithmic/spiral_matrix.py: " ".join(str(i) for i in eval(answer))
    "binary_matrix": _EVAL_LITERAL,  # algorithmic/binary_matrix.py: self._matrix_to_str(eval(answer))
    "n_queens": _EVAL_LITERAL,  # games/n_queens.py: self._board_to_string(eval(answer))
    "countdown": _SYMPY,  # games/countdown.py: float(parse_expr(answer))
    "puzzle24": _SYMPY,  # games/puzzle24.py: int(parse_expr(answer))
    "polynomial_multiplication": _SYMPY,  # algebra/polynomial_multiplication.py: sp.parse_expr(answer)
    "simple_integration": _SYMPY,  # algebra/simple_integration.py: sympy.parse_expr(answer, local_dict=...)
    "intermediate_integration": _SYMPY,  # algebra/intermediate_integration.py: sympy.parse_expr(answer, ...)
    # Not listed: number_sorting evals only the gold answer (entry["answer"]), bitwise_arithmetic and
    # basic_arithmetic eval only while generating, codeio execs its own data while generating, propositional_logic
    # parses with its own parser; advanced_geometry, polynomial_equations and simple_equations use sympy (whose
    # functions sympify strings) only while generating; composite scores with the scorer of each item's source
    # dataset (checked per item).
    # tests/test_reasoning_gym.py scans the installed reasoning_gym, so a release with a new such scorer fails there.
}
"""reasoning-gym datasets whose scorer evaluates the answer text as code, and how (``"eval"`` or ``"sympy"``)."""

_ALPHABETS = {
    # The characters of each evaluating task's gold answers. With them alone Python's eval can only read numbers and
    # names (no call: no parentheses, quotes, dots or operators), and sympy can only do arithmetic on numbers,
    # one-letter symbols and the `_MATHS_NAMES` functions (no string can be built: no quotes, and no builtin that
    # makes one has a one-letter name or is whitelisted).
    "string_insertion": re.compile(r"[A-Za-z]*"),
    "spiral_matrix": re.compile(r"[0-9\s]*"),
    "binary_matrix": re.compile(r"[0-9\s]*"),
    "n_queens": re.compile(r"[_Q\s]*"),
    "countdown": re.compile(r"(?:[0-9\s+\-/()]|\*(?!\*))*"),  # no power: no gold has one, and 9**9**9**9 hangs
    "puzzle24": re.compile(r"(?:[0-9\s+\-/()]|\*(?!\*))*"),
    "polynomial_multiplication": re.compile(r"[0-9A-Za-z\s+\-*/()]*"),
    "simple_integration": re.compile(r"[0-9A-Za-z\s+\-*/()]*"),
    "intermediate_integration": re.compile(r"[0-9A-Za-z\s+\-*/()]*"),
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MATHS_NAMES = frozenset(
    "sin cos tan cot sec csc asin acos atan sinh cosh tanh exp log ln sqrt pi E".split()
)  # the functions and constants the integration tasks' prompts and golds use

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+")
_FULL_NUMBER = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)")


# ----------------------------------------------------------------------------------------------------------------
# Names and settings
# ----------------------------------------------------------------------------------------------------------------


def is_reasoning_gym(task: str) -> bool:
    """Whether ``task`` names a reasoning-gym dataset (``reasoning_gym:<name>``)."""
    return task.startswith(PREFIX)


def dataset_name(task: str) -> str:
    """The reasoning-gym dataset of ``task``: ``"reasoning_gym:chain_sum"`` -> ``"chain_sum"``."""
    return task.removeprefix(PREFIX)


def _reasoning_gym():
    """The ``reasoning_gym`` package (also the scoring worker's preparation: its imports take about a second).

    Raises:
        ValueError: it is not installed; the message gives the install command.
    """
    try:
        import reasoning_gym
    except ImportError:
        raise ValueError(f"reasoning-gym tasks need the package reasoning-gym: {INSTALL_HINT}.") from None
    return reasoning_gym


def parse_task_config(value: str | dict | None) -> dict[str, Any]:
    """The dataset settings of ``--task_config``: a JSON object (a string, or a dict from a YAML recipe); {} for None.

    Raises:
        ValueError: not a JSON object, or it sets ``seed`` or ``size`` (trl_pods sets those).
    """
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"--task_config is not JSON ({err}): give an object such as {_EXAMPLE}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"--task_config must be a JSON object such as {_EXAMPLE}, got {value!r}.")
    reserved = [key for key in _RESERVED if key in value]
    if reserved:
        raise ValueError(
            f"--task_config sets {', '.join(reserved)}, which trl_pods sets itself: use --seed, --task_train_size "
            "and --task_test_size."
        )
    return value


def _settings(config_class: type) -> str:
    """A config dataclass's settings with their defaults: ``"min_terms=2, max_terms=6, ..."``."""
    settings = []
    for f in dataclasses.fields(config_class):
        if f.name in _RESERVED:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        settings.append(f"{f.name}={default!r}")
    return ", ".join(settings)


def check_reasoning_gym_task(task: str, config: dict[str, Any]) -> None:
    """Raise ValueError, in one line, when reasoning-gym is missing, the dataset unknown or a setting bad.

    An unknown name lists the known datasets; a bad setting (unknown, wrong type, refused by the dataset's own
    validation, or failing when a problem is generated) lists the dataset's settings with their defaults.
    """
    reasoning_gym = _reasoning_gym()
    from reasoning_gym.factory import DATASETS

    name = dataset_name(task)
    if name not in DATASETS:
        raise ValueError(f"Unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(DATASETS))}.")
    try:
        reasoning_gym.create_dataset(name, seed=0, size=1, **config)[0]
    except Exception as err:
        message = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(
            f"--task_config {json.dumps(config)} is not a setting of {name} ({message}); its settings (defaults): "
            f"{_settings(DATASETS[name][1])}."
        ) from None


# ----------------------------------------------------------------------------------------------------------------
# Problems
# ----------------------------------------------------------------------------------------------------------------


def _is_number(text: object) -> bool:
    return isinstance(text, str) and _FULL_NUMBER.fullmatch(text.strip()) is not None


def _jsonable(value: object) -> object:
    """JSON for what metadata holds beyond JSON's types (numpy scalars and arrays, sets)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)


def _draws(name: str, config: dict[str, Any], seed: int, budget: int) -> Iterator[dict]:
    """The dataset's seeded stream of items, at most ``budget`` of them."""
    dataset = _reasoning_gym().create_dataset(name, seed=seed, size=budget, **config)
    return (dataset[i] for i in range(budget))


def split_items(
    name: str, config: dict[str, Any], seed: int, n_train: int, n_test: int
) -> tuple[list[dict], list[dict]]:
    """``(train, held_out)`` items of one seeded stream: the first ``n_test`` distinct questions are held out, then
    ``n_train`` items whose question is not held out (repeats allowed).

    Raises:
        ValueError: the setting has too few distinct questions for ``n_test``, or none left to train on.
    """
    budget = 20 * (n_train + n_test) + 1000
    stream = _draws(name, config, seed, budget)
    held_out: list[dict] = []
    questions: set[str] = set()
    for item in stream:
        if item["question"] not in questions:
            questions.add(item["question"])
            held_out.append(item)
            if len(held_out) == n_test:
                break
    if len(held_out) < n_test:
        raise ValueError(
            f"{name} with --task_config {json.dumps(config)} gave only {len(held_out)} distinct questions in {budget} "
            f"draws: ask for fewer held-out problems (--task_test_size) or widen the setting."
        )
    train = list(itertools.islice((item for item in stream if item["question"] not in questions), n_train))
    if len(train) < n_train:
        raise ValueError(
            f"{name} with --task_config {json.dumps(config)} left only {len(train)} training problems outside the "
            f"{n_test} held-out ones in {budget} draws: ask for fewer held-out problems (--task_test_size) or widen "
            "the setting."
        )
    return train, held_out


def load_reasoning_gym(
    task: str,
    split: str = "train",
    config: str | dict | None = None,
    seed: int = 0,
    n_train: int = 2000,
    n_test: int = 200,
):
    """A reasoning-gym dataset as ``datasets.Dataset`` rows for TRL (see the module docstring for the split).

    Args:
        task: ``"reasoning_gym:<name>"``.
        split: ``"train"`` (``n_train`` problems) or ``"test"`` (the ``n_test`` held-out problems).
        config: The dataset's own settings (`parse_task_config`): a JSON string, a dict or None (its defaults).
        seed: Seed of the stream both splits come from.
        n_train: Training problems.
        n_test: Held-out problems (distinct questions), which the training problems exclude.

    Returns:
        Rows ``{"prompt": [system, user], "answer": gold (str or None), "reasoning_gym_task": name,
        "reasoning_gym_config": JSON of the settings, "reasoning_gym_entry": JSON of the item (question, answer,
        metadata: what its scorer reads), "reasoning_gym_numeric": whether the answers are numbers (every held-out
        gold is one; `extract_answer` then falls back on the last number)}``, scored by `reasoning_gym_reward`.

    Raises:
        ValueError: reasoning-gym missing, unknown dataset, bad settings or split, or too few distinct questions.
    """
    from datasets import Dataset

    if split not in ("train", "test"):
        raise ValueError(f"reasoning-gym tasks have the splits 'train' and 'test', not {split!r}.")
    settings = parse_task_config(config)
    check_reasoning_gym_task(task, settings)
    from reasoning_gym.utils import SYSTEM_PROMPTS

    name = dataset_name(task)
    train, held_out = split_items(name, settings, seed, n_train if split == "train" else 0, n_test)
    numeric = all(_is_number(item["answer"]) for item in held_out)
    settings_json = json.dumps(settings, sort_keys=True)
    system = {"role": "system", "content": SYSTEM_PROMPTS["direct"]}
    rows = [
        {
            "prompt": [system, {"role": "user", "content": item["question"]}],
            "answer": None if item["answer"] is None else str(item["answer"]),
            "reasoning_gym_task": name,
            "reasoning_gym_config": settings_json,
            "reasoning_gym_entry": json.dumps(item, default=_jsonable),
            "reasoning_gym_numeric": numeric,
        }
        for item in (train if split == "train" else held_out)
    ]
    return Dataset.from_list(rows)


# ----------------------------------------------------------------------------------------------------------------
# Answers and scores
# ----------------------------------------------------------------------------------------------------------------


def extract_answer(text: str, numeric: bool) -> str:
    """The answer of a completion: the content of its last ``<answer>…</answer>`` (stripped) if it has one; else,
    for a task with numeric answers, its last number (commas dropped); else its last non-empty line (stripped).
    "" when there is none of these."""
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    if start >= 0:
        return text[start + len("<answer>") : end].strip()
    if numeric:
        numbers = _NUMBER.findall(text)
        return numbers[-1].replace(",", "") if numbers else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def admissible(source: str, answer: str) -> bool:
    """Whether ``answer`` may reach the scorer of reasoning-gym dataset ``source`` (see `EVALUATING_SCORERS`).

    Every answer may reach a scorer that does not evaluate it. An ``eval`` scorer takes a literal that
    ``ast.literal_eval`` accepts (eval then computes the same value) or text of the gold's alphabet; a sympy scorer
    takes text of the gold's alphabet whose names are one letter long or maths functions (`_MATHS_NAMES`).
    """
    how = EVALUATING_SCORERS.get(source)
    if how is None:
        return True
    if _ALPHABETS[source].fullmatch(answer):
        return how == _EVAL_LITERAL or all(len(n) == 1 or n in _MATHS_NAMES for n in _NAME.findall(answer))
    if how == _EVAL_LITERAL:
        try:
            ast.literal_eval(answer)
        except Exception:  # SyntaxError, ValueError, and RecursionError or MemoryError on deep nesting
            return False
        return True
    return False


def _source(task: str, entry: str) -> str:
    """The dataset whose scorer scores ``entry``: its ``source_dataset`` (a composite's part), else ``task``."""
    metadata = json.loads(entry).get("metadata")
    source = metadata.get("source_dataset") if isinstance(metadata, dict) else None
    return source if isinstance(source, str) else task


@lru_cache(maxsize=64)
def _dataset(task: str, config: str):
    """Worker side: the dataset object whose ``score_answer`` scores items of ``task`` with settings ``config``."""
    return _reasoning_gym().create_dataset(task, seed=0, size=1, **json.loads(config))


def _score_item(item: tuple[str, str, str, str]) -> float:
    """Worker side (`trl_pods.sandbox.Sandbox`): the dataset's score of one ``(task, config, entry, answer)``."""
    task, config, entry, answer = item
    score = float(_dataset(task, config).score_answer(answer, json.loads(entry)))
    return score if math.isfinite(score) else 0.0


_SANDBOX: Sandbox | None = None


def score_answers(answers: list[str], tasks: list[str], configs: list[str], entries: list[str]) -> list[float]:
    """The dataset's own score of each answer (from `extract_answer`, or a raw completion), 0.0 where `admissible`
    refuses it or its scorer raises or runs past `SCORE_TIMEOUT_S`.

    Args:
        answers: One answer per item.
        tasks, configs, entries: The dataset's ``reasoning_gym_task``, ``reasoning_gym_config`` and
            ``reasoning_gym_entry`` columns of each item.
    """
    global _SANDBOX
    rows = list(zip(tasks, configs, entries, answers, strict=True))
    todo = [i for i, (task, _, entry, answer) in enumerate(rows) if admissible(_source(task, entry), answer)]
    scores = [0.0] * len(rows)
    if todo:
        if _SANDBOX is None:
            _SANDBOX = Sandbox("reasoning_gym_tasks", "_score_item", prepare="_reasoning_gym")
        for i, score in zip(todo, _SANDBOX.run([rows[i] for i in todo], SCORE_TIMEOUT_S), strict=True):
            scores[i] = 0.0 if score is None else score
    return scores


def reasoning_gym_reward(
    completions: list,
    reasoning_gym_task: list[str],
    reasoning_gym_config: list[str],
    reasoning_gym_entry: list[str],
    reasoning_gym_numeric: list[bool],
    **kwargs,
) -> list[float]:
    """The dataset's own score, in [0, 1], of each completion's answer (`extract_answer`; `score_answers`).

    Args:
        completions: Strings, or conversations whose last assistant message is scored (`completion_text`).
        reasoning_gym_task, reasoning_gym_config, reasoning_gym_entry, reasoning_gym_numeric: The dataset's columns
            (`load_reasoning_gym`).
        **kwargs: Other columns and TRL's extras, ignored.
    """
    pairs = zip(completions, reasoning_gym_numeric, strict=True)
    answers = [extract_answer(completion_text(c), numeric) for c, numeric in pairs]
    return score_answers(answers, reasoning_gym_task, reasoning_gym_config, reasoning_gym_entry)


def reasoning_gym_format_reward(completions: list, **kwargs) -> list[float]:
    """1.0 where the completion holds one ``<answer>…</answer>`` (each tag once, in order) with a non-empty answer,
    else 0.0: the format reasoning-gym's prompt asks for."""
    rewards = []
    for completion in completions:
        text = completion_text(completion)
        start, end = text.find("<answer>"), text.find("</answer>")
        once = text.count("<answer>") == 1 and text.count("</answer>") == 1
        rewards.append(float(once and start < end and bool(text[start + len("<answer>") : end].strip())))
    return rewards

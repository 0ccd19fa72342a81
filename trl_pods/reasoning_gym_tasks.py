r"""Any reasoning-gym dataset as a trl_pods task: ``--task reasoning_gym:<name>``, scored by the dataset's own scorer.

reasoning-gym (``pip install 'trl-pods[tasks]'``) generates problems procedurally, each with a scorer
(``dataset.score_answer(answer, entry)`` in [0, 1]). This module makes them TRL conversational datasets and rewards.

Problems. Each split reads a stream of its own: item ``j`` is item ``j % STREAM_CHUNK`` of the dataset object that
``create_dataset(name, seed=stream_seed(seed, split, j // STREAM_CHUNK), size=STREAM_CHUNK, **task_config)`` makes,
its seed a hash of the data seed, the split and the chunk (reasoning-gym draws item ``i`` from ``Random(seed + i)``,
so seeds ``s`` and ``s + 1`` would be one stream shifted by an item). The held-out problems are the first ``n_test``
*distinct* questions of the ``"test"`` stream; the training problems are the first ``n_train`` items of the
``"train"`` stream whose question is not held out (repeats allowed: small settings have few distinct questions). The
streams are built in the reasoning-gym worker (`trl_pods.sandbox.Sandbox`), whose string hashing is fixed, with
Python's and numpy's global generators seeded before each item, in an empty temporary folder; an item reasoning-gym
fails to make, or one that holds that folder's path, is left out. So the problems are a function of the dataset, its
settings, the data seed and the split sizes alone (and of the reasoning-gym release), on every process and every
resume; the held-out set does not depend on ``n_train``, the first ``k`` held-out problems not on ``n_test``, and no
training problem shares a question with the held-out set.

Prompt. reasoning-gym's own ``"direct"`` system prompt (answer between ``<answer>`` tags, no preamble), then the
question as the user message.

Entries. Each row keeps the item as reasoning-gym made it (question, answer, metadata: what its scorer reads) in
``reasoning_gym_entry``: JSON in which what JSON cannot hold (tuples, sets, dicts with other keys than strings,
fractions, numpy values) is tagged (`encode_entry`), so the scorer sees the original item again (`decode_entry`).

Extraction rule (`extract_answer`, used by the reward, `trl-pods eval` and the benchmark alike): the answer is the
content of the last ``<answer>…</answer>``, stripped, if the completion has one; else, where the task's gold answers
are numbers (every held-out gold is one), the last number in the text (commas dropped); else its last non-empty
line, stripped.

Safety. Several scorers evaluate the answer as code (`EVALUATING_SCORERS`): Python's ``eval`` or sympy's
``parse_expr``, which can run ``__import__('os').system(...)``. An answer reaches such a scorer only when
`admissible` accepts it: a plain Python literal (what ``ast.literal_eval`` accepts) for the ``eval`` scorers, or text
made only of the characters of the task's gold answers, with which ``eval``/``parse_expr`` can read a number or a
name and call nothing but whitelisted maths functions, and (sympy) whose powers have numbers as exponents, at most
`MAX_EXPONENT` nested. Every scorer runs in a worker process (`trl_pods.sandbox.Sandbox`) under `SCORE_TIMEOUT_S`
seconds per answer. An answer refused, or whose scoring raises or runs out of time, scores what the scorer gives an
unparsable answer (`UNPARSABLE_ANSWER`: countdown's and puzzle24's 0.01, most others' 0.0; 0.0 where that raises).
"""

from __future__ import annotations

import ast
import dataclasses
import fractions
import hashlib
import itertools
import json
import math
import os
import random
import re
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from .rewards import completion_text
from .sandbox import Sandbox

__all__ = [
    "BUILD_TIMEOUT_S",
    "EVALUATING_SCORERS",
    "INSTALL_HINT",
    "MAX_EXPONENT",
    "PREFIX",
    "SCORE_TIMEOUT_S",
    "STREAM_CHUNK",
    "UNPARSABLE_ANSWER",
    "admissible",
    "check_reasoning_gym_task",
    "dataset_name",
    "decode_entry",
    "encode_entry",
    "extract_answer",
    "is_reasoning_gym",
    "load_reasoning_gym",
    "make_dataset",
    "parse_task_config",
    "reasoning_gym_format_reward",
    "reasoning_gym_reward",
    "score_answers",
    "split_items",
    "split_rows",
    "stream_seed",
]

PREFIX = "reasoning_gym:"
"""A task named ``reasoning_gym:<name>`` is reasoning-gym's dataset ``<name>``."""

INSTALL_HINT = "pip install 'trl-pods[tasks]' (or pip install reasoning-gym)"

SCORE_TIMEOUT_S = 5.0
"""Wall-clock seconds a scorer may spend on one answer (as math-verify's default) before the answer counts as one the
scorer could not parse."""

BUILD_TIMEOUT_S = 3600.0
"""Wall-clock seconds the worker may spend building the splits of a dataset: at the default sizes the slowest,
futoshiki and knight_swap, took 15 and 9 minutes (both splits, on a shared core), most others a second or less."""

STREAM_CHUNK = 500
"""Items of each dataset object a stream is read from (reasoning-gym's default size): the same whatever the split
sizes, since the items of some datasets (acre, list_functions) depend on it, and word_ladder refuses more than
20,000."""

MAX_EXPONENT = 100
"""Largest exponent (nested exponents multiplied) an answer to a sympy scorer may hold: sympy computes a numeric power
in full, and ``9**9**9**9`` would run until the timeout. The golds of the default settings use at most 10."""

UNPARSABLE_ANSWER = "?"
"""The answer a refused one is scored as: text no scorer can parse (neither Python's ``eval`` nor sympy reads it), so
it gets the scorer's own value for an unparsable answer, e.g. countdown's 0.01."""

_EXAMPLE = """'{"min_terms": 2, "max_terms": 2}'"""
_COMPOSITE_EXAMPLE = json.dumps(
    {"datasets": [{"name": "chain_sum", "weight": 1, "config": {}}, {"name": "countdown", "weight": 1, "config": {}}]}
)
_RESERVED = ("seed", "size")  # settings trl_pods sets itself: from the task seed, and the split sizes

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


def _check_composite(config: dict[str, Any]) -> None:
    """Raise ValueError for a composite config without parts (``"datasets": [{"name", "weight", "config"}, ...]``) or
    with a part whose config sets ``seed`` or ``size``."""
    parts = config.get("datasets")
    if not parts or not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
        raise ValueError(f"composite needs its parts: --task_config '{_COMPOSITE_EXAMPLE}'.")
    for part in parts:
        reserved = [key for key in _RESERVED if isinstance(part.get("config"), dict) and key in part["config"]]
        if reserved:
            raise ValueError(
                f"composite's part {part.get('name')} sets {', '.join(reserved)}, which trl_pods sets itself (each "
                "part's seed follows the composite's)."
            )


def make_dataset(name: str, config: dict[str, Any], seed: int = 0, size: int = 1):
    """reasoning-gym's dataset object ``name`` with the settings ``config`` (a composite's parts as JSON objects made
    reasoning-gym's `DatasetSpec`), ``seed`` and ``size``; size 1 for its scorer, which reads the entry, not the
    object's items.

    Raises:
        ValueError: reasoning-gym missing, or a composite without parts (reasoning-gym's own errors pass through).
    """
    reasoning_gym = _reasoning_gym()
    if name == "composite":
        from reasoning_gym.composite import DatasetSpec

        _check_composite(config)
        config = {**config, "datasets": [DatasetSpec(**part) for part in config["datasets"]]}
    return reasoning_gym.create_dataset(name, seed=seed, size=size, **config)


def check_reasoning_gym_task(task: str, config: dict[str, Any]) -> None:
    """Raise ValueError, in one line, when reasoning-gym is missing, the dataset unknown or a setting bad.

    An unknown name lists the known datasets; a bad setting (unknown, wrong type, refused by the dataset's own
    validation, or failing when a problem is generated) lists the dataset's settings with their defaults.
    """
    _reasoning_gym()
    from reasoning_gym.factory import DATASETS

    name = dataset_name(task)
    if name not in DATASETS:
        raise ValueError(f"Unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(DATASETS))}.")
    if name == "composite":
        _check_composite(config)
    try:
        make_dataset(name, config)[0]
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


def stream_seed(seed: int, split: str, chunk: int) -> int:
    """The reasoning-gym seed of chunk ``chunk`` (items ``chunk * STREAM_CHUNK`` on) of the ``split`` stream
    (``"train"`` or ``"test"``) of data seed ``seed``: the first 8 bytes of a SHA-256 of the three, below
    ``2**32 - STREAM_CHUNK`` (numpy's seeds end at 2**32, and an item adds its index). Two seeds' streams overlap only
    by chance (about one chunk pair in 4 million)."""
    digest = hashlib.sha256(f"trl_pods.reasoning_gym:{seed}:{split}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**32 - STREAM_CHUNK)


def _stream(
    name: str, config: dict[str, Any], seed: int, split: str, draws: int, folder: str, failures: list[str]
) -> Iterator[dict]:
    """The items of the first ``draws`` of the ``split`` stream of data seed ``seed`` (`stream_seed`). Python's and
    numpy's global random generators are seeded before each item (with the item's own seed): list_functions draws
    from Python's, so its items would differ from one build to the next. An item reasoning-gym fails to make (codeio:
    an output its own code cannot write as JSON; word_ladder: no path found), or one that holds ``folder`` (the working
    folder: codeio's programs that list files), is left out, its error appended to ``failures``."""
    import numpy as np

    for chunk in range(math.ceil(draws / STREAM_CHUNK)):
        dataset_seed = stream_seed(seed, split, chunk)
        dataset = make_dataset(name, config, dataset_seed, STREAM_CHUNK)
        for i in range(min(STREAM_CHUNK, draws - chunk * STREAM_CHUNK)):
            random.seed(dataset_seed + i)
            np.random.seed(dataset_seed + i)
            try:
                item = dataset[i]
            except Exception as err:  # the dataset's own failure on this item
                failures.append(f"{type(err).__name__}: {' '.join(str(err).split())}"[:200])
                continue
            if folder in repr(item):
                failures.append("an item that holds the folder it was made in")
                continue
            yield item


def _draws(n: int) -> int:
    """Items read from a stream to find ``n`` problems: small settings repeat questions."""
    return 20 * n + 1000


def split_items(
    name: str, config: dict[str, Any], seed: int, n_train: int, n_test: int
) -> tuple[list[dict], list[dict]]:
    """``(train, held_out)`` items as reasoning-gym makes them in this process: the first ``n_test`` distinct
    questions of the ``"test"`` stream, then the first ``n_train`` items of the ``"train"`` stream whose question is
    not held out (repeats allowed; items reasoning-gym fails to make left out, `_stream`). They are made in an empty
    temporary folder, removed after: codeio's programs write files where they run, and an item that holds that
    folder's path is left out, since it would differ with the folder. `load_reasoning_gym` runs this in the
    reasoning-gym worker, whose hashing is fixed.

    Raises:
        ValueError: the setting has too few distinct questions for ``n_test``, or none left to train on; the message
            names the size to use.
    """
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="trl_pods-reasoning-gym-") as folder:
        os.chdir(folder)
        try:
            return _split_here(name, config, seed, n_train, n_test, os.getcwd())
        finally:
            os.chdir(previous)


def _split_here(
    name: str, config: dict[str, Any], seed: int, n_train: int, n_test: int, folder: str
) -> tuple[list[dict], list[dict]]:
    """`split_items` in the working folder ``folder``."""
    held_out: list[dict] = []
    questions: set[str] = set()
    failures: list[str] = []
    for item in _stream(name, config, seed, "test", _draws(n_test), folder, failures):
        if item["question"] not in questions:
            questions.add(item["question"])
            held_out.append(item)
            if len(held_out) == n_test:
                break
    setting = f"{name} with --task_config {json.dumps(config)}"
    fewer = f"use --task_test_size {min(len(held_out), n_test) // 2} or less"
    if len(held_out) < n_test:
        raise ValueError(
            f"{setting} gave only {len(held_out)} distinct questions in {_draws(n_test)} draws{_failed(failures)}: "
            f"{fewer} (training needs questions of their own) or widen the setting."
        )
    stream = _stream(name, config, seed, "train", _draws(n_train) if n_train else 0, folder, failures)
    train = list(itertools.islice((item for item in stream if item["question"] not in questions), n_train))
    if len(train) < n_train:
        use = f"use --task_train_size {len(train)} or less, or {fewer[4:]}" if train else fewer
        raise ValueError(
            f"{setting} left only {len(train)} training problems outside the {n_test} held-out ones in "
            f"{_draws(n_train)} draws{_failed(failures)}: {use}, or widen the setting."
        )
    return train, held_out


def _failed(failures: list[str]) -> str:
    """How many items reasoning-gym failed to make, and the first error: for a message about too few problems."""
    return f" ({len(failures)} of them failed, the first with {failures[0]})" if failures else ""


def _row(item: dict) -> tuple[str, str | None, str]:
    """What a row keeps of an item: its question, its gold answer as text (None if it has none), its entry."""
    return item["question"], None if item["answer"] is None else str(item["answer"]), encode_entry(item)


def _build(name: str, config: str, seed: int, n_train: int, n_test: int) -> tuple[list, list] | str:
    """Worker side: `split_items` as rows (`_row`), or a one-line message of what it raised."""
    try:
        train, held_out = split_items(name, json.loads(config), seed, n_train, n_test)
        return [_row(item) for item in train], [_row(item) for item in held_out]
    except ValueError as err:
        return str(err)
    except Exception as err:  # reasoning-gym's own failure, e.g. making a dataset object
        return (
            f"Building {name} with --task_config {config} failed: {type(err).__name__}: {' '.join(str(err).split())}"
        )


def split_rows(
    name: str, config: dict[str, Any], seed: int, n_train: int, n_test: int
) -> tuple[list[tuple[str, str | None, str]], list[tuple[str, str | None, str]]]:
    """`split_items` made in the scoring worker (fixed hashing: the same on every process), as ``(question, gold
    answer as text or None, entry)`` rows (`encode_entry`): ``(train, held_out)``.

    Raises:
        ValueError: what `split_items` raises, what else failed in the worker, or a build that ran past
            `BUILD_TIMEOUT_S` (or its memory).
    """
    settings = json.dumps(config, sort_keys=True)
    (built,) = _worker().run([("build", name, settings, seed, n_train, n_test)], BUILD_TIMEOUT_S)
    if built is None:
        raise ValueError(
            f"Building {name} with --task_config {settings} ran past {BUILD_TIMEOUT_S:g} s, or its memory, in the "
            "reasoning-gym worker (its warning above says which): try smaller --task_train_size and --task_test_size."
        )
    if isinstance(built, str):
        raise ValueError(built)
    return built


def load_reasoning_gym(
    task: str,
    split: str = "train",
    config: str | dict | None = None,
    seed: int = 0,
    n_train: int = 2000,
    n_test: int = 200,
):
    """A reasoning-gym dataset as ``datasets.Dataset`` rows for TRL (see the module docstring for the split), built in
    the scoring worker (fixed hashing: the same rows on every process).

    Args:
        task: ``"reasoning_gym:<name>"``.
        split: ``"train"`` (``n_train`` problems) or ``"test"`` (the ``n_test`` held-out problems).
        config: The dataset's own settings (`parse_task_config`): a JSON string, a dict or None (its defaults).
        seed: Data seed of both streams (`stream_seed`).
        n_train: Training problems.
        n_test: Held-out problems (distinct questions), which the training problems exclude.

    Returns:
        Rows ``{"prompt": [system, user], "answer": gold (str or None), "reasoning_gym_task": name,
        "reasoning_gym_config": JSON of the settings, "reasoning_gym_entry": the item (question, answer, metadata:
        what its scorer reads; `encode_entry`), "reasoning_gym_numeric": whether the answers are numbers (every
        held-out gold is one; `extract_answer` then falls back on the last number)}``, scored by
        `reasoning_gym_reward`.

    Raises:
        ValueError: reasoning-gym missing, unknown dataset, bad settings or split, too few distinct questions, or a
            build that ran past `BUILD_TIMEOUT_S` or failed in the worker.
    """
    from datasets import Dataset

    if split not in ("train", "test"):
        raise ValueError(f"reasoning-gym tasks have the splits 'train' and 'test', not {split!r}.")
    settings = parse_task_config(config)
    check_reasoning_gym_task(task, settings)
    from reasoning_gym.utils import SYSTEM_PROMPTS

    name = dataset_name(task)
    settings_json = json.dumps(settings, sort_keys=True)
    train, held_out = split_rows(name, settings, seed, n_train if split == "train" else 0, n_test)
    numeric = all(_is_number(answer) for _, answer, _ in held_out)
    system = {"role": "system", "content": SYSTEM_PROMPTS["direct"]}
    rows = [
        {
            "prompt": [system, {"role": "user", "content": question}],
            "answer": answer,
            "reasoning_gym_task": name,
            "reasoning_gym_config": settings_json,
            "reasoning_gym_entry": entry,
            "reasoning_gym_numeric": numeric,
        }
        for question, answer, entry in (train if split == "train" else held_out)
    ]
    return Dataset.from_list(rows)


# ----------------------------------------------------------------------------------------------------------------
# Entries: the item, losslessly
# ----------------------------------------------------------------------------------------------------------------

_TAGS = ("__tuple__", "__set__", "__frozenset__", "__dict__", "__fraction__", "__complex__", "__numpy__")


def _tagged(value: object) -> object:
    """``value`` as JSON types, what JSON lacks tagged: ``{"<tag>": content}``."""
    if value is None or isinstance(value, bool | int | float | str) and type(value).__module__ == "builtins":
        return value
    if isinstance(value, list) and type(value) is list:
        return [_tagged(v) for v in value]
    if type(value) is dict:
        if all(type(k) is str for k in value) and not (len(value) == 1 and next(iter(value)) in _TAGS):
            return {k: _tagged(v) for k, v in value.items()}
        return {"__dict__": [[_tagged(k), _tagged(v)] for k, v in value.items()]}
    if type(value) is tuple:
        return {"__tuple__": [_tagged(v) for v in value]}
    if type(value) in (set, frozenset):
        return {f"__{type(value).__name__}__": sorted((_tagged(v) for v in value), key=repr)}
    if type(value) is fractions.Fraction:
        return {"__fraction__": str(value)}
    if type(value) is complex:
        return {"__complex__": [value.real, value.imag]}
    if type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind != "O":
        return {"__numpy__": [value.dtype.str, list(value.shape), _tagged(value.tolist())]}
    raise ValueError(f"a {type(value).__module__}.{type(value).__qualname__} cannot be stored losslessly")


def _untagged(value: object) -> object:
    """The inverse of `_tagged`."""
    if isinstance(value, list):
        return [_untagged(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag, content = next(iter(value.items())) if len(value) == 1 else (None, None)
    if tag not in _TAGS:
        return {k: _untagged(v) for k, v in value.items()}
    if tag == "__dict__":
        return {_untagged(k): _untagged(v) for k, v in content}
    if tag == "__fraction__":
        return fractions.Fraction(content)
    if tag == "__complex__":
        return complex(*content)
    if tag == "__numpy__":
        import numpy as np

        dtype, shape, data = content
        return np.array(_untagged(data), dtype=dtype).reshape(shape)[()]
    items = [_untagged(v) for v in content]
    return {"__tuple__": tuple, "__set__": set, "__frozenset__": frozenset}[tag](items)


def encode_entry(item: dict) -> str:
    """An item as reasoning-gym made it, as JSON that `decode_entry` turns back into an equal item, types and all
    (tuples, sets, dicts with other keys than strings, fractions, complex and numpy values are tagged).

    Raises:
        ValueError: the item holds a value of another type.
    """
    try:
        return json.dumps(_tagged(item))
    except ValueError as err:
        source = item.get("metadata", {}).get("source_dataset") if isinstance(item.get("metadata"), dict) else None
        raise ValueError(f"An item of {source or 'a reasoning-gym dataset'}: {err}.") from None


def decode_entry(text: str) -> dict:
    """The item an `encode_entry` text holds (the ``reasoning_gym_entry`` column), as reasoning-gym made it."""
    return _untagged(json.loads(text))


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


def _number(node: ast.expr) -> fractions.Fraction | None:
    """The value of an exponent made of integers, signs and ``/`` (``2``, ``-1``, ``(3/2)``); None for any other."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return fractions.Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _number(node.operand)
        return None if value is None else -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        top, bottom = _number(node.left), _number(node.right)
        return None if top is None or not bottom else top / bottom
    return None


def _bounded_powers(node: ast.AST, scale: fractions.Fraction = fractions.Fraction(1)) -> bool:
    """Whether every power under ``node`` has a number as its exponent and the exponents of nested powers multiply
    (``scale``) to at most `MAX_EXPONENT` in size."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exponent = _number(node.right)
        if exponent is None or scale * max(1, abs(exponent)) > MAX_EXPONENT:
            return False
        return _bounded_powers(node.left, scale * max(1, abs(exponent)))
    return all(_bounded_powers(child, scale) for child in ast.iter_child_nodes(node))


def admissible(source: str, answer: str) -> bool:
    """Whether ``answer`` may reach the scorer of reasoning-gym dataset ``source`` (see `EVALUATING_SCORERS`).

    Every answer may reach a scorer that does not evaluate it. An ``eval`` scorer takes a literal that
    ``ast.literal_eval`` accepts (eval then computes the same value) or text of the gold's alphabet; a sympy scorer
    takes text of the gold's alphabet whose names are one letter long or maths functions (`_MATHS_NAMES`), that reads
    as an expression (Python's parser, which evaluates nothing) whose powers have numbers as exponents, nested ones
    multiplying to at most `MAX_EXPONENT`.
    """
    how = EVALUATING_SCORERS.get(source)
    if how is None:
        return True
    if _ALPHABETS[source].fullmatch(answer):
        if how == _EVAL_LITERAL:
            return True
        if not all(len(n) == 1 or n in _MATHS_NAMES for n in _NAME.findall(answer)):
            return False
        try:
            return _bounded_powers(ast.parse(answer.strip(), mode="eval"))
        except (SyntaxError, RecursionError, MemoryError, ValueError):  # not an expression, or nested too deep
            return False
    if how == _EVAL_LITERAL:
        try:
            ast.literal_eval(answer)
        except Exception:  # SyntaxError, ValueError, and RecursionError or MemoryError on deep nesting
            return False
        return True
    return False


def _source(task: str, entry: str) -> str:
    """The dataset whose scorer scores ``entry``: its ``source_dataset`` (a composite's part), else ``task``."""
    metadata = decode_entry(entry).get("metadata")
    source = metadata.get("source_dataset") if isinstance(metadata, dict) else None
    return source if isinstance(source, str) else task


@lru_cache(maxsize=64)
def _dataset(task: str, config: str):
    """Worker side: the dataset object whose ``score_answer`` scores items of ``task`` with settings ``config``."""
    return make_dataset(task, json.loads(config))


def _score_item(task: str, config: str, entry: str, answer: str) -> float:
    """Worker side: the dataset's score of ``answer`` on the item ``entry`` holds (0.0 for a score that is not
    finite)."""
    score = float(_dataset(task, config).score_answer(answer, decode_entry(entry)))
    return score if math.isfinite(score) else 0.0


_JOBS = {"build": _build, "score": _score_item}


def _work(job: tuple) -> object:
    """Worker side (`trl_pods.sandbox.Sandbox`): ``("build", ...)`` (`_build`) or ``("score", ...)``
    (`_score_item`)."""
    return _JOBS[job[0]](*job[1:])


_SANDBOX: Sandbox | None = None


def _worker() -> Sandbox:
    """This process's reasoning-gym worker, which builds the datasets and runs the scorers (started when first
    needed)."""
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox("reasoning_gym_tasks", "_work", prepare="_reasoning_gym")
    return _SANDBOX


def score_answers(answers: list[str], tasks: list[str], configs: list[str], entries: list[str]) -> list[float]:
    """The dataset's own score of each answer (from `extract_answer`, or a raw completion). An answer `admissible`
    refuses, or whose scorer raises or runs past `SCORE_TIMEOUT_S`, scores what the scorer gives
    `UNPARSABLE_ANSWER` (0.0 where that raises too).

    Args:
        answers: One answer per item.
        tasks, configs, entries: The dataset's ``reasoning_gym_task``, ``reasoning_gym_config`` and
            ``reasoning_gym_entry`` columns of each item.
    """
    rows = list(zip(tasks, configs, entries, answers, strict=True))
    if not rows:
        return []
    sent = [
        ("score", task, config, entry, answer if admissible(_source(task, entry), answer) else UNPARSABLE_ANSWER)
        for task, config, entry, answer in rows
    ]
    scores = _worker().run(sent, SCORE_TIMEOUT_S)
    failed = [i for i, score in enumerate(scores) if score is None and sent[i][-1] != UNPARSABLE_ANSWER]
    if failed:
        floors = _worker().run([(*sent[i][:-1], UNPARSABLE_ANSWER) for i in failed], SCORE_TIMEOUT_S)
        for i, floor in zip(failed, floors, strict=True):
            scores[i] = floor
    return [0.0 if score is None else score for score in scores]


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

r"""The tasks as TRL conversational prompts, with the gold columns their rewards read: the PODS paper's GSM8K and
MATH, and the built-in offline arithmetic task.

Every loader returns a `datasets.Dataset` whose ``prompt`` column is ``[system message, user message]`` (no system
message when ``system_prompt`` is None) and which keeps the gold answer:

* GSM8K: ``answer``, the dataset's own answer text (reasoning, then ``#### <number>``).
* MATH: ``solution`` (with ``\boxed{}``) and, where the source has one, ``answer`` (MATH-500's final answer).
* arithmetic: ``answer``, the integer result; generated offline (`trl_pods.arithmetic`), no system message.
* ``reasoning_gym:<name>``: any reasoning-gym dataset, generated offline with its own settings and scored by its
  own scorer (`trl_pods.reasoning_gym_tasks`; needs ``pip install 'trl-pods[tasks]'``).

For GSM8K and MATH, with ``path=None`` the data comes from the Hugging Face Hub (not available offline); otherwise
from a local ``.jsonl``, ``.json`` or ``.parquet`` file with the source's columns. Each task has its own reward
(`TASK_REWARDS`, a name `get_reward_func` resolves) and completion length (`TASK_COMPLETION_LENGTHS`), used wherever
none is given.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset, concatenate_datasets, load_dataset

from ._lookup import resolve
from .arithmetic import arithmetic_reward, train_test_arithmetic
from .reasoning_gym_tasks import PREFIX as REASONING_GYM_PREFIX
from .reasoning_gym_tasks import (
    is_reasoning_gym,
    load_reasoning_gym,
    reasoning_gym_format_reward,
    reasoning_gym_reward,
)
from .rewards import REWARD_FUNCS, RewardFunc

__all__ = [
    "MATH_SUBJECTS",
    "SYSTEM_PROMPT_PLAIN",
    "SYSTEM_PROMPT_THINK",
    "TASKS",
    "TASK_COMPLETION_LENGTHS",
    "TASK_REWARDS",
    "TASK_REWARD_FUNCS",
    "TASK_TEST_SIZES",
    "check_task_name",
    "get_reward_func",
    "is_generated",
    "hub_dataset",
    "load_arithmetic",
    "load_gsm8k",
    "load_math",
    "load_task",
]

REASONING_GYM_TASKS = f"{REASONING_GYM_PREFIX}<name>"
TASKS = ("gsm8k", "math", "arithmetic", REASONING_GYM_TASKS)
"""The tasks; ``reasoning_gym:<name>`` stands for every reasoning-gym dataset (`check_task_name`)."""


class _PerTask(dict):
    """A dict by task whose ``reasoning_gym:<name>`` entry answers for every reasoning-gym dataset's task."""

    def __missing__(self, task: str):
        if is_reasoning_gym(task):
            return self[REASONING_GYM_TASKS]
        raise KeyError(task)


TASK_REWARDS = _PerTask(
    {"gsm8k": "gsm8k", "math": "accuracy", "arithmetic": "arithmetic", REASONING_GYM_TASKS: "reasoning_gym"}
)
"""The reward each task trains and is evaluated with when none is named (names of `get_reward_func`):
the paper's GSM8K reward (correctness plus format credit), the paper's binary MATH reward, the exact integer, the
reasoning-gym dataset's own scorer."""

TASK_REWARD_FUNCS: dict[str, RewardFunc] = {
    "arithmetic": arithmetic_reward,
    "reasoning_gym": reasoning_gym_reward,
    "reasoning_gym_format": reasoning_gym_format_reward,
}
"""The tasks' own rewards, beside the math rewards of `trl_pods.rewards.REWARD_FUNCS`."""


def get_reward_func(name_or_path: str) -> RewardFunc:
    """Return the reward registered as ``name_or_path`` (`trl_pods.rewards.REWARD_FUNCS`, or a task's own in
    `TASK_REWARD_FUNCS`) or import it from a dotted path ``"pkg.mod.fn"``.

    Raises:
        ValueError: the name is neither registered nor an importable callable; the message lists the known names.
    """
    return resolve(name_or_path, {**REWARD_FUNCS, **TASK_REWARD_FUNCS}, "reward function")


TASK_COMPLETION_LENGTHS = _PerTask({"gsm8k": 512, "math": 512, "arithmetic": 16, REASONING_GYM_TASKS: 64})
"""Most tokens a completion of each task may take when none is set: TRL's default (512) for the reasoning tasks; 16
for arithmetic, whose answer is a few tokens (the demo's length: with 512, two CPU steps of SmolLM2-135M had not
finished after 400 s); 64 for reasoning-gym, whose prompt asks for the bare answer in ``<answer>`` tags."""

TASK_TEST_SIZES = _PerTask({"arithmetic": 50, REASONING_GYM_TASKS: 200})
"""Held-out problems of each generated task when none is set (``--task_test_size``; `trl-pods eval`'s
``--max_problems``): the demo's 50 for arithmetic, reasoning-gym's 200."""

SYSTEM_PROMPT_THINK = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The Assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>."
)
"""Reason in ``<think>`` tags, then answer in ``<answer>`` tags: the format `format_reward`/`gsm8k_reward` score
(DeepSeek-R1-Zero's wording)."""

SYSTEM_PROMPT_PLAIN = "Please reason step by step, and put your final answer within \\boxed{}."
r"""Free-form reasoning ending in ``\boxed{}`` (Qwen2.5-Math's chain-of-thought prompt): one convention that suits
both GSM8K and MATH, and the one math-verify extracts first."""

PROMPT_STYLES = {"think": SYSTEM_PROMPT_THINK, "plain": SYSTEM_PROMPT_PLAIN}

MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
"""Configs of ``EleutherAI/hendrycks_math``, concatenated for the MATH training set (7,500 problems)."""

_FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}

GSM8K_HUB, MATH_TRAIN_HUB, MATH_TEST_HUB = "openai/gsm8k", "EleutherAI/hendrycks_math", "HuggingFaceH4/MATH-500"
"""The Hub datasets of the tasks without a data file: GSM8K (both splits), MATH's training and test sets."""


def is_generated(task: str) -> bool:
    """Whether ``task`` is generated offline (the arithmetic task, a reasoning-gym dataset), not read from data."""
    return task == "arithmetic" or is_reasoning_gym(task)


def hub_dataset(task: str, split: str, path: str | Path | None = None) -> str | None:
    """The Hub dataset `load_task` reads for ``task``, ``split`` and ``path``: ``path`` when it names no local file,
    else the task's own; None when it reads none (the arithmetic task, a local file, a split the task lacks)."""
    if is_generated(task):
        return None
    if path is not None:
        return None if Path(path).suffix.lower() in _FILE_FORMATS or Path(path).exists() else str(path)
    return {
        "gsm8k": {"train": GSM8K_HUB, "test": GSM8K_HUB},
        "math": {"train": MATH_TRAIN_HUB, "test": MATH_TEST_HUB},
    }[task].get(split)


def _load_file(path: str | Path, split: str) -> Dataset:
    """A local ``.jsonl``/``.json``/``.parquet`` file, or else the ``split`` of the Hub dataset named ``path``."""
    builder = _FILE_FORMATS.get(Path(path).suffix.lower())
    if builder is not None:
        return load_dataset(builder, data_files=str(path), split="train")
    if Path(path).exists():
        raise ValueError(f"Unsupported data file {str(path)!r}: use one of {', '.join(_FILE_FORMATS)}.")
    return load_dataset(str(path), split=split)


def _to_prompts(dataset: Dataset, question: str, keep: tuple[str, ...], system_prompt: str | None) -> Dataset:
    """Replace ``question`` by a conversational ``prompt``; keep the ``keep`` columns that exist; drop the rest."""
    missing = {question, keep[0]} - set(dataset.column_names)
    if missing:
        raise ValueError(f"The dataset lacks the column(s) {sorted(missing)}; it has {dataset.column_names}.")
    system = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    return dataset.map(
        lambda row: {"prompt": [*system, {"role": "user", "content": row[question]}]},
        remove_columns=[c for c in dataset.column_names if c not in keep],
    )


def load_gsm8k(
    split: str = "train", path: str | Path | None = None, system_prompt: str | None = SYSTEM_PROMPT_THINK
) -> Dataset:
    """GSM8K as ``prompt`` + ``answer`` rows.

    Args:
        split: ``"train"`` (7,473 problems) or ``"test"`` (1,319) of ``openai/gsm8k`` (config ``"main"``); ignored
            with ``path``.
        path: Local ``.jsonl``/``.json``/``.parquet`` file, or another Hub dataset name, with GSM8K's
            ``question`` and ``answer`` columns.
        system_prompt: System message of every prompt; None for none.

    Returns:
        Rows ``{"prompt": [system, user question], "answer": "<reasoning> #### <number>"}``.
    """
    dataset = _load_file(path, split) if path is not None else load_dataset(GSM8K_HUB, "main", split=split)
    return _to_prompts(dataset, "question", ("answer",), system_prompt)


def load_math(
    split: str = "train", path: str | Path | None = None, system_prompt: str | None = SYSTEM_PROMPT_THINK
) -> Dataset:
    r"""MATH as ``prompt`` + ``solution`` (+ ``answer``) rows.

    Args:
        split: ``"train"``: the 7,500 training problems of ``EleutherAI/hendrycks_math`` (its seven subject configs,
            `MATH_SUBJECTS`, concatenated; no ``answer`` column, the gold is the solution's ``\boxed{}``).
            ``"test"``: ``HuggingFaceH4/MATH-500``, the 500-problem test subset the paper evaluates on (with an
            ``answer`` column). Ignored with ``path``.
        path: Local ``.jsonl``/``.json``/``.parquet`` file, or another Hub dataset name, with MATH's ``problem``
            and ``solution`` columns, and optionally ``answer``.
        system_prompt: System message of every prompt; None for none.

    Returns:
        Rows ``{"prompt": [system, user problem], "solution": ..., "answer": ...}`` (``answer`` only if the source
        has it).

    Raises:
        ValueError: ``split`` is neither ``"train"`` nor ``"test"`` (hub only).
    """
    if path is not None:
        dataset = _load_file(path, split)
    elif split == "train":
        dataset = concatenate_datasets(
            [load_dataset(MATH_TRAIN_HUB, subject, split="train") for subject in MATH_SUBJECTS]
        )
    elif split == "test":
        dataset = load_dataset(MATH_TEST_HUB, split="test")
    else:
        raise ValueError(f"MATH has the splits 'train' and 'test', not {split!r}.")
    return _to_prompts(dataset, "problem", ("solution", "answer"), system_prompt)


def load_arithmetic(
    split: str = "train", difficulty: str = "add1", seed: int = 0, n_train: int = 2000, n_test: int = 50
) -> Dataset:
    """The built-in arithmetic task as ``prompt`` + ``answer`` rows, generated offline (`trl_pods.arithmetic`).

    Args:
        split: ``"train"`` (``n_train`` seeded problems, repeats allowed) or ``"test"`` (``n_test`` distinct
            problems, none of them in the training split when the difficulty has at least ``2 * n_test``).
        difficulty: ``"add1"`` (single-digit addition, "What is 7 + 4?"), ``"add2x1"``, ``"add2"``, ``"mul1"`` or
            ``"sub1"``; see `trl_pods.arithmetic`.
        seed: Draws both splits: the same seed gives the same held-out problems.
        n_train: Training problems.
        n_test: Test problems.

    Returns:
        Rows ``{"prompt": [user question], "answer": "<integer>"}``, scored by `trl_pods.arithmetic.arithmetic_reward`.

    Raises:
        ValueError: unknown split or difficulty.
    """
    if split not in ("train", "test"):
        raise ValueError(f"The arithmetic task has the splits 'train' and 'test', not {split!r}.")
    train, test = train_test_arithmetic(n_train if split == "train" else 0, n_test, seed=seed, difficulty=difficulty)
    return train if split == "train" else test


_HUB_LOADERS = {"gsm8k": load_gsm8k, "math": load_math}


def check_task_name(name: str) -> None:
    """Raise ValueError unless ``name`` is one of `TASKS` or ``reasoning_gym:<name>`` (whose dataset is checked
    when it is loaded, `trl_pods.reasoning_gym_tasks.check_reasoning_gym_task`)."""
    if name not in TASKS and not is_reasoning_gym(name) or name == REASONING_GYM_TASKS:
        raise ValueError(f"Unknown task {name!r}; known tasks: {', '.join(TASKS)}.")


def load_task(
    name: str, split: str = "train", path: str | Path | None = None, prompt_style: str = "think", **generated
) -> Dataset:
    """Load task ``name`` (one of `TASKS`); GSM8K and MATH with the system prompt of ``prompt_style``.

    Args:
        name: ``"gsm8k"``, ``"math"``, ``"arithmetic"`` or ``"reasoning_gym:<name>"`` (both generated offline).
        split: ``"train"`` or ``"test"`` (GSM8K and MATH: a Hub split, see `load_gsm8k` and `load_math`; the
            generated tasks: their held-out problems, which training excludes).
        path: Local data file instead of the hub (GSM8K and MATH only).
        prompt_style: ``"think"`` (`SYSTEM_PROMPT_THINK`, for ``format``/``gsm8k`` rewards) or ``"plain"``
            (`SYSTEM_PROMPT_PLAIN`, for the ``accuracy`` reward alone); the arithmetic prompts have no system message,
            the reasoning-gym ones reasoning-gym's own.
        **generated: ``difficulty``, ``seed``, ``n_train``, ``n_test`` of `load_arithmetic`; ``config``, ``seed``,
            ``n_train``, ``n_test`` of `trl_pods.reasoning_gym_tasks.load_reasoning_gym`.

    Raises:
        ValueError: unknown task or prompt style, a ``path`` for a generated task, and for reasoning-gym: the
            package missing, an unknown dataset or a bad setting.
        TypeError: options of a generated task for another task.
    """
    check_task_name(name)
    if prompt_style not in PROMPT_STYLES:
        raise ValueError(f"Unknown prompt style {prompt_style!r}; use one of {', '.join(PROMPT_STYLES)}.")
    if is_generated(name):
        if path is not None:
            raise ValueError(f"The {name} task is generated, not read from a file: drop the path {str(path)!r}.")
        if name == "arithmetic":
            return load_arithmetic(split, **generated)
        return load_reasoning_gym(name, split, **generated)
    if generated:
        raise TypeError(
            f"{', '.join(generated)}: options of the arithmetic task (or a reasoning-gym one), not of {name!r}."
        )
    return _HUB_LOADERS[name](split=split, path=path, system_prompt=PROMPT_STYLES[prompt_style])

"""The task loaders, on the local sample files and the generated arithmetic task only (no hub access), and each
task's own reward and completion length."""

import json
from pathlib import Path

import pytest
from datasets import Dataset

from trl_pods.arithmetic import arithmetic_reward
from trl_pods.rewards import accuracy_reward, gsm8k_reward
from trl_pods.tasks import (
    SYSTEM_PROMPT_PLAIN,
    SYSTEM_PROMPT_THINK,
    TASK_COMPLETION_LENGTHS,
    TASK_REWARDS,
    TASKS,
    get_reward_func,
    load_gsm8k,
    load_math,
    load_task,
)

DATA = Path(__file__).parent / "data"
GSM8K = DATA / "gsm8k_sample.jsonl"
MATH = DATA / "math_sample.jsonl"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_gsm8k_rows_become_conversational_prompts():
    """Each GSM8K row becomes [system, user question] and keeps its answer text (with '#### n') unchanged."""
    dataset = load_gsm8k(path=GSM8K)
    rows = _rows(GSM8K)
    assert set(dataset.column_names) == {"answer", "prompt"}
    assert len(dataset) == len(rows) == 5
    for example, row in zip(dataset, rows, strict=True):
        assert example["prompt"] == [
            {"role": "system", "content": SYSTEM_PROMPT_THINK},
            {"role": "user", "content": row["question"]},
        ]
        assert example["answer"] == row["answer"]
        assert "####" in example["answer"]


def test_math_rows_keep_solution_and_answer():
    """MATH rows keep `solution` and MATH-500's `answer` (the gold the rewards read) and drop everything else."""
    dataset = load_math(path=MATH, system_prompt=None)
    rows = _rows(MATH)
    assert set(dataset.column_names) == {"prompt", "solution", "answer"}
    for example, row in zip(dataset, rows, strict=True):
        assert example["prompt"] == [{"role": "user", "content": row["problem"]}]
        assert (example["solution"], example["answer"]) == (row["solution"], row["answer"])
        assert "\\boxed{" in example["solution"]


def test_math_without_answer_column_from_parquet(tmp_path):
    """A hendrycks-style file (no `answer`), read from parquet, keeps just `prompt` and `solution`."""
    path = tmp_path / "math.parquet"
    Dataset.from_list([{k: v for k, v in row.items() if k != "answer"} for row in _rows(MATH)]).to_parquet(path)
    assert set(load_math(path=path).column_names) == {"prompt", "solution"}


def test_kept_gold_scores_with_the_rewards():
    """The loaders keep exactly what the rewards need: the known final answers score 1.0 on every sample row."""
    gsm8k = load_gsm8k(path=GSM8K)
    finals = [answer.rsplit("####", 1)[1].strip() for answer in gsm8k["answer"]]
    completions = [[{"role": "assistant", "content": f"<think>...</think><answer>{f}</answer>"}] for f in finals]
    assert gsm8k_reward(completions, **gsm8k.remove_columns("prompt").to_dict()) == [1.0] * 5

    math = load_math(path=MATH)
    completions = [f"So the answer is $\\boxed{{{answer}}}$." for answer in math["answer"]]
    assert accuracy_reward(completions, answer=math["answer"]) == [1.0] * 5
    assert accuracy_reward(completions, solution=math["solution"]) == [1.0] * 5


def test_load_task_dispatches_and_validates():
    """load_task picks the loader and the system prompt of the style; unknown names fail with the choices."""
    plain = load_task("gsm8k", path=GSM8K, prompt_style="plain")
    assert plain[0]["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT_PLAIN}
    assert load_task("math", path=MATH)[0]["prompt"][0]["content"] == SYSTEM_PROMPT_THINK
    with pytest.raises(ValueError, match="gsm8k, math, arithmetic"):
        load_task("aime", path=GSM8K)
    with pytest.raises(ValueError, match="think, plain"):
        load_task("gsm8k", path=GSM8K, prompt_style="cot")


def test_bad_files_are_reported(tmp_path):
    """An unsupported extension or a file without the task's columns fails with a clear message."""
    csv = tmp_path / "gsm8k.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(ValueError, match="Unsupported data file"):
        load_gsm8k(path=csv)
    with pytest.raises(ValueError, match="question"):
        load_gsm8k(path=MATH)


def test_prompts_describe_the_scored_formats():
    """The think prompt asks for the tags format_reward checks; the plain prompt for \\boxed{}."""
    for tag in ("<think>", "</think>", "<answer>", "</answer>"):
        assert tag in SYSTEM_PROMPT_THINK
    assert "\\boxed{}" in SYSTEM_PROMPT_PLAIN


def test_a_path_that_is_not_a_file_names_a_hub_dataset(monkeypatch):
    """--dataset_path also takes a Hub dataset in the task's schema; its split is passed through (no download here)."""
    from datasets import Dataset

    import trl_pods.tasks as tasks

    calls = []

    def fake_load_dataset(name, *args, split=None, **kwargs):
        calls.append((name, split))
        return Dataset.from_dict({"question": ["What is 1 + 1?"], "answer": ["#### 2"]})

    monkeypatch.setattr(tasks, "load_dataset", fake_load_dataset)
    rows = load_gsm8k("test", path="someone/gsm8k-like")
    assert calls == [("someone/gsm8k-like", "test")] and rows[0]["answer"] == "#### 2"


def test_arithmetic_task_loads_offline_from_load_task():
    """`load_task("arithmetic")` was refused ("known tasks: gsm8k, math") although `trl-pods train --task arithmetic`
    took it, so the Python API had no offline task. It returns the generated problems: conversational prompts without
    a system message, integer answers that `arithmetic_reward` scores 1.0, and a test split disjoint from training."""
    train, test = load_task("arithmetic"), load_task("arithmetic", "test")
    assert (len(train), len(test)) == (2000, 50)
    assert train[0]["prompt"] == [{"role": "user", "content": train[0]["prompt"][0]["content"]}]
    assert train[0]["prompt"][0]["content"].startswith("What is ")
    completions = [f"The answer is {answer}." for answer in train["answer"][:20]]
    assert arithmetic_reward(completions, train["answer"][:20]) == [1.0] * 20
    train_questions = {prompt[0]["content"] for prompt in train["prompt"]}
    assert not train_questions & {prompt[0]["content"] for prompt in test["prompt"]}
    mul = load_task("arithmetic", difficulty="mul1", seed=3, n_train=8)
    assert len(mul) == 8 and "*" in mul[0]["prompt"][0]["content"]


def test_arithmetic_task_refuses_what_does_not_apply():
    """A data file for the generated task, an arithmetic option for another task and an unknown split are refused,
    not ignored."""
    with pytest.raises(ValueError, match="generated, not read from a file"):
        load_task("arithmetic", path=GSM8K)
    with pytest.raises(TypeError, match="difficulty: options of the arithmetic task"):
        load_task("gsm8k", path=GSM8K, difficulty="add2")
    with pytest.raises(ValueError, match="'train' and 'test'"):
        load_task("arithmetic", "validation")


def test_every_task_has_a_registered_reward_and_a_completion_length():
    """The task owns its reward and completion length: each task names a reward that `get_reward_func` resolves,
    and arithmetic's completions are short (512 tokens made two CPU steps of SmolLM2-135M take over 400 s)."""
    assert set(TASK_REWARDS) == set(TASK_COMPLETION_LENGTHS) == set(TASKS)
    for name in TASK_REWARDS.values():
        assert callable(get_reward_func(name))
    assert TASK_REWARDS["arithmetic"] == "arithmetic" and TASK_COMPLETION_LENGTHS["arithmetic"] == 16

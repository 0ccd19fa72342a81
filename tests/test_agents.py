"""PODS with TRL's agentic features: tools (HF generate), environments, `rollout_func`; and what stays refused.

Each test trains a few steps N -> M and checks, per generation, that phase 2 saw exactly the kept rows of phase 1
with their own token ids, tool masks, rewards and fields, and nothing of a discarded rollout.
"""

from __future__ import annotations

import json

import pytest
import tool_model
import torch
from datasets import Dataset
from helpers import (
    RowSpy,
    assert_phase2_has_the_kept_rows,
    load,
    one_thread,
    pods_config,
    prompts_dataset,
    token_sum_reward,
)
from tool_model import calculator_reward, counting_add, counting_async_add, question
from transformers import PreTrainedTokenizerFast

from trl_pods import PODSGRPOTrainer


def tool_dataset(pairs: list[tuple[int, int]]) -> Dataset:
    return Dataset.from_dict({"prompt": [question(a, b) for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


def tool_trainer(tool_model_path, tmp_path, tool, **options) -> RowSpy:
    """PODS 4 -> 2 on the tool-calling model, 2 steps over four calculator questions, with ``tool``; ``options``
    add to or override the config."""
    model, tokenizer = load(tool_model_path)
    config = pods_config(
        tmp_path, **{**dict(pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=2, max_completion_length=48,
                            learning_rate=1e-4), **options},
    )  # fmt: skip
    return RowSpy(
        model,
        calculator_reward,
        config,
        train_dataset=tool_dataset([(1, 2), (3, 4), (5, 1), (2, 2)]),
        processing_class=tokenizer,
        tools=[tool],
    )


@pytest.mark.parametrize("make_tool", [counting_add, counting_async_add], ids=["sync", "async"])
def test_tools_with_hf_generate(tool_model_path, tmp_path, make_tool):
    """Tools (HF generate), sync and async: TRL's tool loop runs for all N rollouts and the tool really executes;
    phase 2 trains on the M kept rows with their tool masks (tool-output tokens, and only those, out of the loss);
    each logged kept completion carries its own reward; TRL's tool metrics describe the N rows generated."""
    calls: list[tuple[int, int]] = []
    trainer = tool_trainer(tool_model_path, tmp_path, make_tool(calls))
    tokenizer = trainer.processing_class
    calls_per_step = []
    original = trainer._generate_score_and_select

    def counting(inputs):
        before = len(calls)
        kept = original(inputs)
        calls_per_step.append(len(calls) - before)
        return kept

    trainer._generate_score_and_select = counting
    trainer.train()
    assert len(trainer.records) == 2
    assert len(calls) > 0, "the fine-tuned model never called the tool"
    kept_tool_rows = 0
    for record in trainer.records:
        assert len(record["inputs"]) == 8 and len(record["phase1"]["local"]) == 4
        assert_phase2_has_the_kept_rows(record, tokenizer.pad_token_id)
        completions, tool_mask = record["phase1"]["rollouts"].generation[3], record["phase1"]["rollouts"].generation[2]
        for i in record["phase1"]["local"]:
            tool_messages = [m for m in completions[i] if m["role"] == "tool"]
            ids = record["phase1"]["rollouts"].generation[1][i]
            masked = [token for token, keep in zip(ids, tool_mask[i], strict=True) if not keep]
            if tool_messages:
                kept_tool_rows += 1
                text = tokenizer.decode(masked)
                assert "<tool_response>" in text and tool_messages[0]["content"] in text
            else:
                assert masked == []
        kept_tokens = sum(sum(tool_mask[i]) for i in record["phase1"]["local"])  # model tokens of the kept rows
        assert int(record["output"]["num_items_in_batch"]) == kept_tokens, "TRL's loss normaliser: kept rows only"
    assert kept_tool_rows > 0
    frequencies = [
        entry["tools/call_frequency"] for entry in trainer.state.log_history if "tools/call_frequency" in entry
    ]
    assert frequencies == [count / 8 for count in calls_per_step]
    table_completions, table_rewards = trainer._logs["completion"], trainer._logs["rewards"]["calculator_reward"]
    answers = [row["answer"] for row in trainer.records[-1]["phase1"]["inputs"]]  # the table holds the last step
    assert list(table_rewards) == calculator_reward(list(table_completions), answers)


class AdderEnv:
    """A calculator environment: its `add` tool records each result; the reward is 1 when the last result is the
    row's answer, 0.5 for a wrong result, 0 without a call."""

    def __init__(self):
        self.resets = 0
        self.results: list[int] = []
        self.answer = ""

    def reset(self, answer: str = "", **kwargs) -> None:
        self.resets += 1
        self.results, self.answer = [], answer

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        self.results.append(a + b)
        return a + b

    def get_reward(self) -> float:
        if not self.results:
            return 0.0
        return 1.0 if str(self.results[-1]) == self.answer else 0.5


class CounterEnv(AdderEnv):
    """A counter: the same `add` tool, a reset that extends the prompt, and a reward counting the tool calls."""

    def reset(self, answer: str = "", **kwargs) -> str:
        super().reset(answer)
        return " Count."

    def get_reward(self) -> float:
        return float(len(self.results))


@pytest.mark.parametrize("form", ["factory", "dict"])
def test_environment_factory(tool_model_path, tmp_path, form):
    """environment_factory, one factory or a dict selected by the `environment` column: one instance per rollout (N
    per prompt), each reset once as TRL does (not again for phase 2); `get_reward` scores all N before selection;
    the kept rows carry their own environment (its reward, its tool results, the prompt its reset produced), and
    phase 2 sees only kept rows."""
    model, tokenizer = load(tool_model_path)
    pairs = [(1, 2), (3, 4), (5, 1), (2, 2)]
    dataset = tool_dataset(pairs)
    if form == "dict":
        dataset = dataset.add_column("environment", ["adder", "counter", "adder", "counter"])
        factory = {"adder": AdderEnv, "counter": CounterEnv}
    else:
        factory = AdderEnv
    config = pods_config(
        tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=2, max_completion_length=48,
        learning_rate=1e-4,
    )  # fmt: skip
    trainer = RowSpy(
        model, None, config, train_dataset=dataset, processing_class=tokenizer, environment_factory=factory
    )
    trainer.train()
    pool = [env for envs in trainer._environment_pool.values() for env in envs]
    probes = len(trainer._environment_pool)  # TRL builds one instance per environment at construction
    assert sum(env.resets for env in pool) == 2 * 8, "each rollout's environment is reset once per generation"
    assert len(pool) - probes <= 8
    record = trainer.records[-1]
    assert_phase2_has_the_kept_rows(record, tokenizer.pad_token_id)
    rollouts, local = record["phase1"]["rollouts"], record["phase1"]["local"]
    assert trainer.environments == [rollouts.environments[i] for i in local]
    assert len({id(env) for env in rollouts.environments}) == 8
    for i, env in zip(local, trainer.environments, strict=True):
        tool_results = [m["content"] for m in rollouts.generation[3][i] if m["role"] == "tool"]
        assert tool_results == [str(result) for result in env.results]
    assert sum(len(env.results) for env in rollouts.environments) > 0, "no environment tool was called"
    logged = trainer._logs["rewards"]
    for name in {type(env).__name__ for env in trainer.environments}:
        expected = [env.get_reward() if type(env).__name__ == name else None for env in trainer.environments]
        got = [None if value != value else value for value in logged[name]]  # NaN: another environment's row
        assert got == expected
    kept_prompts = [rollouts.prompts[i] for i in local]
    assert list(trainer._logs["prompt"]) == kept_prompts
    if form == "dict":
        assert any(prompt[-1]["content"].endswith(" Count.") for prompt in rollouts.prompts)


class AskingEnv(AdderEnv):
    """An environment that owns the data: its reset asks the row's question, so the dataset needs no prompt column."""

    def reset(self, a: int = 0, b: int = 0, **kwargs) -> str:
        super().reset(str(a + b))
        return question(a, b)[0]["content"]


def test_all_rollouts_table_shows_the_prompts_the_environments_produced(tool_model_path, tmp_path):
    """pods_log_all_rollouts with an environment dataset without a prompt column (TRL allows one: each reset
    supplies the prompt): the completions table shows every rollout with the prompt it was generated from, the one
    the environment's reset produced (it used to raise KeyError: 'prompt', or show the dataset's prompt)."""
    model, tokenizer = load(tool_model_path)
    dataset = Dataset.from_dict({"a": [1, 3], "b": [2, 4]})
    config = pods_config(
        tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=1, max_completion_length=48,
        log_completions=True, pods_log_all_rollouts=True,
    )  # fmt: skip
    trainer = RowSpy(
        model, None, config, train_dataset=dataset, processing_class=tokenizer, environment_factory=AskingEnv
    )
    trainer.train()
    rollouts = trainer.records[-1]["phase1"]["rollouts"]
    assert list(trainer._logs["prompt"]) == rollouts.prompts and len(rollouts.prompts) == 8
    asked = {prompt[-1]["content"] for prompt in rollouts.prompts}
    assert asked == {"What is 1 plus 2?", "What is 3 plus 4?"}, asked
    assert list(trainer._logs["extra"]["kept"]).count(True) == 4


def test_budgeted_generation_with_an_environment_dataset_without_prompts(tool_model_path, tmp_path):
    """Budgeted generation keyed each prompt's history on its ``prompt`` column: an environment's dataset without one
    (TRL allows it: each reset supplies the prompt) raised KeyError: 'prompt' at step 1. Each row now keys a history
    of its own."""
    model, tokenizer = load(tool_model_path)
    dataset = Dataset.from_dict({"a": [1, 3], "b": [2, 4]})
    config = pods_config(
        tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=1, max_completion_length=48,
        pods_generation="budgeted", pods_budget=3,
    )  # fmt: skip
    trainer = PODSGRPOTrainer(
        model, None, config, train_dataset=dataset, processing_class=tokenizer, environment_factory=AskingEnv
    )
    trainer.train()
    assert len(trainer._pods_mode.allocation.history) == 2


class CountingRollouts:
    """A `rollout_func`: random completions (4-6 tokens then EOS), each numbered; extra fields `rollout_index` (one
    per row), `source` (shared) and `env_mask` (the last token masked as environment feedback)."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, index_values: int | None = None):
        self.tokenizer, self.index_values = tokenizer, index_values
        self.generator = torch.Generator().manual_seed(0)
        self.completions: dict[int, list[int]] = {}
        self.group_sizes: list[tuple[int, int]] = []

    def __call__(self, prompts: list, trainer) -> dict:
        self.group_sizes.append((len(prompts), trainer.num_generations))
        texts = [self.tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        prompt_ids = self.tokenizer(texts)["input_ids"]
        indices, completion_ids = [], []
        for _ in prompts:
            length = int(torch.randint(4, 7, (1,), generator=self.generator))
            ids = torch.randint(10, 200, (length,), generator=self.generator).tolist() + [self.tokenizer.eos_token_id]
            indices.append(len(self.completions))
            self.completions[indices[-1]] = ids
            completion_ids.append(ids)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "rollout_index": indices[: self.index_values],
            "source": "counting",
            "env_mask": [[1] * (len(ids) - 1) + [0] for ids in completion_ids],
        }


def indexed_reward(completion_ids, rollout_index, source, **kwargs) -> list[float]:
    """`token_sum_reward`; asserts each row's `rollout_index` is the row's own completion (see the test)."""
    assert source == ["counting"] * len(completion_ids)
    indexed_reward.seen.extend(zip(rollout_index, map(tuple, completion_ids), strict=True))
    return token_sum_reward(completion_ids)


def test_rollout_func_fields_follow_the_kept_rows(tiny_model_path, tmp_path):
    """rollout_func generates the N rollouts of each prompt (it sees N rows per prompt and num_generations = N); its
    per-row extra fields reach the reward functions aligned with their rows and phase 2 with the kept rows only; its
    shared field reaches every row; its env_mask is the kept rows' tool mask."""
    model, tokenizer = load(tiny_model_path)
    rollout = CountingRollouts(tokenizer)
    indexed_reward.seen = []
    config = pods_config(tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=2)
    trainer = RowSpy(
        model, indexed_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer,
        rollout_func=rollout,
    )  # fmt: skip
    trainer.train()
    assert rollout.group_sizes == [(8, 4), (8, 4)]
    assert len(indexed_reward.seen) == 16, "each rollout is scored once"
    assert all(tuple(rollout.completions[index]) == ids for index, ids in indexed_reward.seen)
    for record in trainer.records:
        assert_phase2_has_the_kept_rows(record, tokenizer.pad_token_id)
        fields = record["phase1"]["generation"][5]
        all_indices = record["phase1"]["rollouts"].generation[5]["rollout_index"]
        assert fields["rollout_index"] == [all_indices[i] for i in record["phase1"]["local"]]
        assert [row["rollout_index"] for row in record["phase1"]["inputs"]] == fields["rollout_index"]
        assert fields["source"] == "counting"
        masks = record["phase1"]["generation"][2]  # phase 2's tool mask (assert_phase2_has_the_kept_rows)
        kept_ids = [rollout.completions[index] for index in fields["rollout_index"]]
        assert masks == [[1] * (len(ids) - 1) + [0] for ids in kept_ids]


def test_rollout_func_field_of_another_length_is_refused(tiny_model_path, tmp_path):
    """A rollout_func list field without one value per row cannot follow the kept rows: a clear error."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=1)
    rollout = CountingRollouts(tokenizer, index_values=2)
    trainer = PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer,
        rollout_func=rollout,
    )  # fmt: skip
    with pytest.raises(ValueError, match="rollout_func returned 2 values for 'rollout_index' for 8 rows"):
        trainer.train()


@pytest.mark.parametrize(
    "options",
    [
        dict(pods_generation_chunk_size=3),
        dict(num_iterations=2),
        dict(pods_drop_constant_groups=True),
        dict(pods_cross_group=True, pods_advantage_scope="all"),
        dict(pods_token_fraction=0.5),
    ],
    ids=["rounds", "num_iterations", "drop_constant_groups", "cross_group", "token_selection"],
)
def test_tools_with_pods_modes(tool_model_path, tmp_path, options):
    """Tools with the PODS modes that keep phase 1 in one generation: generation rounds (the tool loop's calls are
    chunked too), num_iterations > 1, and D3S (dropped groups, cross-group selection, token selection). Phase 2
    trains on the kept rows with their tool masks; a dropped group's rows get an all-zero mask, the others keep
    their tool mask."""
    calls: list[tuple[int, int]] = []
    trainer = tool_trainer(tool_model_path, tmp_path, counting_add(calls), **options)
    tokenizer = trainer.processing_class
    trainer.train()
    assert calls, "the fine-tuned model never called the tool"
    assert len(trainer.records) == (1 if options.get("num_iterations") else 2)
    for record in trainer.records:
        phase1, output = record["phase1"], record["output"]
        assert len(phase1["local"]) == 4
        tool_mask = phase1["rollouts"].generation[2]
        if options.get("pods_drop_constant_groups"):
            dropped = phase1["dropped"].tolist()
            rows = zip(phase1["local"], dropped, strict=True)
            kept_masks = [[0] * len(tool_mask[i]) if drop else tool_mask[i] for i, drop in rows]
            width = output["tool_mask"].size(1)
            assert output["tool_mask"].tolist() == [mask + [1] * (width - len(mask)) for mask in kept_masks]
        else:
            assert_phase2_has_the_kept_rows(record, tokenizer.pad_token_id)


@pytest.mark.parametrize(
    ("feature", "options", "message"),
    [
        ("rollout_func", dict(pods_generation_chunk_size=2), "pods_generation_chunk_size cannot split"),
        ("image column", {}, "environment_factory with image inputs"),
    ],
)
def test_refuses_what_cannot_be_down_sampled(tool_model_path, tmp_path, feature, options, message):
    """A generation chunk size with rollout_func, and environments with image inputs, are refused at construction
    with what to change (every generation mode is accepted with tools, environments and rollout_func)."""
    model, tokenizer = load(tool_model_path)
    config = pods_config(tmp_path, pods_n=4, pods_m=2, per_device_train_batch_size=4, max_steps=1, **options)
    dataset = tool_dataset([(1, 2), (3, 4)])
    arguments = {
        "tools": dict(tools=[counting_add([])]),
        "environment_factory": dict(environment_factory=AdderEnv),
        "rollout_func": dict(rollout_func=CountingRollouts(tokenizer)),
        "image column": dict(environment_factory=AdderEnv),
    }[feature]
    if feature == "image column":
        dataset = dataset.add_column("image", [None, None])
    with pytest.raises(ValueError, match=message):
        PODSGRPOTrainer(
            model, calculator_reward, config, train_dataset=dataset, processing_class=tokenizer, **arguments
        )


@pytest.mark.slow
def test_calculator_example_runs_offline(tmp_path):
    """The docs' example (scripts/calculator_tool.py) runs offline: it builds its tool-calling model, trains PODS
    8 -> 4 with the tool for 2 steps, and writes its summary, with tool calls made."""
    with one_thread():  # its tool model's warm-up, as in the tool_model_path fixture
        summary = tool_model.calculator_tool.main(["--output_dir", str(tmp_path), "--steps", "2"])
    assert json.loads((tmp_path / "calculator_summary.json").read_text()) == summary
    assert len(summary["tool_call_frequency"]) == 2 and max(summary["tool_call_frequency"]) > 0

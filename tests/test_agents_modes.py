"""Every generation mode with TRL's agentic and vision features: tools with real tool calls, `environment_factory`,
`rollout_func` and a vision-language model, each with adaptive, budgeted, refill and screened generation.

Each test trains 2 steps of PODS 4 -> 2 on 2 prompts per step. Every other prompt of the data (an even first number,
or a red or blue image) earns a constant reward, and the data is read in order, so each mode does what only it does:
adaptive tops the constant groups up from 2 rollouts to 4, refill draws a further prompt for each of them, screened
pilots a pool of 4 prompts with 2 rollouts and commits 2 more to the 2 it picks, budgeted gives the 2 prompts 5
rollouts (3 and 2). Per generation the tests check, against what the reward sources, tools and environments recorded
while they ran (`Events`):

- the mode's waves: each group's rollouts, the calls, the groups trained;
- every rollout generated was scored once, with its own row (its answer, image, fields, environment);
- each rollout's environment was reset once, with its own row, and its tool results are its own;
- phase 2 saw exactly the kept rows with their own token ids, tool mask, prompt, environment, images and fields, and
  nothing ran in it (no reset, no tool call, no scoring).
"""

from __future__ import annotations

import functools
import json
from collections import Counter

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers import RowSpy, assert_phase2_has_the_kept_rows, load, pods_config, prompt_index
from PIL import Image
from test_agents import AdderEnv, CountingRollouts, tool_dataset
from tiny_vlm import IMAGE_SIZE, build
from tool_model import add, calculator_reward

from trl_pods.adaptive import has_contrast

N, M, B = 4, 2, 2  # rollouts per prompt, kept per prompt, prompts trained per generation
MODES = {
    "adaptive": dict(pods_generation="adaptive", pods_n_initial=2),
    "budgeted": dict(pods_generation="budgeted", pods_budget=2.5),
    "refill": dict(pods_generation="refill", pods_max_draws=2, pods_draw_coverage=0.0),
    "screened": dict(pods_generation="screened", pods_screen_ratio=2, pods_n_initial=2),
}
# Read in order: each batch of 2 holds an odd and an even (constant) first number; refill draws from the back (odd).
# Enough for 2 steps, the data loader's read-ahead of a batch and refill's draws, or screened's pools.
PAIRS = [(1, 2), (2, 4), (3, 1), (4, 2), (5, 3), (6, 1), (7, 0), (9, 0), (1, 6), (3, 3), (5, 0), (7, 1)]
CONSTANT_COLORS = {(250, 0, 0), (0, 0, 250)}
COLORS = [(0, 250, 0), (250, 0, 0), (120, 120, 0), (0, 0, 250), (0, 120, 120), (200, 100, 50), (50, 50, 50)]
COLORS.append((10, 200, 200))


class Events(list):
    """What the reward sources, tools and environments did, in order: ``(kind, ...)`` tuples."""


def constant_prompt(prompt: list[dict]) -> bool:
    """The prompt "What is a plus b?" (an environment may have extended it) has an even a: its reward is constant."""
    return prompt_index(prompt) % 2 == 0


TOOL_OPTIONS = dict(max_completion_length=48, learning_rate=1e-4)  # room for a tool call, its result and the answer


def train(mode: str, tmp_path, model, processing_class, reward_funcs, dataset: Dataset, options: dict, **features):
    """Train 2 steps of PODS 4 -> 2 in ``mode`` on ``dataset`` read in order, with ``options`` in the config and the
    feature's trainer arguments; the `PhaseSpy`."""
    config = pods_config(
        tmp_path, pods_n=N, pods_m=M, per_device_train_batch_size=B * M, max_steps=2, shuffle_dataset=False,
        **options, **MODES[mode],
    )  # fmt: skip
    trainer = PhaseSpy(
        model, reward_funcs, config, train_dataset=dataset, processing_class=processing_class, **features
    )
    trainer.train()
    assert len(trainer.records) == 2
    return trainer


class PhaseSpy(RowSpy):
    """`RowSpy` that also keeps, per generation, the `Events` of phase 1 and of phase 2, a snapshot of each generated
    rollout's environment right after phase 1, and the trainer's environments after phase 2. ``events`` is where the
    test's reward sources, tools and environments record (set by each test)."""

    events: Events = Events()

    def _generate_score_and_select(self, inputs):
        start = len(self.events)
        kept = super()._generate_score_and_select(inputs)
        environments = kept["rollouts"].environments
        self.records[-1]["phase1_events"] = self.events[start:]
        self.records[-1]["phase1_end"] = len(self.events)
        self.records[-1]["snapshot"] = [None if env is None else env._snapshot() for env in environments or []]
        return kept

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.records[-1]["phase2_events"] = self.events[self.records[-1]["phase1_end"] :]
            self.records[-1]["environments_after"] = self.environments
        return output


def generated_slots(record: dict) -> list[int]:
    """The slots of the generation that hold a rollout (slot ``g * N + s``: group g's s-th rollout)."""
    counts = record["phase1"]["counts"]
    return [g * N + s for g, count in enumerate(counts.tolist()) for s in range(count)]


def check_mode_waves(mode: str, record: dict) -> bool:
    """Assert the generation's waves followed ``mode``'s rules; return whether it did what fixed generation cannot
    in this test (adaptive: a top-up; refill: a drawn prompt trained; budgeted: unequal counts; screened: a pilot
    and a commit)."""
    phase1 = record["phase1"]
    rollouts, counts, rewards = phase1["rollouts"], phase1["counts"], phase1["rewards"]  # [G], [G, N]
    trained = phase1["kept"].any(dim=1)  # [G]
    assert int(trained.sum()) == B and phase1["kept"].sum(dim=1)[trained].tolist() == [M] * B
    if mode == "adaptive":
        lacking = ~has_contrast(rewards[:, :2])  # [G]: the first wave's 2 rollouts agree
        assert counts.tolist() == torch.where(lacking, 4, 2).tolist()
        assert rollouts.calls == 1 + int(lacking.any())
        return bool(lacking.any())
    if mode == "budgeted":
        assert sorted(counts.tolist()) == [2, 3] and rollouts.calls == 1, "floor(2.5 x 2) rollouts, each at least M"
        return True
    if mode == "refill":
        missing = B - int(has_contrast(rewards[:B]).sum())
        assert counts[:B].tolist() == [N] * B and int((counts[B:] > 0).sum()) == missing
        assert counts[B:].tolist() == [N] * missing + [0] * (B - missing) and rollouts.calls == 1 + (missing > 0)
        available = int(has_contrast(rewards).sum())
        assert int(has_contrast(rewards[trained]).sum()) == min(B, available), "groups with contrast first"
        return bool(trained[B:].any())
    pilot = counts.numel()  # screened: a pool of 2B prompts
    assert pilot == 2 * B and rollouts.calls == 2
    assert counts.tolist() == torch.where(trained, N, 2).tolist(), "the pilot of 2 for all, then 2 more for B"
    return True


def check_common(mode: str, trainer: PhaseSpy, pad_token_id: int) -> None:
    """What every test checks per generation (the mode's waves, phase 2's rows, nothing run in phase 2), and that
    some generation did what fixed generation cannot."""
    special = 0
    for record in trainer.records:
        special += check_mode_waves(mode, record)
        phase1, rollouts = record["phase1"], record["phase1"]["rollouts"]
        assert rollouts.generated == len(generated_slots(record)) and rollouts.padding == 0
        assert set(phase1["local"]) <= set(generated_slots(record)), "only generated rollouts are kept"
        assert_phase2_has_the_kept_rows(record, pad_token_id)
        assert record["phase2_events"] == [], "phase 2 reset, scored or called a tool"
    assert special > 0, f"{mode} never did what fixed generation cannot"


# ---------------------------------------------------------------- tools


def role_calculator_reward(completions, answer, prompts, **kwargs) -> list[float]:
    """1 for a prompt with an even first number (a constant group), else `calculator_reward`; records each rollout
    it scores as ``("scored", answer, completion)``."""
    for messages, expected in zip(completions, answer, strict=True):
        PhaseSpy.events.append(("scored", expected, json.dumps(messages)))
    rewards = calculator_reward(completions, answer)
    return [1.0 if constant_prompt(p) else r for p, r in zip(prompts, rewards, strict=True)]


def recording_add(events: Events):
    """The `add` tool (same name and schema), recording each call as ``("tool", a, b)``."""

    @functools.wraps(add)
    def recorded(a: int, b: int) -> int:
        events.append(("tool", a, b))
        return add(a, b)

    return recorded


def tool_calls(messages: list[dict]) -> tuple[int, list[str]]:
    """The tool calls a completion made (TRL runs each once, failing ones included), and the results it shows of
    those that ran (the last may be rolled back: TRL drops a result that would exceed max_completion_length)."""
    made = sum(len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant")
    contents = [m["content"] for m in messages if m["role"] == "tool"]
    return made, [content for content in contents if not content.startswith("{'error'")]


@pytest.mark.parametrize("mode", list(MODES))
def test_tools_in_every_mode(tool_model_path, tmp_path, mode):
    """Tools (HF generate) in each mode: the tool really runs, once per tool call of a generated rollout (each
    wave's rollouts, none of phase 2); every generated rollout is scored once with its own row's answer; phase 2
    trains on the kept rows with their own tool masks (tool-output tokens, and only those, out of the loss), and the
    logged rewards are the kept completions' own. TRL's tool-call frequency and completion length (model tokens)
    describe every rollout the waves generated, as they describe the N rollouts of fixed generation (they were
    averaged over waves: a wave of 2 rollouts weighed like one of 4; the length counted tool output)."""
    check_tool_rollouts(mode, train_with_tools(mode, tmp_path, tool_model_path))


def train_with_tools(mode: str, tmp_path, model_path, **options) -> PhaseSpy:
    """`train` the tool model in ``mode`` with the recording `add` tool and `role_calculator_reward`."""
    PhaseSpy.events = events = Events()
    model, tokenizer = load(model_path)
    return train(
        mode, tmp_path, model, tokenizer, role_calculator_reward, tool_dataset(PAIRS), {**TOOL_OPTIONS, **options},
        tools=[recording_add(events)],
    )  # fmt: skip


def check_tool_rollouts(mode: str, trainer: PhaseSpy) -> None:
    """What `test_tools_in_every_mode` checks (also on a vLLM engine: test_agents_vllm.py)."""
    check_common(mode, trainer, trainer.processing_class.pad_token_id)
    tool_rows, frequencies, lengths = 0, [], []
    for record in trainer.records:
        rollouts, local = record["phase1"]["rollouts"], record["phase1"]["local"]
        completions, tool_mask, completion_ids = rollouts.generation[3], rollouts.generation[2], rollouts.generation[1]
        slots = generated_slots(record)
        scored = [event[1:] for event in record["phase1_events"] if event[0] == "scored"]
        assert Counter(scored) == Counter((rollouts.rows[s]["answer"], json.dumps(completions[s])) for s in slots), (
            "each generated rollout scored once, with its own row"
        )
        made = sum(tool_calls(completions[s])[0] for s in slots)
        shown = Counter(result for s in slots for result in tool_calls(completions[s])[1])
        ran = [event[1:] for event in record["phase1_events"] if event[0] == "tool"]
        assert shown <= Counter(str(a + b) for a, b in ran) and len(ran) <= made, "one run per tool call generated"
        frequencies.append(made / rollouts.generated)
        lengths.append(sum(sum(tool_mask[s]) for s in slots) / len(slots))  # TRL's: model tokens, not tool output
        for i in local:
            masked = [token for token, keep in zip(completion_ids[i], tool_mask[i], strict=True) if not keep]
            responses = [m["content"] for m in completions[i] if m["role"] == "tool"]
            tool_rows += bool(responses)
            text = trainer.processing_class.decode(masked)
            assert text.count("<tool_response>") == len(responses) and all(r in text for r in responses)
    assert tool_rows > 0, "no kept rollout called the tool"
    logged = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert [entry["tools/call_frequency"] for entry in logged] == pytest.approx(frequencies), "over every rollout"
    assert [entry["completions/mean_length"] for entry in logged] == pytest.approx(lengths), "over every rollout"
    last = trainer.records[-1]
    kept_rows = [last["phase1"]["rollouts"].rows[i] for i in last["phase1"]["local"]]
    kept_completions = [last["phase1"]["rollouts"].generation[3][i] for i in last["phase1"]["local"]]
    assert list(trainer._logs["completion"]) == kept_completions
    expected = role_calculator_reward(
        kept_completions, [row["answer"] for row in kept_rows], [row["prompt"] for row in kept_rows]
    )
    assert list(trainer._logs["rewards"]["role_calculator_reward"]) == expected


# ---------------------------------------------------------------- environments


class LoggedEnv(AdderEnv):
    """`AdderEnv` whose reset and `get_reward` are recorded (``("reset", id, answer)``, ``("get_reward", id)``); a
    prompt with an even first number gets a reward of 1 (a constant group) and its reset extends it, the others get
    `AdderEnv`'s reward."""

    def __init__(self, events: Events):
        super().__init__()
        self.events, self.constant = events, False

    def reset(self, prompt: list, answer: str = "", **kwargs) -> str | None:
        super().reset(answer)
        self.constant = constant_prompt(prompt)
        self.events.append(("reset", id(self), answer))
        return " Count." if self.constant else None  # the others keep the question the tool model learned

    def get_reward(self) -> float:
        self.events.append(("get_reward", id(self)))
        return self._reward()

    def _reward(self) -> float:
        return 1.0 if self.constant else super().get_reward()

    def _snapshot(self) -> tuple:
        """``(id, answer, tool results, reward)`` now (private: TRL makes every public method a tool)."""
        return id(self), self.answer, list(self.results), self._reward()


@pytest.mark.parametrize("mode", list(MODES))
def test_environments_in_every_mode(tool_model_path, tmp_path, mode):
    """environment_factory in each mode: every generated rollout has its own instance, reset once with its own row
    (a top-up, a draw, a commit gets instances no earlier wave of the generation used; padding: none on one process),
    its tool results are its own; `get_reward` scores each rollout once; after phase 2 the trainer holds the kept
    rows' own instances, the kept rows carry the prompts their resets produced and the rewards of their own
    environments."""
    PhaseSpy.events = events = Events()
    model, tokenizer = load(tool_model_path)
    trainer = train(
        mode, tmp_path, model, tokenizer, None, tool_dataset(PAIRS), TOOL_OPTIONS,
        environment_factory=lambda: LoggedEnv(events),
    )  # fmt: skip
    check_common(mode, trainer, tokenizer.pad_token_id)
    calls_made = 0
    for record in trainer.records:
        phase1 = record["phase1"]
        rollouts, local, snapshot = phase1["rollouts"], phase1["local"], record["snapshot"]
        slots = generated_slots(record)
        assert all(snapshot[s] is None for s in range(len(snapshot)) if s not in slots)
        environments = [snapshot[s][0] for s in slots]
        assert len(set(environments)) == len(slots), "one instance per rollout"
        resets = [event[1:] for event in record["phase1_events"] if event[0] == "reset"]
        assert Counter(resets) == Counter((snapshot[s][0], rollouts.rows[s]["answer"]) for s in slots)
        scored = [event[1] for event in record["phase1_events"] if event[0] == "get_reward"]
        assert Counter(scored) == Counter(environments), "get_reward: each rollout once"
        for s in slots:
            made, results = tool_calls(rollouts.generation[3][s])
            ran = [str(result) for result in snapshot[s][2]]
            assert ran[: len(results)] == results and len(ran) <= made, "the rollout's tool results are its env's"
            calls_made += made
        assert [id(env) for env in record["environments_after"]] == [snapshot[i][0] for i in local]
        prompts = [row["prompt"] for row in phase1["inputs"]]
        assert prompts == [rollouts.prompts[i] for i in local], "the kept rows' prompts, as their resets produced"
        extended = [prompt[-1]["content"].endswith(" Count.") for prompt in prompts]
        assert extended == [constant_prompt(prompt) for prompt in prompts]
        column = trainer.reward_func_names.index("LoggedEnv")
        assert phase1["rewards_per_func"][:, column].tolist() == [snapshot[i][3] for i in local]
    assert calls_made > 0, "no environment tool was called"


# ---------------------------------------------------------------- rollout_func


def indexed_role_reward(prompts, completion_ids, rollout_index, source, **kwargs) -> list[float]:
    """1 for a prompt with an even first number (a constant group), else the token sum modulo 7; records each row
    it scores as ``("scored", rollout_index, completion ids, source)``."""
    for index, ids, shared in zip(rollout_index, completion_ids, source, strict=True):
        PhaseSpy.events.append(("scored", index, tuple(ids), shared))
    return [1.0 if constant_prompt(p) else float(sum(ids) % 7) for p, ids in zip(prompts, completion_ids, strict=True)]


@pytest.mark.parametrize("mode", list(MODES))
def test_rollout_func_in_every_mode(tiny_model_path, tmp_path, mode):
    """rollout_func in each mode: it generates each wave's rows (as many per prompt as the wave gives, that count as
    `num_generations`); every generated rollout is scored once with its own per-row field and the shared one; phase
    2's rows carry the kept rows' own fields, and their env_mask is the kept rows' tool mask."""
    PhaseSpy.events = Events()
    model, tokenizer = load(tiny_model_path)
    rollout = CountingRollouts(tokenizer)
    trainer = train(
        mode, tmp_path, model, tokenizer, indexed_role_reward, tool_dataset(PAIRS), {}, rollout_func=rollout
    )
    check_common(mode, trainer, tokenizer.pad_token_id)
    first = 0
    for record in trainer.records:
        phase1 = record["phase1"]
        rollouts, local, counts = phase1["rollouts"], phase1["local"], phase1["counts"]
        slots = generated_slots(record)
        calls = rollout.group_sizes[first : first + rollouts.calls]
        first += rollouts.calls
        assert sum(rows for rows, _ in calls) == len(slots), "rollout_func generated every rollout, once"
        requests = {"adaptive": {2}, "budgeted": {1}, "refill": {N}, "screened": {2}}[mode]
        assert {size for _, size in calls} == requests and all(rows % size == 0 for rows, size in calls)
        indices = rollouts.generation[5]["rollout_index"]
        scored = [event[1:] for event in record["phase1_events"] if event[0] == "scored"]
        assert Counter(scored) == Counter(
            (indices[s], tuple(rollout.completions[indices[s]]), "counting") for s in slots
        ), "each generated rollout scored once, with its own fields"
        assert all(tuple(rollouts.generation[1][s]) == tuple(rollout.completions[indices[s]]) for s in slots)
        fields = phase1["generation"][5]
        assert fields["rollout_index"] == [indices[i] for i in local] and fields["source"] == "counting"
        assert [row["rollout_index"] for row in phase1["inputs"]] == fields["rollout_index"]
        kept_ids = [rollout.completions[index] for index in fields["rollout_index"]]
        assert phase1["generation"][2] == [[1] * (len(ids) - 1) + [0] for ids in kept_ids]
        assert counts.sum() == len(slots)


# ---------------------------------------------------------------- vision


def _visited_rows(trainer: PhaseSpy) -> list[dict]:
    """The dataset rows of every group generated (one each)."""
    return [row for record in trainer.records for row in record["phase1"]["rollouts"].rows[::N] if row is not None]


def color_dataset() -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "What color is this picture?"}]] * len(COLORS),
            "image": [Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), color) for color in COLORS],
        }
    )


def color_reward(completion_ids, image, **kwargs) -> list[float]:
    """1 for a red or blue picture (a constant group), else its red channel plus the token sum, modulo 7; records
    each row it scores as ``("scored", color, completion ids)``."""
    colors = [picture.getpixel((0, 0)) for picture in image]
    for color, ids in zip(colors, completion_ids, strict=True):
        PhaseSpy.events.append(("scored", color, tuple(ids)))
    return [
        1.0 if color in CONSTANT_COLORS else float((color[0] + sum(ids)) % 7)
        for color, ids in zip(colors, completion_ids, strict=True)
    ]


@pytest.mark.parametrize("mode", list(MODES))
def test_vision_in_every_mode(tmp_path, mode):
    """A vision-language model (tiny LLaVA) in each mode: every generated rollout is generated with its own row's
    image and scored once with it; phase 2's pixel values are the image processor's output for the kept rows' images,
    in order, one image per kept row. Budgeted: the rows share one question, and each image has a history of its own
    (keyed on the question alone, they shared one, and the allocation became an even split)."""
    PhaseSpy.events = Events()
    model, processor = build("llava")
    trainer = train(mode, tmp_path, model, processor, color_reward, color_dataset(), {})
    check_common(mode, trainer, processor.tokenizer.pad_token_id)
    if mode == "budgeted":  # every row asks the same question of another image: each has a history of its own
        assert len(trainer._pods_mode.allocation.history) == len({row["image"].getpixel((0, 0)) for row in
                                                                   _visited_rows(trainer)}) == 2 * B  # fmt: skip
    for record in trainer.records:
        phase1 = record["phase1"]
        rollouts, local, output = phase1["rollouts"], phase1["local"], record["output"]
        slots = generated_slots(record)
        images = rollouts.generation[6]
        for s in slots:
            assert np.array(images[s][0]).tolist() == np.array(rollouts.rows[s]["image"]).tolist()
        scored = [event[1:] for event in record["phase1_events"] if event[0] == "scored"]
        assert Counter(scored) == Counter(
            (rollouts.rows[s]["image"].getpixel((0, 0)), tuple(rollouts.generation[1][s])) for s in slots
        ), "each generated rollout scored once, with its own image"
        kept_images = [rollouts.rows[i]["image"] for i in local]
        expected = processor.image_processor(images=kept_images, return_tensors="pt")["pixel_values"]
        assert output["pixel_values"].shape == expected.shape == (B * M, 3, IMAGE_SIZE, IMAGE_SIZE)
        assert np.allclose(output["pixel_values"].numpy(), expected.numpy())
        assert output["num_images"] == [1] * (B * M)

"""Generation modes on a tool-calling agent: GRPO vs PODS fixed vs PODS + refill vs screened, with TRL's tool loop.

The agent is the calculator example's (`scripts/calculator_tool.py`): a tiny Qwen2 (~110k parameters) with a
byte-level BPE tokenizer and TRL's Qwen3 chat template, given ``--warmup_steps`` steps of supervised warm-up on whole
calculator conversations ("What is a plus b?" -> `<tool_call>` add(a, b) -> the tool's result -> the answer), seeded.
The warm-up teaches the format more than the content. RL then trains it with the `add` tool (TRL's tool loop:
generate, run the call, append the result, generate again) on the 100 questions (a, b in 0..9), reward
`calculator_reward`: 1 for the right answer, 0.5 for a wrong one after a tool call, 0 otherwise.

Methods (``--methods`` picks a subset), each training on ``--prompts_per_step`` prompts x 4 kept rollouts per
optimizer step with the same learning rate, for the same number of steps:

* ``GRPO 4`` -- N = M = 4;
* ``PODS 8->4`` -- 8 rollouts per prompt, max-variance down-sampling to 4;
* ``PODS 8->4 + refill`` -- the same with DAPO's dynamic sampling: further prompts drawn for the groups without
  contrast, at most 3 draws (generation calls) per step;
* ``screened 2x4->8->4`` -- a pilot of 4 rollouts for twice the prompts, 4 more for the half the frontier rule picks.

Accuracy: greedy decoding with the tool, the conversation built as TRL's tool loop builds it (the prompt, the first
turn, the tool's response, a second turn when the first called `add`), on the 100 questions, before training and
every ``--eval_every`` steps (no random generator touched). Per step, from the trainer's logs: rollouts generated,
generation calls, the trained groups whose rewards differ (the others have zero advantage), and the tool calls made
(TRL's `tools/call_frequency` times the rollouts generated). A seed fixes the warm-up (the starting model, shared by
the methods), the order of the prompts and the sampling; runs go seed by seed, methods interleaved, on one thread.

    python benchmarks/agent_modes.py                                              # 3 seeds x 4 methods
    python benchmarks/agent_modes.py --seeds 1 --steps 4 --eval_every 2 --smoke   # nothing written
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from _report import REPO, command_line, environment, figure_path, plot_accuracy_curves, write_section
from budgeted_generation import AccuracyCurve, mean_logged
from datasets import Dataset
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM
from transformers.trainer_callback import PrinterCallback
from trl.chat_template_utils import get_training_chat_template

from trl_pods import PODSConfig, PODSGRPOTrainer

sys.path.insert(0, str(REPO / "scripts"))  # scripts/ is not a package
from calculator_tool import add, build_tool_model, calculator_reward, question  # noqa: E402

REFILL = dict(pods_generation="refill", pods_max_draws=3)
METHODS = {
    "GRPO 4": dict(pods_n=4, pods_m=4),
    "PODS 8->4": dict(pods_n=8, pods_m=4),
    "PODS 8->4 + refill": dict(pods_n=8, pods_m=4, **REFILL),
    "screened 2x4->8->4": dict(pods_n=8, pods_m=4, pods_generation="screened", pods_screen_ratio=2, pods_n_initial=4),
}
NAME = "agent_modes"
MAX_COMPLETION_LENGTH = 48  # both turns and the tool's response, as in the example
TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>", re.DOTALL)
THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def questions() -> Dataset:
    """The 100 questions "What is a plus b?" (a, b in 0..9) with their ``answer``."""
    pairs = [(a, b) for a in range(10) for b in range(10)]
    return Dataset.from_dict({"prompt": [question(a, b) for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


def render(tokenizer: PreTrainedTokenizerFast, messages: list[dict], **kwargs) -> list[int]:
    """Token ids of ``messages`` with the `add` tool, rendered with the chat template TRL trains with."""
    template = get_training_chat_template(tokenizer)  # None: the tokenizer's own is fit for training
    return tokenizer.apply_chat_template(messages, tools=[add], chat_template=template, return_dict=False, **kwargs)


def tool_suffix(tokenizer: PreTrainedTokenizerFast, result: int) -> list[int]:
    """The tokens TRL's tool loop appends after a turn that called `add` (`GRPOTrainer._get_tool_suffix_ids`): the
    tool's response and the next assistant header."""
    call = {"type": "function", "function": {"name": "add", "arguments": {}}}
    turns = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    before = render(tokenizer, turns)
    after = render(
        tokenizer, [*turns, {"role": "tool", "name": "add", "content": str(result)}], add_generation_prompt=True
    )
    return after[len(before) :]


def greedy_turn(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[list[int]], limit: int):
    """Greedy completions (token ids up to and with the end of turn, at most ``limit``) of ``prompts``."""
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])  # left padding
    mask = (torch.arange(width) >= torch.tensor([width - len(p) for p in prompts]).unsqueeze(1)).long()
    out = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=limit, pad_token_id=tokenizer.pad_token_id
    )[:, width:]
    completions = []
    for row in out.tolist():
        end = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        completions.append([token for token in row[:end] if token != tokenizer.pad_token_id])
    return completions


def parsed_call(text: str) -> int | None:
    """The result of the `add` call a turn makes (None: no parsable call)."""
    match = TOOL_CALL.search(text)
    try:
        call = json.loads(match.group(1)) if match else None
        arguments = call["arguments"] if call and call.get("name") == "add" else None
        return add(**arguments) if isinstance(arguments, dict) else None
    except (json.JSONDecodeError, TypeError, KeyError):
        return None


@torch.no_grad()
def accuracy(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, data: Dataset) -> tuple[float, float, int]:
    """(greedy accuracy, share of greedy first turns that call `add` and parse, distinct greedy first turns) on
    ``data`` (one distinct first turn: the model ignores the question).

    The first turn is decoded greedily; when it calls `add`, the tool runs, its response is appended as TRL's tool
    loop appends it, and a second turn gives the answer; the answer (its `<think>` block removed) must be the sum.
    """
    training = model.training
    model.eval()
    prompts = [render(tokenizer, prompt, add_generation_prompt=True) for prompt in data["prompt"]]
    first = greedy_turn(model, tokenizer, prompts, MAX_COMPLETION_LENGTH)
    results = [parsed_call(tokenizer.decode(ids)) for ids in first]
    called = [i for i, result in enumerate(results) if result is not None]
    second = dict.fromkeys(range(len(prompts)))
    if called:
        follow = [prompts[i] + first[i] + tool_suffix(tokenizer, results[i]) for i in called]
        limit = MAX_COMPLETION_LENGTH - min(len(first[i]) for i in called)
        second.update(zip(called, greedy_turn(model, tokenizer, follow, max(limit, 1)), strict=True))
    answers = [tokenizer.decode(second[i] if second[i] is not None else first[i], skip_special_tokens=True)
               for i in range(len(prompts))]  # fmt: skip
    right = [THINK.sub("", text).strip() == expected for text, expected in zip(answers, data["answer"], strict=True)]
    model.train(training)
    return statistics.mean(right), len(called) / len(prompts), len({tuple(ids) for ids in first})


class ToolAccuracyCurve(AccuracyCurve):
    """`AccuracyCurve` with `accuracy` of the agent: ``curve`` holds (step, training minutes, greedy accuracy, share
    of greedy first turns calling `add`, distinct greedy first turns)."""

    def accuracy(self, model: Qwen2ForCausalLM) -> tuple[float, float, int]:
        return accuracy(model, self.tokenizer, self.data)


def run(method: str, seed: int, model_path: Path, args: argparse.Namespace) -> dict:
    """Train one method from the seed's warmed-up model; return its curve and per-step costs."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    data = questions()
    curve = ToolAccuracyCurve(tokenizer, data, args.eval_every)
    settings = METHODS[method]
    with tempfile.TemporaryDirectory() as out:
        config = PODSConfig(
            output_dir=out, per_device_train_batch_size=args.prompts_per_step * settings["pods_m"],
            learning_rate=args.learning_rate, lr_scheduler_type="constant", max_steps=args.steps,
            max_completion_length=MAX_COMPLETION_LENGTH, temperature=1.0, beta=0.0, gradient_checkpointing=False,
            logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, bf16=False, use_cpu=True,
            seed=seed, pods_selection_log=False, **settings,
        )  # fmt: skip
        trainer = PODSGRPOTrainer(
            Qwen2ForCausalLM.from_pretrained(model_path), calculator_reward, config, train_dataset=data,
            processing_class=tokenizer, tools=[add], callbacks=[curve],
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    history = [entry for entry in trainer.state.log_history if "pods/rollouts_generated" in entry]
    rollouts = [entry["pods/rollouts_generated"] for entry in history]
    contrast = [
        entry.get("pods/frac_trained_groups_with_contrast", 1 - entry["pods/frac_zero_std_groups_kept"])
        for entry in history
    ]
    tool_calls = [entry["tools/call_frequency"] * n for entry, n in zip(history, rollouts, strict=True)]
    result = {
        "method": method,
        "seed": seed,
        "curve": curve.curve,
        "rollouts": statistics.mean(rollouts),
        "tool_calls": statistics.mean(tool_calls),
        "generation_calls": mean_logged(history, "pods/generation_calls", default=1.0),
        "contrast": statistics.mean(contrast),
        "reward": mean_logged(history, "pods/reward_mean_all"),
        "per_step": {
            "rollouts": rollouts,
            "contrast": contrast,
            "tool_calls": tool_calls,
            "reward_all": [entry["pods/reward_mean_all"] for entry in history],
        },
    }
    points = ", ".join(f"{step}: {greedy:.2f} ({distinct} distinct)" for step, _, greedy, _, distinct in curve.curve)
    print(
        f"{method:>20} seed {seed}: {points}; {curve.curve[-1][1] * 60 / args.steps:.2f} s/step; rollouts/step "
        f"{result['rollouts']:.0f}; tool calls/step {result['tool_calls']:.1f}; contrast {result['contrast']:.2f}; "
        f"reward {result['reward']:.2f}",
        flush=True,
    )
    return result


def summarise(runs: list[dict]) -> str:
    """One markdown table row per method."""
    rows = []
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        final = [r["curve"][-1][2] for r in mine]
        best = [max(point[2] for point in r["curve"]) for r in mine]
        distinct = [r["curve"][-1][4] for r in mine]
        per_step = statistics.mean(r["curve"][-1][1] * 60 / r["curve"][-1][0] for r in mine)

        def mean(key: str, digits: int, mine=mine) -> str:
            return f"{statistics.mean(r[key] for r in mine):.{digits}f}"

        rows.append(
            f"| {method} | {statistics.mean(final):.2f} ({min(final):.2f}–{max(final):.2f}) | "
            f"{statistics.mean(best):.2f} | {mean('contrast', 2)} | {mean('rollouts', 0)} | {mean('tool_calls', 1)} | "
            f"{mean('generation_calls', 2)} | {mean('reward', 2)} | {statistics.mean(distinct):.1f} | {per_step:.2f} |"
        )
    return "\n".join(rows)


def curves(runs: list[dict]) -> str:
    """Mean greedy accuracy per method at each evaluation: a markdown table."""
    steps = [point[0] for point in runs[0]["curve"]]
    header = "| method | " + " | ".join(f"step {step}" for step in steps) + " |"
    rows = [header, "|---|" + "---|" * len(steps)]
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r["curve"] for r in runs if r["method"] == method]
        means = [statistics.mean(curve[k][2] for curve in mine) for k in range(len(steps))]
        rows.append(f"| {method} | " + " | ".join(f"{value:.2f}" for value in means) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--warmup_steps", type=int, default=120, help="supervised warm-up steps of the tool model")
    parser.add_argument("--prompts_per_step", type=int, default=4)
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--smoke", action="store_true", help="print the table; write nothing to docs/")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = []
    with tempfile.TemporaryDirectory() as models:
        for seed in range(args.seeds):
            model_path = build_tool_model(Path(models) / str(seed), steps=args.warmup_steps, seed=seed)
            runs += [run(method, seed, model_path, args) for method in args.methods]
    table, over_steps = summarise(runs), curves(runs)
    if args.smoke:
        print(table, over_steps, "smoke run: nothing written", sep="\n")
        return
    figure_path(f"{NAME}.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1) + "\n")
    plot_accuracy_curves(
        runs, figure_path(f"{NAME}.png"), "greedy accuracy on the 100 questions", "training minutes (1 CPU thread)",
        "o",
    )  # fmt: skip
    untrained = statistics.mean(r["curve"][0][2] for r in runs)
    write_section(
        NAME,
        f"""## Generation modes on a tool-calling agent: {" vs ".join(args.methods)}

The calculator example's tiny Qwen2 (~110k parameters, `scripts/calculator_tool.py`) after {args.warmup_steps} steps
of supervised warm-up on calculator conversations, trained with RL and the `add` tool (TRL's tool loop) on the 100
questions "What is a plus b?" (a, b in 0..9): {args.prompts_per_step} prompts x 4 kept rollouts per optimizer step,
completions of at most {MAX_COMPLETION_LENGTH} tokens (both turns and the tool's response) at temperature 1, reward 1
for the right answer, 0.5 for a wrong one after a tool call, 0 otherwise; lr {args.learning_rate} (constant),
{args.steps} steps per run, seeds 0–{args.seeds - 1} (each seed's warmed-up model shared by the methods). Accuracy:
greedy decoding with the tool on the 100 questions (untrained: {untrained:.2f} on average). Groups with contrast: the
trained groups whose rewards differ (the others have zero advantage). Rollouts, tool calls and generation calls: per
optimizer step. Seconds per step: wall-clock training time on one thread of a shared CPU, evaluation excluded.

| method | final greedy accuracy, mean (min–max) | best greedy accuracy (mean) | trained groups with contrast | \
rollouts / step | tool calls / step | generation calls / step | mean reward, all rollouts | \
distinct greedy first turns at the end | s / step |
|---|---|---|---|---|---|---|---|---|---|
{table}

Greedy accuracy over steps (mean over seeds):

{over_steps}

![agent modes]({NAME}.png)

Raw curves (step, minutes, greedy accuracy, share of greedy first turns calling `add`, distinct greedy first turns
over the 100 questions) and per-step series (rollouts, groups with contrast, tool calls, mean reward of all rollouts):
[{NAME}.json]({NAME}.json).

- Command: `{command_line("agent_modes.py", parser, args)}`
{environment()}
""",
    )


if __name__ == "__main__":
    main()

"""Where the demo's model starts on reasoning-gym tasks: greedy held-out accuracy, read two ways.

For SmolLM2-135M-Instruct (`trl_pods.smollm2`), each task of `TASKS` at an easy setting: its 200 held-out problems
(`trl_pods.reasoning_gym_tasks.load_reasoning_gym`, seed 0, the problems `trl-pods train --task reasoning_gym:<name>
--task_config ...` holds out with ``--seed 0``), with the prompt training uses (reasoning-gym's "direct" system
prompt, the question as the user message) through the model's chat template, answered greedily with HF ``generate``
(`trl_pods.evaluate`'s generation, up to the task's completion length). Each completion is scored by the task's own
scorer in two readings:

* raw: the scorer on the whole completion, stripped (what a user who feeds completions to ``score_answer`` gets);
* extracted: the scorer on `trl_pods.reasoning_gym_tasks.extract_answer`'s answer (the ``<answer>`` content, else
  the last number for numeric tasks, else the last line): the reading the ``reasoning_gym`` reward and
  ``trl-pods eval`` use, so format and skill are told apart.

A problem counts as solved when its score is 1. Tasks whose extracted accuracy is 10-50% and where one answer given
to every problem (`constant_accuracy`) scores under 10% are marked: there RL can show skill learned rather than
format or a collapse to one answer. Each task is saved as one line of
``docs/benchmarks/data/reasoning_gym_base.jsonl`` as it ends (a stopped run resumes), with its prompt, setting and
completion length, and the page ``docs/benchmarks/reasoning-gym-base.md`` is written from them.

    OMP_NUM_THREADS=2 python benchmarks/reasoning_gym_base.py     # measure (resumes), then the page
    python benchmarks/reasoning_gym_base.py --report              # the page from the saved data
    python benchmarks/reasoning_gym_base.py --smoke --model DIR   # 2 tasks x 4 problems, prints, writes nothing
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence

from harness import DATA, RunStore, Study, command_line, measure, notes

from trl_pods.evaluate import EvalArguments, _generate_hf, chat_prompts
from trl_pods.reasoning_gym_tasks import (
    load_reasoning_gym,
    reasoning_gym_format_reward,
    reasoning_gym_reward,
    score_answers,
)

STUDY = Study(
    "reasoning_gym_base.py",
    "reasoning-gym-base",
    "Where SmolLM2-135M-Instruct starts on reasoning-gym",
    "reasoning_gym_base",
)
TASKS = {  # name: (the dataset's settings, completion length in tokens); each has over 2 x 200 distinct questions
    "chain_sum": ({"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}, 32),
    "basic_arithmetic": ({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, 32),
    "products": ({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}, 32),
    "leg_counting": ({"min_animals": 1, "max_animals": 2, "max_instances": 3}, 32),
    "letter_counting": ({"min_words": 3, "max_words": 5}, 32),
    "count_bits": ({"min_n": 1, "max_n": 1023}, 32),
    "gcd": ({"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 30}, 32),
    "spell_backward": ({"min_word_len": 3, "max_word_len": 4}, 32),
    "word_sequence_reversal": ({"min_words": 2, "max_words": 3}, 32),
    "word_sorting": ({"min_words": 3, "max_words": 3}, 48),
    "number_sorting": ({"min_numbers": 3, "max_numbers": 3, "min_decimals": 0, "max_decimals": 0}, 48),
    "countdown": ({"min_numbers": 3, "max_numbers": 3, "min_target": 10, "max_target": 50}, 48),
    "gsm_symbolic": ({}, 64),
}
SMOKE_TASKS = ("chain_sum", "spell_backward")
PARSER = STUDY.parser(__doc__)
PARSER.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M-Instruct, trl_pods.smollm2)")
PARSER.add_argument("--problems", type=int, default=200, help="held-out problems per task")
PARSER.add_argument("--seed", type=int, default=0, help="seed of the held-out problems")
PARSER.add_argument("--batch_size", type=int, default=50, help="prompts per generate call")
LOW, HIGH = 0.10, 0.50  # the band where RL can show skill rather than format


def in_band(run: dict) -> bool:
    """Whether RL can show skill on the task: extracted accuracy in the band, and one answer to all under it."""
    return LOW <= run["extracted_accuracy"] <= HIGH and run["constant_accuracy"] < LOW


def constant_accuracy(answers: Sequence[str]) -> float:
    """The held-out accuracy of one answer given to every problem: the share of the most common of the problems'
    gold ``answers``."""
    return max(Counter(answers).values()) / len(answers)


def measure_task(task: str, model: str, problems: int, seed: int, batch_size: int) -> dict:
    """Generate greedily on the task's held-out problems and score both readings."""
    config, length = TASKS[task]
    start = time.perf_counter()
    rows = load_reasoning_gym(f"reasoning_gym:{task}", "test", config=config, seed=seed, n_test=problems)
    tokenizer, prompts = chat_prompts(model, rows["prompt"])
    args = EvalArguments(
        model_name_or_path=model, task=f"reasoning_gym:{task}", max_new_tokens=length, batch_size=batch_size
    )
    texts, tokens = _generate_hf(model, tokenizer, prompts, args, _device())
    completions = [samples[0] for samples in texts]
    columns = {name: rows[name] for name in rows.column_names if name.startswith("reasoning_gym_")}
    extracted = reasoning_gym_reward(completions, **columns)
    raw = score_answers(
        [c.strip() for c in completions], rows["reasoning_gym_task"], rows["reasoning_gym_config"],
        rows["reasoning_gym_entry"],
    )  # fmt: skip
    formatted = reasoning_gym_format_reward(completions)
    n = len(completions)
    return {
        "task": task,
        "config": config,
        "max_new_tokens": length,
        "system_prompt": rows["prompt"][0][0]["content"],
        "example_question": rows["prompt"][0][1]["content"],
        "numeric": rows["reasoning_gym_numeric"][0],
        "problems": n,
        "raw_accuracy": sum(s >= 1.0 for s in raw) / n,
        "extracted_accuracy": sum(s >= 1.0 for s in extracted) / n,
        "constant_accuracy": constant_accuracy([str(answer) for answer in rows["answer"]]),
        "raw_mean_score": sum(raw) / n,
        "extracted_mean_score": sum(extracted) / n,
        "answer_tag_rate": sum(formatted) / n,
        "mean_tokens": tokens / n,
        "seconds": time.perf_counter() - start,
        "examples": [{"gold": g, "completion": c} for g, c in zip(rows["answer"][:3], completions[:3], strict=True)],
    }


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def table(runs: list[dict]) -> str:
    """One row per task: setting, length, both accuracies (the 10-50% band marked), one answer to all, tag rate,
    time."""
    lines = [
        "| task | setting (`--task_config`) | tokens | raw accuracy | extracted accuracy | one answer to all | "
        "`<answer>` tags | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        band = " **(10-50%)**" if in_band(run) else ""
        lines.append(
            f"| {run['task']} | `{json.dumps(run['config'])}` | {run['max_new_tokens']} | {run['raw_accuracy']:.2f} "
            f"| {run['extracted_accuracy']:.2f}{band} | {run['constant_accuracy']:.2f} | {run['answer_tag_rate']:.2f} "
            f"| {run['seconds']:.0f} |"
        )
    return "\n".join(lines)


def render() -> str:
    """The page, from the saved runs."""
    path = DATA / "reasoning_gym_base.jsonl"
    runs = RunStore(path, ("task",)).runs()
    settings = runs[0]["settings"] if runs else {}
    marked = [r["task"] for r in runs if in_band(r)]
    prompts = "\n".join(
        f"- {r['task']} ({'numeric' if r['numeric'] else 'text'} answers): `{r['example_question'][:160]!r}`"
        for r in runs
    )
    body = f"""
SmolLM2-135M-Instruct, greedy, on {settings.get("problems", 200)} held-out problems of each task (seed
{settings.get("seed", 0)}), with the prompt training uses: reasoning-gym's own "direct" system prompt

> {runs[0]["system_prompt"] if runs else ""}

and the question as the user message, through the model's chat template. **Raw**: the task's scorer on the whole
completion (stripped). **Extracted**: the scorer on the answer `trl_pods.reasoning_gym_tasks.extract_answer` reads
(the last `<answer>` content, else the last number where the answers are numbers, else the last line): what the
`reasoning_gym` reward and `trl-pods eval` score. Accuracy counts scores of 1. One answer to all: the accuracy of
the most common gold answer given to every problem (a policy that collapses to it scores this without the skill).
`<answer>` tags: the share of completions with one well-formed `<answer>` (the `reasoning_gym_format` reward). s: the
task's wall-clock seconds on cores shared with other jobs (they say nothing about speed). **(10-50%)** marks the
tasks at 10-50% extracted accuracy whose one answer to all scores under 10%: there RL can show skill learned rather
than format (or a collapse to one answer): {", ".join(marked) or "none"}.

{table(runs)}

Command: `OMP_NUM_THREADS=2 {command_line(STUDY.script, PARSER, settings)}` (resumes; `--report` rewrites this page).
Train on a marked task with the same setting and length, e.g. `trl-pods train --task reasoning_gym:<task>
--task_config '<setting>' --max_completion_length <tokens> --seed 0 ...` (docs/tasks.md).

Example questions (the first held-out problem of each task):

{prompts}

{notes("reasoning_gym_base", runs)}
"""
    return STUDY.render(body)


def main() -> None:
    args = PARSER.parse_args()
    if args.report:
        STUDY.write(render())
        return
    model = args.model
    if model is None:
        from trl_pods.smollm2 import fetch_smollm2

        model = str(fetch_smollm2())
    tasks = SMOKE_TASKS if args.smoke else tuple(TASKS)
    problems = 4 if args.smoke else args.problems
    settings = {"problems": problems, "seed": args.seed, "batch_size": args.batch_size}
    if args.model is not None:
        settings["model"] = args.model
    store = RunStore(DATA / "reasoning_gym_base.jsonl", ("task",))
    runs = measure(
        store,
        [(task,) for task in tasks],
        lambda task: measure_task(task, model, problems, args.seed, args.batch_size),
        settings,
        args.smoke,
    )
    print(table(runs))
    if args.smoke:
        print("smoke run: nothing written")
    else:
        STUDY.write(render())


if __name__ == "__main__":
    main()

"""`trl-pods eval` (also `scripts/evaluate.py`): accuracy and pass@k of a model, or of every checkpoint of a run.

    trl-pods eval --model_name_or_path Qwen/Qwen2.5-3B-Instruct --task gsm8k --num_samples 4
    trl-pods eval --run_dir runs/gsm8k_pods --base_model Qwen/Qwen2.5-3B-Instruct --task gsm8k

Every model answers each test problem ``num_samples`` (k) times. A sample is correct when its reward (``--reward``)
is at least 1.0, so the partial format credit of the ``gsm8k`` reward does not count; an unscorable sample (reward
None) counts as wrong and is reported. Per model the evaluation reports ``accuracy``, the mean over problems of the
fraction of correct samples, its standard error (``accuracy_stderr``, `standard_error`: over problems, so about 0.035
for 200 problems near 0.5), and ``pass@j`` for j = 1, 2, 4, ... and k, with the unbiased estimator of `pass_at_k`.

Sampling uses only the knobs given here (``temperature``, ``top_p``; no top-k, no repetition penalty), not the
model's ``generation_config``, and is seeded, so the same arguments give the same completions on the same hardware.
Unless ``--temperature`` is given, one sample per problem is greedy (the accuracy one expects) and several are drawn
at the paper's 0.9. The command prints what it measures (task, samples, temperature) and where it wrote.
With ``--run_dir`` every ``checkpoint-<step>`` folder and the final model (unless a checkpoint has its step, and so
its weights) are evaluated, each with the training wall-clock it took to reach it (TRL's logged ``step_time``); the
JSON results go next to the run and, for more than one model, a plot of accuracy against step and against training
minutes; a rerun that draws no plot removes the earlier one, which its results would contradict.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from .cpu import set_cpu_threads, set_up_cpu
from .inputs import check_data_file, check_model, checkpoint_step, checkpoints
from .parsing import CommandParser
from .reasoning_gym_tasks import is_reasoning_gym
from .tasks import (
    TASK_COMPLETION_LENGTHS,
    TASK_REWARDS,
    TASK_TEST_SIZES,
    TASKS,
    get_reward_func,
    is_generated,
    load_task,
)
from .train import check_hub_inputs, check_task, value_names

__all__ = [
    "EvalArguments",
    "accuracy",
    "check_arguments",
    "describe",
    "evaluate",
    "format_table",
    "main",
    "output_paths",
    "pass_at_k",
    "plot_results",
    "standard_error",
]

logger = logging.getLogger(__name__)

_MODEL_FILES = ("config.json", "adapter_config.json")
DESCRIPTION = (
    "Accuracy and pass@k of a model (--model_name_or_path) or of every checkpoint of a training run (--run_dir, "
    "with --base_model as step 0): each test problem is answered --num_samples times, and a sample is correct when "
    "its reward is at least 1. Writes the JSON results (and a plot) and prints a table."
)


@dataclass
class EvalArguments:
    """Arguments of `trl-pods eval`."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Model to evaluate: a local folder or a Hub name. Give this or --run_dir."}
    )
    run_dir: str | None = field(
        default=None,
        metadata={
            "help": "Training output_dir: evaluate its final model and every checkpoint-<step> folder in it, by step."
        },
    )
    base_model: str | None = field(
        default=None, metadata={"help": "With --run_dir: also evaluate this (untrained) model as step 0."}
    )
    task: str = field(
        default="gsm8k",
        metadata={
            "help": "Task: 'gsm8k', 'math' (Hub or --dataset_path), 'arithmetic' or 'reasoning_gym:<name>'. One of "
            f"{', '.join(TASKS)}."
        },
    )
    task_config: str | None = field(
        default=None,
        metadata={
            "help": "Settings of a reasoning_gym:<name> task's dataset (JSON object), as in training. None: with "
            "--run_dir the run's (its run_args.json), else the dataset's defaults."
        },
    )
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local .jsonl/.json/.parquet file in the task's schema instead of the Hub."}
    )
    split: str = field(default="test", metadata={"help": "Hub split to evaluate on (ignored with --dataset_path)."})
    prompt_style: str = field(
        default="think",
        metadata={
            "help": "System prompt, as in training: 'think' (<think>/<answer> tags) or 'plain' (\\boxed{}).",
            "choices": ["think", "plain"],
        },
    )
    arithmetic_difficulty: str = field(
        default="add1", metadata={"help": "Difficulty of the 'arithmetic' task (see trl_pods.arithmetic)."}
    )
    arithmetic_seed: int | None = field(
        default=None,
        metadata={
            "help": "Seed that draws the 'arithmetic' test set; pass the training run's task seed (its --task_seed, "
            "else its --seed) to get the run's held-out problems (None: --seed)."
        },
    )
    reward: str | None = field(
        default=None,
        metadata={
            "help": "Correctness reward: a name ('accuracy', 'gsm8k', 'arithmetic', ...) or dotted import path; a "
            "sample is correct when it scores >= 1.0. None: the task's own (gsm8k: gsm8k, math: accuracy, "
            "arithmetic: arithmetic)."
        },
    )
    num_samples: int = field(default=1, metadata={"help": "Completions per problem (k of pass@k)."})
    temperature: float | None = field(
        default=None,
        metadata={
            "help": "Sampling temperature; 0 is greedy and needs num_samples 1. None: greedy (0) with one sample per "
            "problem, the accuracy one expects; the paper's 0.9 with several (pass@k needs samples that differ)."
        },
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling probability mass (1.0: off)."})
    max_new_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Most tokens generated per completion. None: the task's (arithmetic: 16, reasoning-gym: 64, "
            "else 512)."
        },
    )
    max_problems: int | None = field(
        default=None,
        metadata={
            "help": "Evaluate only the first N problems (arithmetic: draw N; None: 50, the held-out set of training; "
            "reasoning-gym: the first N held-out ones; None: all of the run's, else 200)."
        },
    )
    batch_size: int = field(
        default=64, metadata={"help": "Completions per generate call (prompts x num_samples; at least one prompt)."}
    )
    seed: int = field(
        default=42, metadata={"help": "Seed of the sampling (every model gets the same one); 42 as in training."}
    )
    output: str | None = field(
        default=None,
        metadata={
            "help": "JSON results path. None: <run_dir or local model folder>/eval_<task>.json, else "
            "./eval_<task>.json."
        },
    )
    plot: str | None = field(
        default=None,
        metadata={
            "help": "PNG plot path (accuracy vs step and vs training minutes); None: next to the JSON, drawn only "
            "when more than one model is evaluated."
        },
    )
    use_vllm: bool | None = field(
        default=None,
        metadata={
            "help": "Generate with vLLM ('true') or transformers' generate ('false'). Unset: vLLM when it is "
            "importable, the device is CUDA and the model is not a LoRA adapter folder."
        },
    )
    dtype: str = field(
        default="auto",
        metadata={"help": "Model dtype: 'auto' (the checkpoint's), 'bfloat16', 'float16' or 'float32'."},
    )
    device: str = field(default="auto", metadata={"help": "Device: 'auto' (cuda if available, else cpu), 'cpu', ..."})

    def __post_init__(self):
        if (self.model_name_or_path is None) == (self.run_dir is None):
            raise ValueError("Give exactly one of --model_name_or_path (one model) and --run_dir (a training run).")
        if self.num_samples < 1:
            raise ValueError(f"--num_samples must be at least 1, got {self.num_samples}.")
        if self.temperature is None:
            self.temperature = 0.0 if self.num_samples == 1 else 0.9
        if self.temperature < 0:
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}.")
        if self.temperature == 0 and self.num_samples > 1:
            raise ValueError(
                f"--temperature 0 is greedy decoding: all {self.num_samples} samples would be identical. "
                "Use --num_samples 1, or a temperature > 0."
            )
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"--max_problems must be at least 1, got {self.max_problems}.")
        self.task_config = check_task(self.task, self.arithmetic_difficulty, self.task_config)
        if self.reward is None:
            self.reward = TASK_REWARDS[self.task]
        if self.max_new_tokens is None:
            self.max_new_tokens = TASK_COMPLETION_LENGTHS[self.task]


def check_arguments(args: EvalArguments) -> None:
    """Refuse what the user can fix before any download or model load: the reward, the model folders, the run folder
    (and a reasoning-gym run whose held-out problems cannot be made, `_run_problems`), a local data file (the task and
    its difficulty are checked when `EvalArguments` is built), and last a model or dataset that needs the Hub where it
    cannot be reached (`trl_pods.train.check_hub_inputs`).

    Raises:
        ValueError: what is wrong and which flag to change.
    """
    get_reward_func(args.reward)  # raises with the registered names
    for flag in ("model_name_or_path", "base_model"):
        if getattr(args, flag) is not None:
            check_model(flag, getattr(args, flag))
    if args.run_dir is not None and not Path(args.run_dir).is_dir():
        raise ValueError(f"--run_dir {args.run_dir}: no such folder.")
    if is_reasoning_gym(args.task):
        _run_problems(args)  # a run whose held-out problems this trl_pods cannot make
    check_data_file("dataset_path", args.dataset_path, args.task, is_generated(args.task))
    models = {flag: getattr(args, flag) for flag in ("model_name_or_path", "base_model")}
    check_hub_inputs(models, args.task, [(args.split, args.dataset_path)], None)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021).

    pass@k = 1 - C(n - c, k) / C(n, k): the chance that k samples drawn without replacement from the n include a
    correct one. It is computed as Chen et al.'s product 1 - prod_{i=n-c+1}^{n} (1 - k / i), in exact rational
    arithmetic: no overflow for large n, and pass@1 is exactly ``c / n``.

    Args:
        n: Samples drawn for the problem.
        c: Correct samples among them (0 <= c <= n).
        k: Budget of the metric (1 <= k <= n).

    Returns:
        The estimate in [0, 1]; 1.0 when ``n - c < k`` (every k-subset holds a correct sample).

    Raises:
        ValueError: ``c`` or ``k`` out of range.
    """
    if not 0 <= c <= n:
        raise ValueError(f"Need 0 <= c <= n, got n={n}, c={c}.")
    if not 1 <= k <= n:
        raise ValueError(f"Need 1 <= k <= n, got n={n}, k={k}.")
    if n - c < k:
        return 1.0
    return float(1 - math.prod(Fraction(i - k, i) for i in range(n - c + 1, n + 1)))


def standard_error(scores: Sequence[float]) -> float:
    """Standard error of the mean of ``scores``, one per problem in [0, 1] (e.g. the fraction of its samples that are
    correct): sqrt(mean squared deviation / n), which for 0/1 scores is the binomial sqrt(p (1 - p) / n). At p = 0.5,
    200 problems give 0.035 and 1,000 give 0.016.

    Raises:
        ValueError: no scores.
    """
    if not scores:
        raise ValueError("A standard error needs at least one score.")
    mean = sum(scores) / len(scores)
    return math.sqrt(sum((score - mean) ** 2 for score in scores) / len(scores) ** 2)


def _pass_ks(k: int) -> list[int]:
    """1, 2, 4, ... up to ``k``, and ``k``."""
    return sorted({2**i for i in range(k.bit_length())} | {k})


# ----------------------------------------------------------------------------------------------------------------
# What to evaluate
# ----------------------------------------------------------------------------------------------------------------


def _run_arguments(run_dir: str | None) -> dict:
    """The ``run_args.json`` a training run saved in ``run_dir`` ({} without one)."""
    file = Path(run_dir) / "run_args.json" if run_dir is not None else None
    return json.loads(file.read_text()) if file is not None and file.is_file() else {}


def _run_problems(args: EvalArguments) -> tuple[dict, int]:
    """The script arguments of the run in ``--run_dir`` if it trained on the reasoning-gym ``--task`` ({} otherwise),
    and the seed of its problems: its task seed, else its seed (``--seed`` without such a run).

    Raises:
        ValueError: a run saved before each seed and split had a stream of its own (no ``task_seed`` in its
            ``run_args.json``): the problems it held out are no longer made.
    """
    run = _run_arguments(args.run_dir)
    script = run.get("script", {}) if run.get("script", {}).get("task") == args.task else {}
    if not script:
        return {}, args.seed
    if "task_seed" not in script:
        raise ValueError(
            f"--run_dir {args.run_dir} trained on {args.task} problems drawn before each seed and split had a stream "
            "of its own (its run_args.json has no task_seed): this trl_pods cannot make the problems it held out. "
            "Evaluate its models with --model_name_or_path instead (on other problems, some of which it may have "
            "trained on)."
        )
    seed = run.get("training", {}).get("seed", args.seed) if script["task_seed"] is None else script["task_seed"]
    return script, seed


def _reasoning_gym_problems(args: EvalArguments) -> Dataset:
    """A reasoning-gym task's held-out problems: with ``--run_dir``, the run's (`_run_problems`; its task config and
    held-out size, from ``run_args.json``; ``--max_problems`` may only take fewer), else drawn with ``--seed``."""
    script, seed = _run_problems(args)
    config = args.task_config if args.task_config is not None else script.get("task_config")
    n_test = script.get("task_test_size") or args.max_problems or TASK_TEST_SIZES[args.task]
    dataset = load_task(args.task, "test", config=config, seed=seed, n_test=n_test)
    return dataset.select(range(min(args.max_problems or n_test, n_test)))


def _load_problems(args: EvalArguments) -> Dataset:
    """The test problems: ``prompt`` and gold columns."""
    if is_reasoning_gym(args.task):
        return _reasoning_gym_problems(args)
    if args.task == "arithmetic":
        seed = args.seed if args.arithmetic_seed is None else args.arithmetic_seed
        difficulty = args.arithmetic_difficulty
        n_test = args.max_problems or TASK_TEST_SIZES["arithmetic"]
        return load_task("arithmetic", "test", difficulty=difficulty, seed=seed, n_test=n_test)
    dataset = load_task(args.task, args.split, args.dataset_path, args.prompt_style)
    if args.max_problems is not None:
        dataset = dataset.select(range(min(args.max_problems, len(dataset))))
    return dataset


def _trainer_state(folder: Path) -> dict:
    """The folder's ``trainer_state.json`` ({} if it has none)."""
    file = folder / "trainer_state.json"
    return json.loads(file.read_text()) if file.is_file() else {}


def _train_time(state: dict, step: int) -> float | None:
    """Training seconds up to ``step`` from a trainer state's log: TRL logs ``step_time`` as the mean over the steps
    since the previous log, so each entry counts that many times. None when no entry logs it."""
    total, last_step, found = 0.0, 0, False
    for entry in state.get("log_history", []):
        if entry.get("step_time") is not None and last_step < entry["step"] <= step:
            total += entry["step_time"] * (entry["step"] - last_step)
            last_step, found = entry["step"], True
    return total if found else None


def _models(args: EvalArguments) -> list[dict]:
    """``{"model", "step", "train_time_s"}`` per model to evaluate, by step (base model first)."""
    if args.run_dir is None:
        return [{"model": args.model_name_or_path, "step": None, "train_time_s": None}]
    run = Path(args.run_dir)
    complete, incomplete = checkpoints(run)
    for path in incomplete:  # a run stopped while saving it
        logger.warning("%s is incomplete (the run stopped while saving it): not evaluated.", path)
    steps = [checkpoint_step(path) for path in complete]
    models = [
        {"model": str(path), "step": step, "train_time_s": _train_time(_trainer_state(path), step)}
        for step, path in zip(steps, complete, strict=True)
    ]
    if any((run / name).is_file() for name in _MODEL_FILES):  # the final model
        state = _trainer_state(run)
        step = state.get("global_step", steps[-1] if steps else None)
        if step is None:
            models.append({"model": str(run), "step": None, "train_time_s": None})
        elif step not in steps:  # else it has the weights of checkpoint-<step>
            models.append({"model": str(run), "step": step, "train_time_s": _train_time(state, step)})
    if not models:
        raise ValueError(f"No model in {run}: no checkpoint-<step> folder and no final model.")
    if args.base_model is not None:
        models.insert(0, {"model": args.base_model, "step": 0, "train_time_s": 0.0})
    return models


# ----------------------------------------------------------------------------------------------------------------
# Generation and scoring
# ----------------------------------------------------------------------------------------------------------------


def _resolve_device(device: str) -> torch.device:
    """``"auto"``: cuda if available, else cpu."""
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)


def _use_vllm(args: EvalArguments, model: str, device: torch.device) -> bool:
    """``--use_vllm`` if set, else whether vLLM can serve ``model`` here."""
    if args.use_vllm is not None:
        return args.use_vllm
    from trl.import_utils import is_vllm_available

    return device.type == "cuda" and is_vllm_available() and not (Path(model) / "adapter_config.json").is_file()


@torch.no_grad()
def _generate_hf(
    model_path: str,
    tokenizer,
    prompts: list[list[int]],
    args: EvalArguments,
    device: torch.device,
    label: str | None = None,
) -> tuple[list[list[str]], int]:
    """``num_samples`` completions per prompt (token ids) with transformers' ``generate``; also tokens generated. With
    a ``label``, a progress bar of the problems done, named so, goes to stderr."""
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=args.dtype).to(device).eval()
    eos = model.generation_config.eos_token_id
    eos = tokenizer.eos_token_id if eos is None else eos
    eos_ids = torch.tensor(eos if isinstance(eos, list) else [eos], device=device)
    k = args.num_samples
    sampling = dict(do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=0, repetition_penalty=1.0)
    options = dict(
        **(sampling if args.temperature > 0 else dict(do_sample=False)),
        max_new_tokens=args.max_new_tokens,
        num_return_sequences=k,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    per_call = max(1, args.batch_size // k)
    texts, tokens = [], 0
    bar = tqdm(total=len(prompts), desc=label, unit="problem", file=sys.stderr, disable=label is None)
    with bar, torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(args.seed)
        for start in range(0, len(prompts), per_call):
            batch = tokenizer.pad({"input_ids": prompts[start : start + per_call]}, return_tensors="pt").to(device)
            new = model.generate(**batch, **options)[:, batch["input_ids"].shape[1] :]
            is_eos = torch.isin(new, eos_ids)  # a completion ends at its first EOS; padding follows
            tokens += int(torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, new.shape[1]).sum())
            decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
            texts += [decoded[i : i + k] for i in range(0, len(decoded), k)]
            bar.update(len(new) // k)
    return texts, tokens


def _generate_vllm(model_path: str, prompts: list[list[int]], args: EvalArguments) -> tuple[list[list[str]], int]:
    """As `_generate_hf`, with vLLM (tested on vLLM's CPU build: tests/test_vllm_engine.py)."""
    import gc

    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, dtype=args.dtype, seed=args.seed)
    params = SamplingParams(
        n=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], params)
    texts = [[sample.text for sample in output.outputs] for output in outputs]
    tokens = sum(len(sample.token_ids) for output in outputs for sample in output.outputs)
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return texts, tokens


def chat_prompts(model_path: str, conversations: Sequence[list[dict]]) -> tuple[Any, list[list[int]]]:
    """The model's tokenizer (left padding; its EOS as the pad token where it has none) and the token ids of each
    conversation through its chat template, ready for generation."""
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    chat = dict(add_generation_prompt=True, tokenize=True, return_dict=True)
    return tokenizer, [tokenizer.apply_chat_template(c, **chat)["input_ids"] for c in conversations]


def _evaluate_model(model_path: str, dataset: Dataset, args: EvalArguments, label: str | None = None) -> dict:
    """Generate, score and summarize one model on ``dataset``; ``label`` names its progress bar (else the model)."""
    start = time.perf_counter()
    device = _resolve_device(args.device)
    tokenizer, prompts = chat_prompts(model_path, dataset["prompt"])
    if _use_vllm(args, model_path, device):  # vLLM shows its own progress
        texts, tokens = _generate_vllm(model_path, prompts, args)
    else:
        texts, tokens = _generate_hf(model_path, tokenizer, prompts, args, device, label or model_path)

    k = args.num_samples
    gold = {name: [value for value in dataset[name] for _ in range(k)] for name in dataset.column_names}
    gold["prompts"] = gold.pop("prompt")
    completions = [[{"role": "assistant", "content": text}] for samples in texts for text in samples]
    rewards = get_reward_func(args.reward)(completions=completions, **gold)
    correct = [sum(r is not None and r >= 1.0 for r in rewards[i : i + k]) for i in range(0, len(rewards), k)]
    n = len(correct)
    return {
        "accuracy": sum(c / k for c in correct) / n,
        "accuracy_stderr": standard_error([c / k for c in correct]),
        **{f"pass@{j}": sum(pass_at_k(k, c, j) for c in correct) / n for j in _pass_ks(k)},
        "num_problems": n,
        "num_samples": k,
        "unscorable": sum(r is None for r in rewards),
        "tokens_generated": tokens,
        "eval_seconds": time.perf_counter() - start,
    }


# ----------------------------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------------------------


def format_table(report: dict) -> str:
    """A plain-text table of ``evaluate``'s report: one line per model, its accuracy's standard error beside it."""
    k = report["num_samples"]
    columns = f"{'accuracy':>8} {'s.e.':>6} {f'pass@{k}':>8} {'unscorable':>10} {'eval s':>7}"
    header = f"{'step':>6} {'train min':>9} {columns}  model"
    lines = [header]
    for r in report["results"]:
        minutes = "-" if r["train_time_s"] is None else f"{r['train_time_s'] / 60:.1f}"
        step = "-" if r["step"] is None else str(r["step"])
        lines.append(
            f"{step:>6} {minutes:>9} {r['accuracy']:>8.4f} {r['accuracy_stderr']:>6.4f} {r[f'pass@{k}']:>8.4f} "
            f"{r['unscorable']:>10} "
            f"{r['eval_seconds']:>7.1f}  {r['model']}"
        )
    return "\n".join(lines)


def plot_results(report: dict, path: str | Path, title: str | None = None) -> None:
    """Save a PNG with accuracy (and pass@k for k > 1) against step and against training wall-clock minutes, on a
    0-1 axis (a narrower one makes a gain look steeper), titled ``title`` (default: the task and sampling)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state; PNGs render with Agg

    k = report["num_samples"]
    metrics = ["accuracy"] + ([f"pass@{k}"] if k > 1 else [])
    fig = Figure(figsize=(10, 4), layout="tight")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key, scale, label in ((axes[0], "step", 1, "step"), (axes[1], "train_time_s", 60, "training minutes")):
        points = sorted(((r[key] / scale, r) for r in report["results"] if r[key] is not None), key=lambda p: p[0])
        for metric in metrics:
            ax.plot([x for x, _ in points], [r[metric] for _, r in points], marker="o", label=metric)
        ax.set(xlabel=label, ylim=(0, 1))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[0].legend()
    fig.suptitle(title or f"{report['task']} (k={k}, temperature {report['temperature']})")
    fig.savefig(path, dpi=120)


def evaluate(args: EvalArguments) -> dict:
    """Evaluate the model, or every checkpoint of the run, of ``args``; write the JSON results and the plot.

    Returns:
        ``{"task", "split", "dataset_path", "num_samples", "temperature", "results": [...]}``, one result per
        model: ``{"model", "step", "train_time_s", "accuracy", "accuracy_stderr", "pass@1", "pass@2", ...,
        "pass@<k>", "num_problems", "num_samples", "unscorable", "tokens_generated", "eval_seconds"}``
        (``accuracy_stderr``: `standard_error` of the per-problem accuracies). ``step`` is None for a single model;
        ``train_time_s`` (training seconds to reach the checkpoint, evaluation excluded) is None when the
        checkpoint's ``trainer_state.json`` logs no ``step_time``.
    """
    dataset, models = _load_problems(args), _models(args)
    results = [
        {**entry, **_evaluate_model(entry["model"], dataset, args, f"model {i} of {len(models)}: {entry['model']}")}
        for i, entry in enumerate(models, 1)
    ]
    report = {
        "task": args.task,
        "split": args.split,
        "dataset_path": args.dataset_path,
        "num_samples": args.num_samples,
        "temperature": args.temperature,
        "results": results,
    }
    output, plot = output_paths(args)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot is not None or len(results) > 1:
        plot_results(report, plot)
    elif plot.exists():  # an earlier evaluation's curve, which this one's JSON would contradict
        plot.unlink()
    return report


def accuracy(model: str | Path, **options: Any) -> float:
    """The accuracy of one ``model`` (a folder, a LoRA adapter folder or a Hub name) as `trl-pods eval` measures it,
    with `EvalArguments` ``options`` (such as ``task="arithmetic"``), writing no file: e.g. before and after training,
    ``accuracy(path, task="arithmetic", arithmetic_seed=0)``, on the problems ``load_task("arithmetic")`` holds out."""
    args = EvalArguments(model_name_or_path=str(model), **options)
    check_arguments(args)
    return _evaluate_model(args.model_name_or_path, _load_problems(args), args)["accuracy"]


def output_paths(args: EvalArguments) -> tuple[Path, Path]:
    """Where `evaluate` writes the JSON results and the plot (drawn for a ``--plot`` or for more than one model;
    otherwise a plot of an earlier evaluation at its default path is removed)."""
    if args.output is not None:
        output = Path(args.output)
    else:
        folder = Path(args.run_dir or args.model_name_or_path)
        output = (folder if folder.is_dir() else Path(".")) / f"eval_{args.task.replace(':', '_')}.json"
    return output, Path(args.plot) if args.plot is not None else output.with_suffix(".png")


def describe(args: EvalArguments) -> str:
    """What an evaluation measures, in one line: the task and data, samples per problem and how they are drawn."""
    data = args.dataset_path or ("generated offline" if is_generated(args.task) else f"split {args.split}")
    sampling = (
        "greedy (temperature 0)"
        if args.temperature == 0
        else f"sampled at temperature {args.temperature:g}, top_p {args.top_p:g}, seed {args.seed}"
    )
    return f"task {args.task} ({data}), {args.num_samples} sample(s) per problem, {sampling}"


def main(argv: Sequence[str] | None = None) -> None:
    """Parse and check `EvalArguments` from ``argv`` (and a YAML ``--config``; a user error: one line, exit status
    2), evaluate, print the table."""
    flags = [f.name for f in fields(EvalArguments)]
    checked = ("task", "hub_tasks", "arithmetic_difficulty", "reward_funcs")  # `trl_pods.inputs` checks --reward
    names = {key: value for key, value in value_names().items() if key in checked}
    parser = CommandParser((EvalArguments,), "trl-pods eval", DESCRIPTION, [("evaluation", flags, True)], names)
    (args,) = parser.parse_checked(argv, check_arguments)
    set_up_cpu()
    set_cpu_threads()  # the command owns the process
    print(f"trl-pods eval: {describe(args)}", flush=True)
    print(format_table(evaluate(args)))
    output, plot = output_paths(args)
    print(f"trl-pods eval: wrote {output}" + (f" and {plot}" if plot.exists() else ""))


if __name__ == "__main__":
    main()

"""`trl-pods train` (also `scripts/train_pods.py`): train a model with PODS from a YAML recipe and/or flags.

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml scripts/train_pods.py \
        --config recipes/gsm8k_qwen2.5-3b_lora_pods.yaml --pods_n 64 --pods_m 16

Arguments are those of `ScriptArguments` (data and rewards), `trl_pods.PODSConfig` (training, with every
`trl.GRPOConfig` field) and `trl.ModelConfig` (model, dtype, LoRA). A YAML ``--config`` sets defaults; flags override.
``--help`` lists the PODS, script and common flags, ``--help-all`` every flag. Every name (task, reward functions,
down-sampler, allocation rule, arithmetic difficulty), the model folder and the other user inputs are checked before
any download or model load; a user error prints one ``error:`` line. The task chooses the reward functions and the
completion length the user does not set (`trl_pods.tasks.TASK_REWARDS`, ``TASK_COMPLETION_LENGTHS``). Without a GPU
the run trains in float32 on the CPU, on the threads `trl_pods.cpu.cpu_threads` chooses, and the command says so in
one line. The run saves the model, ``run_args.json`` (all arguments, and the device and precision that really ran),
``train_results.json`` and ``trainer_state.json`` (every logged metric) in ``output_dir``, and ends with a few lines:
what it trained, where it saved it, and the `trl-pods eval` command to run next. ``--resume_from_checkpoint PATH`` (or
``last``) continues a run; an ``output_dir`` that already holds files is refused unless the run resumes or
``--overwrite_output_dir true`` empties it first, so that two runs never mix in one folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config, get_quantization_config

from .config import PODSConfig
from .cpu import leave_distributed_run, quiet_trl_deprecations, set_up_cpu
from .hub import check_on_hub
from .parsing import CommandParser
from .reasoning_gym_tasks import check_reasoning_gym_task, is_reasoning_gym, parse_task_config
from .tasks import (
    TASK_COMPLETION_LENGTHS,
    TASK_REWARDS,
    TASK_TEST_SIZES,
    check_task_name,
    get_reward_func,
    hub_dataset,
    is_generated,
    load_task,
)
from .trainer import PODSGRPOTrainer

DESCRIPTION = (
    "Train a model with PODS: generate --pods_n rollouts per prompt, score them all, and train on the --pods_m that "
    "the down-sampler keeps (--pods_n equal to --pods_m is plain GRPO). Flags and/or a YAML recipe (--config "
    "recipes/NAME.yaml; flags override it). Without a GPU it trains on the CPU in float32 and says so."
)
COMMON_FLAGS = (
    "model_name_or_path", "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
    "max_steps", "max_completion_length", "temperature", "use_peft", "use_vllm", "use_cpu", "bf16", "seed",
    "resume_from_checkpoint",
)  # fmt: skip


@dataclass
class ScriptArguments:
    """Data and reward arguments of `trl-pods train`."""

    task: str = field(
        default="gsm8k",
        metadata={
            "help": "Task: 'gsm8k', 'math' (Hub or --dataset_path), 'arithmetic' or 'reasoning_gym:<name>' (any "
            "reasoning-gym dataset; pip install 'trl-pods[tasks]'), both generated offline."
        },
    )
    task_config: str | None = field(
        default=None,
        metadata={
            "help": "A reasoning_gym:<name> dataset's settings: JSON (e.g. '{\"min_terms\": 2}'; a mapping in YAML)."
        },
    )
    task_train_size: int = field(
        default=2000, metadata={"help": "Training problems of a generated task ('arithmetic', reasoning_gym:<name>)."}
    )
    task_test_size: int | None = field(
        default=None,
        metadata={
            "help": "Held-out problems of a generated task, which its training problems exclude (`trl-pods eval "
            "--run_dir` evaluates them). Default: 50 for 'arithmetic', 200 for reasoning_gym:<name>."
        },
    )
    task_seed: int | None = field(
        default=None,
        metadata={
            "help": "Seed of a generated task's problems, both splits ('arithmetic', reasoning_gym:<name>); --seed "
            "seeds the training. None: --seed, so each training seed has problems of its own; set it to train "
            "several seeds on one problem set."
        },
    )
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Training data in the task's schema: a local .jsonl/.json/.parquet file or a Hub dataset name "
            "(default: the task's own Hub dataset)."
        },
    )
    eval_dataset_path: str | None = field(
        default=None, metadata={"help": "Local evaluation file in the task's schema (used with eval_strategy)."}
    )
    eval_split: str | None = field(
        default=None,
        metadata={"help": "Hub split evaluated during training (e.g. 'test'); None and no eval_dataset_path: none."},
    )
    prompt_style: str = field(
        default="think",
        metadata={
            "help": "System prompt: 'think' (<think>/<answer> tags, the paper's) or 'plain' (\\boxed{}).",
            "choices": ["think", "plain"],
        },
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions by name ('accuracy', 'format', 'gsm8k', 'arithmetic', 'reasoning_gym', "
            "'reasoning_gym_format') or dotted import path; weight them with --reward_weights. None: the task's own "
            "(gsm8k: gsm8k, math: accuracy, arithmetic: arithmetic, reasoning_gym:<name>: reasoning_gym)."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N training examples (quick runs)."}
    )
    arithmetic_difficulty: str = field(
        default="add1", metadata={"help": "Difficulty of the 'arithmetic' task (see trl_pods.arithmetic)."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "trl-pods train (and scripts/train_pods.py): train into an --output_dir that already holds files "
            "by emptying it first; such a folder is refused otherwise, unless --resume_from_checkpoint continues the "
            "run there."
        },
    )

    def __post_init__(self):
        self.task_config = check_task(self.task, self.arithmetic_difficulty, self.task_config)
        if self.task_test_size is None and is_generated(self.task):
            self.task_test_size = TASK_TEST_SIZES[self.task]
        if self.reward_funcs is None:
            self.reward_funcs = [TASK_REWARDS[self.task]]


def check_task(task: str, arithmetic_difficulty: str, task_config: str | dict | None = None) -> str | None:
    """Raise ValueError for an unknown ``--task``, an unknown ``--arithmetic_difficulty`` of the arithmetic task, or
    (a reasoning-gym task) reasoning-gym not installed, an unknown dataset or a bad ``--task_config``; return the
    task config as canonical JSON (None when not given).

    Raises:
        ValueError: also for a ``--task_config`` given to a task other than reasoning-gym's.
    """
    check_task_name(task)
    from .arithmetic import DIFFICULTIES

    if task == "arithmetic" and arithmetic_difficulty not in DIFFICULTIES:
        raise ValueError(
            f"Unknown --arithmetic_difficulty {arithmetic_difficulty!r}; use one of {', '.join(DIFFICULTIES)}."
        )
    if not is_reasoning_gym(task):
        if task_config is not None:
            raise ValueError(f"--task_config sets a reasoning_gym:<name> task's dataset, not --task {task}.")
        return None
    config = parse_task_config(task_config)
    check_reasoning_gym_task(task, config)
    return json.dumps(config, sort_keys=True) if task_config is not None else None


def check_model(flag: str, name: str) -> None:
    """Raise ValueError when ``name`` is neither a local folder nor a name the Hub could hold (a mistyped path)."""
    if Path(name).is_dir():  # as transformers reads it: "~" unexpanded
        return
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ValueError(f"--{flag} {name}: no such folder (nor a Hub model name, 'owner/name').") from None


def check_data_file(flag: str, path: str | None, task: str) -> None:
    """Raise ValueError for a data path given to a generated task, or a missing local data file."""
    if path and is_generated(task):
        raise ValueError(f"--{flag}: the {task} task is generated, not read from a file; drop --{flag}.")
    if path and Path(path).suffix.lower() in (".jsonl", ".json", ".parquet") and not Path(path).is_file():
        raise ValueError(f"--{flag} {path}: no such file.")


def check_hub_inputs(
    models: dict[str, str | None], task: str, data: list[tuple[str, str | None]], revision: str | None
) -> None:
    """Raise ValueError for a model or dataset that must come from the Hub while the Hub is offline or unreachable
    and it is not in the local cache (`trl_pods.hub.check_on_hub`): a 30-80 s wait and a long traceback otherwise.

    Args:
        models: ``{flag: model}`` (a local folder needs no Hub; None: not given).
        task: the task, whose Hub dataset is read without a data file.
        data: ``(split, data path or None)`` of each split of the task the command reads.
        revision: the models' revision.
    """
    local_model = 'give a local model folder, such as the demo\'s: "$(python -m trl_pods.smollm2)"'
    for flag, name in models.items():
        if name is not None and not Path(name).is_dir():
            check_on_hub(f"--{flag} {name}", name, "model", local_model, revision)
    for split, path in data:
        dataset = hub_dataset(task, split, path)
        if dataset is not None:
            flag = f"--dataset_path {path}" if path is not None else f"--task {task}"
            instead = "give --dataset_path FILE.jsonl (a local file with the task's columns), or --task arithmetic"
            check_on_hub(flag, dataset, "dataset", f"{instead} (made offline)")


def check_arguments(script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig) -> None:
    """Refuse what the user can fix before any download or model load: the model folder, every name (reward
    functions; `ScriptArguments` checks the task and arithmetic difficulty, `PODSConfig` its down-sampler and
    allocation rule; ``--max_steps 0`` too), the reward weights, a local data file, the ``--resume_from_checkpoint``
    folder (or ``last``: a checkpoint in ``output_dir``), and last a model or dataset that needs the Hub where it
    cannot be reached (`check_hub_inputs`).

    Raises:
        ValueError: what is wrong and which flag to change.
    """
    if model_args.model_name_or_path is None:
        raise ValueError("Set --model_name_or_path (a Hub name or a local folder).")
    check_model("model_name_or_path", model_args.model_name_or_path)
    for name in script_args.reward_funcs:
        get_reward_func(name)  # raises with the registered names
    weights = training_args.reward_weights
    if weights is not None and len(weights) != len(script_args.reward_funcs):
        raise ValueError(
            f"--reward_weights has {len(weights)} value(s) for {len(script_args.reward_funcs)} --reward_funcs: give "
            "one weight per reward function."
        )
    for flag in ("dataset_path", "eval_dataset_path"):
        check_data_file(flag, getattr(script_args, flag), script_args.task)
    _resume_checkpoint(training_args)
    data = [("train", script_args.dataset_path)]
    if script_args.eval_dataset_path or script_args.eval_split:
        data.append((script_args.eval_split or "test", script_args.eval_dataset_path))
    models = {"model_name_or_path": model_args.model_name_or_path}
    check_hub_inputs(models, script_args.task, data, model_args.model_revision)


def load_datasets(script_args: ScriptArguments, seed: int):
    """``(train, eval or None)`` for the task of ``script_args`` (a generated task drawn with ``--task_seed``, else
    with ``seed``)."""
    task, style = script_args.task, script_args.prompt_style
    generated = {}
    if is_generated(task):
        seed = seed if script_args.task_seed is None else script_args.task_seed
        generated = dict(seed=seed, n_train=script_args.task_train_size, n_test=script_args.task_test_size)
        if task == "arithmetic":
            generated["difficulty"] = script_args.arithmetic_difficulty
        else:
            generated["config"] = script_args.task_config
    train = load_task(task, "train", script_args.dataset_path, style, **generated)
    evaluation = None
    if script_args.eval_dataset_path or script_args.eval_split:
        split = script_args.eval_split or "test"
        evaluation = load_task(task, split, script_args.eval_dataset_path, style, **generated)
    if script_args.max_train_samples is not None:
        train = train.select(range(min(script_args.max_train_samples, len(train))))
    return train, evaluation


def _model_init_kwargs(model_args: ModelConfig, training_args: PODSConfig) -> dict:
    kwargs = dict(
        revision=model_args.model_revision,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    quantization_config = get_quantization_config(model_args)
    if quantization_config is not None:
        # k-bit weights must sit on this process's device
        kwargs.update(quantization_config=quantization_config, device_map={"": PartialState().local_process_index})
    return {**kwargs, **(training_args.model_init_kwargs or {})}


def _resume_checkpoint(training_args: PODSConfig) -> str | None:
    """The checkpoint folder to resume from (None: none); ValueError for a folder that is not there."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint in ("last", "latest", "true", "True"):
        output_dir = training_args.output_dir
        checkpoint = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
        if checkpoint is None:
            raise ValueError(f"--resume_from_checkpoint last: no checkpoint in {output_dir}.")
    elif checkpoint is not None and not Path(checkpoint).is_dir():
        raise ValueError(f"--resume_from_checkpoint {checkpoint}: no such folder.")
    return checkpoint


def fresh_folder(wanted: Path) -> Path:
    """``wanted`` if it is missing or empty, else the first of ``wanted-2``, ``wanted-3``, ... that is."""
    folder, number = wanted, 1
    while folder.exists() and any(folder.iterdir()):
        number += 1
        folder = wanted.with_name(f"{wanted.name}-{number}")
    return folder


def check_output_dir(output_dir: str, resuming: bool, overwrite: bool) -> None:
    """Raise ValueError for an ``output_dir`` that already holds files, unless the run resumes (``resuming``) or
    ``overwrite`` (``--overwrite_output_dir``) empties it first: two runs in one folder mixed their
    ``pods_selections.jsonl`` and left one's evaluations beside the other's weights. ``overwrite`` never empties
    the working folder, a folder above it or the home folder."""
    folder = Path(output_dir)
    if overwrite and not resuming:
        resolved, here = folder.resolve(), Path.cwd().resolve()
        if resolved in (here, *here.parents, Path.home().resolve()):
            raise ValueError(
                f"--overwrite_output_dir would empty --output_dir {output_dir}, which is the working folder, a folder "
                "above it or the home folder: give a folder of its own for the run."
            )
    if resuming or overwrite or folder == fresh_folder(folder):
        return
    raise ValueError(
        f"--output_dir {output_dir} already holds files (an earlier run?): give a new folder ({fresh_folder(folder)} "
        "is free), --resume_from_checkpoint to continue that run, or --overwrite_output_dir true to empty it first."
    )


def check_command(script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig) -> None:
    """The output folder (`trl-pods train` only: `check_output_dir`), then `check_arguments`."""
    resuming = training_args.resume_from_checkpoint is not None
    check_output_dir(training_args.output_dir, resuming, script_args.overwrite_output_dir)
    check_arguments(script_args, training_args, model_args)


def empty_folder(folder: Path) -> None:
    """Remove what ``folder`` holds (``--overwrite_output_dir``), on the main process while the others wait."""
    state = PartialState()
    if state.is_main_process and folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    state.wait_for_everyone()


def summary(script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig, steps: int) -> list[str]:
    """The lines a `trl-pods train` run ends with: what it trained, where it saved it, the command to run next."""
    model, out = model_args.model_name_or_path, training_args.output_dir
    method = f"PODS {training_args.pods_n} -> {training_args.pods_m}, {training_args.pods_down_sampler}"
    if training_args.pods_generation != "fixed":
        method += f", {training_args.pods_generation} generation"
    saved = "the LoRA adapter" if model_args.use_peft else "the model"
    return [
        f"trl-pods train: trained {model} on the {script_args.task} task for {steps} step{'s' * (steps != 1)} "
        f"({method})",
        f"saved in {out}: {saved}, its card (README.md), run_args.json, and the metrics (train_results.json, "
        "trainer_state.json)",
        f"next, its accuracy: trl-pods eval --run_dir {shlex.quote(out)} --base_model {shlex.quote(model)} --task "
        f"{script_args.task}",
    ]


def train(
    script_args: ScriptArguments,
    training_args: PODSConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    trainer_class: type[GRPOTrainer] = PODSGRPOTrainer,
) -> GRPOTrainer:
    """Check the arguments (`check_arguments`), build the trainer, train (resuming if asked), save model, arguments
    and metrics; return the trainer. ``trainer_class`` builds it: `PODSGRPOTrainer`, or `trl.GRPOTrainer` itself
    (with a `trl.GRPOConfig`) to compare against TRL's trainer on the same data, rewards and model."""
    check_arguments(script_args, training_args, model_args)
    train_dataset, eval_dataset = load_datasets(script_args, training_args.seed)
    training_args.model_init_kwargs = _model_init_kwargs(model_args, training_args)
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )
    trainer = trainer_class(
        model=model_args.model_name_or_path,
        reward_funcs=[get_reward_func(name) for name in script_args.reward_funcs],
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=callbacks,
    )
    result = trainer.train(resume_from_checkpoint=_resume_checkpoint(training_args))
    trainer.save_model(training_args.output_dir)
    trainer.save_state()
    trainer.save_metrics("train", result.metrics)
    if trainer.accelerator.is_main_process:
        arguments = {
            "launch": {
                "distributed_type": trainer.accelerator.distributed_type.value,
                "num_processes": trainer.accelerator.num_processes,
                "device": trainer.accelerator.device.type,  # what ran, whatever the flags said
                "mixed_precision": trainer.accelerator.mixed_precision,
                "weights_dtype": str(next(trainer.model.parameters()).dtype).removeprefix("torch."),
            },
            "script": dataclasses.asdict(script_args),
            "training": training_args.to_dict(),
            "model": dataclasses.asdict(model_args),
        }
        with open(os.path.join(training_args.output_dir, "run_args.json"), "w") as f:
            json.dump(arguments, f, indent=2, default=str)
    # The processes leave together: one that exits while another still saves can abort in the teardown of its
    # distributed backend (seen with gloo on a loaded CPU), failing a finished run.
    trainer.accelerator.wait_for_everyone()
    return trainer


def parser() -> CommandParser:
    """`trl-pods train`'s parser: ``--help`` shows the PODS, script and common flags; ``--help-all`` every flag."""
    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    pods = [f.name for f in dataclasses.fields(PODSConfig) if f.name not in grpo]
    return CommandParser(
        (ScriptArguments, PODSConfig, ModelConfig),
        prog="trl-pods train",
        description=DESCRIPTION,
        sections=[
            ("PODS (trl_pods.PODSConfig)", pods, True),
            ("data and rewards", [f.name for f in dataclasses.fields(ScriptArguments)], True),
            ("common model and training flags (all of them: --help-all)", COMMON_FLAGS, True),
            ("model (trl.ModelConfig)", [f.name for f in dataclasses.fields(ModelConfig)], False),
            ("training (trl.GRPOConfig and transformers.TrainingArguments)", sorted(grpo), False),
        ],
    )


def device_defaults() -> dict[str, bool]:
    """Flag defaults for this machine: TRL's wherever there is an accelerator; without one no pinned memory (there is
    nothing to pin it for). `PODSConfig` turns ``bf16`` off where transformers would refuse it; ``use_cpu`` stays
    off: accelerate runs on the CPU anyway, and ``use_cpu`` would also turn DeepSpeed off."""
    return {} if torch.accelerator.is_available() else {"dataloader_pin_memory": False}


def device_line(training_args: PODSConfig, model_args: ModelConfig) -> str:
    """The one line that says how a run without a GPU trains: on the CPU, its threads, weights' dtype and precision."""
    precision = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else None
    mixed = f"{precision} autocast (--{precision} true)" if precision else "no mixed precision (--bf16 false)"
    threads = f"{torch.get_num_threads()} thread(s) (OMP_NUM_THREADS to choose)"
    return f"trl-pods train: no GPU: training on the CPU, {threads}, with {model_args.dtype} weights and {mixed}"


def parse_arguments(command: CommandParser, argv: Sequence[str] | None) -> tuple:
    """`CommandParser.parse_checked`, with the task's completion length (`TASK_COMPLETION_LENGTHS`) as the default
    of ``--max_completion_length``: flags and the YAML ``--config`` still override it."""
    parsed = command.parse_checked(argv)
    length = TASK_COMPLETION_LENGTHS[parsed[0].task]
    if command.get_default("max_completion_length") != length:  # a YAML value is the default now: it stays
        command.set_defaults(max_completion_length=length)
    return command.parse_checked(argv, check_command)


def main(argv: Sequence[str] | None = None) -> None:
    """`trl-pods train`: `run`, then leave the distributed run (`trl_pods.cpu.leave_distributed_run`)."""
    run(argv)
    leave_distributed_run()


def run(argv: Sequence[str] | None = None) -> GRPOTrainer:
    """Parse and check the arguments (a user error: one line, exit status 2), `train`, and print the run's summary.
    The process stays as it is, so one process can make several runs (tests/train_runs.py)."""
    quiet_trl_deprecations()
    set_up_cpu()
    command = parser()
    command.set_defaults(**device_defaults())
    script_args, training_args, model_args = parse_arguments(command, argv)
    if not torch.accelerator.is_available() and os.environ.get("RANK", "0") == "0":
        print(device_line(training_args, model_args), flush=True)
    if script_args.overwrite_output_dir and training_args.resume_from_checkpoint is None:
        empty_folder(Path(training_args.output_dir))
    trainer = train(script_args, training_args, model_args)
    if trainer.accelerator.is_main_process:
        print("\n".join(summary(script_args, training_args, model_args, trainer.state.global_step)), flush=True)
    return trainer


if __name__ == "__main__":
    main()

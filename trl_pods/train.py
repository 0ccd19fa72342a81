"""`trl-pods train` (also `scripts/train_pods.py`): train a model with PODS from a YAML recipe and/or flags.

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml scripts/train_pods.py \
        --config recipes/gsm8k_qwen2.5-3b_lora_pods.yaml --pods_n 64 --pods_m 16

Arguments are those of `ScriptArguments` (data and rewards), `trl_pods.PODSConfig` (training, with every
`trl.GRPOConfig` field) and `trl.ModelConfig` (model, dtype, LoRA). A YAML ``--config`` sets defaults; flags override.
``--help`` lists the PODS, script and common flags, ``--help-all`` every flag. Every name (task, reward functions,
down-sampler, allocation rule, arithmetic difficulty), the model folder and the other user inputs are checked before
any download or model load, most of them before the heavy imports (`trl_pods.flags`, `trl_pods.inputs`); a user
error prints one ``error:`` line. The task chooses the reward functions and the completion length the user does not
set (`trl_pods.tasks.TASK_REWARDS`, ``TASK_COMPLETION_LENGTHS``). Without a GPU the run trains in float32 on the CPU,
on the threads `trl_pods.cpu.set_cpu_threads` chooses, and the command says so in one line. The run saves the model,
``run_args.json`` (all arguments, and the device and precision that really ran), ``train_results.json`` and
``trainer_state.json`` (every logged metric) in ``output_dir``, and ends with a few lines: what it trained, where it
saved it, the `trl-pods eval` command to run next (sized for a CPU), and a warning if no trained group had contrast
(`trl_pods.no_signal`). ``--resume_from_checkpoint PATH`` (or ``last``: the newest complete checkpoint) continues a
run, and says so and trains nothing when the checkpoint is at ``--max_steps``; an ``output_dir`` that already holds
files is refused unless the run resumes or ``--overwrite_output_dir true`` empties it first (never a folder that is,
holds or lies inside one of the run's inputs), so that two runs never mix in one folder.
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
from transformers import AutoTokenizer, TrainerState
from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config, get_quantization_config

from .arithmetic import DIFFICULTIES
from .config import PODSConfig
from .cpu import leave_distributed_run, quiet_trl_deprecations, set_cpu_threads, set_up_cpu
from .down_sampling import list_down_samplers
from .generation_modes import GENERATION_MODES
from .hub import check_on_hub
from .inputs import check_data_file, check_model, check_run_folder, is_complete, resume_checkpoint, unknown_value
from .no_signal import NoSignalWarning, no_signal_line
from .parsing import CommandParser
from .reasoning_gym_tasks import check_reasoning_gym_task, dataset_name, is_reasoning_gym, parse_task_config
from .rewards import REWARD_FUNCS
from .tasks import (
    TASK_COMPLETION_LENGTHS,
    TASK_REWARD_FUNCS,
    TASK_REWARDS,
    TASK_TEST_SIZES,
    TASKS,
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
    task config as canonical JSON (None when not given). An unknown name says the closest known one.

    Raises:
        ValueError: also for a ``--task_config`` given to a task other than reasoning-gym's.
    """
    check_task_name(task)
    if task == "arithmetic" and arithmetic_difficulty not in DIFFICULTIES:
        raise ValueError(unknown_value("--arithmetic_difficulty", arithmetic_difficulty, list(DIFFICULTIES)))
    if not is_reasoning_gym(task):
        if task_config is not None:
            raise ValueError(f"--task_config sets a reasoning_gym:<name> task's dataset, not --task {task}.")
        return None
    config = parse_task_config(task_config)
    _check_reasoning_gym_name(task)
    check_reasoning_gym_task(task, config)
    return json.dumps(config, sort_keys=True) if task_config is not None else None


def _check_reasoning_gym_name(task: str) -> None:
    """Raise ValueError for a reasoning-gym dataset that reasoning-gym does not have, naming the closest rather than
    its 106 datasets (nothing without reasoning-gym: `check_reasoning_gym_task` says how to install it)."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        return
    if dataset_name(task) not in DATASETS:
        message = unknown_value("reasoning-gym dataset", dataset_name(task), sorted(DATASETS))
        raise ValueError(f"{message[:-1]} (reasoning_gym.factory.DATASETS).")


def value_names() -> dict[str, list[str]]:
    """The names the values of some flags may take, for the checks of `trl_pods.inputs` (a dotted import path aside):
    tasks, Hub tasks (the others are generated), arithmetic difficulties, reward functions, down-samplers, generation
    modes and loggers."""
    return {
        "task": list(TASKS),
        "hub_tasks": [task for task in TASKS if not is_generated(task)],
        "arithmetic_difficulty": list(DIFFICULTIES),
        "reward_funcs": sorted({**REWARD_FUNCS, **TASK_REWARD_FUNCS}),
        "pods_down_sampler": list_down_samplers(),
        "pods_generation": sorted(GENERATION_MODES),
        "report_to": [*INTEGRATION_TO_CALLBACK, "all", "none"],
    }


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
    folder (or ``last``: the newest complete checkpoint in ``output_dir``), and last a model or dataset that needs the
    Hub where it cannot be reached (`check_hub_inputs`).

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
        check_data_file(flag, getattr(script_args, flag), script_args.task, is_generated(script_args.task))
    resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
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


def check_command(script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig) -> None:
    """The output folder as the run will use it (transformers' default where none was given: `check_run_folder`),
    then `check_arguments`."""
    run = {"output_dir": training_args.output_dir, "resume_from_checkpoint": training_args.resume_from_checkpoint}
    check_run_folder({**vars(script_args), **vars(model_args), **run})
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


CPU_EVAL_PROBLEMS = 50
"""Held-out problems the closing `trl-pods eval` command asks for on a machine without a GPU: on a reasoning-gym task
200 problems took 9 minutes a model there (64 tokens, greedy), against 2 of training."""


def eval_command(script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig) -> str:
    """The `trl-pods eval` command of the run's accuracy, base model against checkpoints; sized with
    ``--max_problems`` for a machine without a GPU, where the run's held-out set (or a Hub task's test split) would
    take long, and saying so in a shell comment, so that the line runs as pasted."""
    model, out, task = model_args.model_name_or_path, training_args.output_dir, script_args.task
    command = f"trl-pods eval --run_dir {shlex.quote(out)} --base_model {shlex.quote(model)} --task {task}"
    held_out = script_args.task_test_size
    if torch.accelerator.is_available() or (held_out is not None and held_out <= CPU_EVAL_PROBLEMS):
        return command
    problems = "problems" if held_out is None else f"{held_out} held-out problems"
    note = f"the first {CPU_EVAL_PROBLEMS} of its {problems}, for a CPU"
    return f"{command} --max_problems {CPU_EVAL_PROBLEMS}  # {note}"


def summary(
    script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig, state: TrainerState
) -> list[str]:
    """The lines a `trl-pods train` run ends with: what it trained, where it saved it, the command to run next, and
    whether it could learn at all (`trl_pods.no_signal`)."""
    model, out, steps = model_args.model_name_or_path, training_args.output_dir, state.global_step
    method = f"PODS {training_args.pods_n} -> {training_args.pods_m}, {training_args.pods_down_sampler}"
    if training_args.pods_generation != "fixed":
        method += f", {training_args.pods_generation} generation"
    saved = "the LoRA adapter" if model_args.use_peft else "the model"
    no_signal = no_signal_line(state.log_history)
    return [
        f"trl-pods train: trained {model} on the {script_args.task} task for {steps} step{'s' * (steps != 1)} "
        f"({method})",
        f"saved in {out}: {saved}, its card (README.md), run_args.json, and the metrics (train_results.json, "
        "trainer_state.json)",
        f"next, its accuracy: {eval_command(script_args, training_args, model_args)}",
        *([f"trl-pods train: warning: {no_signal}"] if no_signal else []),
    ]


def train(
    script_args: ScriptArguments,
    training_args: PODSConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    trainer_class: type[GRPOTrainer] = PODSGRPOTrainer,
) -> GRPOTrainer:
    """Check the arguments (`check_arguments`), build the trainer, train (resuming if asked: ``last`` is the newest
    complete checkpoint), save model, arguments and metrics; return the trainer. A run that trains no group with
    contrast for a while warns (`trl_pods.no_signal`). ``trainer_class`` builds the trainer: `PODSGRPOTrainer`, or
    `trl.GRPOTrainer` itself (with a `trl.GRPOConfig`) to compare against TRL's trainer on the same data, rewards and
    model."""
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
        callbacks=[*(callbacks or []), NoSignalWarning()],
    )
    checkpoint, _ = resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    result = trainer.train(resume_from_checkpoint=checkpoint)
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
        names=value_names(),
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
    argv = command.check_command_line(argv)  # once: a renamed flag is said once
    parsed = command.parse_checked(argv)
    length = TASK_COMPLETION_LENGTHS[parsed[0].task]
    if command.get_default("max_completion_length") != length:  # a YAML value is the default now: it stays
        command.set_defaults(max_completion_length=length)
    return command.parse_checked(argv, check_command)


def main(argv: Sequence[str] | None = None) -> None:
    """`trl-pods train`: `run`, then leave the distributed run (`trl_pods.cpu.leave_distributed_run`)."""
    run(argv)
    leave_distributed_run()


def finished_at(checkpoint: str | None, max_steps: int) -> int | None:
    """The step of ``checkpoint`` when a run resumed from it has nothing left to train (at or past a positive
    ``max_steps``; transformers would still train one step past it), else None (also for a folder without Trainer's
    state, which resumes at step 0)."""
    if checkpoint is None or max_steps <= 0 or not is_complete(Path(checkpoint)):
        return None
    step = json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]
    return step if step >= max_steps else None


def run(argv: Sequence[str] | None = None) -> GRPOTrainer | None:
    """Parse and check the arguments (a user error: one line, exit status 2), `train`, and print the run's summary.
    A run resumed from a checkpoint at ``--max_steps`` says so and trains nothing (returns None). The process stays as
    it is, so one process can make several runs (tests/train_runs.py)."""
    quiet_trl_deprecations()
    set_up_cpu()
    set_cpu_threads()  # the command owns the process
    command = parser()
    command.set_defaults(**device_defaults())
    script_args, training_args, model_args = parse_arguments(command, argv)
    main_process = os.environ.get("RANK", "0") == "0"
    checkpoint, skipped = resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    if skipped and main_process:
        print(f"trl-pods train: {skipped}", flush=True)
    step = finished_at(checkpoint, training_args.max_steps)
    if step is not None:
        if main_process:
            print(
                f"trl-pods train: {checkpoint} is at step {step} of --max_steps {training_args.max_steps}: the run is "
                "complete, nothing to train (a larger --max_steps trains on from it).",
                flush=True,
            )
        return None
    if not torch.accelerator.is_available() and main_process:
        print(device_line(training_args, model_args), flush=True)
    if script_args.overwrite_output_dir and training_args.resume_from_checkpoint is None:
        empty_folder(Path(training_args.output_dir))
    trainer = train(script_args, training_args, model_args)
    if trainer.accelerator.is_main_process:
        print("\n".join(summary(script_args, training_args, model_args, trainer.state)), flush=True)
    return trainer


if __name__ == "__main__":
    main()

"""`trl-pods train` (also `scripts/train_pods.py`): train a model with PODS from a YAML recipe and/or flags.

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml scripts/train_pods.py \
        --config recipes/gsm8k_qwen2.5-3b_lora_pods.yaml --pods_n 64 --pods_m 16

Arguments are those of `ScriptArguments` (data and rewards), `trl_pods.PODSConfig` (training, with every
`trl.GRPOConfig` field) and `trl.ModelConfig` (model, dtype, LoRA). A YAML ``--config`` sets defaults; flags override.
The run saves the model, ``run_args.json`` (all arguments), ``train_results.json`` and ``trainer_state.json``
(every logged metric) in ``output_dir``; ``--resume_from_checkpoint PATH`` (or ``last``) continues a run.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from accelerate import PartialState
from transformers import AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint
from trl import ModelConfig, TrlParser, get_peft_config, get_quantization_config

from .config import PODSConfig
from .rewards import get_reward_func
from .trainer import PODSGRPOTrainer

TASKS = ("gsm8k", "math", "arithmetic")


@dataclass
class ScriptArguments:
    """Data and reward arguments of `trl-pods train`."""

    task: str = field(
        default="gsm8k",
        metadata={
            "help": "Task: 'gsm8k', 'math' (Hub or --dataset_path) or 'arithmetic' (generated offline).",
            "choices": list(TASKS),
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
    reward_funcs: list[str] = field(
        default_factory=lambda: ["gsm8k"],
        metadata={
            "help": "Reward functions by name ('accuracy', 'format', 'gsm8k', 'arithmetic') or dotted import "
            "path; weight them with --reward_weights."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N training examples (quick runs)."}
    )
    arithmetic_difficulty: str = field(
        default="add1", metadata={"help": "Difficulty of the 'arithmetic' task (see trl_pods.arithmetic)."}
    )
    arithmetic_train_size: int = field(
        default=2000, metadata={"help": "Training problems generated for the 'arithmetic' task."}
    )


def load_datasets(script_args: ScriptArguments, seed: int):
    """``(train, eval or None)`` for the task of ``script_args``."""
    if script_args.task == "arithmetic":
        from .arithmetic import train_test_arithmetic

        train, test = train_test_arithmetic(
            n_train=script_args.arithmetic_train_size, seed=seed, difficulty=script_args.arithmetic_difficulty
        )
        evaluation = test if script_args.eval_split or script_args.eval_dataset_path else None
    else:
        from .tasks import load_task

        train = load_task(script_args.task, "train", script_args.dataset_path, script_args.prompt_style)
        evaluation = None
        if script_args.eval_dataset_path or script_args.eval_split:
            evaluation = load_task(
                script_args.task,
                script_args.eval_split or "test",
                script_args.eval_dataset_path,
                script_args.prompt_style,
            )
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
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint in ("last", "latest", "true", "True"):
        checkpoint = get_last_checkpoint(training_args.output_dir)
        if checkpoint is None:
            raise ValueError(f"--resume_from_checkpoint last: no checkpoint in {training_args.output_dir}.")
    return checkpoint


def train(
    script_args: ScriptArguments, training_args: PODSConfig, model_args: ModelConfig, callbacks: list | None = None
) -> PODSGRPOTrainer:
    """Build the trainer, train (resuming if asked), save model, arguments and metrics; return the trainer."""
    if model_args.model_name_or_path is None:
        raise ValueError("Set --model_name_or_path (a Hub name or a local folder).")
    train_dataset, eval_dataset = load_datasets(script_args, training_args.seed)
    training_args.model_init_kwargs = _model_init_kwargs(model_args, training_args)
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )
    trainer = PODSGRPOTrainer(
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
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    if trainer.accelerator.is_main_process:
        arguments = {
            "launch": {
                "distributed_type": trainer.accelerator.distributed_type.value,
                "num_processes": trainer.accelerator.num_processes,
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = TrlParser((ScriptArguments, PODSConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    train(script_args, training_args, model_args)
    if torch.distributed.is_initialized():  # while the interpreter is alive: gloo's threads can abort in its teardown
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

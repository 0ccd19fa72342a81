"""Train with PODS in TRL's asynchronous trainer (docs/async.md): start the `vllm serve` of the recipe's header, then

    accelerate launch --config_file recipes/accelerate/multi_gpu.yaml --num_processes 4 \
        scripts/train_pods_async.py --config recipes/async/gsm8k_qwen2.5-3b_lora_pods_async.yaml

Arguments are those of `trl_pods.train.ScriptArguments` (data and rewards), `trl_pods.async_grpo.PODSAsyncGRPOConfig`
(training, with every `AsyncGRPOConfig` field, `dtype` included) and `ModelArguments` below (model and LoRA: TRL's
`ModelConfig` cannot be parsed beside `AsyncGRPOConfig`, both define `--dtype`); a YAML ``--config`` sets defaults
and flags override. Saves the model in ``output_dir``; ``--resume_from_checkpoint PATH`` continues a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from peft import LoraConfig
from transformers import AutoTokenizer
from trl import TrlParser

from trl_pods.async_grpo import PODSAsyncGRPOConfig, PODSAsyncGRPOTrainer
from trl_pods.cpu import set_cpu_threads
from trl_pods.tasks import get_reward_func
from trl_pods.train import ScriptArguments, load_datasets


@dataclass
class ModelArguments:
    """The model, and the LoRA adapter TRL's adapter sync sends to the server (no bias, no modules_to_save)."""

    model_name_or_path: str = field(metadata={"help": "Hub name or local folder; `vllm serve` must serve the same."})
    model_revision: str = field(default="main", metadata={"help": "Revision of the model."})
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter (synced to vLLM by path)."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (the server's --max-lora-rank must cover it)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Modules to adapt ('all-linear' or names; not lm_head or embed_tokens)."}
    )

    def peft_config(self) -> LoraConfig | None:
        if not self.use_peft:
            return None
        targets = self.lora_target_modules
        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=targets[0] if targets == ["all-linear"] else targets,
            bias="none",
            task_type="CAUSAL_LM",
        )


def main(argv: Sequence[str] | None = None) -> PODSAsyncGRPOTrainer:
    parser = TrlParser((ScriptArguments, PODSAsyncGRPOConfig, ModelArguments))
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    train_dataset, _ = load_datasets(script_args, training_args.seed)
    revision = {"revision": model_args.model_revision}
    training_args.model_init_kwargs = {**revision, **(training_args.model_init_kwargs or {})}
    trainer = PODSAsyncGRPOTrainer(
        model_args.model_name_or_path,
        [get_reward_func(name) for name in script_args.reward_funcs],
        training_args,
        train_dataset=train_dataset,
        processing_class=AutoTokenizer.from_pretrained(model_args.model_name_or_path),
        peft_config=model_args.peft_config(),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    return trainer


if __name__ == "__main__":  # the rollout worker is a spawned process, which re-imports this file
    set_cpu_threads()  # the process is the script's: the threads `trl-pods train` takes
    main()

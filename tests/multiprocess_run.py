"""Worker for the multi-process tests: `torchrun --nproc_per_node K tests/multiprocess_run.py MODEL OUT [SAMPLER]`.

Trains PODS for two optimizer steps and writes, per rank, what that rank saw: its prompts, the selection, its
advantages and the global token count, so the test can compare ranks with each other and with a 1-process run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from helpers import load, pods_config, prompts_dataset, token_sum_reward  # noqa: E402

from trl_pods import PODSGRPOTrainer  # noqa: E402


class RecordingTrainer(PODSGRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.records[-1].update(
                advantages=output["advantages"].tolist(), num_items_in_batch=int(output["num_items_in_batch"])
            )
        return output

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        self.records.append(
            dict(
                prompts=[row["prompt"][0]["content"] for row in inputs],
                kept_prompts=[row["prompt"][0]["content"] for row in phase1["inputs"]],
                kept=phase1["kept"].tolist(),
                rewards=phase1["rewards"].tolist(),
            )
        )
        return phase1


def main(model_path: str, out: str, sampler: str = "random", processes: int | None = None) -> None:
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # The same global batch whatever the process count: 2 prompts x 4 kept rows per generation.
    per_device = 8 // world
    model, tokenizer = load(model_path)
    config = pods_config(
        out,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=per_device,
        max_steps=2,
        pods_down_sampler=sampler,
        ddp_backend="gloo" if world > 1 else None,
    )
    trainer = RecordingTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    logs = [{k: v for k, v in e.items() if k.startswith(("pods/", "reward"))} for e in trainer.state.log_history]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"records": trainer.records, "logs": logs, "world": world}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

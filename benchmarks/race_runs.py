"""The runs of a race to a target (`race_analysis.Race`): training an arm on a task from a seed, evaluating every
checkpoint on held-out problems, taking the plan's runs as a queue shared by any number of processes
(`harness.RunStore`), and the interleaved timing run that measures every arm's step time side by side.

Every arm trains with the demo's arguments (`trl_pods.demo.demo_arguments`) and its own options (`Race.arms`): the
baseline arms (`Race.baselines`) with `trl.GRPOTrainer` itself on a field-for-field copy of the config (`trl_config`),
the others with `PODSGRPOTrainer`; the plan's prompts per optimizer step in micro-batches of 4 rows per prompt, so
every arm has the same memory shape. A run is saved as it ends with its curve and its `race_analysis.STEP_FIELDS`
per step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import torch
from harness import DATA, RunStore, cpu_model, interleaved, versions
from race_analysis import FIELD, STEP_FIELDS, Race, accumulation, confirmed, steps_per_generation
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer, ModelConfig

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.demo import demo_arguments, held_out
from trl_pods.evaluate import EvalArguments, _generate_hf, _load_problems, chat_prompts
from trl_pods.reasoning_gym_tasks import reasoning_gym_reward, score_answers
from trl_pods.train import ScriptArguments, train
from trl_pods.vllm_engine import cpu_weights_in_place

ENGINES = {
    "vllm-cpu": dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=512),
    "hf": dict(use_vllm=False),
    "vllm-cuda": dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=1024,
                      vllm_gpu_memory_utilization=0.3),
}  # fmt: skip
"""Where a run generates: the plan's runs on vLLM's CPU engine (colocate); ``hf``, for ``--timing`` and ``--smoke``
where vLLM is not installed, with HF ``generate`` in the trainer: in bf16 on a CUDA GPU when there is one (the setting
of the H200's costs), else in fp32 on the CPU; ``vllm-cuda``: vLLM colocated on a CUDA GPU (a third of its memory),
training in bf16 (`race_rg.py` on a GPU)."""


def trl_config(config: PODSConfig) -> GRPOConfig:
    """The same training arguments as a `trl.GRPOConfig`: its every field as ``config`` has it, PODS's fields
    dropped. ``generation_batch_size`` is derived again from ``steps_per_generation`` (TRL refuses both)."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(GRPOConfig) if f.init}
    return GRPOConfig(**{**values, "generation_batch_size": None})


def engine_arguments(engine: str, gpu: bool) -> dict:
    """The training arguments of ``engine`` (`ENGINES`); ``hf`` or ``vllm-cuda`` with a CUDA GPU (``gpu``) trains
    there in bf16."""
    return {**ENGINES[engine], **(dict(use_cpu=False, bf16=True) if engine != "vllm-cpu" and gpu else {})}


def run_arguments(
    race: Race,
    arm: str,
    model: Path,
    out: str,
    task: str,
    seed: int,
    steps: int,
    eval_every: int | None,
    engine: str = "vllm-cpu",
) -> tuple[ScriptArguments, PODSConfig, ModelConfig]:
    """The demo's arguments with the arm's settings, the plan's prompts per optimizer step in micro-batches of 4 rows
    per prompt (`accumulation`), its held-out problems excluded from training, a whole checkpoint every
    ``eval_every`` steps (None: none), generating on ``engine`` (`ENGINES`). A reasoning-gym ``task`` trains on its
    dataset with the race's settings and completion length for it (`Race.task_configs`), rewarded by the dataset's
    own scorer."""
    options, plan = race.arms[arm], race.plan
    # whole checkpoints (optimizer and RNG states too): a run cut short continues exactly (`resume_point`)
    checkpoints = dict(save_steps=eval_every, save_only_model=False) if eval_every else dict(save_strategy="no")
    engine_options = engine_arguments(engine, torch.cuda.is_available())
    generated = race.task_configs.get(task, {})
    lengths = {"max_completion_length": generated["max_completion_length"]} if generated else {}
    script_args, training_args, model_args = demo_arguments(
        model, Path(out), max_steps=steps, seed=seed, difficulty="add1" if generated else task,
        per_device_train_batch_size=4 * plan["prompts_per_step"], gradient_accumulation_steps=accumulation(options),
        pods_selection_log=False, **checkpoints, **lengths, **options, **engine_options,
    )  # fmt: skip
    script_args.task_test_size = plan["held_out"]
    if generated:
        script_args = ScriptArguments(task=task, task_config=json.dumps(generated["config"]),
                                      task_test_size=plan["held_out"], reward_funcs=["reasoning_gym"])  # fmt: skip
    model_args.dtype = "bfloat16" if engine_options.get("bf16") else model_args.dtype
    return script_args, training_args, model_args


def method_arguments(race: Race, arm: str, *where, engine: str = "vllm-cpu") -> tuple[type[GRPOTrainer], tuple]:
    """``(trainer class, train's arguments)`` of one run (``where``: `run_arguments`'s after the arm):
    `trl.GRPOTrainer` with `trl_config` of the arguments for the baseline arms, `PODSGRPOTrainer` for the others."""
    script_args, training_args, model_args = run_arguments(race, arm, *where, engine=engine)
    if arm in race.baselines:
        return GRPOTrainer, (script_args, trl_config(training_args), model_args)
    return PODSGRPOTrainer, (script_args, training_args, model_args)


def step_records(history: list[dict], trl_rollouts: int | None, per_generation: int = 1) -> list[list[float]]:
    """`STEP_FIELDS` per optimizer step from a trainer's log (logged every step). ``trl_rollouts``: the rollouts, all
    trained, per step of a `trl.GRPOTrainer` run, which logs no counts; None for a `PODSGRPOTrainer` run, which logs
    its generation's on the step that generates. ``per_generation``: optimizer steps per generation (its
    ``steps_per_generation`` over ``gradient_accumulation_steps``): a generation's calls and rollouts count on the step
    that makes them (steps 1, 1 + ``per_generation``, ...), none on the steps that train on them; each of its steps
    trains an equal share of its rows and carries its rewards and lengths (both trainers log them only on the step
    that generates)."""

    def generates(step: int) -> bool:
        return (step - 1) % per_generation == 0

    records, generation = [], {}
    keys = ("frac_reward_zero_std", "reward", "completions/mean_length", "pods/rollouts_trained")
    for e in (e for e in history if "step_time" in e):
        fresh = generates(e["step"])
        generation = {key: e.get(key, None if fresh and key.startswith("pods/") else generation.get(key))
                      for key in keys}  # fmt: skip
        if trl_rollouts is None:
            generated = e.get("pods/rollouts_generated", None if fresh else 0.0)
            rows = generation["pods/rollouts_trained"] / per_generation
        else:
            generated, rows = trl_rollouts * per_generation * fresh, trl_rollouts
        records.append([
            e["step"],
            e["step_time"],
            generated,
            rows,
            e.get("pods/generation_calls", float(fresh)),
            generation["frac_reward_zero_std"],
            generation["reward"],
            generation["completions/mean_length"],
        ])  # fmt: skip
    return records


def train_arm(
    race: Race,
    arm: str,
    where: tuple,
    callbacks: list | None = None,
    engine: str = "vllm-cpu",
    resume: str | None = None,
) -> list[list[float]]:
    """Train one arm (``where``: `run_arguments`'s after the arm) on ``engine``, from the checkpoint ``resume`` if
    given; its `step_records` (from the first step: a checkpoint's log holds the steps before it)."""
    trainer_class, arguments = method_arguments(race, arm, *where, engine=engine)
    config = arguments[1]
    config.resume_from_checkpoint = resume
    trl_rollouts = config.per_device_train_batch_size * config.gradient_accumulation_steps
    per_generation = steps_per_generation(race.arms[arm])
    # trl.GRPOTrainer's colocate engine must take TRL's weight sync on vLLM-CPU too
    with cpu_weights_in_place() if engine == "vllm-cpu" else nullcontext():
        history = train(*arguments, callbacks=callbacks, trainer_class=trainer_class).state.log_history
    return step_records(history, trl_rollouts if trainer_class is GRPOTrainer else None, per_generation)


def held_out_accuracy(race: Race, task: str, seed: int, problems: int, model: str) -> dict:
    """Greedy accuracy of ``model`` on the ``problems`` held-out problems of ``seed`` (which its training run does not
    train on) and the seconds it took. A reasoning-gym task is scored by the dataset's own scorer twice on the same
    completions: on the answer the extraction rule reads (``accuracy``: what the reward scores) and on the raw
    completion (``raw_accuracy``), so that a reader sees what is format."""
    start = time.perf_counter()
    generated = race.task_configs.get(task)
    if not generated:
        with tempfile.TemporaryDirectory() as out:
            report = held_out(task, seed=seed, problems=problems, model_name_or_path=model, output=f"{out}/eval.json")
        return {"accuracy": report["results"][0]["accuracy"], "seconds": time.perf_counter() - start}
    args = EvalArguments(
        model_name_or_path=model, task=task, task_config=json.dumps(generated["config"]), seed=seed,
        max_problems=problems, temperature=0.0, max_new_tokens=generated["max_completion_length"],
        device="cuda" if torch.cuda.is_available() else "cpu",
    )  # fmt: skip
    rows = _load_problems(args)
    tokenizer, prompts = chat_prompts(model, rows["prompt"])
    texts, _ = _generate_hf(model, tokenizer, prompts, args, torch.device(args.device))
    completions = [samples[0] for samples in texts]
    columns = {name: rows[name] for name in rows.column_names if name.startswith("reasoning_gym_")}
    extracted = reasoning_gym_reward(completions, **columns)
    raw = score_answers(
        [c.strip() for c in completions], *(columns[f"reasoning_gym_{k}"] for k in ("task", "config", "entry"))
    )
    solved = {name: sum(s >= 1.0 for s in scores) / len(rows) for name, scores in (("accuracy", extracted),
              ("raw_accuracy", raw))}  # fmt: skip
    return {**solved, "seconds": time.perf_counter() - start}


EVALUATIONS = "evaluations.json"
"""A resumable run's evaluations so far and the steps it resumed at, in its folder (`HeldOut`, `resume_point`)."""


def resume_point(folder: Path, per_generation: int) -> tuple[str | None, dict]:
    """Where a run whose folder is ``folder`` continues: ``(checkpoint, record)``, the latest checkpoint that was
    evaluated and falls on a generation's first step (a multiple of ``per_generation``: TRL regenerates at once
    when it resumes), and the folder's `EVALUATIONS` record cut to it, with that step added to ``resumed_at``; the
    checkpoints after it are removed. ``(None, {})`` with the folder emptied when there is none."""
    path = folder / EVALUATIONS
    record = json.loads(path.read_text()) if path.exists() else {"evaluations": [], "resumed_at": []}
    evaluated = {step for step, _ in record["evaluations"]}
    saved = {int(p.name.split("-")[1]): p for p in folder.glob("checkpoint-*") if p.name.split("-")[1].isdigit()}
    usable = [step for step in saved if step in evaluated and step % per_generation == 0]
    if not usable:
        for entry in folder.iterdir() if folder.is_dir() else ():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        return None, {}
    step = max(usable)
    for later in (p for s, p in saved.items() if s > step):
        shutil.rmtree(later)
    kept = [[s, found] for s, found in record["evaluations"] if s <= step]
    return str(saved[step]), {"evaluations": kept, "resumed_at": [*record["resumed_at"], step]}


class HeldOut(TrainerCallback):
    """Evaluates every checkpoint as it is saved (`held_out_accuracy`: greedy, the run's held-out problems) with an
    RNG state of its own, so that evaluating does not change training; stops training at the evaluation that
    confirms the endpoint (`confirmed`; ``target`` None: never). ``record`` (`resume_point`'s) carries a resumed
    run's evaluations; with a ``folder``, the record is written there after each evaluation."""

    def __init__(
        self,
        race: Race,
        task: str,
        seed: int,
        target: float | None,
        problems: int,
        model: Path,
        record: dict | None = None,
        folder: Path | None = None,
    ):
        self.race, self.task, self.seed, self.target, self.problems = race, task, seed, target, problems
        self.folder, self.resumed_at = folder, (record or {}).get("resumed_at", [])
        self.evaluations = [tuple(e) for e in (record or {}).get("evaluations", [])]
        if not self.evaluations:  # the base model first
            self.evaluations = [(0, held_out_accuracy(race, task, seed, problems, str(model)))]
            self._write()

    def _write(self) -> None:
        if self.folder is not None:
            record = {"evaluations": self.evaluations, "resumed_at": self.resumed_at}
            (self.folder / EVALUATIONS).write_text(json.dumps(record) + "\n")

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        with torch.random.fork_rng():
            found = held_out_accuracy(self.race, self.task, self.seed, self.problems, str(checkpoint))
        self.evaluations.append((state.global_step, found))
        self._write()
        print(f"step {state.global_step}: held-out accuracy {found['accuracy']:.3f} ({found['seconds']:.0f} s)",
              flush=True)  # fmt: skip
        if (
            self.target is not None
            and confirmed([e["accuracy"] for _, e in self.evaluations], self.target) is not None
        ):
            control.should_training_stop = True


def run(
    race: Race,
    model: Path,
    task: str,
    arm: str,
    seed: int,
    settings: dict,
    engine: str = "vllm-cpu",
    folder: Path | None = None,
) -> dict:
    """Train one arm on one task from one seed until the endpoint is confirmed (``settings["target"]``; None: all
    its steps); its curve ``[step, accuracy, rollouts, rows, calls]`` (cumulative counts up to each evaluation, step 0
    the base model), its `step_records` and per evaluation its seconds (``eval_seconds``) and, on a reasoning-gym
    task, its accuracy with the scorer on the raw completion (``raw_accuracy``).

    With a ``folder`` the run is resumable: it trains there and continues a run stopped in it from `resume_point`
    (a run that resumed lists the steps in ``resumed_at``: vLLM's sampler starts a new random stream there, so such a
    run is the same measurement but not the same bits as one that did not stop); else in a temporary folder."""
    with nullcontext(folder) if folder is not None else tempfile.TemporaryDirectory() as out:
        Path(out).mkdir(parents=True, exist_ok=True)
        checkpoint, record = resume_point(Path(out), steps_per_generation(race.arms[arm]))
        evaluation = HeldOut(race, task, seed, settings["target"], settings["held_out"], model, record,
                             folder)  # fmt: skip
        where = (model, out, task, seed, settings["max_steps"], settings["eval_every"])
        steps = train_arm(race, arm, where, [evaluation], engine, checkpoint)

    def up_to(step: int, name: str) -> float:
        return sum(record[FIELD[name]] for record in steps if record[0] <= step)

    curve = [
        [step, found["accuracy"], up_to(step, "rollouts"), up_to(step, "rows"), up_to(step, "calls")]
        for step, found in evaluation.evaluations
    ]
    extra = {"eval_seconds": [found["seconds"] for _, found in evaluation.evaluations]}
    if task in race.task_configs:
        extra["raw_accuracy"] = [found["raw_accuracy"] for _, found in evaluation.evaluations]
    if evaluation.resumed_at:
        extra["resumed_at"] = evaluation.resumed_at
    print(f"{task} {arm} seed {seed}: " + ", ".join(f"{s}: {a:.3f}" for s, a, *_ in curve), flush=True)
    return {"task": task, "arm": arm, "seed": seed, "settings": settings, "curve": curve, "steps": steps, **extra,
            "device": cpu_model(), "threads": torch.get_num_threads(),
            "versions": versions(("torch", "transformers", "trl", "peft", "vllm"))}  # fmt: skip


def store(race: Race) -> RunStore:
    """The race's runs, ``docs/benchmarks/data/<name>.jsonl``, keyed by task, arm and seed."""
    return RunStore(DATA / f"{race.name}.jsonl", ("task", "arm", "seed"))


def measure(race: Race, planned: list[tuple], model: Path, args: argparse.Namespace) -> Iterator[dict]:
    """Take the ``planned`` runs (of ``args.arms`` and ``args.tasks``) that are neither saved nor claimed by another
    process, one at a time; save each as it ends (not with --smoke, which trains ``args.steps`` steps of each wanted
    arm on seed 0)."""
    if args.smoke:
        for task in args.tasks:
            settings = {**race.settings(task), "max_steps": args.steps, "eval_every": args.eval_every}
            for arm in args.arms:
                yield run(race, model, task, arm, 0, settings)
        return
    runs = store(race)
    for key in planned:
        task, arm, seed = key
        if arm not in args.arms or task not in args.tasks:
            continue
        with runs.claim(key) as mine:
            if mine:
                result = run(race, model, task, arm, seed, race.settings(task))
                runs.append(result)
                yield result


def timing(race: Race, model: Path, args: argparse.Namespace, earlier: dict | None = None) -> Iterator[dict]:
    """Every arm ``--timing_steps`` steps per round, round robin over ``--timing_rounds`` rounds in this process (the
    order rotated each round, `harness.interleaved`; round r trains from seed r), on the first of ``--tasks``, on
    ``--engine``; the load average before and after every run. Yields the measurement so far after each run, so a
    cut-short one keeps what it measured; given that measurement (``earlier``), it continues with the runs it lacks
    (refused where it was measured otherwise)."""
    task, loads, records, done = args.tasks[0], [os.getloadavg()], [], []
    gpu = engine_arguments(args.engine, torch.cuda.is_available()).get("bf16", False)  # hf on a CUDA GPU
    same = {"task": task, "steps_per_run": args.timing_steps, "threads": torch.get_num_threads(),
            "prompts_per_step": race.plan["prompts_per_step"]}  # fmt: skip
    if earlier is not None:
        if {key: earlier.get(key) for key in same} != same:
            raise SystemExit(f"the timing run saved so far was measured with {({k: earlier.get(k) for k in same})}, "
                             f"not {same}: remove its file to measure again.")  # fmt: skip
        loads, records, done = earlier["load"], earlier["records"], earlier.get("runs", [])
    for round_, arm in interleaved(args.arms, args.timing_rounds):
        if [arm, round_] in done:
            continue
        with tempfile.TemporaryDirectory() as out:
            steps = train_arm(race, arm, (model, out, task, round_, args.timing_steps, None), engine=args.engine)
        records += [[arm, round_, *record] for record in steps[1:]]  # the first step warms the engine up
        loads.append(os.getloadavg())
        done.append([arm, round_])
        print(f"timing round {round_} {arm}: " + ", ".join(f"{r[1]:.2f}" for r in steps) + " s", flush=True)
        yield {
            "device": torch.cuda.get_device_name() if gpu else cpu_model(),
            "engine": "the vLLM CPU engine (colocate)" if args.engine == "vllm-cpu"
            else f"HF generate, {'bf16' if gpu else 'fp32'}",
            "versions": versions(("torch", "transformers", "trl", "peft", "vllm")), **same,
            "rounds": round_ + 1, "fields": ["arm", "round", *STEP_FIELDS], "records": records, "load": loads,
            "runs": done,
        }  # fmt: skip


def free_port() -> int:
    """A TCP port the system has just handed out as free (for the colocate engine's one-process rendezvous)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]

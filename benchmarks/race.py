"""The race harness: a race to a held-out accuracy is a plan (`Race`: arms, tasks, seeds, budget, as data), and this
module trains its runs (`run`: the demo's SmolLM2-135M-Instruct + LoRA, the baseline arms with `trl.GRPOTrainer` on a
field-for-field copy of the config, the others with `PODSGRPOTrainer`; held-out evaluations with their binomial
standard error); `race_report` reads them. The plan's runs are a queue shared by processes (`take`), a run cut short
continues from its last evaluated checkpoint (`resume_point`), and `timing` measures every arm's step times side by
side on a CPU or a GPU (`race_report.fit_costs` turns them into a pricing's costs). Each race is a plan module
(``time_to_target.py``, ``time_to_target_rg.py``) whose command line is `main`:

    python benchmarks/<race>.py --phase evaluate|timing   # the plan's runs (resumes), interleaved step times
    python benchmarks/<race>.py --report [--costs FILE]   # the page; with --costs, the tables priced by FILE
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

import race_report
import torch
from harness import DATA, REPO, RunStore, cpu_model, interleaved, key_name, versions, write_pages
from race_report import FIELD, STEP_FIELDS, Race, accumulation, confirmed, steps_per_generation
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer, ModelConfig

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.demo import demo_arguments, held_out
from trl_pods.evaluate import EvalArguments, _generate_hf, _load_problems, chat_prompts, standard_error
from trl_pods.reasoning_gym_tasks import reasoning_gym_reward, score_answers
from trl_pods.train import ScriptArguments, train
from trl_pods.vllm_engine import cpu_weights_in_place

ENGINES = {
    "vllm-cpu": dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=512),
    "hf": dict(use_vllm=False),
    "vllm-cuda": dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=1024,
                      vllm_gpu_memory_utilization=0.3),
}  # fmt: skip
"""Where a run generates: vLLM's CPU engine (the races' runs); HF ``generate`` in the trainer (bf16 on a CUDA GPU, as
the H200's costs were measured, else fp32); vLLM colocated on a CUDA GPU (a third of its memory, bf16)."""


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
    race: Race, arm: str, model: Path, out: str, task: str, seed: int, steps: int, eval_every: int | None,
    engine: str = "vllm-cpu",
) -> tuple[ScriptArguments, PODSConfig, ModelConfig]:  # fmt: skip
    """The demo's arguments with the arm's options, the plan's prompts per step in micro-batches of 4 rows a prompt
    (`accumulation`), its held-out problems excluded from training, a whole checkpoint every ``eval_every`` steps
    (None: none), on ``engine``; a reasoning-gym ``task`` with its settings and length, rewarded by its own scorer."""
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
    """`STEP_FIELDS` per optimizer step from a trainer's log. ``trl_rollouts``: a `trl.GRPOTrainer` run's rollouts a
    step (it logs no counts; None for a `PODSGRPOTrainer` run). With ``per_generation`` optimizer steps a generation,
    its calls and rollouts count on the step that makes them, and each of its steps trains an equal share of its rows
    with its rewards and lengths (both trainers log them only on the step that generates)."""
    records, generation = [], {}
    keys = ("frac_reward_zero_std", "reward", "completions/mean_length", "pods/rollouts_trained")
    for e in (e for e in history if "step_time" in e):
        fresh = (e["step"] - 1) % per_generation == 0
        generation = {key: e.get(key, None if fresh and key.startswith("pods/") else generation.get(key))
                      for key in keys}  # fmt: skip
        if trl_rollouts is None:
            generated = e.get("pods/rollouts_generated", None if fresh else 0.0)
            rows = generation["pods/rollouts_trained"] / per_generation
        else:
            generated, rows = trl_rollouts * per_generation * fresh, trl_rollouts
        records.append([e["step"], e["step_time"], generated, rows, e.get("pods/generation_calls", float(fresh)),
                        generation["frac_reward_zero_std"], generation["reward"],
                        generation["completions/mean_length"]])  # fmt: skip
    return records


def train_arm(
    race: Race, arm: str, where: tuple, callbacks: list | None = None, engine: str = "vllm-cpu",
    resume: str | None = None,
) -> list[list[float]]:  # fmt: skip
    """Train one arm (``where``: `run_arguments`'s after the arm) on ``engine``, from the checkpoint ``resume`` if
    given; its `step_records` (from the first step: a checkpoint's log holds the steps before it)."""
    trainer_class, arguments = method_arguments(race, arm, *where, engine=engine)
    config = arguments[1]
    config.resume_from_checkpoint = resume
    trl_rollouts = config.per_device_train_batch_size * config.gradient_accumulation_steps
    # trl.GRPOTrainer's colocate engine must take TRL's weight sync on vLLM-CPU too
    with cpu_weights_in_place() if engine == "vllm-cpu" else nullcontext():
        history = train(*arguments, callbacks=callbacks, trainer_class=trainer_class).state.log_history
    trl = trl_rollouts if trainer_class is GRPOTrainer else None
    return step_records(history, trl, steps_per_generation(race.arms[arm]))


def held_out_accuracy(race: Race, task: str, seed: int, problems: int, model: str) -> dict:
    """Greedy accuracy of ``model`` on the ``problems`` held-out problems of ``seed``, its standard error as
    `trl-pods eval` gives it (``se``: `trl_pods.evaluate.standard_error`) and seconds; on a reasoning-gym task also
    with the scorer on the raw completion (``raw_accuracy``)."""
    start = time.perf_counter()
    generated = race.task_configs.get(task)
    if not generated:
        with tempfile.TemporaryDirectory() as out:
            report = held_out(task, seed=seed, problems=problems, model_name_or_path=model, output=f"{out}/eval.json")
        result, seconds = report["results"][0], time.perf_counter() - start
        return {"accuracy": result["accuracy"], "se": result["accuracy_stderr"], "seconds": seconds}
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
    correct = [float(score >= 1.0) for score in extracted]
    accuracy, raw_accuracy = sum(correct) / len(rows), sum(score >= 1.0 for score in raw) / len(rows)
    return {"accuracy": accuracy, "se": standard_error(correct), "raw_accuracy": raw_accuracy,
            "seconds": time.perf_counter() - start}  # fmt: skip


EVALUATIONS = "evaluations.json"
"""A resumable run's evaluations so far and the steps it resumed at, in its folder (`HeldOut`, `resume_point`)."""


def resume_point(folder: Path, per_generation: int) -> tuple[str | None, dict]:
    """Where a run in ``folder`` continues: its latest evaluated checkpoint on a generation's first step (TRL
    regenerates when it resumes) and its `EVALUATIONS` cut there, the step added to ``resumed_at``, the later
    checkpoints removed; ``(None, {})`` with the folder emptied when there is none."""
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
    """Evaluates every checkpoint as it is saved, on an RNG state of its own (evaluating does not change training);
    stops at the evaluation confirming ``target`` (None: never); keeps ``record`` (`resume_point`'s) in ``folder``."""

    def __init__(self, race: Race, task: str, seed: int, target: float | None, problems: int, model: Path,
                 record: dict | None = None, folder: Path | None = None):  # fmt: skip
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
        print(f"step {state.global_step}: held-out accuracy {found['accuracy']:.3f} ± {found['se']:.3f} "
              f"({found['seconds']:.0f} s)", flush=True)  # fmt: skip
        accuracy = [e["accuracy"] for _, e in self.evaluations]
        if self.target is not None and confirmed(accuracy, self.target) is not None:
            control.should_training_stop = True


def run(race: Race, model: Path, task: str, arm: str, seed: int, settings: dict, engine: str = "vllm-cpu",
        folder: Path | None = None) -> dict:  # fmt: skip
    """Train one arm on one task from one seed until ``settings["target"]`` is confirmed (None: every step): its
    curve ``[step, accuracy, rollouts, rows, calls]`` (cumulative counts; step 0 the base model), `step_records`,
    evaluation seconds and raw accuracies. In a ``folder`` it continues a run stopped there (`resume_point`; the
    steps it resumed at in ``resumed_at``: vLLM samples a new random stream there)."""
    with nullcontext(folder) if folder is not None else tempfile.TemporaryDirectory() as out:
        Path(out).mkdir(parents=True, exist_ok=True)
        checkpoint, record = resume_point(Path(out), steps_per_generation(race.arms[arm]))
        evaluation = HeldOut(race, task, seed, settings["target"], settings["held_out"], model, record, folder)
        where = (model, out, task, seed, settings["max_steps"], settings["eval_every"])
        steps = train_arm(race, arm, where, [evaluation], engine, checkpoint)

    def up_to(step: int, name: str) -> float:
        return sum(record[FIELD[name]] for record in steps if record[0] <= step)

    curve = [[step, found["accuracy"], up_to(step, "rollouts"), up_to(step, "rows"), up_to(step, "calls")]
             for step, found in evaluation.evaluations]  # fmt: skip
    extra = {"eval_seconds": [found["seconds"] for _, found in evaluation.evaluations]}
    if task in race.task_configs:
        extra["raw_accuracy"] = [found["raw_accuracy"] for _, found in evaluation.evaluations]
    if evaluation.resumed_at:
        extra["resumed_at"] = evaluation.resumed_at
    print(f"{task} {arm} seed {seed}: " + ", ".join(f"{s}: {a:.3f}" for s, a, *_ in curve), flush=True)
    return {"task": task, "arm": arm, "seed": seed, "settings": settings, "curve": curve, "steps": steps, **extra,
            "device": cpu_model(), "threads": torch.get_num_threads(), "versions": versions()}  # fmt: skip


def take(races: dict[str, Race], queue: list[tuple], store: RunStore, model: Path, args: argparse.Namespace,
         retired: dict[str, str]) -> None:  # fmt: skip
    """Take the runs ``(task, arm, seed)`` of ``queue`` (of ``--arms``) nobody has saved or claimed, each with its
    task's race, in a folder of its own under ``--work`` (a run cut short continues there), saving each as it ends;
    an arm of ``retired`` is refused."""
    for key in queue:
        task, arm, seed = key
        if args.arms and arm not in args.arms:
            continue
        with store.claim(key) as mine:
            if mine:
                if arm in retired:
                    raise SystemExit(f"error: {arm} cannot be trained again: {retired[arm]}")
                folder = Path(args.work) / key_name(key)
                race = races[task]
                store.append(run(race, model, task, arm, seed, race.settings(task), args.engine, folder))
                shutil.rmtree(folder)


def timing(race: Race, model: Path, args: argparse.Namespace, earlier: dict | None = None) -> Iterator[dict]:
    """Every arm of ``--arms`` ``--timing_steps`` steps a round over ``--timing_rounds`` rounds, the order rotated
    each round (round r from seed r), on the first of ``--tasks`` and ``--engine``; yields the measurement after each
    run, and given one (``earlier``) continues with the runs it lacks (refused if measured otherwise)."""
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
            "versions": versions(), **same, "rounds": round_ + 1, "fields": ["arm", "round", *STEP_FIELDS],
            "records": records, "load": loads, "runs": done,
        }  # fmt: skip


def free_port() -> int:
    """A TCP port the system has just handed out as free (for the colocate engine's one-process rendezvous)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------- command line

WORK = REPO / "runs"  # where runs train (not committed): a run cut short continues from there


def parser(plan) -> argparse.ArgumentParser:
    """The command line of the race ``plan`` (a plan module: `main`)."""
    found = argparse.ArgumentParser(description=plan.__doc__.split("\n")[0])
    add = found.add_argument
    add("--phase", choices=("timing", "tune", "fix", "evaluate"), help="the runs to take (resumes); tune and fix: "
        "a race whose baseline, target and budget are fixed by rules on tuning runs")  # fmt: skip
    add("--report", action="store_true", help="write the page from the saved runs, measuring nothing")
    add("--costs", help="with --report: print the tables with the H200 column priced by this costs file (JSON: "
        "call, rollout, row, update seconds, or a timing run to fit), writing nothing")  # fmt: skip
    add("--arms", nargs="+", default=None, help="only these arms")
    add("--tasks", nargs="+", default=None, help="only these tasks (--phase timing: the first)")
    add("--engine", choices=list(ENGINES), default="vllm-cpu", help="where runs generate (race.ENGINES)")
    add("--model", default=None, help="model folder or Hub name (default: SmolLM2-135M-Instruct)")
    add("--data", default=str(DATA), help="folder of the runs (another model's: a folder of its own)")
    add("--work", default=str(WORK / plan.NAME), help="folder of the runs' checkpoints while they train (resume)")
    add("--threads", type=int, default=1, help="vllm-cpu: torch threads of this process (1 beside other runs; 2 for "
        "a run alone on 2 cores); --phase timing keeps 1, as its costs price one thread")  # fmt: skip
    add("--timing_rounds", type=int, default=3, help="--phase timing: rounds of every arm")
    add("--timing_steps", type=int, default=5, help="--phase timing: steps per arm and round (the first unused)")
    return found


def main(plan, argv: list[str] | None = None) -> None:
    """The command line of the race ``plan`` (its module: ``NAME``, ``PAGES``, ``figure``, ``races``, ``planned``,
    ``timing_race``, ``known_race``, ``RETIRED``, ``report_inputs``; a race fixed by tuning runs also
    ``tuning_race``, ``tuning_queue``, ``fix``). Bad input stops with one ``error:`` line before any model loads."""
    commands = parser(plan)
    args = commands.parse_args(argv)
    data = Path(args.data)
    if args.report:
        if args.costs:
            return race_report.reprice(plan, data, Path(args.costs))
        write_pages(plan.PAGES)
        return plan.figure(data)
    known, arms = plan.known_race(), args.arms or ()
    args.tasks = args.tasks or list(known.plan["tasks"])
    refused = [
        (args.phase is None, "give --phase or --report"),
        (args.phase in ("tune", "fix") and not hasattr(plan, "fix"), f"--phase {args.phase}: this race fixes no "
         "baseline by tuning runs"),
        (args.threads < 1 or (args.threads != 1 and args.phase == "timing"), "--threads: at least 1, and 1 for "
         "--phase timing (its costs price one thread)"),
        (args.threads != 1 and args.engine != "vllm-cpu", f"--threads sets the threads of --engine vllm-cpu runs; "
         f"drop it for --engine {args.engine}"),
        *((task not in known.plan["tasks"], f"--tasks {task} is not a task of the race; its tasks: "
           f"{', '.join(known.plan['tasks'])}") for task in args.tasks),
        *((arm not in known.arms, f"unknown arm(s) {[arm]}: the arms are {list(known.arms)}") for arm in arms),
        *((arm in plan.RETIRED, f"{arm} cannot be trained again: {plan.RETIRED.get(arm)}") for arm in arms),
        (args.model is not None and data.resolve() == DATA.resolve(), "--model trains another "
         "model: give its runs a folder of their own (--data)"),
    ]  # fmt: skip
    if why := next((message for bad, message in refused if bad), None):
        commands.error(why)
    if args.phase == "fix":
        (data / f"{plan.NAME}_fixed.json").write_text(json.dumps(plan.fix(data), indent=1) + "\n")
        return print(f"wrote {data / f'{plan.NAME}_fixed.json'}: commit it before any evaluation run")
    if args.engine == "vllm-cpu":
        from trl_pods.vllm_engine import check_cpu_vllm

        torch.set_num_threads(args.threads)  # vLLM's CPU engine keeps it
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # what trl_pods.cpu.cpu_threads reads too
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default would take much more
        os.environ.setdefault("MASTER_PORT", str(free_port()))  # processes side by side would collide on 29500
        if not check_cpu_vllm():
            commands.error("--engine vllm-cpu needs vLLM's CPU build: run it in the vLLM environment")
    elif args.engine == "vllm-cuda" and not torch.cuda.is_available():
        commands.error("--engine vllm-cuda needs a CUDA GPU")
    if args.model is None:
        from trl_pods.smollm2 import fetch_smollm2

        model = fetch_smollm2()
    else:
        model = Path(args.model) if Path(args.model).exists() else args.model
    if args.phase == "timing":
        race, gpu = plan.timing_race(data), "_gpu" * (args.engine != "vllm-cpu")
        path = data / f"{plan.NAME}_timing{gpu}.json"
        args.arms = args.arms or list(race.arms)
        earlier = json.loads(path.read_text()) if path.exists() else None
        for measured in timing(race, model, args, earlier):
            path.write_text(json.dumps(measured) + "\n")
        return None
    if args.phase == "tune":
        race = plan.tuning_race()
        store = RunStore(data / f"{plan.NAME}_tuning.jsonl", ("task", "arm", "seed"))
        return take(dict.fromkeys(race.plan["tasks"], race), plan.tuning_queue(), store, model, args, plan.RETIRED)
    races = plan.races(data)
    queue = [key for key in plan.planned(races) if key[0] in args.tasks]
    store = RunStore(data / f"{plan.NAME}.jsonl", ("task", "arm", "seed"))
    return take(races, queue, store, model, args, plan.RETIRED)

"""Time to target on reasoning-gym tasks against a tuned `trl.GRPOTrainer`, on a plan fixed before its runs
(`time_to_target_rg_plan.PLAN`; the rules that choose the tasks, the baseline, the targets and the budget are its
functions).

Each phase takes its runs as a queue (`harness.RunStore`: any number of processes, resumes after a stop) and saves
each run as it ends, to ``docs/benchmarks/data/race_rg_tuning.jsonl`` (pilot and tuning) or ``race_rg.jsonl``
(evaluation). Runs train and generate as the earlier race's (`race_runs`: the demo's SmolLM2-135M-Instruct + LoRA,
4 prompts per optimizer step, vLLM's CPU engine), on the task's dataset with the setting and completion length the
base-model table measured, rewarded by the dataset's own scorer.

    python benchmarks/time_to_target_rg.py --phase timing    # interleaved step times of every setting (idle; resumes)
    python benchmarks/time_to_target_rg.py --phase pilot     # the pilot seed on every candidate task
    python benchmarks/time_to_target_rg.py --phase tune      # the tuning runs (first seeds, then second seeds)
    python benchmarks/time_to_target_rg.py --phase fix       # race_rg_fixed.json (baseline, target, budget): commit
    python benchmarks/time_to_target_rg.py --phase evaluate  # the evaluation runs (refused without the fixing)
    python benchmarks/time_to_target_rg.py --report          # docs/benchmarks/time-to-target-rg.md from the runs
    python benchmarks/time_to_target_rg.py --smoke --steps 2 --eval_every 1 --arms ...   # no files written

On a CUDA machine with vLLM (`--engine vllm-cuda`), the same race with another model and its own data folder:

    python benchmarks/time_to_target_rg.py --engine vllm-cuda --model Qwen/Qwen2.5-0.5B-Instruct --data runs/qwen \
        --phase ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import time_to_target_rg_plan as plan
import torch
from harness import DATA, RunStore, key_name
from race_rg_report import cpu_costs, render, timing_run, write_report
from race_runs import ENGINES, free_port, run, timing

SMOKE_TASK = "reasoning_gym:chain_sum"
"""The smoke run's default task (``--task``: any of the plan's candidates, with the base-model table's setting)."""
WORK = Path(__file__).resolve().parent.parent / "runs" / "race_rg"
"""Where a phase's runs train (``--work``; ``runs/`` is not committed): a run cut short continues from here."""
SMOKE_LINE = "race_rg smoke: "
"""What starts the line a smoke run prints per run (its step and evaluation seconds, curve, raw accuracies)."""
__all__ = ["main", "render"]
PHASES = ("timing", "pilot", "tune", "fix", "evaluate")


def read_jsonl(path: Path) -> list[dict]:
    """The JSON lines of ``path`` ([] when it is missing)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def plans_as(arm: str) -> bool:
    """Whether this trl_pods's auto plans as ``arm``'s did (`plan.AUTO_RETURNS`, `plan.AUTO_AT_PODS_N`; True for an
    arm that is not auto)."""
    from trl_pods import auto

    if arm not in plan.AUTO_RETURNS:
        return True
    at_pods_n = auto.planned_rollouts(4, 16) == [16]
    return plan.AUTO_RETURNS[arm] == auto.STEP_RETURNS and (arm in plan.AUTO_AT_PODS_N) == at_pods_n


def planner_mismatch(arm: str) -> str | None:
    """Why this trl_pods cannot train ``arm``, an auto arm whose auto planned otherwise (`plans_as`): its run would not
    be the arm's; None where it can."""
    if plans_as(arm):
        return None
    current = [a for a in plan.AUTO_RETURNS if plans_as(a)]
    rollouts = "at pods_n" if arm in plan.AUTO_AT_PODS_N else "chosen among pods_m doubling up to pods_n"
    return (
        f"{arm} is trl_pods's auto valuing a step's progress as its signal to the power {plan.AUTO_RETURNS[arm]}, "
        f"its rollouts per prompt {rollouts}; this trl_pods plans otherwise (trl_pods.auto): train "
        f"{' or '.join(map(repr, current))}"
    )


def take(race, queue: list[tuple], store: RunStore, model: Path, args: argparse.Namespace) -> None:
    """Take the runs of ``queue`` nobody has saved or claimed, one at a time, saving each as it ends. Each trains in
    a folder of its own under ``--work``, so that a run cut short (a stopped machine) continues from its last
    evaluated checkpoint when it is taken again (`race_runs.resume_point`); the folder goes once the run is saved."""
    for key in queue:
        task, arm, seed = key
        if args.arms and arm not in args.arms:
            continue
        with store.claim(key) as mine:
            if mine:
                if why := planner_mismatch(arm):
                    raise SystemExit(why)
                folder = Path(args.work) / key_name(key)
                store.append(run(race, model, task, arm, seed, race.settings(task), args.engine, folder))
                shutil.rmtree(folder)


def phase(args: argparse.Namespace, model: Path) -> None:
    """Run ``args.phase`` on the runs saved under ``args.data`` so far."""
    data = Path(args.data)
    found = candidate_tasks(data)
    tuning = plan.tuning_race(found)
    tuning_store = RunStore(data / "race_rg_tuning.jsonl", ("task", "arm", "seed"))
    if args.phase == "timing":
        race = plan.Race("race_rg_timing", tuning.plan, plan.TIMING_ARMS, tuple(plan.TUNING_ARMS), found)
        args.arms, args.tasks = args.arms or list(plan.TIMING_ARMS), [next(iter(found))]
        args.timing_rounds = plan.TIMING_ROUNDS
        for measured in timing(race, model, args, timing_run(data)):
            (data / plan.TIMING_FILE).write_text(json.dumps(measured) + "\n")
        return
    if args.phase == "pilot":
        if lacking := plan.missing(read_jsonl(data / plan.BASE_TABLE)):
            raise SystemExit(f"the base-model table lacks {', '.join(lacking)}: the pilot waits for all of it.")
        take(tuning, [(task, plan.PILOT_ARM, plan.TUNING_SEEDS[0]) for task in found], tuning_store, model, args)
        return
    saved = tuning_store.runs()
    pilots = plan.pilot_runs(saved, found)
    if len(pilots) < len(found):
        raise SystemExit(f"the pilot has {len(pilots)} of its {len(found)} runs: run --phase pilot first.")
    tasks, cpu = plan.choose_tasks(pilots), cpu_costs(data)
    queue = plan.tuning_runs(tasks, [r for r in saved if r["seed"] == plan.TUNING_SEEDS[0]], cpu)
    if args.phase == "tune":
        take(tuning, queue, tuning_store, model, args)
        return
    if cpu is None:
        raise SystemExit("the timing run is missing or not whole: run --phase timing (idle machine; it continues).")
    done = {(r["task"], r["arm"], r["seed"]) for r in saved}
    if missing := [key for key in queue if key not in done]:
        raise SystemExit(f"{len(missing)} tuning runs are missing (first: {missing[0]}): run --phase tune first.")
    fixing = {"tasks": tasks, "fixed": plan.fixed(saved, tasks, cpu)}
    fixed_file = data / "race_rg_fixed.json"
    if args.phase == "fix":
        fixed_file.write_text(json.dumps(fixing, indent=1) + "\n")
        print(f"wrote {fixed_file}: commit it before any evaluation run.\n{json.dumps(fixing, indent=1)}")
        return
    if not fixed_file.exists() or json.loads(fixed_file.read_text()) != fixing:
        raise SystemExit(f"{fixed_file} is missing or differs from the rules on the tuning runs: run --phase fix.")
    evaluation_store = RunStore(data / "race_rg.jsonl", ("task", "arm", "seed"))
    races = {task: plan.evaluation_race(task, found[task], fixing["fixed"][task]) for task in tasks}
    for key in plan.evaluation_runs(races):  # seed by seed over both tasks: a stop leaves them the same seeds
        take(races[key[0]], [key], evaluation_store, model, args)


def candidate_tasks(data: Path = DATA) -> dict[str, dict]:
    """The plan's candidate tasks (`plan.candidates` on ``data``'s base-model table; ``--smoke`` trains one of the
    committed table's), each with the setting and completion length the race trains it with."""
    return plan.candidates(read_jsonl(data / plan.BASE_TABLE))


def smoke(args: argparse.Namespace, model: Path, setting: dict) -> None:
    """``--steps`` steps of each of ``--arms`` (default: the pilot's setting and the trl_pods arms) on ``--task``
    (``setting``: its entry of `candidate_tasks`), on each of ``--seeds`` seeds, an evaluation every ``--eval_every``
    on ``--held_out`` problems; prints each run's step and evaluation seconds; writes nothing, or with ``--pair FILE``
    appends each run to that file (outside the plan: the smallest pair on a GPU, `gpu_check.sh`)."""
    arms = {**plan.TUNING_ARMS, **plan.raced_arms(plan.LEARNING_RATES[0])}
    tasks = {args.task: setting}
    race = plan.tuning_race(tasks)
    race = plan.Race("smoke", {**race.plan, "held_out": args.held_out}, arms, tuple(plan.TUNING_ARMS), tasks)
    task = args.task
    settings = {**race.settings(task), "max_steps": args.steps, "eval_every": args.eval_every}
    for seed in range(args.seeds):
        for arm in args.arms or [plan.PILOT_ARM, *filter(plans_as, plan.raced_arms(0))]:
            result = run(race, model, task, arm, seed, settings, args.engine)
            keys = ("curve", "eval_seconds", "raw_accuracy")
            found = {"arm": arm, "step_seconds": [s[1] for s in result["steps"]], **{k: result[k] for k in keys}}
            print(SMOKE_LINE + json.dumps(found), flush=True)
            if args.pair:
                with open(args.pair, "a") as file:
                    file.write(json.dumps(result) + "\n")
    print(f"pair runs appended to {args.pair}" if args.pair else "smoke run: nothing written")


def parser() -> argparse.ArgumentParser:
    """The command line."""
    found = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    found.add_argument("--phase", choices=PHASES, help="the phase whose runs to take (resumes)")
    found.add_argument(
        "--report", action="store_true", help="docs/benchmarks/time-to-target-rg.md from the saved runs"
    )
    found.add_argument("--arms", nargs="+", default=None, help="only these arms' runs")
    found.add_argument("--engine", choices=list(ENGINES), default="vllm-cpu", help="where runs generate (ENGINES)")
    found.add_argument("--model", default=None, help="model folder or Hub name (default: SmolLM2-135M-Instruct)")
    found.add_argument("--data", default=str(DATA), help="folder of the runs (another model's: a folder of its own)")
    found.add_argument("--work", default=str(WORK), help="folder of the runs' checkpoints while they train (resume)")
    found.add_argument(
        "--threads", type=int, default=1,
        help="vllm-cpu: torch threads of this process; 1 beside other runs (a core each), 2 for a run alone on 2 "
        "cores (a 16-rollout step: 1.8x faster, docs/benchmarks/data/race_rg.notes.md); --phase timing keeps 1",
    )  # fmt: skip
    found.add_argument("--timing_steps", type=int, default=5, help="steps per arm and round (the first unused)")
    found.add_argument("--smoke", action="store_true", help="train a few steps per arm on seed 0; write nothing")
    found.add_argument("--task", default=SMOKE_TASK, help="--smoke: the task, one of the race's candidates")
    found.add_argument("--steps", type=int, default=2, help="--smoke: steps per run")
    found.add_argument("--eval_every", type=int, default=1, help="--smoke: steps between evaluations")
    found.add_argument("--held_out", type=int, default=plan.HELD_OUT, help="--smoke: held-out problems")
    found.add_argument("--seeds", type=int, default=1, help="--smoke: seeds 0..SEEDS-1 of every arm")
    found.add_argument("--pair", default=None, help="--smoke: append each run to this JSON-lines file (gpu_check.sh)")
    return found


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.report:
        write_report(Path(args.data))
        return
    if not args.smoke and args.phase is None:
        parser().error("give --phase, --report or --smoke")
    if args.threads < 1 or (args.threads != 1 and args.phase == "timing"):
        parser().error("--threads: at least 1, and 1 for --phase timing (its costs price one thread)")
    if args.threads != 1 and args.engine != "vllm-cpu":
        parser().error(f"--threads sets the threads of --engine vllm-cpu runs; drop it for --engine {args.engine}")
    if args.pair and not args.smoke:
        parser().error("--pair saves the runs of --smoke: give --smoke")
    known = candidate_tasks() if args.smoke else {}
    if args.smoke and args.task not in known:
        parser().error(f"--task {args.task} is not a task of the race; its candidates: {', '.join(known)}")
    known_arms = [*plan.TUNING_ARMS, *plan.TRL_ARMS, *plan.raced_arms(0)]  # TRL's: "baseline"
    unknown = [arm for arm in args.arms or () if arm not in known_arms]
    if unknown:
        parser().error(f"unknown arm(s) {unknown}: the arms are {known_arms}")
    if mismatched := [why for arm in args.arms or () if (why := planner_mismatch(arm))]:
        parser().error(mismatched[0])
    if args.model is not None and not args.smoke and Path(args.data).resolve() == DATA.resolve():
        parser().error("--model trains another model: give its runs a folder of their own (--data)")
    if args.engine == "vllm-cpu":
        from trl_pods.vllm_engine import check_cpu_vllm

        torch.set_num_threads(args.threads)  # vLLM's CPU engine keeps it
        # the count trl_pods's trainer keeps too (`trl_pods.cpu.set_up_cpu`): without it, 2 threads on 2 cores would
        # read as torch's default and a PODSGRPOTrainer run would train on 1, a trl.GRPOTrainer run on 2
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default would take much more
        os.environ.setdefault("MASTER_PORT", str(free_port()))  # processes side by side would collide on 29500
        if not check_cpu_vllm():
            parser().error("--engine vllm-cpu needs vLLM's CPU build: run it in the vLLM environment")
    elif args.engine == "vllm-cuda" and not torch.cuda.is_available():
        parser().error("--engine vllm-cuda needs a CUDA GPU")
    if args.model is None:
        from trl_pods.smollm2 import fetch_smollm2

        model = fetch_smollm2()
    else:
        model = Path(args.model) if Path(args.model).exists() else args.model
    smoke(args, model, known[args.task]) if args.smoke else phase(args, model)


if __name__ == "__main__":
    main()

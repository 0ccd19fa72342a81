"""Training steps and groups with contrast per step: synchronous PODS (vLLM server mode), TRL's asynchronous GRPO, and
asynchronous PODS in every generation mode, all on a real vLLM CPU server.

The runs train the same LoRA adapter of the same model on the same prompts, with the same rows per optimizer step
(``--prompts`` prompts x M kept rollouts), against a real vLLM server on this machine:

* ``sync PODS N->M``: `PODSGRPOTrainer` in vLLM server mode (`trl vllm-serve`): generate N per prompt, score, keep M,
  train; generation and training take turns. TRL's weight transfer to that server is NCCL, which a CPU cannot run,
  so it is replaced as in the tests (tests/vllm_real.py): the trainer still merges and walks the weights at every
  step, but the server keeps the initial ones. This run therefore pays no transfer; the asynchronous ones do.
* ``async GRPO M``: TRL's `AsyncGRPOTrainer` (`vllm serve`, LoRA sync through TRL's own path), M rollouts per prompt.
* ``async PODS <mode>``: `PODSAsyncGRPOTrainer`, its rollout worker generating per `pods_generation` (`MODES`) and
  queuing the M kept: fixed (N per prompt), refill (N, groups without contrast dropped), adaptive (a pilot of M,
  doubled while the rewards agree, at most N), budgeted (``--budget`` per prompt on average over each window of
  ``--prompts`` prompts, from their history) and screened (a pilot of M for 2 x ``--prompts`` prompts, the rest of N
  for the ``--prompts`` the "frontier" rule picks). The asynchronous runs of a round share one server, which forgets
  the previous run's adapters in between.

The asynchronous runs batch a fixed number of rows per step (``token_budget=0``), so a step is ``--prompts x M`` rows
in all of them. Steps per minute are taken between the end of step ``--warmup`` and the last step (the start-up -- the
worker's child process, the server's first requests -- is left out); kept rows per minute are that times the rows
per step. Rollouts generated per minute are N per prompt per step for the synchronous run, and for asynchronous PODS
what its worker scored in the same window (`pods/rollouts_generated_total`); TRL's worker reports no such count, so
the column is empty for asynchronous GRPO. Groups with contrast per step are counted in what the trainer trains: the
collator's micro-batches (one per step), a group having contrast when its trained rows' rewards differ.

The model is the tests' tiny random Qwen2 (head_dim 32, which vLLM's CPU attention needs) unless ``--hidden`` makes
it wider. The reward (`reward`) makes prompts of four kinds, by the prompt's number: never solved, solved half the
time, solved one time in eight, always solved; so half the prompts can never show contrast, which is what the
generation modes act on. The server and the trainer share this machine's cores, so the asynchronous runs overlap
generation and training only as far as two processes on 2 cores can. Run in the vLLM test environment (README,
"Tests"); rewrites the ``async_throughput`` section of docs/benchmarks.md and its raw results,
docs/async_throughput.json::

    python benchmarks/async_throughput.py    # 2 rounds of 7 runs of 14 steps (about 10 minutes here)
    python benchmarks/async_throughput.py --rounds 4    # as measured in docs/benchmarks.md (about 15 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import REPO, command_line, environment, figure_path, write_section

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(REPO / "tests"))  # the real-server helpers the tests use (tests/vllm_real.py)

MODES = ("fixed", "refill", "adaptive", "budgeted", "screened")
METHODS = ("sync PODS", "async GRPO", *(f"async PODS {mode}" for mode in MODES))
STALENESS = 2


def reward(prompts, completion_ids, **kwargs) -> list[float]:
    """1 or 0 by the prompt's kind (its number mod 4): never, when the completion's token-id sum is even, when it is
    a multiple of 8, always. A deterministic reward with prompts of set difficulty (module level: picklable)."""
    rewards = []
    for prompt, ids in zip(prompts, completion_ids, strict=True):
        kind = int(re.search(r"What is (\d+)", prompt[-1]["content"]).group(1)) % 4
        rewards.append(float((False, sum(ids) % 2 == 0, sum(ids) % 8 == 0, True)[kind]))
    return rewards


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=8, help="rollouts generated per prompt (N)")
    parser.add_argument("--m", type=int, default=2, help="rollouts kept per prompt (M)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per optimizer step (and per window)")
    parser.add_argument("--budget", type=float, default=4.0, help="budgeted: mean rollouts per prompt")
    parser.add_argument("--steps", type=int, default=14, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=4, help="steps left out of the rates")
    parser.add_argument("--max_completion_length", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64, help="model width (head_dim 32)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all methods, order rotated")
    return parser


def _clock():
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Wall time at the end of every optimizer step."""

        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    return StepClock()


def _dataset():
    from datasets import Dataset

    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"What is {i} plus {i + 1}?"}] for i in range(64)]}
    )


def _lora():
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


COMMON = dict(use_cpu=True, report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0)


def run_sync(args: argparse.Namespace, model: Path, out: Path) -> dict:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from vllm_real import MAX_MODEL_LENGTH, VLLMServer, replace_nccl_weight_transfer

    from trl_pods import PODSConfig, PODSGRPOTrainer

    server = VLLMServer(model, out / "trl-vllm-serve.log")
    try:
        replace_nccl_weight_transfer(setattr, [])
        config = PODSConfig(
            output_dir=str(out / "sync"),
            pods_n=args.n,
            pods_m=args.m,
            per_device_train_batch_size=args.prompts * args.m,
            max_steps=args.steps,
            max_completion_length=args.max_completion_length,
            learning_rate=5e-3,
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=server.url,
            vllm_max_model_length=MAX_MODEL_LENGTH,
            **COMMON,
        )
        clock = _clock()
        trainer = PODSGRPOTrainer(
            AutoModelForCausalLM.from_pretrained(model),
            reward,
            config,
            train_dataset=_dataset(),
            processing_class=PreTrainedTokenizerFast.from_pretrained(model),
            peft_config=_lora(),
            callbacks=[clock],
        )
        trainer.train()
    finally:
        server.stop()
    logs = trainer.state.log_history[args.warmup : args.steps]
    constant = statistics.mean(entry["pods/frac_zero_std_groups_kept"] for entry in logs)
    rates = _rates(args, clock.times, generated_per_step=args.prompts * args.n)
    return {**rates, "contrast_per_step": args.prompts * (1 - constant)}


def _async_config(args: argparse.Namespace, method: str, settings: dict):
    """TRL's asynchronous config for ``async GRPO``, PODS's with the method's generation mode otherwise."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from trl_pods.async_grpo import PODSAsyncGRPOConfig

    if method == "async GRPO":
        return AsyncGRPOConfig(num_generations=args.m, **settings)
    mode = method.removeprefix("async PODS ")
    generation = {
        "budgeted": dict(pods_budget=args.budget, pods_window=args.prompts),
        "screened": dict(pods_window=args.prompts),
    }.get(mode, {})
    return PODSAsyncGRPOConfig(pods_n=args.n, pods_m=args.m, pods_generation=mode, **generation, **settings)


def run_async(args: argparse.Namespace, model: Path, out: Path, method: str, server) -> dict:
    from trl.experimental.async_grpo import AsyncGRPOTrainer
    from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout
    from vllm_real import async_tokenizer

    from trl_pods.async_cpu import use_async_trainer_on_cpu
    from trl_pods.async_grpo import PODSAsyncGRPOTrainer

    use_async_trainer_on_cpu()
    server.forget_training()  # the previous run's adapters, which this run's would be refused as
    settings = dict(
        output_dir=str(out / method.replace(" ", "-")),
        per_device_train_batch_size=args.prompts * args.m,
        token_budget=0,  # a fixed number of rows per step, as in the synchronous run
        max_steps=args.steps,
        max_completion_length=args.max_completion_length,
        learning_rate=5e-3,
        max_staleness=STALENESS,
        vllm_server_base_url=server.url,
        **COMMON,
    )
    trainer_class = AsyncGRPOTrainer if method == "async GRPO" else PODSAsyncGRPOTrainer
    batches, collate = [], DataCollatorForRollout.torch_call

    def recording(self, examples):
        batches.append([sample for row in examples[0] for sample in row.samples])
        return collate(self, examples)

    clock = _clock()
    DataCollatorForRollout.torch_call = recording
    try:
        trainer = trainer_class(
            str(model),
            reward,
            _async_config(args, method, settings),
            train_dataset=_dataset(),
            processing_class=async_tokenizer(model),
            peft_config=_lora(),
            callbacks=[clock],
        )
        trainer.train()
    finally:
        DataCollatorForRollout.torch_call = collate
    logs = trainer.state.log_history[args.warmup : args.steps]  # the steps after the warm-up ones
    waits = [entry["perf/rollout_wait_s"] for entry in logs if "perf/rollout_wait_s" in entry]
    syncs = [entry["perf/weight_sync_s"] for entry in logs if "perf/weight_sync_s" in entry]
    staleness_mean = statistics.mean(entry["sample/staleness_mean"] for entry in logs)
    stale = sum(entry.get("sample/dropped_stale_total", 0.0) for entry in logs)
    generated = sum(entry.get("pods/rollouts_generated_total", 0.0) for entry in logs) / len(logs)
    pods = method != "async GRPO"
    rates = _rates(args, clock.times, generated_per_step=generated if pods else None)  # None: not reported
    extra = {"wait_s_per_step": statistics.mean(waits), "sync_s_per_step": statistics.mean(syncs)}
    contrast = statistics.mean(_groups_with_contrast(batch) for batch in batches[args.warmup : args.steps])
    return {**rates, **extra, "staleness": staleness_mean, "stale_rows_dropped": stale, "contrast_per_step": contrast}


def _groups_with_contrast(samples: list[dict]) -> int:
    """Groups of a collated micro-batch whose trained rows' rewards differ."""
    rewards: dict[int, set[float]] = {}
    for sample in samples:
        rewards.setdefault(sample["group_id"], set()).add(sample["metrics"]["reward"])
    return sum(len(values) > 1 for values in rewards.values())


def _rates(args: argparse.Namespace, times: list[float], generated_per_step: float | None) -> dict:
    """Steps, kept rows and rollouts generated per minute between the end of the warm-up and the last step (no
    rollout rate where ``generated_per_step`` is None)."""
    window = times[args.warmup - 1 :]
    steps_per_minute = 60 * (len(window) - 1) / (window[-1] - window[0])
    rows = args.prompts * args.m
    return {
        "steps_per_minute": steps_per_minute,
        "kept_rows_per_minute": steps_per_minute * rows,
        "rollouts_per_minute": None if generated_per_step is None else steps_per_minute * generated_per_step,
        "step_s": statistics.median(b - a for a, b in zip(window[:-1], window[1:], strict=True)),
    }


def _count(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def report(args: argparse.Namespace, parser: argparse.ArgumentParser, results: dict[str, list[dict]]) -> str:
    n, m = args.n, args.m
    label = {"sync PODS": f"sync PODS {n}->{m} (server mode)", "async GRPO": f"async GRPO {m}"}
    label |= {f"async PODS {mode}": f"async PODS {n}->{m} {mode}" for mode in MODES}
    rows = [
        "| run | round | steps / min | groups with contrast / step | kept rows / min | rollouts generated / min | "
        "median step (s) | trainer wait / step (s) | weight sync / step (s) | mean staleness | stale rows dropped | "
        "load average (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, runs in results.items():
        for result in runs:
            if "staleness" in result:
                wait, sync = f"{result['wait_s_per_step']:.2f}", f"{result['sync_s_per_step']:.2f}"
                staleness, stale = f"{result['staleness']:.2f}", f"{result['stale_rows_dropped']:.0f}"
            else:
                wait, sync, staleness, stale = "–", "not transferred", "0 (on-policy)", "–"
            rows.append(
                f"| {label[method]} | {result['round']} | {result['steps_per_minute']:.1f} | "
                f"{result['contrast_per_step']:.2f} | {result['kept_rows_per_minute']:.0f} | "
                f"{_count(result['rollouts_per_minute'])} | {result['step_s']:.2f} | {wait} | {sync} | {staleness} | "
                f"{stale} | {result['load'][0]:.1f} -> {result['load'][1]:.1f} |"
            )
    means = [
        f"| {label[method]} | {statistics.mean(run['steps_per_minute'] for run in runs):.1f} | "
        f"{statistics.mean(run['contrast_per_step'] for run in runs):.2f} | "
        f"{statistics.mean(run['steps_per_minute'] * run['contrast_per_step'] for run in runs):.0f} |"
        for method, runs in results.items()
    ]
    return f"""## Asynchronous PODS in every generation mode on a real vLLM CPU server

`PODSAsyncGRPOTrainer` (PODS in TRL's asynchronous rollout worker) in every generation mode, against TRL's
`AsyncGRPOTrainer` and the synchronous `PODSGRPOTrainer` in vLLM server mode:

- every run: {args.prompts} prompts x {m} kept rows per optimizer step, {args.max_completion_length}-token completions,
  LoRA r=8, a random Qwen2 (hidden {args.hidden}, {args.layers} layers);
- the reward makes four kinds of prompts (never solved, solved half the time, one time in eight, always), so half
  the groups can never show contrast;
- the modes: refill drops groups without contrast; adaptive pilots {m} rollouts and doubles them while the rewards
  agree (at most {n}); budgeted gives {args.budget:g} rollouts per prompt on average over each window of
  {args.prompts} prompts, from their history; screened pilots {m} rollouts for 2 x {args.prompts} prompts and gives the
  rest of {n} to the {args.prompts} the "frontier" rule picks;
- rates and groups with contrast between the end of step {args.warmup} and step {args.steps}; a group has contrast
  when its trained rows' rewards differ ({args.prompts} groups are trained per step);
- the synchronous run's server keeps its initial weights (NCCL transfer replaced, see the script); the asynchronous
  runs sync their adapter every step and share one server per round;
- the runs follow one another in one invocation, {args.rounds} round(s) with the order rotated, so the rows were
  measured side by side; the machine is shared, so each row gives the load average at its start and end.

Raw results: [async_throughput.json](async_throughput.json).

{chr(10).join(rows)}

Means over the rounds:

| run | steps / min | groups with contrast / step | groups with contrast / min |
|---|---|---|---|
{chr(10).join(means)}

- Command: `{command_line("async_throughput.py", parser, args)}` (vLLM test environment)
{environment()}
"""


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    from vllm_real import OpenAIServer, build_tiny_model

    results: dict[str, list[dict]] = {method: [] for method in args.methods}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        model = build_tiny_model(
            out / "model",
            hidden_size=args.hidden,
            num_attention_heads=args.hidden // 32,
            num_key_value_heads=1,
            intermediate_size=2 * args.hidden,
            num_hidden_layers=args.layers,
        )
        for round_ in range(args.rounds):
            run = out / f"{round_}"
            run.mkdir()
            order = args.methods[round_ % len(args.methods) :] + args.methods[: round_ % len(args.methods)]
            server = None  # the asynchronous runs' server, stopped while the synchronous run's serves
            try:
                for method in order:
                    if method == "sync PODS" and server is not None:
                        server.stop()
                        server = None
                    elif method != "sync PODS" and server is None:
                        server = OpenAIServer(model, run / f"vllm-serve-{method}.log", max_loras=STALENESS + 2)
                    start, load = time.perf_counter(), os.getloadavg()[0]
                    if method == "sync PODS":
                        result = run_sync(args, model, run)
                    else:
                        result = run_async(args, model, run, method, server)
                    results[method].append({**result, "round": round_, "load": (load, os.getloadavg()[0])})
                    print(f"{method}: {results[method][-1]} ({time.perf_counter() - start:.0f} s)", flush=True)
            finally:
                if server is not None:
                    server.stop()
    raw = {"args": vars(args), "results": results}
    figure_path("async_throughput.json").write_text(json.dumps(raw, indent=1) + "\n")
    write_section("async_throughput", report(args, parser, results))


if __name__ == "__main__":
    main()

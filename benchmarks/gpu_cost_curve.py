"""What a rollout and a trained row cost on a GPU: generation and update time against batch size, in one process.

The races price an optimizer step by its generation calls, rollouts and trained rows (`race_report.step_seconds`). On
a GPU one `generate` call decodes its rollouts in parallel, so its time may hardly grow with their number until the GPU
is busy: this measures that curve (`time_to_target.py`'s H200 pricing is its fits for SmolLM2-135M with LoRA).

On a random-weight bf16 model of a real checkpoint's shape (``--shape``): Qwen2.5-0.5B's or -1.5B's (`QWEN25`: full
fine-tuning, gradient checkpointing), or SmolLM2-135M-Instruct's (the races' model), which with ``--lora`` trains
through the demo's LoRA adapters. In one process, interleaved in rounds (the order rotated each round; round 0 is
warm-up, left out), ``torch.cuda.synchronize()`` around every timed call:

* generation: one HF ``generate`` call of R rollouts (``--rollouts``) of a ``--prompt_tokens`` prompt, forced to
  ``--tokens`` new tokens, sampling at temperature 1;
* update: one optimizer step on W rows (``--rows``): forward, cross-entropy on the completion, backward, in
  micro-batches of at most 16 rows, then AdamW and ``zero_grad``.

Reported: medians over rounds and the least-squares fits generation = a x R + g (g: a call's cost whatever its size)
and update = b x W + u; each measurement saved as ``docs/benchmarks/data/gpu_cost_curve_<shape>[_lora].json``.

    python benchmarks/gpu_cost_curve.py                 # on a CUDA GPU: Qwen2.5-0.5B's shape, then the page
    python benchmarks/gpu_cost_curve.py --shape SmolLM2-135M --lora --tokens 16 --prompt_tokens 40 --rounds 5
    python benchmarks/gpu_cost_curve.py --report        # the page from the saved measurements
    python benchmarks/gpu_cost_curve.py --smoke         # CPU or GPU: a tiny fp32 model, prints, writes nothing
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from harness import DATA, REPO, cpu_model, generated, interleaved, notes, spread, versions, write_pages

sys.path.insert(0, str(REPO / "tests"))  # the tests' tokenizer and model builder

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tiny_model import build_tokenizer, tiny_qwen2  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

MICRO_BATCH = 16
SMOLLM2_135M = dict(  # SmolLM2-135M-Instruct's config.json, less its token ids and rotary settings
    vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
)  # fmt: skip
QWEN25 = {  # the Qwen2Config sizes of a Qwen2.5 checkpoint (tied embeddings; its vocabulary: QWEN25_VOCAB)
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2),
}  # fmt: skip
QWEN25_VOCAB = 151_936
SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
SMOKE_VOCAB, SMOKE_TOKENS = 1024, 8  # --smoke: a tiny fp32 model of either architecture, 8 completion tokens
MODELS = [*QWEN25, "SmolLM2-135M"]  # --shape


def build_model(args: argparse.Namespace, tokens: int) -> torch.nn.Module:
    """The random-weight model ``args`` name on the current device, bf16 (fp32 in smoke mode), ready to train: with
    the demo's LoRA adapters under ``--lora``, else fully trainable with gradient checkpointing."""
    positions = args.prompt_tokens + tokens
    if args.shape == "SmolLM2-135M":  # smoke: the Llama architecture at the smoke model's sizes
        tiny = dict(SMOKE, vocab_size=SMOKE_VOCAB, head_dim=16) if args.smoke else {}
        config = LlamaConfig(**{**SMOLLM2_135M, **tiny}, max_position_embeddings=positions, pad_token_id=2,
                             eos_token_id=2)  # fmt: skip
        model = LlamaForCausalLM(config)
    else:
        model = tiny_qwen2(build_tokenizer(), **(SMOKE if args.smoke else QWEN25[args.shape]),
                           max_position_embeddings=positions)  # fmt: skip
        model.resize_token_embeddings(SMOKE_VOCAB if args.smoke else QWEN25_VOCAB, mean_resizing=False)
    model.to(torch.float32 if args.smoke else torch.bfloat16)
    model.config.use_cache = True  # generate with the KV cache; checkpointing acts only in training mode
    if not args.lora:
        model.gradient_checkpointing_enable()
        return model
    from peft import get_peft_model
    from trl import get_peft_config

    from trl_pods.demo import demo_arguments

    _, _, model_args = demo_arguments(Path("unused"), Path("unused"))
    return get_peft_model(model, get_peft_config(model_args))


def label(result: dict) -> str:
    """A measurement's model in words, e.g. 'Qwen2.5-0.5B shape' or 'SmolLM2-135M shape, LoRA'."""
    shape = result["shape"] if result["shape"].startswith("SmolLM2") else f"Qwen2.5-{result['shape']}"
    return f"{shape} shape" + (", LoRA" if result["lora"] else "")


def sync() -> float:
    """Wait for the device; the time."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def generation_seconds(model, rollouts: int, prompt_tokens: int, tokens: int) -> float:
    """One ``generate`` call of ``rollouts`` sampled completions of exactly ``tokens`` tokens."""
    prompt = torch.randint(0, model.config.vocab_size, (rollouts, prompt_tokens), device=model.device)
    began = sync()
    model.generate(input_ids=prompt, do_sample=True, max_new_tokens=tokens, min_new_tokens=tokens, top_k=0, top_p=1.0)
    return sync() - began


def update_seconds(model, optimizer, rows: int, prompt_tokens: int, tokens: int) -> float:
    """One optimizer step on ``rows`` rows of prompt + ``tokens`` completion tokens in micro-batches of 16."""
    sequences = torch.randint(0, model.config.vocab_size, (rows, prompt_tokens + tokens), device=model.device)
    began = sync()
    for micro in sequences.split(MICRO_BATCH):
        logits = model(input_ids=micro).logits[:, prompt_tokens - 1 : -1].float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), micro[:, prompt_tokens:].flatten())
        (loss * len(micro) / rows).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return sync() - began


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    """``python benchmarks/gpu_cost_curve.py`` with the flags of ``args`` that differ from their defaults."""
    defaults, flags = vars(parser.parse_args([])), []
    for key, value in vars(args).items():
        if key not in ("smoke", "report") and value != defaults[key]:
            flags += [f"--{key}", *([] if value is True else value if isinstance(value, list) else [value])]
    return shlex.join(["python", "benchmarks/gpu_cost_curve.py", *map(str, flags)])


def measure(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """Every size of both phases in each of ``args.rounds + 1`` rounds; the raw times of the measured rounds."""
    tokens = SMOKE_TOKENS if args.smoke else args.tokens
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(1)
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = build_model(args, tokens)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6, foreach=True)
    jobs = [("generation", r) for r in args.rollouts] + [("update", w) for w in args.rows]
    times: dict[str, dict[int, list[float]]] = {"generation": {}, "update": {}}
    for round_, (phase, size) in interleaved(jobs, args.rounds + 1):
        if phase == "generation":
            model.eval()
            with torch.no_grad():
                seconds = generation_seconds(model, size, args.prompt_tokens, tokens)
        else:
            model.train()
            seconds = update_seconds(model, optimizer, size, args.prompt_tokens, tokens)
        if round_:
            times[phase].setdefault(size, []).append(seconds)
        print(f"round {round_} {phase} {size}: {seconds:.3f} s", flush=True)
    shape = "smoke" if args.smoke else args.shape
    return {
        "name": f"gpu_cost_curve_{shape}" + ("_lora" if args.lora else ""),
        "shape": shape,
        "lora": args.lora,
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "tokens": tokens,
        "prompt_tokens": args.prompt_tokens,
        "micro_batch": MICRO_BATCH,
        "rounds": args.rounds,
        "device": torch.cuda.get_device_name() if cuda else f"CPU: {cpu_model()}",
        "versions": versions(("torch", "transformers")),
        "times": times,
        "command": command(args, parser),
    }


def measurement(name: str) -> dict:
    """The saved measurement ``docs/benchmarks/data/gpu_cost_curve_<name>.json``, e.g. ``"SmolLM2-135M_lora"``."""
    return json.loads((DATA / f"gpu_cost_curve_{name}.json").read_text())


def summary(result: dict) -> dict[str, tuple[float, float]]:
    """Per phase: the fit (slope per rollout or row, intercept) of the median times."""
    fits = {}
    for phase, by_size in result["times"].items():
        sizes = sorted(by_size, key=int)
        slope, intercept = np.polyfit([int(s) for s in sizes], [statistics.median(by_size[s]) for s in sizes], 1)
        fits[phase] = float(slope), float(intercept)
    return fits


def section(result: dict) -> str:
    """One measurement: its setting, the median (min–max) seconds per size, and the fits."""
    fits = summary(result)
    (a, g), (b, u) = fits["generation"], fits["update"]
    rows = [
        f"| {phase} | {size} {'rollouts' if phase == 'generation' else 'rows'} | "
        f"{spread(values, 3, statistics.median)} | {1000 * statistics.median(values) / int(size):.1f} |"
        for phase, by_size in result["times"].items()
        for size, values in sorted(by_size.items(), key=lambda item: int(item[0]))
    ]
    trained = "LoRA adapters" if result["lora"] else "full fine-tuning, gradient checkpointing"
    return f"""## {result["device"]}, {label(result)}, {result["tokens"]} completion tokens

Each call of a {result["prompt_tokens"]}-token prompt and {result["tokens"]} completion tokens, on a random-weight
{result["dtype"]} model of {label(result)} ({result["parameters"]:,} parameters, {result["trainable"]:,} trained;
{trained}; micro-batches of {result["micro_batch"]} rows, AdamW), {result["rounds"]} measured rounds after a warm-up
round. Versions: {", ".join(f"{k} {v}" for k, v in result["versions"].items())}. Raw:
[data/{result["name"]}.json](data/{result["name"]}.json).

| phase | size | seconds, median (min–max over rounds) | ms per rollout or row |
|---|---|---|---|
{chr(10).join(rows)}

Fits: generation = {1000 * a:.2f} ms × rollouts + {g:.3f} s per call; update = {1000 * b:.2f} ms × rows + {u:.3f} s per
step; a / b = {a / b:.3f}.

- Command: `{result["command"]}`"""


def render() -> str:
    """The page, from every saved measurement and the notes written beside them."""
    measurements = [json.loads(path.read_text()) for path in sorted(DATA.glob("gpu_cost_curve*.json"))]
    sections = "\n".join(section(m) + "\n" for m in measurements)
    return generated(
        "GPU: what a rollout and a trained row cost",
        "gpu_cost_curve.py",
        "gpu_cost_curve",
        f"""{notes("gpu_cost_curve")}

One HF `generate` call of R rollouts and one optimizer step on W rows, timed in one process, interleaved in
rounds (the order rotated each round), with `torch.cuda.synchronize()` around every call, on a random-weight model of
a real checkpoint's shape; the fits are least squares over the sizes' medians. The time-to-target study prices its
runs with the SmolLM2-135M measurement. `benchmarks/gpu_cost_curve.py`'s docstring has the details.

{sections}""",
    )


PAGES = {"gpu-cost-curve": render}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: print the results, write nothing")
    parser.add_argument("--report", action="store_true", help="write the page from the saved data, measuring nothing")
    parser.add_argument("--shape", default="0.5B", choices=MODELS, help="the checkpoint whose shape the model takes")
    parser.add_argument("--lora", action="store_true", help="train the demo's LoRA adapters instead of every weight")
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens per rollout and row")
    parser.add_argument("--prompt_tokens", type=int, default=32, help="prompt tokens per rollout and row")
    parser.add_argument("--rollouts", type=int, nargs="+", default=[4, 16, 64, 256], help="rollouts per call")
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 16, 64], help="rows per optimizer step")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (one warm-up round more)")
    args = parser.parse_args()
    if not args.report:
        result = measure(args, parser)
        if args.smoke:
            print(section(result), "smoke run: nothing written", sep="\n")
            return
        (DATA / f"{result['name']}.json").write_text(json.dumps(result) + "\n")
    write_pages(PAGES)


if __name__ == "__main__":
    main()

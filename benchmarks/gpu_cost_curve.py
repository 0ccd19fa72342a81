"""What a rollout and a trained row cost on a GPU: generation and update time against batch size, in one process.

`time_to_target.py` prices an optimizer step as a x rollouts generated + b x rows trained + c, fitted on a 2-core
CPU, where generation grows with every rollout. On a GPU one `generate` call decodes its rollouts in parallel, so its
time may hardly grow with their number until the GPU is busy: this measures that curve, for the projection of
`time_to_target.py` (its GPU section reads the saved result).

On the random-weight model of `gpu_step.py`'s ``--shape`` (bf16, gradient checkpointing, the 151,936-token
vocabulary), in one process, interleaved in rounds (the order rotated each round; round 0 is warm-up, left out):

* generation: one HF ``model.generate`` call of R rollouts (``--rollouts``) of a 32-token prompt, sampling at
  temperature 1, forced to ``--tokens`` new tokens (``min_new_tokens``);
* update: one optimizer step on W rows (``--rows``) of prompt + completion tokens: forward, cross-entropy on the
  completion, backward, in micro-batches of at most 16 rows (gradient accumulation, as `gpu_step.py`), then AdamW
  (``foreach``) and ``zero_grad``.

``torch.cuda.synchronize()`` brackets every timed call. Reported: medians over rounds, and least-squares fits
generation = a x R + g (g: a call's cost whatever its size) and update = b x W + u.

    python benchmarks/gpu_cost_curve.py                 # on a CUDA GPU: rewrites the gpu_cost_curve section
    python benchmarks/gpu_cost_curve.py --smoke         # CPU or GPU: a tiny fp32 model, prints, writes nothing
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import _report

sys.path.insert(0, str(_report.REPO / "tests"))  # the tests' tokenizer and model builder

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gpu_step import FULL, SHAPES, SMOKE  # noqa: E402
from tiny_model import build_tokenizer, tiny_qwen2  # noqa: E402

SECTION = "gpu_cost_curve"
PROMPT_TOKENS = 32
MICRO_BATCH = 16


def sync() -> float:
    """Wait for the device; the time."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def generation_seconds(model, rollouts: int, tokens: int, vocab: int) -> float:
    """One ``generate`` call of ``rollouts`` sampled completions of exactly ``tokens`` tokens."""
    prompt = torch.randint(0, vocab, (rollouts, PROMPT_TOKENS), device=model.device)
    began = sync()
    model.generate(prompt, do_sample=True, max_new_tokens=tokens, min_new_tokens=tokens, top_k=0, top_p=1.0)
    return sync() - began


def update_seconds(model, optimizer, rows: int, tokens: int, vocab: int) -> float:
    """One optimizer step on ``rows`` rows of prompt + ``tokens`` completion tokens in micro-batches of 16."""
    sequences = torch.randint(0, vocab, (rows, PROMPT_TOKENS + tokens), device=model.device)
    began = sync()
    for micro in sequences.split(MICRO_BATCH):
        logits = model(micro).logits[:, PROMPT_TOKENS - 1 : -1].float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), micro[:, PROMPT_TOKENS:].flatten())
        (loss * len(micro) / rows).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return sync() - began


def fit(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least squares ``seconds = slope x size + intercept``."""
    slope, intercept = np.polyfit(np.array(sizes, dtype=float), np.array(seconds, dtype=float), 1)
    return float(slope), float(intercept)


def measure(args: argparse.Namespace) -> dict:
    """Every size of both phases in each of ``args.rounds + 1`` rounds; the raw times of the measured rounds."""
    setting = SMOKE if args.smoke else FULL
    shape = setting.model if args.smoke else SHAPES[args.shape]
    tokens = setting.tokens if args.smoke else args.tokens
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = tiny_qwen2(tokenizer, **shape, max_position_embeddings=PROMPT_TOKENS + tokens)
        model.resize_token_embeddings(setting.vocab_size, mean_resizing=False)
    model.to(getattr(torch, setting.dtype))
    model.gradient_checkpointing_enable()
    model.config.use_cache = True  # generate with the KV cache; checkpointing acts only in training mode
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, foreach=True)
    jobs = [("generation", r) for r in args.rollouts] + [("update", w) for w in args.rows]
    times: dict[str, dict[int, list[float]]] = {"generation": {}, "update": {}}
    for round_ in range(args.rounds + 1):
        for phase, size in jobs[round_ % len(jobs) :] + jobs[: round_ % len(jobs)]:
            if phase == "generation":
                model.eval()
                with torch.no_grad():
                    seconds = generation_seconds(model, size, tokens, setting.vocab_size)
            else:
                model.train()
                seconds = update_seconds(model, optimizer, size, tokens, setting.vocab_size)
            if round_:
                times[phase].setdefault(size, []).append(seconds)
            print(f"round {round_} {phase} {size}: {seconds:.3f} s", flush=True)
    return {
        "shape": "smoke" if args.smoke else args.shape,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens": tokens,
        "prompt_tokens": PROMPT_TOKENS,
        "micro_batch": MICRO_BATCH,
        "rounds": args.rounds,
        "device": torch.cuda.get_device_name() if cuda else f"CPU: {_report.cpu_model()}",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "times": times,
    }


def summary(result: dict) -> dict[str, tuple[float, float]]:
    """Per phase: the fit (slope per rollout or row, intercept) of the median times."""
    fits = {}
    for phase, by_size in result["times"].items():
        sizes = sorted(by_size, key=int)
        fits[phase] = fit([int(s) for s in sizes], [statistics.median(by_size[s]) for s in sizes])
    return fits


def table(result: dict) -> str:
    """The markdown table of median (min–max) seconds per size, and the fits."""
    fits = summary(result)
    (a, g), (b, u) = fits["generation"], fits["update"]
    rows = []
    for phase, by_size in result["times"].items():
        for size in sorted(by_size, key=int):
            values = by_size[size]
            unit = "rollouts" if phase == "generation" else "rows"
            rows.append(
                f"| {phase} | {size} {unit} | {statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f}) | "
                f"{1000 * statistics.median(values) / int(size):.1f} |"
            )
    return "\n".join(
        [
            "| phase | size | seconds, median (min–max over rounds) | ms per rollout or row |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Fits: generation = {1000 * a:.2f} ms × rollouts + {g:.3f} s per call; update = {1000 * b:.2f} ms × rows "
            f"+ {u:.3f} s per step; a / b = {a / b:.3f}.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="0.5B", choices=list(SHAPES), help="Qwen2.5 shape of the random model")
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens per rollout and row")
    parser.add_argument("--rollouts", type=int, nargs="+", default=[4, 16, 64, 256], help="rollouts per call")
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 16, 64], help="rows per optimizer step")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (one warm-up round more)")
    parser.add_argument("--smoke", action="store_true", help="a tiny fp32 model, 8 tokens; prints, writes nothing")
    args = parser.parse_args()
    result = measure(args)
    print(table(result))
    if args.smoke:
        print("smoke run: nothing written")
        return
    raw = _report.figure_path(f"{SECTION}_{args.shape}.json")
    raw.write_text(json.dumps(result) + "\n")
    _report.write_section(
        SECTION,
        f"""## GPU: what a rollout and a trained row cost ({result["device"]}, Qwen2.5-{args.shape} shape)

`benchmarks/gpu_cost_curve.py`: one HF `generate` call of R rollouts, and one optimizer step on W rows, each of a
{PROMPT_TOKENS}-token prompt and {result["tokens"]} completion tokens, on the random-weight model of `gpu_step.py`
({result["parameters"]:,} parameters, bf16, gradient checkpointing, micro-batches of {MICRO_BATCH} rows, AdamW),
interleaved in one process over {result["rounds"]} measured rounds after a warm-up round. Versions:
{", ".join(f"{k} {v}" for k, v in result["versions"].items())}. Raw: [{raw.name}]({raw.name}).

{table(result)}

- Command: `python benchmarks/gpu_cost_curve.py --shape {args.shape} --tokens {args.tokens} --rounds {args.rounds}`
""",
    )


if __name__ == "__main__":
    main()

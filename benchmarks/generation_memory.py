"""Peak generation memory against N, with and without generation in rounds (`pods_generation_chunk_size`).

Each (N, chunk) point runs in a fresh process, so the kernel's peak resident set size (``ru_maxrss``) is the peak of
that point alone. The process builds a random-weight Qwen2 model (hidden 256, 4 layers, 300-token vocabulary, so the
KV cache dominates), wraps it in `PODSGRPOTrainer`, and generates N rollouts of one prompt through the trainer's own
generation path (HF ``generate``; rounds of at most ``chunk`` sequences when set) with every completion forced to
``--tokens`` tokens. Reported: the peak RSS minus the RSS just before generating, i.e. what generation added.

vLLM needs none of this: it already admits at most ``max_num_seqs`` sequences at a time and pages its KV cache, so
its memory is bounded whatever N is (the option is refused with vLLM).

    python benchmarks/generation_memory.py           # N in {16, 64, 256}, rounds of 16, 128 tokens
    python benchmarks/generation_memory.py --quick   # N in {16, 64}, 64 tokens
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import REPO, environment, figure_path, write_section

sys.path.insert(0, str(REPO / "tests"))


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(n: int, chunk: int | None, tokens: int) -> dict:
    """Run in a child process: generate N rollouts; return the memory added by generation and the time taken."""
    from tiny_model import build_tokenizer, tiny_qwen2

    from trl_pods import PODSConfig, PODSGRPOTrainer

    tokenizer = build_tokenizer()
    model = tiny_qwen2(
        tokenizer, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=8, max_position_embeddings=2048,
    )  # fmt: skip
    prompt = [{"role": "user", "content": "What is 12 plus 7?"}]
    with tempfile.TemporaryDirectory() as out:
        args = PODSConfig(
            output_dir=out, pods_n=n, pods_m=2, per_device_train_batch_size=2, max_completion_length=tokens,
            pods_generation_chunk_size=chunk, generation_kwargs={"min_new_tokens": tokens}, use_cpu=True,
            bf16=False, report_to=[], gradient_checkpointing=False, pods_selection_log=False,
        )  # fmt: skip
        from datasets import Dataset

        dataset = Dataset.from_dict({"prompt": [prompt] * 4})
        trainer = PODSGRPOTrainer(model, lambda completions, **kw: [0.0] * len(completions), args,
                                  train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
        trainer.model.train()
        before = _rss_bytes()
        start = time.perf_counter()
        completion_ids = trainer._generate([prompt] * n)[1]
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert len(completion_ids) == n and all(len(ids) == tokens for ids in completion_ids)
    return {"n": n, "chunk": chunk, "added_mib": (peak - before) / 2**20, "seconds": seconds}


def run_point(n: int, chunk: int | None, tokens: int) -> dict:
    code = f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import generation_memory as g, json; "
    code += f"print(json.dumps(g.measure({n}, {chunk}, {tokens})))"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes, tokens, chunk = ([16, 64], 64, 16) if args.quick else ([16, 64, 256], 128, 16)
    points = [run_point(n, c, tokens) for n in sizes for c in (None, chunk)]
    for p in points:
        print(p)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for c, label in ((None, "all N at once"), (chunk, f"rounds of {chunk}")):
        xs = [p["n"] for p in points if p["chunk"] == c]
        ax.plot(xs, [p["added_mib"] for p in points if p["chunk"] == c], marker="o", label=label)
    ax.set(xscale="log", xlabel="rollouts per prompt N", ylabel="peak memory added by generation (MiB)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(figure_path("generation_memory.png"), dpi=120)

    rows = "\n".join(
        f"| {n} | {a['added_mib']:.0f} | {b['added_mib']:.0f} | {a['added_mib'] / max(b['added_mib'], 1e-9):.1f}x "
        f"| {a['seconds']:.1f} | {b['seconds']:.1f} |"
        for n in sizes
        for a, b in [[p for p in points if p["n"] == n]]
    )
    command = "python benchmarks/generation_memory.py" + (" --quick" if args.quick else "")
    write_section(
        "generation_memory",
        f"""## Generation memory vs N: all at once or in rounds (issue: memory-bounded generation)

Peak resident memory added by generating N rollouts of {tokens} tokens with HF `generate` through
`PODSGRPOTrainer` (random Qwen2, hidden 256, 4 layers), all N sequences at once versus
`pods_generation_chunk_size={chunk}`. Each point is a fresh process (`ru_maxrss`); times are single runs.

| N | all at once (MiB) | rounds of {chunk} (MiB) | ratio | all at once (s) | rounds (s) |
|---|---|---|---|---|---|
{rows}

![generation memory](generation_memory.png)

With rounds the peak stays roughly flat as N grows (it is set by the round size); all at once it grows with N,
because the KV cache holds every sequence. vLLM bounds this itself (`max_num_seqs`, paged KV cache).

- Command: `{command}`
{environment()}
""",
    )


if __name__ == "__main__":
    main()

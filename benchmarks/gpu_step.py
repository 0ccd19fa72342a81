"""Step time and peak GPU memory of PODS 64→16 against GRPO 16 and GRPO-GA 64 on Qwen2.5-0.5B and -1.5B shapes, bf16.

Three variants of `trl_pods.PODSGRPOTrainer`, each consuming 1 prompt per optimizer step, with the same backward
micro-batch (``per_device_train_batch_size = 16`` completions, the knob that sets the update's activation memory):

* ``PODS 64→16``: generate and score N = 64 rollouts, keep M = 16 (max-variance), train on them in 1 micro-batch.
* ``GRPO 16``:    pods_n = pods_m = 16, which is plain GRPO exactly (the trainer's documented equivalence).
* ``GRPO-GA 64``: pods_n = pods_m = 64, trained in 4 micro-batches of 16 (``gradient_accumulation_steps = 4``).

``steps_per_generation`` is left at TRL's default (the gradient accumulation steps), so every variant generates once
per optimizer step and TRL skips the old-log-prob pass; ``beta = 0`` (TRL's default) means no reference model.

The model is a random-weight Qwen2 shaped like a Qwen2.5 checkpoint (``--shape``): Qwen2.5-0.5B (the default;
hidden 896, MLP 4864, 24 layers, 14 query and 2 key-value heads: about 494M parameters) or Qwen2.5-1.5B (hidden 1536,
MLP 8960, 28 layers, 12 query and 2 key-value heads: about 1.54B parameters), both with tied embeddings and a
151,936-token vocabulary, built by the tests' ``tiny_qwen2`` directly on the GPU in bf16 (weights, gradients and
AdamW states all bf16, as TRL loads a Qwen2.5 checkpoint) and trained with ``bf16=True`` and gradient checkpointing.
The tokenizer is the tests' 300-token byte-level BPE (tests/tiny_model.py): the embedding is resized to Qwen2.5's
vocabulary so the logits cost what they cost in Qwen2.5; sampled ids past the tokenizer's 300 simply decode to
nothing. Completions are forced to 256 tokens (``min_new_tokens``) so every rollout has the same length; the reward
is the tests' ``token_sum_reward`` (a hash of the token ids, so groups have spread). Generation is HF ``generate``.

Each variant runs in a fresh subprocess (so memory peaks and allocator caches do not mix): one ``trainer.train()``
of 1 warm-up step plus ``--steps`` measured steps (5 by default). A callback and a trainer subclass measure every
optimizer step in place, calling ``torch.cuda.synchronize()`` at each mark:

* step time: ``time.perf_counter`` from ``on_step_begin`` to ``on_step_end`` (generation, scoring, selection, TRL's
  batch preparation, forward, backward, gradient clipping, ``optimizer.step``, ``zero_grad``);
* generation phase: from ``on_step_begin`` to the end of PODS's phase 1 (``_generate_score_and_select``: generate,
  score and select the rollouts); update phase: from there to ``on_step_end`` (TRL's pipeline on the kept rows,
  forward, backward and optimizer, over every micro-batch of the step);
* memory: ``torch.cuda.memory_allocated()`` at ``on_step_begin`` (resident: weights and optimizer states) and
  ``torch.cuda.max_memory_allocated()`` over each phase (``reset_peak_memory_stats()`` at each mark); the step's
  peak is the larger of the two phase peaks.

Reported per variant: the median over measured steps of the times and the maximum of the peaks; ratios
(PODS ÷ GRPO 16, GRPO-GA 64 ÷ PODS) are of those values. Per rollout: the generation phase time divided by the
rollouts generated and the update phase time divided by the rollouts trained on. Memory is what PyTorch's caching
allocator handed out to tensors; the CUDA context and the allocator's cached-but-free blocks come on top.

Run from the repository root on a machine with a CUDA GPU. A run saves its measurements (settings, versions, device,
every measured step) to docs/gpu_step_SHAPE.json and its figure to docs/gpu_step_SHAPE.png, then rewrites the
``gpu_step`` section of docs/benchmarks.md from every docs/gpu_step_SHAPE.json present, one subsection per shape, so
each shape can be measured (again) on its own::

    python benchmarks/gpu_step.py                          # Qwen2.5-0.5B's shape, 5 measured steps per variant
    python benchmarks/gpu_step.py --shape 1.5B --steps 3   # Qwen2.5-1.5B's shape, 3 measured steps per variant
    python benchmarks/gpu_step.py --smoke      # CPU or GPU: a tiny fp32 model, N = 8 → M = 4, 8-token completions;
                                               # the same code path end to end, prints the tables, writes nothing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _report

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(_report.REPO / "tests"))  # the tests' tokenizer, model builder, prompts and reward

import torch  # noqa: E402
from helpers import prompts_dataset, token_sum_reward  # noqa: E402
from tiny_model import build_tokenizer, tiny_qwen2  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

from trl_pods import PODSConfig, PODSGRPOTrainer  # noqa: E402

SECTION = "gpu_step"
GIB = 2**30
WARMUP_STEPS = 1
VARIANTS = ("pods", "grpo", "grpo_ga")


@dataclasses.dataclass(frozen=True)
class Setting:
    n: int  # rollouts generated per prompt by PODS
    m: int  # rollouts kept per prompt by PODS
    micro_batch: int  # per_device_train_batch_size: completions per backward pass, the same in every variant
    prompts: int  # prompts per optimizer step, the same in every variant
    tokens: int  # completion length, forced
    vocab_size: int
    model: dict  # Qwen2Config sizes for tiny_qwen2
    dtype: str  # name of the torch dtype of the weights, gradients and optimizer states
    steps: int  # measured optimizer steps per variant (default of --steps)

    def variant(self, key: str) -> tuple[str, int, int, int]:
        """``(label, pods_n, pods_m, gradient_accumulation_steps)`` of a variant."""
        n, m = {"pods": (self.n, self.m), "grpo": (self.m, self.m), "grpo_ga": (self.n, self.n)}[key]
        label = {"pods": f"PODS {n}→{m}", "grpo": f"GRPO {m}", "grpo_ga": f"GRPO-GA {n}"}[key]
        return label, n, m, self.prompts * m // self.micro_batch


SHAPES = {  # --shape: the Qwen2Config sizes of a Qwen2.5 checkpoint (tied embeddings and vocabulary are common)
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2),
}  # fmt: skip
FULL = Setting(
    n=64, m=16, micro_batch=16, prompts=1, tokens=256, vocab_size=151_936, dtype="bfloat16", steps=5,
    model=SHAPES["0.5B"],
)  # fmt: skip
SMOKE = Setting(
    n=8, m=4, micro_batch=4, prompts=1, tokens=8, vocab_size=1024, dtype="float32", steps=2,
    model=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2),
)  # fmt: skip


class StepMeter(TrainerCallback):
    """Per optimizer step: wall time and peak allocated memory of the generation phase and of the update phase."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.steps: list[dict] = []
        self._record: dict = {}
        self._began = self._phase1_ended = 0.0

    def _mark(self) -> tuple[float, float]:
        """Wait for the device; return the time and the peak memory (GiB) since the last mark, and restart the peak."""
        if not self.cuda:
            return time.perf_counter(), math.nan
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / GIB
        torch.cuda.reset_peak_memory_stats()
        return time.perf_counter(), peak

    def on_step_begin(self, args, state, control, **kwargs):
        self._began, _ = self._mark()
        self._record = {"resident_gib": torch.cuda.memory_allocated() / GIB if self.cuda else math.nan}

    def end_phase1(self) -> None:
        self._phase1_ended, peak = self._mark()
        self._record.update(generation_s=self._phase1_ended - self._began, generation_peak_gib=peak)

    def on_step_end(self, args, state, control, **kwargs):
        now, peak = self._mark()
        if "generation_s" not in self._record:
            raise RuntimeError("an optimizer step without generation: steps_per_generation must equal GA")
        self._record.update(update_s=now - self._phase1_ended, update_peak_gib=peak, step_s=now - self._began)
        self.steps.append(self._record)


class MeteredTrainer(PODSGRPOTrainer):
    """`PODSGRPOTrainer` that tells the meter when phase 1 (generate, score, select) ends."""

    def __init__(self, *args, meter: StepMeter, **kwargs):
        super().__init__(*args, callbacks=[meter], **kwargs)
        self.meter = meter
        self.remove_callback(PrinterCallback)  # the child's stdout carries only its JSON result

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        self.meter.end_phase1()
        return phase1


def measure(setting: Setting, key: str, steps: int) -> dict:
    """Run in a fresh process: train one variant for warm-up + ``steps`` optimizer steps; return the measurements."""
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(1)  # the smoke run on a shared CPU
    _, pods_n, pods_m, accumulation = setting.variant(key)
    tokenizer = build_tokenizer()
    with torch.device("cuda" if cuda else "cpu"):
        model = tiny_qwen2(tokenizer, **setting.model)
        model.resize_token_embeddings(setting.vocab_size, mean_resizing=False)
    model.to(getattr(torch, setting.dtype))
    meter = StepMeter(cuda)
    with tempfile.TemporaryDirectory() as out:
        config = PODSConfig(
            output_dir=out,
            pods_n=pods_n,
            pods_m=pods_m,
            per_device_train_batch_size=setting.micro_batch,
            gradient_accumulation_steps=accumulation,
            max_steps=WARMUP_STEPS + steps,
            max_completion_length=setting.tokens,
            generation_kwargs={"min_new_tokens": setting.tokens},
            learning_rate=1e-6,
            bf16=setting.dtype == "bfloat16",
            gradient_checkpointing=True,
            use_cpu=not cuda,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            logging_steps=WARMUP_STEPS + steps,
            pods_selection_log=False,
            seed=0,
        )
        trainer = MeteredTrainer(
            model=model,
            reward_funcs=token_sum_reward,
            args=config,
            train_dataset=prompts_dataset(8),
            processing_class=tokenizer,
            meter=meter,
        )
        trainer.train()
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "optimizer": str(config.optim),
        "device": torch.cuda.get_device_name() if cuda else f"CPU: {_report.cpu_model()}",
        "device_gib": torch.cuda.get_device_properties(0).total_memory / GIB if cuda else math.nan,
        "steps": meter.steps[WARMUP_STEPS:],
    }


def run_variant(key: str, shape: str, smoke: bool, steps: int) -> dict:
    """`measure` in a fresh Python process, so that its memory peaks are its own."""
    script = str(Path(__file__).resolve())
    command = [sys.executable, script, "--child", key, "--shape", shape, "--steps", str(steps)]
    command += ["--smoke"] if smoke else []
    print(f"measuring {key} ...", file=sys.stderr)
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def summarise(result: dict) -> dict:
    """Median times and maximum peaks over the measured steps."""
    steps = result["steps"]
    summary = {name: statistics.median(s[name] for s in steps) for name in ("step_s", "generation_s", "update_s")}
    for name in ("resident_gib", "generation_peak_gib", "update_peak_gib"):
        summary[name] = max(s[name] for s in steps)
    summary["peak_gib"] = max(summary["generation_peak_gib"], summary["update_peak_gib"])
    return summary


QUANTITIES = (  # summary key, label
    ("step_s", "step time"),
    ("generation_s", "generation phase time"),
    ("update_s", "update phase time"),
    ("peak_gib", "peak memory"),
    ("generation_peak_gib", "generation phase peak"),
    ("update_peak_gib", "update phase peak"),
)


def fmt(value: float, key: str) -> str:
    if math.isnan(value):
        return "–"
    return _report.fmt_time(value) if key.endswith("_s") else f"{value:.2f} GiB"


def tables(setting: Setting, summaries: dict[str, dict]) -> str:
    """The ratio table and the per-variant table, in markdown."""
    layout = {key: setting.variant(key) for key in VARIANTS}  # key: (label, pods_n, pods_m, accumulation)
    labels = {key: label for key, (label, *_) in layout.items()}
    pods, grpo, grpo_ga = (summaries[key] for key in VARIANTS)

    def ratio(top: dict, bottom: dict, key: str) -> str:
        value = top[key] / bottom[key]
        return "–" if math.isnan(value) else f"{value:.2f}×"

    ratio_rows = "\n".join(
        f"| {label} | {ratio(pods, grpo, key)} | {ratio(grpo_ga, pods, key)} |" for key, label in QUANTITIES
    )
    variant_rows = [
        "| rollouts generated / trained | "
        + " | ".join(f"{setting.prompts * n} / {setting.prompts * m}" for _, n, m, _ in layout.values())
        + " |",
        "| micro-batches × completions | "
        + " | ".join(f"{accumulation} × {setting.micro_batch}" for *_, accumulation in layout.values())
        + " |",
        *(
            f"| {label} | " + " | ".join(fmt(summaries[k][key], key) for k in VARIANTS) + " |"
            for key, label in (*QUANTITIES, ("resident_gib", "resident at step start"))
        ),
        *(
            f"| {label} | "
            + " | ".join(fmt(summaries[k][key] / (setting.prompts * layout[k][index]), key) for k in VARIANTS)
            + " |"
            for key, index, label in (
                ("generation_s", 1, "generation phase ÷ rollouts generated"),
                ("update_s", 2, "update phase ÷ rollouts trained"),
            )
        ),
    ]
    return f"""| ratio | {labels["pods"]} ÷ {labels["grpo"]} | {labels["grpo_ga"]} ÷ {labels["pods"]} |
|---|---:|---:|
{ratio_rows}

| per optimizer step | {" | ".join(labels[k] for k in VARIANTS)} |
|---|---:|---:|---:|
{chr(10).join(variant_rows)}"""


def plot(setting: Setting, model: str, summaries: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [setting.variant(key)[0] for key in VARIANTS]
    fig, (times, memory) = plt.subplots(1, 2, figsize=(10, 3.6))
    generation = [summaries[key]["generation_s"] for key in VARIANTS]
    update = [summaries[key]["update_s"] for key in VARIANTS]
    times.bar(labels, generation, label="generation phase")
    times.bar(labels, update, bottom=generation, label="update phase")
    times.set(ylabel="seconds per optimizer step (median)", title="step time")
    times.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    width = 0.27
    for index, (key, label) in enumerate(
        (("resident_gib", "resident at step start"), ("generation_peak_gib", "generation phase peak"),
         ("update_peak_gib", "update phase peak"))
    ):  # fmt: skip
        xs = [x + (index - 1) * width for x in range(len(labels))]
        memory.bar(xs, [summaries[k][key] for k in VARIANTS], width, label=label)
    memory.set_xticks(range(len(labels)), labels)
    memory.set(ylabel="GiB allocated (max over steps)", title="peak GPU memory")
    memory.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.suptitle(f"{model}'s shape")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def record(setting: Setting, model: str, command: str, results: dict[str, dict]) -> dict:
    """One run's measurements and everything its subsection states: what docs/gpu_step_SHAPE.json holds."""
    return {
        "model": model,
        "command": command,
        "setting": dataclasses.asdict(setting),
        "versions": _report.environment().splitlines()[0],  # its machine line describes the CPU only
        "cuda": torch.version.cuda,
        "host": f"{platform.system()} {platform.machine()}, {os.cpu_count()} logical cores",
        "variants": {key: {**result, "summary": summarise(result)} for key, result in results.items()},
    }


def subsection(run: dict, name: str) -> str:
    """One shape's command, environment, tables and figure (docs/NAME.png) from its `record`."""
    setting = Setting(**run["setting"])
    first = run["variants"]["pods"]
    summaries = {key: variant["summary"] for key, variant in run["variants"].items()}
    return f"""### {run["model"]}'s shape: {first["parameters"] / 1e6:.0f}M parameters

```bash
{run["command"]}
```

- {len(first["steps"])} measured optimizer steps per variant; optimizer `{first["optimizer"]}`.
{run["versions"]}
- Device: {first["device"]} ({first["device_gib"]:.0f} GiB), CUDA {run["cuda"]}; host {run["host"]}.

{tables(setting, summaries)}

![step time by phase and peak memory by phase, per variant]({name}.png)

Raw measurements, every step: [{name}.json]({name}.json).
"""


def section(runs: dict[str, dict]) -> str:
    """The ``gpu_step`` section: the setting and the method, then one `subsection` per run (name: `record`)."""
    setting = Setting(**next(iter(runs.values()))["setting"])
    pods, grpo, grpo_ga = (setting.variant(key) for key in VARIANTS)
    models = " and ".join(run["model"] for run in runs.values())
    subsections = "\n".join(subsection(run, name) for name, run in runs.items())
    return f"""## GPU step: {pods[0]} vs {grpo[0]} vs {grpo_ga[0]} in bf16 ({models} shapes)

Prompts per optimizer step: {setting.prompts}. `PODSGRPOTrainer` on random-weight Qwen2 models shaped like {models}
(weights, gradients and optimizer states in bf16, `bf16=True`, gradient checkpointing), {setting.tokens}-token
completions (forced), HF `generate`, `beta = 0`. Unlike the sections above, this one was measured on a GPU.

- {pods[0]} generates {setting.n // setting.m}× the rollouts of {grpo[0]} and trains on the same {setting.m} per
  prompt in the same micro-batches ({pods[3]} × {setting.micro_batch} completions), so the two differ only in the
  generation phase.
- {grpo_ga[0]} generates as many rollouts as {pods[0]} and trains on all of them, in {grpo_ga[3]} accumulated
  micro-batches of the same {setting.micro_batch} completions.
- Method: each variant in a fresh process, {WARMUP_STEPS} warm-up step then the measured optimizer steps;
  `torch.cuda.synchronize()` at every mark. Times: median over steps (`time.perf_counter`, `on_step_begin` to
  `on_step_end`; the generation phase ends with PODS's phase 1, generate + score + select, the update phase is the
  rest); per rollout: the phase's time divided by the rollouts it generated or trained on. Memory:
  `torch.cuda.max_memory_allocated()` per phase, maximum over steps; resident is `memory_allocated()` at step start
  (weights and optimizer states). The script's docstring has the details.

{subsections}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny fp32 model on CPU or GPU; prints the tables and writes nothing"
    )
    parser.add_argument(
        "--shape", choices=SHAPES, default="0.5B", help="the Qwen2.5 checkpoint whose shape the model takes"
    )
    parser.add_argument(
        "--steps", type=int, help=f"measured optimizer steps per variant (default {FULL.steps}; smoke: {SMOKE.steps})"
    )
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)  # one variant, in a fresh process
    args = parser.parse_args()
    setting = SMOKE if args.smoke else dataclasses.replace(FULL, model=SHAPES[args.shape])
    steps = args.steps or setting.steps
    if args.child:
        print(json.dumps(measure(setting, args.child, steps)))
        return
    if not args.smoke and not torch.cuda.is_available():
        sys.exit(
            "benchmarks/gpu_step.py measures GPU step time and memory, and torch sees no CUDA device. On a machine "
            "without a GPU, run `python benchmarks/gpu_step.py --smoke` to check the script end to end (tiny model, "
            "prints the tables, writes nothing)."
        )

    results = {key: run_variant(key, args.shape, args.smoke, steps) for key in VARIANTS}
    model = "tiny fp32 smoke model" if args.smoke else f"Qwen2.5-{args.shape}"
    run = record(setting, model, _report.command_line("gpu_step.py", parser, args), results)
    summaries = {key: variant["summary"] for key, variant in run["variants"].items()}
    print(tables(setting, summaries))
    name = f"gpu_step_{args.shape}"
    if args.smoke:  # render the section and the figure as a full run would, but keep docs/ untouched
        section({name: run})
        with tempfile.TemporaryDirectory() as tmp:
            plot(setting, model, summaries, Path(tmp) / f"{name}.png")
        print(f"smoke run on {results['pods']['device']}: section and figure rendered, nothing written")
        return
    _report.figure_path(f"{name}.json").write_text(json.dumps(run, indent=1) + "\n")
    plot(setting, model, summaries, _report.figure_path(f"{name}.png"))
    runs = {}  # every shape measured so far, this run's included
    for shape in SHAPES:
        if (path := _report.DOCS / f"gpu_step_{shape}.json").exists():
            runs[path.stem] = json.loads(path.read_text())
    _report.write_section(SECTION, section(runs))


if __name__ == "__main__":
    main()

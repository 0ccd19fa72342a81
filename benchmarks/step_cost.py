"""What does a PODS training step cost, phase by phase, against GRPO with M and with N rollouts per prompt?

Three variants of `trl_pods.PODSGRPOTrainer`, all consuming the same prompts per optimizer step:

* ``PODS(N→M)``: generate and score N rollouts per prompt, keep M (max-variance), train on M.
* ``GRPO(M)``:   pods_n = pods_m = M, which is plain GRPO exactly (the trainer's documented equivalence).
* ``GRPO(N)``:   pods_n = pods_m = N, with per_device_train_batch_size scaled by N/M so the prompts per step match.

The model is a random-weight Qwen2 (4 layers, hidden 256, ~4M parameters) with the tests' byte-level BPE tokenizer
(tests/tiny_model.py), built locally; the reward is the tests' ``token_sum_reward`` (a hash of the token ids, so
groups have spread). Generation is forced to the full completion length (``min_new_tokens``), so every variant
handles sequences of one length. ``beta = 0.04`` makes the reference-model pass run, and
``steps_per_generation = 2`` with ``gradient_accumulation_steps = 1`` makes TRL compute old log-probs (one
generation batch feeds two optimizer steps). One measured unit is therefore one generation batch: generate, score,
select, the no-grad passes, and two optimizer steps.

Phases are timed in place by a subclass of the trainer (the trainer itself is not modified), with
``time.perf_counter`` around the methods that implement them -- a phase runs once inside a stateful training loop,
so it cannot be re-run by ``torch.utils.benchmark.Timer``:

* generation: ``_generate`` in phase 1 (in phase 2 it only returns the cached phase-1 result, not timed);
* scoring: ``_calculate_rewards`` in phase 1 (same);
* selection: `trl_pods.phase1.select`, as the trainer times it (`pods/selection_time`; trivial for the two GRPO
  variants, which keep every rollout);
* old / ref log-probs: ``_get_per_token_logps_and_entropies`` under ``no_grad``, split by model;
* update: ``compute_loss`` (forward with grad and loss) + ``accelerator.backward`` + the optimizer: from the end of
  ``training_step`` to ``on_step_end`` (gradient clipping, ``optimizer.step``, scheduler, ``zero_grad``);
* other: the wall time from the first ``on_step_begin`` to the last ``on_step_end`` of the batch minus the phases
  above (tokenising, padding, advantages, metrics, TRL's and PODS's bookkeeping).

Each phase also counts the sequences it processed. Variants are interleaved: every round runs one generation batch
of each variant (a ``trainer.train()`` of two optimizer steps; order rotated between rounds); round 0 is warm-up and
discarded. Times are medians over rounds; ratios are medians of per-round ratios. torch runs on one thread: on
the shared 2-core machine two threads made generation several times slower and erratic.

Run from the repository root; rewrites the ``step_cost`` section of docs/benchmarks.md and docs/step_cost.png::

    python benchmarks/step_cost.py            # full: 10 measured rounds (about 1.5 minutes here)
    python benchmarks/step_cost.py --quick    # 3 measured rounds

``--model smollm2`` measures SmolLM2-135M-Instruct (real weights) instead, and ``--use_vllm`` generates with vLLM
colocate (run it in the vLLM test environment, README "Tests"); each setting writes its own section
(``step_cost_smollm2_hf``, ``step_cost_smollm2_vllm``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import _report

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(_report.REPO / "tests"))  # the tests' tokenizer, prompts and reward

import matplotlib  # noqa: E402
import torch  # noqa: E402
from helpers import prompts_dataset, token_sum_reward  # noqa: E402
from tiny_model import build_tiny_model, build_tokenizer  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

from trl_pods import PODSConfig, PODSGRPOTrainer  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SECTION = "step_cost"
FIGURE = "step_cost.png"
N, M = 16, 4  # rollouts generated / kept per prompt: the paper's 4:1
PROMPTS_PER_STEP = 2  # prompts per optimizer step, the same for every variant
STEPS_PER_GENERATION = 2
COMPLETION_LENGTH = 48
PHASES = ("generation", "scoring", "selection", "old log-probs", "ref log-probs", "forward", "backward", "optimizer")
COMPOSITES = {"no-grad log-probs": ("old log-probs", "ref log-probs"), "update": ("forward", "backward", "optimizer")}
VARIANTS = {  # name: (pods_n, pods_m, per_device_train_batch_size)
    f"PODS({N}→{M})": (N, M, PROMPTS_PER_STEP * M),
    f"GRPO({M})": (M, M, PROMPTS_PER_STEP * M),
    f"GRPO({N})": (N, N, PROMPTS_PER_STEP * N),
}
PODS, GRPO_M, GRPO_N = VARIANTS


def build_model(path: Path) -> Path:
    """A random-weight Qwen2 causal LM (~4M parameters) and the tests' BPE tokenizer, saved to ``path``."""
    return build_tiny_model(
        path, hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2,
    )  # fmt: skip


class PhaseTimedTrainer(PODSGRPOTrainer):
    """`PODSGRPOTrainer` that adds up the wall time and the sequences of each phase of the generation batch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds: dict[str, float] = defaultdict(float)
        self.sequences: dict[str, int] = defaultdict(int)
        self._update_rows = 0
        self._step_began = self._training_step_ended = 0.0
        backward = self.accelerator.backward

        def timed_backward(loss, **kwargs):
            with self._phase("backward", self._update_rows):
                return backward(loss, **kwargs)

        self.accelerator.backward = timed_backward
        self.remove_callback(PrinterCallback)
        self.add_callback(_StepClock(self))

    def reset(self) -> None:
        self.seconds.clear()
        self.sequences.clear()

    @contextmanager
    def _phase(self, name: str, sequences: int):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.sequences[name] += sequences

    def _generate(self, prompts):
        if self._pods_phase1 is not None:  # phase 2: the cached phase-1 rollouts
            return super()._generate(prompts)
        with self._phase("generation", len(prompts)):
            return super()._generate(prompts)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._pods_phase1 is not None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        with self._phase("scoring", len(prompts)):
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)  # times its selection rule: pods/selection_time
        self.seconds["selection"] += self._metrics["train"]["pods/selection_time"][-1]
        self.sequences["selection"] += phase1["rewards"].numel()
        return phase1

    def _get_per_token_logps_and_entropies(self, model, input_ids, *args, **kwargs):
        if torch.is_grad_enabled():  # the forward of the update: timed by compute_loss
            return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)
        name = "ref log-probs" if model is self.ref_model else "old log-probs"
        with self._phase(name, input_ids.size(0)):
            return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)

    def compute_loss(self, model, inputs, *args, **kwargs):
        self._update_rows = inputs["completion_ids"].size(0)
        with self._phase("forward", self._update_rows):
            return super().compute_loss(model, inputs, *args, **kwargs)

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self._training_step_ended = time.perf_counter()
        return loss


class _StepClock(TrainerCallback):
    """Times the optimizer (end of ``training_step`` to ``on_step_end``) and the wall time of every step."""

    def __init__(self, trainer: PhaseTimedTrainer):
        self.trainer = trainer

    def on_step_begin(self, args, state, control, **kwargs):
        self.trainer._step_began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now, trainer = time.perf_counter(), self.trainer
        trainer.seconds["optimizer"] += now - trainer._training_step_ended
        trainer.seconds["wall"] += now - trainer._step_began


def make_trainers(model_path: Path, tokenizer, output_dir: Path, use_vllm: bool) -> dict[str, PhaseTimedTrainer]:
    # every completion runs to full length: `min_new_tokens` for HF generate, `min_tokens` for vLLM's SamplingParams
    engine = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=512) if use_vllm else {}
    min_tokens = {"min_tokens" if use_vllm else "min_new_tokens": COMPLETION_LENGTH}
    trainers = {}
    for name, (pods_n, pods_m, batch_size) in VARIANTS.items():
        config = PODSConfig(
            output_dir=str(output_dir / name),
            pods_n=pods_n,
            pods_m=pods_m,
            per_device_train_batch_size=batch_size,
            steps_per_generation=STEPS_PER_GENERATION,
            gradient_accumulation_steps=1,
            max_steps=STEPS_PER_GENERATION,  # one generation batch per train() call
            beta=0.04,
            max_completion_length=COMPLETION_LENGTH,
            generation_kwargs=min_tokens,
            **engine,
            learning_rate=1e-5,
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            logging_steps=STEPS_PER_GENERATION,
            seed=0,
        )
        trainers[name] = PhaseTimedTrainer(
            model=str(model_path),
            reward_funcs=token_sum_reward,
            args=config,
            train_dataset=prompts_dataset(8),
            processing_class=tokenizer,
        )
    return trainers


def measure(trainers: dict[str, PhaseTimedTrainer], rounds: int) -> tuple[dict, dict]:
    """Rounds of one generation batch per variant, order rotated; round 0 is warm-up.

    Returns ``{variant: [{phase: seconds}, one per measured round]}`` and ``{variant: {phase: sequences}}``.
    """
    names = list(trainers)
    seconds, sequences = defaultdict(list), {}
    for round_index in range(rounds + 1):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            trainer = trainers[name]
            trainer.reset()
            trainer.train()
            if round_index > 0:
                seconds[name].append(dict(trainer.seconds))
                sequences[name] = dict(trainer.sequences)
        print(f"round {round_index}/{rounds} done" + (" (warm-up)" if round_index == 0 else ""), file=sys.stderr)
    return seconds, sequences


def phase_value(record: dict, phase: str) -> float:
    """Seconds of ``phase`` in one round's record; also the sums in COMPOSITES and ``other`` (wall minus phases)."""
    if phase in COMPOSITES:
        return sum(record.get(p, 0.0) for p in COMPOSITES[phase])
    if phase == "other":
        return record["wall"] - sum(record.get(p, 0.0) for p in PHASES)
    return record.get(phase, 0.0)


def median_of(records: list[dict], phase: str) -> float:
    return statistics.median(phase_value(r, phase) for r in records)


def median_ratio(top: list[dict], bottom: list[dict], phase: str, bottom_phase: str | None = None) -> float:
    """Median over rounds of ``top[phase] / bottom[bottom_phase]``, both from the same round."""
    return statistics.median(
        phase_value(a, phase) / phase_value(b, bottom_phase or phase) for a, b in zip(top, bottom, strict=True)
    )


def plot(seconds: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.4))
    names = list(VARIANTS)
    left = [0.0] * len(names)
    for index, phase in enumerate((*PHASES, "other")):
        widths = [median_of(seconds[name], phase) for name in names]
        ax.barh(names, widths, left=left, label=phase, color=plt.cm.tab10(index))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.2f} s", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.15)
    ax.set_xlabel(f"seconds per generation batch ({STEPS_PER_GENERATION} optimizer steps), median over rounds")
    ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    ax.set_title(
        f"Cost by phase, CPU, 1 thread: {PROMPTS_PER_STEP} prompts per optimizer step, {COMPLETION_LENGTH}-token "
        "completions",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def report(seconds: dict, sequences: dict, command: str, rounds: int, setting: dict[str, str]) -> str:
    names = list(VARIANTS)
    walls = {name: median_of(seconds[name], "wall") for name in names}
    rows = []
    for phase in (*PHASES, *COMPOSITES, "other", "wall"):
        cells = []
        for name in names:
            value = median_of(seconds[name], phase)
            count = sequences[name].get(COMPOSITES.get(phase, (phase,))[0], "")
            share = "" if phase == "wall" else f" ({100 * value / walls[name]:.1f}%)"
            cells.append(f"{_report.fmt_time(value)}{share} | {count}")
        label = f"**{phase}**" if phase in (*COMPOSITES, "wall") else phase
        rows.append(f"| {label} | " + " | ".join(cells) + " |")

    def compare(top, bottom, phase):
        """A ratio row: the phase's time in ``top`` over ``bottom``, and the sequences each pushed through it."""
        counted = COMPOSITES.get(phase, (phase,))[0]
        value = median_ratio(seconds[top], seconds[bottom], phase)
        return (
            f"{phase}: {top} ÷ {bottom}",
            f"{value:.3g}",
            f"{sequences[top][counted]} vs {sequences[bottom][counted]}",
        )

    selection_share = 100 * median_ratio(seconds[PODS], seconds[PODS], "selection", "wall")
    ratios = [
        compare(PODS, GRPO_M, "update"),
        compare(GRPO_N, GRPO_M, "update"),
        compare(PODS, GRPO_M, "no-grad log-probs"),
        compare(GRPO_N, GRPO_M, "no-grad log-probs"),
        compare(PODS, GRPO_M, "generation"),
        compare(GRPO_N, PODS, "generation"),
        (f"selection ÷ wall: {PODS}", f"{selection_share:.2g}%", ""),
        (f"wall: {PODS} ÷ {GRPO_M}", f"{median_ratio(seconds[PODS], seconds[GRPO_M], 'wall'):.3g}", ""),
        (f"wall: {GRPO_N} ÷ {PODS}", f"{median_ratio(seconds[GRPO_N], seconds[PODS], 'wall'):.3g}", ""),
    ]
    ratio_rows = "\n".join(f"| {label} | {value} | {rows} |" for label, value, rows in ratios)

    def share(name, phase):
        return f"{100 * median_of(seconds[name], phase) / walls[name]:.0f}%"

    major = ("generation", "no-grad log-probs", "update")
    shares = "; ".join(f"{name} " + " / ".join(share(name, phase) for phase in major) for name in names)
    led_by_generation = [
        name for name in names if max(major, key=lambda phase: median_of(seconds[name], phase)) == "generation"
    ]

    kept = PROMPTS_PER_STEP * STEPS_PER_GENERATION * M
    table_header = "| phase | " + " | ".join(f"{name}: time | seqs" for name in names) + " |"
    table_rule = "|---|" + "---:|---:|" * len(names)
    return f"""## Step cost: PODS(N→M) vs GRPO(M) vs GRPO(N), by phase{setting["title"]}

One generation batch of `PODSGRPOTrainer` ({STEPS_PER_GENERATION} optimizer steps of {PROMPTS_PER_STEP} prompts
each) on {setting["model"]}, generation with {setting["engine"]}, {COMPLETION_LENGTH}-token completions,
N = {N}, M = {M}, `beta = 0.04` (reference pass on), `steps_per_generation = {STEPS_PER_GENERATION}` with
`gradient_accumulation_steps = 1` (old-log-prob pass on). All three variants consume the same prompts per
optimizer step: PODS and GRPO(M) train on {PROMPTS_PER_STEP * M} sequences per step, GRPO(N) on
{PROMPTS_PER_STEP * N}.

```bash
{command}
```

- Method: phases timed in place by a subclass of the trainer (the script's docstring says which method is which
  phase); {rounds} measured rounds after one warm-up round, each running one generation batch of every variant,
  order rotated. Times are medians over rounds (in brackets: share of the variant's median wall time); ratios are
  medians of per-round ratios. `seqs`: sequences through the phase per generation batch (selection: rewards
  looked at; trivial for the GRPO variants, which keep every rollout).
- torch runs on 1 thread. In a spot check on this shared machine, 2 threads made generation 8–16× slower than 1
  (OpenMP threads waiting for cores busy with other jobs).
{_report.environment()}

| ratio (median of per-round ratios) | value | sequences through the phase |
|---|---:|---|
{ratio_rows}

{table_header}
{table_rule}
{chr(10).join(rows)}

Share of each variant's wall time spent in generation / no-grad log-probs / update: {shares}. Generation is the
largest phase for {", ".join(led_by_generation) or "none of the variants"}.

Decoding runs {COMPLETION_LENGTH} sequential forward passes over a small batch, dominated by per-step overhead,
so its cost grows much less than the number of sequences (generation: PODS ÷ GRPO(M) above), whereas the no-grad
passes and the update are batched compute and grow about in proportion to the rows. PODS pays for its N = {N}
rollouts in generation and scoring only: every pass after selection (old and reference log-probs, forward,
backward, optimizer) sees the {kept} kept sequences, as in GRPO(M), while GRPO(N) pushes {N // M}× as many through
them. The GPU setting the paper targets differs (generation batched and cheap next to a memory- and
communication-bound update), so these CPU shares say nothing about GPU wall-clock; what carries over is which
passes scale with N and which with M.

![seconds per generation batch by phase, stacked]({setting["figure"]})
"""


MODELS = {
    "tiny": "a random-weight Qwen2 (4 layers, hidden 256, about 4M parameters)",
    "smollm2": "SmolLM2-135M-Instruct (real weights, fp32)",
}


def load_model(name: str, folder: Path) -> tuple[Path, object]:
    """The model's folder and its tokenizer."""
    if name == "tiny":
        return build_model(folder), build_tokenizer()
    from transformers import AutoTokenizer

    from trl_pods.smollm2 import fetch_smollm2

    path = fetch_smollm2()
    return path, AutoTokenizer.from_pretrained(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 measured rounds instead of 10")
    parser.add_argument("--model", default="tiny", choices=list(MODELS))
    parser.add_argument("--use_vllm", action="store_true", help="generate with vLLM colocate (vLLM test environment)")
    args = parser.parse_args()
    rounds = 3 if args.quick else 10
    torch.set_num_threads(1)
    if args.use_vllm:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB per engine
    flags = [flag for flag, on in (("--quick", args.quick), ("--use_vllm", args.use_vllm)) if on]
    flags += ["--model", args.model] if args.model != "tiny" else []
    command = " ".join(["python benchmarks/step_cost.py", *flags])
    default = args.model == "tiny" and not args.use_vllm
    suffix = "" if default else f"_{args.model}_{'vllm' if args.use_vllm else 'hf'}"
    engine = "vLLM colocate (vllm-cpu)" if args.use_vllm else "HF generate"
    setting = dict(
        title="" if default else f" ({args.model}, {engine})",
        model=MODELS[args.model],
        engine=engine,
        figure=FIGURE.replace(".png", f"{suffix}.png"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        model_path, tokenizer = load_model(args.model, Path(tmp) / "model")
        trainers = make_trainers(model_path, tokenizer, Path(tmp) / "runs", args.use_vllm)
        seconds, sequences = measure(trainers, rounds)
    plot(seconds, _report.figure_path(setting["figure"]))
    _report.write_section(SECTION + suffix, report(seconds, sequences, command, rounds, setting))


if __name__ == "__main__":
    main()

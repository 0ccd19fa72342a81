"""Budgeted generation: learning efficiency from scratch on a prompt set that recurs, so rollouts can be budgeted.

A random-weight Qwen2 (264k parameters, seeded) with a character vocabulary (the digits, ``+``, ``=``, an EOS and a
pad token) learns single-digit addition with RL alone: the prompts are the 100 problems ``a+b=`` (a, b in 0..9) as
plain text, revisited every few optimizer steps; a completion (at most 3 tokens, temperature 1) earns 1 when its text
up to the EOS is exactly the sum's digits, else 0. There is no supervised warm-up and no constraint on what is
sampled: the untrained model's logits are nearly uniform over the 14 tokens, so a rollout is right with probability
about 0.3% (a one-digit sum needs a digit then EOS, 1/14^2; a two-digit sum 1/14^3). At the start nearly every group
of 4 rollouts is all wrong and carries no signal, the regime where generating more rollouts than are trained on
matters most. Methods (``--methods`` picks a subset; the default is the first four):

* ``GRPO 4``                 -- N = M = 4: plain GRPO with the update size of PODS.
* ``PODS 8->4``, ``PODS 16->4`` -- N = 8 or 16 rollouts per prompt, max-variance down-sampling to M = 4.
* ``budgeted 4-16 (mean 8)`` -- budgeted generation: 4 to 16 rollouts per prompt, 8 per prompt on average, M = 4.
* ``GRPO 8``                 -- N = M = 8: twice the update of GRPO 4.

Every method trains on ``--prompts_per_step`` prompts x 4 kept rollouts per optimizer step (GRPO 8: x 8) with the
same learning rate, for the same number of steps. Accuracy on the 100 problems is measured before training and every
``--eval_every`` steps, in eval mode and without touching any random generator (so the schedule of evaluations does
not change the run): greedy (argmax decoding) and sampled, the latter the exact probability that a sample at the
training temperature is right (the product of the answer's token probabilities, EOS included), averaged over the
problems. Training minutes are wall-clock time from the start of training, evaluation excluded. Rollouts / step is the
trainer's ``pods/rollouts_generated``; generation calls / step is ``pods/generation_calls`` where the trainer logs it
(budgeted generation), else 1. Runs go seed by seed with the methods interleaved (a seed fixes the initial weights,
shared by the methods, the order of the prompts and the sampling), on one thread.

    python benchmarks/budgeted_generation.py        # 5 seeds x 4 methods x 1500 steps (about 22 minutes, 1 thread)
    python benchmarks/budgeted_generation.py --seeds 1 --steps 20 --eval_every 10 --smoke   # no files written
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from _report import command_line, environment, figure_path, plot_accuracy_curves, saved_runs, write_section
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from trl_pods import PODSConfig, PODSGRPOTrainer

METHODS = {
    "GRPO 4": dict(pods_n=4, pods_m=4),
    "PODS 8->4": dict(pods_n=8, pods_m=4),
    "budgeted 4-16 (mean 8)": dict(pods_n=16, pods_m=4, pods_generation="budgeted", pods_budget=8),
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "GRPO 8": dict(pods_n=8, pods_m=8),
}
DEFAULT_METHODS = ["GRPO 4", "PODS 8->4", "budgeted 4-16 (mean 8)", "PODS 16->4"]
CHARACTERS = "0123456789+="
EOS, PAD = "<eos>", "<pad>"
MAX_COMPLETION_LENGTH = 3
TEMPERATURE = 1.0
MODEL_SIZES = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: one token per character, EOS and pad as special tokens."""
    vocab = {token: i for i, token in enumerate([*CHARACTERS, EOS, PAD])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=PAD)


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> Qwen2ForCausalLM:
    """A random-weight Qwen2 causal LM for ``tokenizer``, initialised from ``seed``."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        num_key_value_heads=MODEL_SIZES["num_attention_heads"],
        max_position_embeddings=16,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        **MODEL_SIZES,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def problems() -> Dataset:
    """The 100 problems ``a+b=`` with a, b in 0..9: a plain-text prompt and the sum's digits."""
    pairs = [(a, b) for a in range(10) for b in range(10)]
    return Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


class ExactAnswer:
    """Reward 1.0 when a completion's text up to its first EOS, stripped, is exactly the answer, else 0.0.

    Decoded with the special tokens kept, so a pad token sampled before the EOS counts as text, not as an end.
    """

    __name__ = "exact_answer"

    def __init__(self, tokenizer: PreTrainedTokenizerFast):
        self.tokenizer = tokenizer

    def __call__(self, completion_ids: list[list[int]], answer: list[str], **kwargs) -> list[float]:
        texts = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=False)
        return [float(text.split(EOS)[0].strip() == a) for text, a in zip(texts, answer, strict=True)]


@torch.no_grad()
def accuracy(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, data: Dataset) -> tuple[float, float]:
    """(greedy, sampled) accuracy of ``model`` on ``data``; no random generator is used.

    Greedy: argmax decoding of at most ``MAX_COMPLETION_LENGTH`` tokens, scored by `ExactAnswer`. Sampled: the exact
    probability that a completion sampled at ``TEMPERATURE`` is right, i.e. the probability of the answer's tokens
    followed by EOS (every answer is shorter than ``MAX_COMPLETION_LENGTH``), averaged over the problems.
    """
    training = model.training
    model.eval()
    answers = list(data["answer"])
    prompts = torch.tensor(tokenizer(list(data["prompt"])).input_ids)  # [P, 4]: every prompt is 4 characters
    ids = prompts
    for _ in range(MAX_COMPLETION_LENGTH):
        ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    greedy = statistics.mean(ExactAnswer(tokenizer)(ids[:, prompts.size(1) :].tolist(), answers))
    targets = [tokenizer(a).input_ids + [tokenizer.eos_token_id] for a in answers]
    width = max(map(len, targets))
    padded = torch.tensor([t + [tokenizer.pad_token_id] * (width - len(t)) for t in targets])  # [P, width]
    mask = torch.tensor([[1.0] * len(t) + [0.0] * (width - len(t)) for t in targets])  # [P, width]
    logits = model(torch.cat([prompts, padded[:, :-1]], dim=1)).logits[:, prompts.size(1) - 1 :]  # [P, width, V]
    logps = (logits / TEMPERATURE).log_softmax(-1).gather(-1, padded.unsqueeze(-1)).squeeze(-1)  # [P, width]
    sampled = (logps * mask).sum(1).exp().mean().item()
    model.train(training)
    return greedy, sampled


class AccuracyCurve(TrainerCallback):
    """Measures `accuracy` when training begins and every ``every`` steps (and at the last), timing the training
    in between: ``curve`` holds (step, training minutes, greedy accuracy, sampled accuracy)."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, data: Dataset, every: int):
        self.tokenizer, self.data, self.every = tokenizer, data, every
        self.curve: list[tuple[int, float, float, float]] = []
        self.start = self.eval_seconds = 0.0

    def accuracy(self, model: Qwen2ForCausalLM) -> tuple[float, float]:
        """What is measured (a subclass may measure another task): `accuracy`."""
        return accuracy(model, self.tokenizer, self.data)

    def _measure(self, step: int, model: Qwen2ForCausalLM) -> None:
        begin = time.perf_counter()
        minutes = (begin - self.start - self.eval_seconds) / 60
        self.curve.append((step, minutes, *self.accuracy(model)))
        self.eval_seconds += time.perf_counter() - begin

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.start = time.perf_counter()
        self._measure(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self._measure(state.global_step, model)


def config(method: str, seed: int, args: argparse.Namespace, output_dir: str) -> PODSConfig:
    """The training settings of one run: ``METHODS[method]`` on ``--prompts_per_step`` prompts per step."""
    settings = METHODS[method]
    return PODSConfig(
        output_dir=output_dir,
        per_device_train_batch_size=args.prompts_per_step * settings["pods_m"],
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        max_steps=args.steps,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        beta=0.0,
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        bf16=False,
        use_cpu=True,
        seed=seed,
        pods_selection_log=False,
        **settings,
    )


def mean_logged(history: list[dict], key: str, default: float | None = None) -> float:
    """Mean of a metric over the steps that logged it (``default`` when none did)."""
    values = [entry[key] for entry in history if key in entry]
    return statistics.mean(values) if values or default is None else default


def run(method: str, seed: int, args: argparse.Namespace) -> dict:
    """Train one method from the seed's initial weights; return its curve and per-step costs."""
    tokenizer = build_tokenizer()
    data = problems()
    curve = AccuracyCurve(tokenizer, data, args.eval_every)
    with tempfile.TemporaryDirectory() as out:
        trainer = PODSGRPOTrainer(
            build_model(tokenizer, seed),
            ExactAnswer(tokenizer),
            config(method, seed, args, out),
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[curve],
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    history = trainer.state.log_history
    result = {
        "method": method,
        "seed": seed,
        "curve": curve.curve,
        "rollouts": mean_logged(history, "pods/rollouts_generated"),
        "generation_calls": mean_logged(history, "pods/generation_calls", default=1.0),
        "signal": 1 - mean_logged(history, "pods/frac_zero_std_groups_kept"),
        "success": mean_logged(history, "pods/reward_mean_all"),
    }
    points = ", ".join(f"{step}: {greedy:.2f}/{sampled:.2f}" for step, _, greedy, sampled in curve.curve)
    print(
        f"{method:>22} seed {seed}: {points}; {curve.curve[-1][1] * 60 / args.steps:.3f} s/step; rollouts/step "
        f"{result['rollouts']:.0f}; signal {result['signal']:.2f}; success/rollout {result['success']:.3f}",
        flush=True,
    )
    return result


def first_reaching(curve: list, target: float) -> tuple[float, float] | None:
    """(step, training minutes) of the first evaluation whose greedy accuracy is at or above ``target``, or None."""
    return next(((step, minutes) for step, minutes, greedy, _ in curve if greedy >= target), None)


def summarise(runs: list[dict], target: float) -> str:
    """One markdown table row per method."""
    rows = []
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        greedy = [r["curve"][-1][2] for r in mine]
        sampled = [r["curve"][-1][3] for r in mine]
        hit = [x for x in (first_reaching(r["curve"], target) for r in mine) if x is not None]
        steps = f"{statistics.mean(s for s, _ in hit):.0f}" if hit else "–"
        minutes = f"{statistics.mean(m for _, m in hit):.2f}" if hit else "–"
        per_step = statistics.mean(r["curve"][-1][1] * 60 / r["curve"][-1][0] for r in mine)
        rows.append(
            f"| {method} | {statistics.mean(greedy):.2f} ({min(greedy):.2f}–{max(greedy):.2f}) | "
            f"{statistics.mean(sampled):.2f} | {len(hit)}/{len(mine)} | {steps} | {minutes} | "
            f"{statistics.mean(r['rollouts'] for r in mine):.0f} | "
            f"{statistics.mean(r['generation_calls'] for r in mine):.2f} | {per_step:.3f} | "
            f"{statistics.mean(r['signal'] for r in mine):.2f} |"
        )
    return "\n".join(rows)


def untrained(runs: list[dict]) -> str:
    """The accuracies before training, averaged over the seeds."""
    greedy = statistics.mean(r["curve"][0][2] for r in runs)
    sampled = statistics.mean(r["curve"][0][3] for r in runs)
    return f"greedy {greedy:.2f}, sampled {sampled:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--eval_every", type=int, default=50)
    parser.add_argument("--target", type=float, default=0.4, help="greedy accuracy for steps / minutes to target")
    parser.add_argument("--prompts_per_step", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=2e-4)
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS))
    parser.add_argument("--smoke", action="store_true", help="print the table; write nothing to docs/")
    parser.add_argument(
        "--keep_runs",
        action="store_true",
        help="reuse the runs in this section's JSON file (same settings) and measure only the missing seeds",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    name = "budgeted_generation"
    raw = figure_path(f"{name}.json")
    kept_runs = saved_runs(raw, args) if args.keep_runs else []
    done = {(r["method"], r["seed"]) for r in kept_runs}
    runs = kept_runs + [
        run(method, seed, args) for seed in range(args.seeds) for method in args.methods if (method, seed) not in done
    ]
    table = summarise(runs, args.target)
    if args.smoke:
        print(table)
        print("smoke run: nothing written")
        return
    raw.write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1) + "\n")
    plot_accuracy_curves(
        runs,
        figure_path(f"{name}.png"),
        "accuracy on the 100 problems (greedy)",
        "training minutes (1 CPU thread)",
        None,
    )
    command = command_line("budgeted_generation.py", parser, args)
    write_section(
        name,
        f"""## Budgeted generation on add1 from scratch: {" vs ".join(args.methods)}

A random-weight Qwen2 (264k parameters) with a character vocabulary learns single-digit addition (the 100 problems
`a+b=`) from scratch with RL: {args.prompts_per_step} prompts x 4 kept rollouts per optimizer step (GRPO 8: x 8),
completions of at most {MAX_COMPLETION_LENGTH} tokens at temperature {TEMPERATURE}, reward 1 for the exact sum,
lr {args.learning_rate} (constant), {args.steps} steps per run, {args.seeds} seeds per method (each seed's initial
weights shared by the methods). Accuracy on the 100 problems every {args.eval_every} steps: greedy, and sampled
(the exact probability that a sample is right); untrained: {untrained(runs)}. Target: greedy accuracy
{args.target}. Training minutes: wall-clock time of training on one thread of a shared 2-core CPU, evaluation
excluded. Rollouts and generation calls per step: what the trainer generated per optimizer step. Groups with signal:
the fraction of trained groups whose rewards differ (the others have zero advantage).

| method | final greedy accuracy, mean (min–max) | final sampled accuracy | runs reaching {args.target} | \
steps to {args.target} (mean of those) | minutes to {args.target} | rollouts / step | generation calls / step | \
s / step | groups with signal |
|---|---|---|---|---|---|---|---|---|---|
{table}

![budgeted generation]({name}.png)

Raw curves: [{name}.json]({name}.json).

- Command: `{command}`
{environment()}
""",
    )


if __name__ == "__main__":
    main()

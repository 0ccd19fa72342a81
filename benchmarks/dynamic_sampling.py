"""Generation modes learning addition from scratch: which reaches a target accuracy with the fewest steps, rollouts
and minutes?

A random-weight Qwen2 (264k parameters, seeded) with a character vocabulary (the digits, ``+``, ``=``, an EOS and a pad
token) learns single-digit addition with RL alone: the prompts are the 100 problems ``a+b=`` (a, b in 0..9) as plain
text, revisited every few optimizer steps; a completion (at most 3 tokens, temperature 1) earns 1 when its text up to
the EOS is exactly the sum's digits, else 0. There is no supervised warm-up and no constraint on what is sampled: the
untrained model's logits are nearly uniform over the 14 tokens, so a rollout is right with probability about 0.3% (a
one-digit sum needs a digit then EOS, 1/14^2; a two-digit sum 1/14^3), and at the start nearly every group of 4
rollouts is all wrong, the regime where generating more rollouts than are trained on matters most.

Every method (`METHODS`; ``--methods`` picks some) trains on ``--prompts_per_step`` prompts x 4 kept rollouts per
optimizer step (GRPO 8: x 8) with the same learning rate, for the same number of steps: GRPO at 4 and 8 rollouts per
prompt, PODS N -> 4 with max-variance down-sampling, DAPO's refill (at most 3 draws), screened generation (a pilot of
4 rollouts for twice the prompts, the rule's picks get 12 more; the default frontier rule, or SPEED-RL's contrast-first
rule), adaptive over-generation (4, then up to 16), and budgeted generation (rollouts per prompt from its history).

Accuracy on the 100 problems is measured before training and every ``--eval_every`` steps, in eval mode and without
touching any random generator (so the schedule of evaluations does not change the run): greedy (argmax decoding) and
sampled, the exact probability that a sample at the training temperature is right (the product of the answer's token
probabilities, EOS included), averaged over the problems. Training minutes are wall-clock time from the start of
training, evaluation excluded, on one thread. Rollouts are the trainer's ``pods/rollouts_generated`` (pilots of
prompts not trained on and refill's draws included), counted up to each evaluation; generation calls per step are
``pods/generation_calls`` or ``pods/waves`` where the trainer logs them, else 1. A seed fixes the initial weights
(shared by the methods), the order of the prompts and the sampling; runs go seed by seed, methods interleaved.

Each run is saved as it ends, in ``docs/benchmarks/data/dynamic_sampling_<tag>.jsonl``; processes started side by side
share the runs, and a stopped measurement goes on where it stopped.

    python benchmarks/dynamic_sampling.py --tag modes & python benchmarks/dynamic_sampling.py --tag modes  # shared
    python benchmarks/dynamic_sampling.py --report        # docs/benchmarks/dynamic-sampling.md from the saved runs
    python benchmarks/dynamic_sampling.py --seeds 1 --steps 20 --eval_every 10 --smoke   # prints, writes nothing
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from harness import (
    DATA,
    RunStore,
    Study,
    first_reaching,
    mean_logged,
    mean_of,
    measure,
    measurement_commands,
    notes,
    permutation_p,
    plot_accuracy_curves,
    spread,
)
from race_analysis import against_fastest, fastest, ratio_words
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from trl_pods import PODSConfig, PODSGRPOTrainer

STUDY = Study(
    "dynamic_sampling.py",
    "dynamic-sampling",
    "Generation modes from scratch: refill, screened, adaptive, budgeted, PODS and GRPO",
    "dynamic_sampling",
)
REFILL = dict(pods_generation="refill", pods_max_draws=3, pods_draw_coverage=0.0)  # drawing exactly the missing groups
SCREENED = dict(pods_n=16, pods_m=4, pods_generation="screened", pods_screen_ratio=2, pods_n_initial=4)
METHODS = {
    "GRPO 4": dict(pods_n=4, pods_m=4),
    "GRPO 4 + refill": dict(pods_n=4, pods_m=4, **REFILL),
    "PODS 8->4": dict(pods_n=8, pods_m=4),
    "budgeted 4-16 (mean 8)": dict(pods_n=16, pods_m=4, pods_generation="budgeted", pods_budget=8),
    "PODS 16->4": dict(pods_n=16, pods_m=4),
    "PODS 16->4 + refill": dict(pods_n=16, pods_m=4, **REFILL),
    "screened 2x4->16->4": SCREENED,
    "screened (contrast rule)": dict(SCREENED, pods_screen_rule="contrast"),
    "adaptive 4->16->4": dict(pods_n=16, pods_m=4, pods_generation="adaptive", pods_n_initial=4),
    "budgeted 4-32 (mean 20)": dict(pods_n=32, pods_m=4, pods_generation="budgeted", pods_budget=20),
    "GRPO 8": dict(pods_n=8, pods_m=8),
    "GRPO 4 + sized refill": dict(pods_n=4, pods_m=4, pods_generation="refill", pods_max_draws=3),
    "PODS 16->4 + sized refill": dict(pods_n=16, pods_m=4, pods_generation="refill", pods_max_draws=3),
    "auto 16->4": dict(pods_n=16, pods_m=4, pods_generation="auto", pods_max_draws=3),
    "auto 4->4": dict(pods_n=4, pods_m=4, pods_generation="auto", pods_max_draws=3),
}
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

    def _measure(self, step: int, model: Qwen2ForCausalLM) -> None:
        begin = time.perf_counter()
        minutes = (begin - self.start - self.eval_seconds) / 60
        self.curve.append((step, minutes, *accuracy(model, self.tokenizer, self.data)))
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
        output_dir=output_dir, per_device_train_batch_size=args.prompts_per_step * settings["pods_m"],
        learning_rate=args.learning_rate, lr_scheduler_type="constant", max_steps=args.steps,
        max_completion_length=MAX_COMPLETION_LENGTH, temperature=TEMPERATURE, beta=0.0, gradient_checkpointing=False,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, bf16=False, use_cpu=True, seed=seed,
        pods_selection_log=False, **settings,
    )  # fmt: skip


def run(method: str, seed: int, args: argparse.Namespace) -> dict:
    """Train one method from the seed's initial weights: its curve (step, training minutes, greedy and sampled
    accuracy, rollouts generated so far) and its per-step costs."""
    tokenizer = build_tokenizer()
    data = problems()
    curve = AccuracyCurve(tokenizer, data, args.eval_every)
    with tempfile.TemporaryDirectory() as out:
        trainer = PODSGRPOTrainer(
            build_model(tokenizer, seed), ExactAnswer(tokenizer), config(method, seed, args, out), train_dataset=data,
            processing_class=tokenizer, callbacks=[curve],
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    history = trainer.state.log_history
    generated = {e["step"]: e["pods/rollouts_generated"] for e in history if "pods/rollouts_generated" in e}
    cumulative = [sum(v for step, v in generated.items() if step <= point[0]) for point in curve.curve]
    result = {
        "method": method,
        "seed": seed,
        "curve": [[*point, rollouts] for point, rollouts in zip(curve.curve, cumulative, strict=True)],
        "rollouts": mean_logged(history, "pods/rollouts_generated"),
        "generation_calls": mean_logged(
            history, "pods/generation_calls", default=mean_logged(history, "pods/waves", default=1.0)
        ),
        "signal": 1 - mean_logged(history, "pods/frac_zero_std_groups_kept"),
    }
    print(
        f"{method:>26} seed {seed}: final greedy {curve.curve[-1][2]:.2f}; rollouts/step {result['rollouts']:.0f}; "
        f"calls/step {result['generation_calls']:.2f}; signal {result['signal']:.2f}",
        flush=True,
    )
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = STUDY.parser(__doc__, METHODS, seeds=5, steps=1500, eval_every=50, prompts_per_step=8)
    parser.add_argument("--learning_rate", type=float, default=2e-4)
    parser.add_argument("--targets", type=float, nargs="+", default=[0.4, 0.8],
                        help="greedy accuracies for steps, rollouts and minutes to target")  # fmt: skip
    return parser


PARSER = build_parser()
DEFAULTS = vars(PARSER.parse_args([]))
SETTINGS = ("steps", "eval_every", "prompts_per_step", "learning_rate", "targets")
"""What defines a measurement; the other flags pick which of its runs to measure, or what to do."""


def table(runs: list[dict], methods: list[str], target: float) -> str:
    """One row per method: accuracy at the end, and steps, rollouts and minutes to ``target`` (means over the runs
    that reached it, at their first evaluation at or above it), and the per-step costs."""
    rollouts_to = all(len(r["curve"][0]) == 5 for r in runs)  # runs saved before rollouts were counted have no column
    rows = []
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        final = [r["curve"][-1][2] for r in mine]
        hit = [point for point in (first_reaching(r["curve"], target) for r in mine) if point is not None]
        cells = [
            method, spread(final),
            mean_of([r["curve"][-1][3] for r in mine], 2), f"{len(hit)}/{len(mine)}", mean_of([p[0] for p in hit], 0),
            *([mean_of([p[4] for p in hit], 0)] if rollouts_to else []), mean_of([p[1] for p in hit], 2),
            mean_of([r["rollouts"] for r in mine], 0), mean_of([r["generation_calls"] for r in mine], 2),
            mean_of([r["curve"][-1][1] * 60 / r["curve"][-1][0] for r in mine], 3),
            mean_of([r["signal"] for r in mine], 2),
        ]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    columns = [
        "method", "final greedy accuracy, mean (min–max)", "final sampled accuracy", f"runs reaching {target}",
        f"steps to {target}", *([f"rollouts to {target}"] if rollouts_to else []), f"minutes to {target}",
        "rollouts / step", "generation calls / step", "s / step", "groups with signal",
    ]  # fmt: skip
    return "\n".join(["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *rows])


def minutes_to(run: dict, target: float) -> float:
    """Training minutes to greedy accuracy ``target``, a run that never reaches it counted at its last evaluation's
    minutes (every run counts: their mean is the restricted mean time to target)."""
    return (first_reaching(run["curve"], target) or run["curve"][-1])[1]


def floor_of(auto: str) -> str:
    """The fixed arm that is ``auto``'s floor: sized refill at its ``pods_n`` (`trl_pods.auto`), by its settings."""
    settings = {**METHODS[auto], "pods_generation": "refill"}
    return next((m for m in METHODS if METHODS[m] == settings), "")


def _against(arm: str, pool: list[str], runs: list[dict], target: float) -> str:
    """``arm`` against the fastest arm of ``pool`` in restricted mean minutes to ``target`` (`minutes_to`) and how
    many runs missed it: their ratio with a 90% bootstrap interval that chooses the fastest again in every resample
    (`race_analysis.against_fastest`), the permutation p (*within noise* where `race_analysis.ratio_words` says so),
    and the final greedy accuracies with their p."""
    mine = {m: [r for r in runs if r["method"] == m] for m in [arm, *pool]}
    minutes = {m: [minutes_to(r, target) for r in mine[m]] for m in mine}
    best = fastest({m: minutes[m] for m in pool})
    missed = {m: sum(first_reaching(r["curve"], target) is None for r in mine[m]) for m in (arm, best)}
    if all(missed[m] == len(mine[m]) for m in missed):
        return f"- `{arm}` against `{best}`: no run of either reached it"
    _, ratio, low, high = against_fastest(minutes[arm], {m: minutes[m] for m in pool})
    words = ratio_words(ratio, low, high, permutation_p(minutes[arm], minutes[best]))
    final = {m: [r["curve"][-1][2] for r in mine[m]] for m in (arm, best)}
    text = {m: f"{statistics.fmean(minutes[m]):.2f} ({missed[m]} of {len(mine[m])} runs missed)" for m in missed}
    return (
        f"- `{arm}` {text[arm]} against `{best}`'s {text[best]}: {words}; final greedy accuracy "
        f"{statistics.fmean(final[arm]):.2f} against {statistics.fmean(final[best]):.2f}, "
        f"p {permutation_p(final[arm], final[best]):.2f}"
    )


def auto_against_fixed(runs: list[dict], methods: list[str], target: float) -> str:
    """Each auto arm against the fastest fixed arm of its measurement with at most its rollouts per prompt (auto 4->4
    cannot draw 16), as `_against` reads it; where the measurement has auto's floor (`floor_of`) and another such
    arm, the floor too, against the fastest of the others. Empty where the measurement has no such pair."""
    lines, floors = [], []
    for auto in (m for m in methods if METHODS[m].get("pods_generation") == "auto"):
        fixed = [m for m in methods if METHODS[m].get("pods_generation") != "auto"
                 and METHODS[m]["pods_n"] <= METHODS[auto]["pods_n"]]  # fmt: skip
        if fixed:
            lines.append(_against(auto, fixed, runs, target))
        floor = floor_of(auto)
        others = [m for m in fixed if m != floor]
        if floor in fixed and others:
            floors.append(_against(floor, others, runs, target))
    if not lines:
        return ""
    floor = ", and auto's floor (sized refill at its `pods_n`) against the fastest of the others" if floors else ""
    return (f"Minutes to {target}, every run counted (a miss at its minutes at the last evaluation): each auto arm "
            f"against the fastest fixed arm with at most its rollouts per prompt{floor}, the interval choosing the "
            "fastest again in each resample:\n\n" + "\n".join(lines + floors))  # fmt: skip


def section(runs: list[dict], path: Path) -> str:
    """One measurement (its runs, saved in ``path``): its settings, a table per target, its figure, the command that
    measures it and what is written by hand beside its data."""
    name = path.stem
    settings = {**DEFAULTS, **{k: v for k, v in runs[0].get("settings", {}).items() if k in SETTINGS}}
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    tag = name.removeprefix(STUDY.data).removeprefix("_")
    untrained = [statistics.mean(r["curve"][0][k] for r in runs) for k in (2, 3)]
    commands = measurement_commands(STUDY.script, PARSER, {**settings, "tag": tag}, runs, methods)
    tables = "\n\n".join(
        part
        for t in settings["targets"]
        for part in (
            f"Target: greedy accuracy {t}.\n\n{table(runs, methods, t)}",
            auto_against_fixed(runs, methods, t),
        )  # fmt: skip
        if part
    )
    return f"""## add1 from scratch{f" ({tag})" if tag else ""}: {" vs ".join(methods)}

{settings["prompts_per_step"]} prompts per optimizer step, lr {settings["learning_rate"]} (constant);
{settings["steps"]} steps per run, seeds {seeds};
accuracy every {settings["eval_every"]} steps, untrained: greedy {untrained[0]:.2f}, sampled {untrained[1]:.4f}.

{tables}

![accuracy against steps and training minutes](data/{name}.png)

Runs: [data/{path.name}](data/{path.name}). {commands}

{notes(name, runs)}""".strip()


def data_file(args: argparse.Namespace) -> Path:
    """Where a measurement's runs are saved: ``dynamic_sampling[_<tag>].jsonl``."""
    return DATA / f"{STUDY.data}{f'_{args.tag}' if args.tag else ''}.jsonl"


def render() -> str:
    """The page, from every saved measurement and the notes written beside them."""
    return STUDY.render_runs(
        f"""A random-weight Qwen2 (264k parameters) with a character vocabulary learns single-digit addition (the 100
problems `a+b=`) from scratch with RL, reward 1 for the exact sum, completions of at most {MAX_COMPLETION_LENGTH}
tokens at temperature {TEMPERATURE}; every method trains 4 kept rollouts per prompt (GRPO 8: 8), and each seed's
initial weights are shared by the methods. Accuracy on the 100 problems: greedy, and sampled (the exact probability
that a sample is right). Steps, rollouts and minutes to a target: means over the runs that reached it, at the first
evaluation at or above it; rollouts count everything generated (pilots of prompts not trained on, and refill's draws,
included). Minutes: wall-clock training time on one thread of a shared 2-core CPU, evaluation excluded. Rollouts and
generation calls per step: what the trainer generated per optimizer step. Groups with signal: the fraction of trained
groups whose rewards differ (the others have zero advantage). `benchmarks/dynamic_sampling.py`'s docstring has the
details.""",
        section,
    )


def plot(runs: list[dict], path: Path) -> None:
    """The figure of the measurement saved in ``path``, beside it."""
    plot_accuracy_curves(runs, path.with_suffix(".png"),
                         "accuracy on the 100 problems (greedy)", "training minutes (1 CPU thread)", None)  # fmt: skip


def main() -> None:
    args = PARSER.parse_args()
    if not args.report:
        torch.set_num_threads(1)
        path = data_file(args)
        planned = [(method, seed) for seed in range(args.seeds) for method in args.methods]
        settings = {key: getattr(args, key) for key in SETTINGS}
        runs = measure(RunStore(path, ("method", "seed")), planned, lambda method, seed: run(method, seed, args),
                       settings, args.smoke)  # fmt: skip
        if args.smoke:
            print(section(runs, path), "smoke run: nothing written", sep="\n")
            return
    for path, runs in STUDY.measurements().items():
        plot(runs, path)
    STUDY.write(render())


if __name__ == "__main__":
    main()

"""Beyond PODS: D3S sample- and token-level selection, dynamic schedules, dropping constant groups, and
generation in memory-bounded rounds."""

import itertools
import math

import pytest
import torch
from helpers import (
    DroppedLossRecorder,
    constant_for_even_prompts,
    load,
    pods_config,
    prompts_dataset,
    step_losses,
    token_sum_reward,
)
from tiny_model import build_tokenizer, tiny_qwen2_moe

from trl_pods import PODSGRPOTrainer
from trl_pods.advantages import full_group_advantages
from trl_pods.down_sampling import max_advantage_variance, max_variance, max_variance_across_groups
from trl_pods.losses import optimizer_step_totals, sequence_average_scale
from trl_pods.schedules import kept_per_prompt, scheduled_value
from trl_pods.token_selection import normaliser_weights, select_top_tokens, token_budget, token_scores


def _variance(values):
    values = torch.as_tensor(values, dtype=torch.float64)
    return ((values - values.mean()) ** 2).mean().item()


def test_advantage_variance_rule_is_optimal_and_equals_max_variance():
    """D3S per-group rule: its subset maximises the variance of full-group advantages (brute force), and it is the
    same optimum as PODS's max_variance (advantages are an increasing affine map of rewards within a group)."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(3, 9, (1,), generator=gen))
        m = int(torch.randint(2, n + 1, (1,), generator=gen))
        rewards = torch.randint(0, 4, (3, n), generator=gen).float() / 3
        advantages = full_group_advantages(rewards, "group")
        kept = max_advantage_variance(rewards, m)
        pods = max_variance(rewards, m)
        for row, a, b in zip(rewards, kept, pods, strict=True):
            assert _variance(row[a]) == pytest.approx(_variance(row[b]), abs=1e-12)
        for row, idx in zip(advantages, kept, strict=True):
            best = max(_variance(row[list(c)]) for c in itertools.combinations(range(n), m))
            assert _variance(row[idx]) >= best - 1e-6  # float32 advantages: ties differ in the last bits


def test_cross_group_selection_is_optimal_per_budget_block():
    """Cross-group D3S: each block of groups keeps exactly blocks*m rollouts, with the largest variance of
    advantages over all ways to pick that many from the block (brute force)."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(100):
        advantages = torch.randn(4, 4, generator=gen)  # 2 blocks of 2 groups x 4 rollouts
        mask = max_variance_across_groups(advantages, 2, groups_per_budget=2)
        for block in range(2):
            values = advantages[2 * block : 2 * block + 2].flatten()
            chosen = mask[2 * block : 2 * block + 2].flatten()
            assert int(chosen.sum()) == 4
            best = max(_variance(values[list(c)]) for c in itertools.combinations(range(8), 4))
            assert _variance(values[chosen]) >= best - 1e-9
    with pytest.raises(ValueError, match="blocks of 3"):
        max_variance_across_groups(advantages, 2, groups_per_budget=3)


def test_token_mask_and_normaliser_weights_on_a_hand_computed_example():
    """|A| x H scores, the top-fraction mask, and loss weights that make each normaliser count kept tokens."""
    advantages = torch.tensor([2.0, -1.0])
    entropies = torch.tensor([[0.5, 1.0, 0.1], [3.0, 0.2, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last token of row 2 is padding
    scores = token_scores(advantages, entropies)
    assert torch.allclose(scores, torch.tensor([[1.0, 2.0, 0.2], [3.0, 0.2, 9.0]]))
    keep = select_top_tokens(scores, mask, fraction=0.6)  # 3 of 5 valid: 1.0, 2.0, 3.0; never the padding (9.0)
    assert keep.tolist() == [[True, True, False], [True, False, False]]
    grpo = normaliser_weights(keep, mask, "grpo", kept_total=3, valid_total=5)
    assert grpo.tolist() == [[1.5, 1.5, 0.0], [2.0, 0.0, 0.0]]  # row 1: 3 valid / 2 kept; row 2: 2 / 1
    dapo = normaliser_weights(keep, mask, "dapo", kept_total=3, valid_total=5)
    assert torch.allclose(dapo, keep.float() * 5 / 3)
    assert torch.equal(normaliser_weights(keep, mask, "dr_grpo", 3, 5), keep.float())
    # grpo's per-sequence mean with these weights is the mean over kept tokens only:
    loss = torch.tensor([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]])
    per_sequence = (loss * grpo * mask).sum(1) / mask.sum(1)
    assert per_sequence.tolist() == [2.0, 2.0]


def _mostly_zero_scores(zero_share: float, rows: int = 10, tokens: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """``[rows, tokens]`` |A| x H scores whose first ``zero_share`` of rows have zero advantage (constant groups),
    and a mask with one padded token per row."""
    gen = torch.Generator().manual_seed(0)
    advantages = torch.randn(rows, generator=gen).abs() + 0.1
    advantages[: round(zero_share * rows)] = 0.0
    scores = token_scores(advantages, torch.rand(rows, tokens, generator=gen) + 0.01)
    mask = torch.ones(rows, tokens)
    mask[:, -1] = 0
    return scores, mask


@pytest.mark.parametrize("zero_share", [0.7, 0.8])
def test_token_selection_holds_the_budget_when_most_tokens_have_zero_advantage(zero_share):
    """With more zero-score tokens than 1 - fraction, a quantile threshold of 0 used to keep every token. The budget
    round(fraction x valid) holds exactly: every token strictly above the budget's score, then ties with it in
    index order; a kept token never scores below a dropped one and padding is never kept."""
    scores, mask = _mostly_zero_scores(zero_share)
    valid = int(mask.sum())  # 190
    keep = select_top_tokens(scores, mask, fraction=0.25)
    assert int(keep.sum()) == token_budget(0.25, valid) == 48
    assert not (keep & ~mask.bool()).any()
    dropped = mask.bool() & ~keep
    assert scores[keep].min() >= scores[dropped].max()
    positive = scores > 0
    if zero_share == 0.7:  # 57 positive tokens: the 48 largest
        assert (keep <= positive).all()
    else:  # 38 positive tokens, all kept, then the first 10 zero-score tokens in index order
        assert (keep >= positive & mask.bool()).all()
        zero_tokens = (mask.bool() & ~positive).flatten().nonzero().squeeze(1)
        assert keep.flatten()[zero_tokens].tolist() == [True] * 10 + [False] * (len(zero_tokens) - 10)
    assert torch.equal(keep, select_top_tokens(scores.clone(), mask, fraction=0.25)), "deterministic"


def test_token_budget_rounds_and_keeps_at_least_one():
    """The budget is round(fraction x valid), at least one token when any is valid, none when none is."""
    assert [token_budget(0.25, v) for v in (0, 1, 4, 10, 190)] == [0, 1, 1, 3, 48]
    assert token_budget(1.0, 7) == 7 and token_budget(0.5, 7) == 4


@pytest.mark.parametrize("shape,values", [("constant", [8, 8, 8]), ("linear", [2, 5, 8]), ("cosine", [2, 5, 8])])
def test_schedule_values_at_chosen_steps(shape, values):
    """Ramps from start to end: constant is the end value; linear and cosine meet at the midpoint."""
    assert [scheduled_value(2, 8, p, shape) for p in (0.0, 0.5, 1.0)] == pytest.approx(values)
    assert scheduled_value(2, 8, 0.25, "cosine") == pytest.approx(2 + 6 * (1 - math.cos(math.pi / 4)) / 2)
    assert scheduled_value(2, 8, 1.7, shape) == pytest.approx(values[-1]), "progress is clamped"


def test_kept_per_prompt_keeps_micro_batches_even():
    """M is rounded down so that prompts_per_process * M splits into steps_per_generation equal micro-batches."""
    assert kept_per_prompt(5.7, 8, prompts_per_process=1, steps_per_generation=2) == 4
    assert kept_per_prompt(5.7, 8, prompts_per_process=2, steps_per_generation=2) == 5
    assert kept_per_prompt(1.0, 8, prompts_per_process=1, steps_per_generation=4) == 4, "smallest valid M"
    assert kept_per_prompt(8.0, 8, prompts_per_process=1, steps_per_generation=1) == 8


class _KeptCompletions(PODSGRPOTrainer):
    """Records the completions each generation keeps."""

    kept: list[list[str]]

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        self.kept = [*getattr(self, "kept", []), [c[0]["content"] for c in phase1["generation"][3]]]
        return phase1


def _train(path, tmp_path, reward=token_sum_reward, trainer_class=PODSGRPOTrainer, **options):
    model, tokenizer = load(path)
    config = pods_config(tmp_path, **{"pods_n": 8, "pods_m": 4, "per_device_train_batch_size": 8, **options})
    trainer = trainer_class(model, reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()
    return trainer


def test_m_schedule_changes_the_kept_count_each_step(tiny_model_path, tmp_path):
    """pods_m_start=2 -> pods_m=4, linear over 3 steps: 2, 3, 4 kept per prompt, logged every step."""
    trainer = _train(tiny_model_path, tmp_path, max_steps=3, pods_m_start=2, pods_schedule="linear")
    logs = [e for e in trainer.state.log_history if "pods/kept_per_prompt" in e]
    assert [e["pods/kept_per_prompt"] for e in logs] == [2, 3, 4]
    assert [e["pods/rollouts_trained"] for e in logs] == [4, 6, 8]


def test_completions_table_holds_exactly_the_current_generation_under_an_m_schedule(tiny_model_path, tmp_path):
    """TRL's completion logs are sized for pods_m; with a scheduled M of 2, 3, 4 each step's table must hold exactly
    that generation's kept rows (4, 6, 8), not stale rows of the previous generation labelled with the new step."""
    import pandas as pd

    options = dict(max_steps=3, pods_m_start=2, pods_schedule="linear", log_completions=True)
    trainer = _train(tiny_model_path, tmp_path, trainer_class=_KeptCompletions, **options)
    for step, kept in enumerate(trainer.kept, start=1):
        table = pd.read_parquet(tmp_path / "completions" / f"completions_{step:05d}.parquet")
        assert [c[0]["content"] for c in table["completion"]] == kept, step
        assert len(table) == 2 * (step + 1) and set(table["step"]) == {step}


def test_cross_group_selection_trains_with_full_group_advantages(tiny_model_path, tmp_path):
    """Cross-group D3S keeps 2 prompts x 4 rows in total (any split between the prompts) and trains."""
    trainer = _train(tiny_model_path, tmp_path, max_steps=2, pods_cross_group=True, pods_advantage_scope="all")
    logs = [e for e in trainer.state.log_history if "pods/rollouts_trained" in e]
    assert [e["pods/rollouts_trained"] for e in logs] == [8, 8]


def test_token_selection_trains_and_logs_the_fraction(tiny_model_path, tmp_path):
    """pods_token_fraction_start=0.25 -> 0.75 (linear) trains and logs the fraction used at each step."""
    trainer = _train(
        tiny_model_path,
        tmp_path,
        max_steps=3,
        pods_token_fraction_start=0.25,
        pods_token_fraction=0.75,
        pods_schedule="linear",
    )
    logs = [e["pods/token_fraction"] for e in trainer.state.log_history if "pods/token_fraction" in e]
    assert logs == pytest.approx([0.25, 0.5, 0.75])


def _token_selection_trainer(path, tmp_path, loss_type: str, fraction: float) -> PODSGRPOTrainer:
    model, tokenizer = load(path)
    config = pods_config(
        tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=8, pods_token_fraction=fraction, loss_type=loss_type
    )
    trainer = PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    trainer.model.train()
    return trainer


def test_token_selection_mask_inside_the_loss(tiny_model_path, tmp_path):
    """The trainer's seam returns weights that keep exactly the top half of tokens by |A| x H, ties in index order,
    scaled so that grpo's per-sequence mean counts the kept tokens."""
    trainer = _token_selection_trainer(tiny_model_path, tmp_path, "grpo", 0.5)
    trainer._loss_advantages = torch.tensor([1.0, -2.0])
    entropies = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0]])
    weights = trainer.get_high_entropy_mask(entropies, torch.ones(2, 4), threshold=0.0)
    # scores: [[1, 2, 3, 4], [2, 2, 2, 2]]; budget 4: 3 and 4, then the first two 2s (row 1 col 1, row 2 col 1)
    assert (weights > 0).tolist() == [[False, True, True, True], [True, False, False, False]]
    assert weights[0, 1:].tolist() == pytest.approx([4 / 3] * 3) and weights[1].tolist() == [4.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("zero_share", [0.7, 0.8])
def test_token_selection_seam_holds_the_budget_and_logs_the_kept_fraction(tiny_model_path, tmp_path, zero_share):
    """With 70% or 80% zero-advantage tokens and pods_token_fraction = 0.25, the seam keeps exactly a quarter of the
    tokens (it used to keep all of them at 80%), dapo's normaliser weight is exactly 1 / 0.25, and
    pods/token_fraction_kept logs the fraction actually kept."""
    trainer = _token_selection_trainer(tiny_model_path, tmp_path, "dapo", 0.25)
    scores, mask = _mostly_zero_scores(zero_share)
    trainer._loss_advantages = torch.ones(scores.size(0))  # scores = entropies
    weights = trainer.get_high_entropy_mask(scores, mask, threshold=0.0)
    kept = weights > 0
    assert int(kept.sum()) == 48 and torch.equal(kept, select_top_tokens(scores, mask, 0.25))
    assert weights[kept].tolist() == pytest.approx([190 / 48] * 48)
    assert trainer._metrics["train"]["pods/token_fraction_kept"] == [pytest.approx(48 / 190)]


def _constant_for_first_prompt(prompts, completion_ids, **kwargs):
    """Prompt 0's rollouts all score 1 (a zero-signal group); the others get the token hash."""
    return [
        1.0 if "What is 0 " in p[0]["content"] else float(sum(ids) % 7)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_dropping_constant_groups_rescales_the_normaliser(tiny_model_path, tmp_path, loss_type):
    """With one of two groups constant, dropping it halves the normaliser (sequences for grpo, tokens for dapo),
    so the loss doubles; the constant group contributes nothing either way."""
    options = dict(max_steps=1, shuffle_dataset=False, loss_type=loss_type)
    kept = _train(tiny_model_path, tmp_path / "a", _constant_for_first_prompt, **options)
    dropped = _train(
        tiny_model_path, tmp_path / "b", _constant_for_first_prompt, pods_drop_constant_groups=True, **options
    )
    log = dropped.state.log_history[0]
    assert log["pods/frac_rollouts_dropped"] == 0.5
    assert log["loss"] == pytest.approx(2 * kept.state.log_history[0]["loss"], rel=1e-4, abs=1e-7)


@pytest.mark.parametrize(
    "options",
    [
        dict(loss_type="grpo"),
        dict(loss_type="grpo", top_entropy_quantile=0.5),
        dict(loss_type="sapo"),
        dict(loss_type="dr_grpo"),
        dict(loss_type="luspo", importance_sampling_level="sequence"),
        dict(loss_type="dapo"),
        dict(loss_type="cispo"),
        dict(loss_type="vespo"),
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_loss_with_dropped_groups_equals_trl_loss_on_the_other_rows(tiny_model_path, tmp_path, options):
    """With half the rows in constant groups and dropped, the loss (policy term, KL and entropy bonus) equals TRL's
    loss computed on the other rows alone, for every accepted loss type. Rescaling the whole loss used to double the
    entropy bonus of the sequence-averaged losses, which is already a mean over the rows not dropped."""
    trainer = _train(
        tiny_model_path,
        tmp_path,
        constant_for_even_prompts,
        trainer_class=DroppedLossRecorder,
        max_steps=2,
        shuffle_dataset=False,
        pods_drop_constant_groups=True,
        entropy_coef=0.5,
        beta=0.1,
        **options,
    )
    assert [r["kept"] for r in trainer.loss_records] == [4, 4], "one of the two groups dropped at each step"
    for loss, reference in step_losses([trainer.loss_records]):
        assert loss == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_optimizer_step_totals_and_sequence_average_scale():
    """Each micro-batch of a generation gets the total of its aligned block of accumulation steps; the scale is 1
    when nothing is dropped and never divides by zero."""
    counts = torch.tensor([1.0, 3.0, 0.0, 2.0])
    assert optimizer_step_totals(counts, 2).tolist() == [4.0, 4.0, 2.0, 2.0]
    assert optimizer_step_totals(counts, 1).tolist() == counts.tolist()
    assert optimizer_step_totals(counts, 4).tolist() == [6.0] * 4
    assert sequence_average_scale(4, 2, 2, torch.tensor(16.0)).item() == 1.0
    assert sequence_average_scale(4, 2, 2, torch.tensor(6.0)).item() == pytest.approx(16 / 6)
    assert sequence_average_scale(4, 1, 1, torch.tensor(0.0)).item() == 4.0


def test_router_loss_is_not_rescaled_with_dropped_groups(tmp_path):
    """A Mixture-of-Experts model: the router auxiliary loss is TRL's, over every row of the forward pass, and is
    not rescaled with the policy term: the loss differs from TRL's loss on the non-dropped rows alone exactly by the
    coefficient times the difference of the two router losses (rescaling the whole loss doubled it)."""
    tokenizer = build_tokenizer()
    config = pods_config(
        tmp_path,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=8,
        max_steps=2,
        shuffle_dataset=False,
        pods_drop_constant_groups=True,
        loss_type="grpo",
    )
    trainer = DroppedLossRecorder(
        tiny_qwen2_moe(tokenizer, router_aux_loss_coef=0.5),
        constant_for_even_prompts,
        config,
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
    )
    assert trainer.aux_loss_enabled
    trainer.train()
    assert [r["kept"] for r in trainer.loss_records] == [4, 4]
    for record in trainer.loss_records:
        all_rows, kept_rows = record["aux_loss"]
        expected = record["reference"] + 0.5 * (all_rows - kept_rows)
        assert record["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_dropped_groups_are_counted_over_the_whole_optimizer_step(tiny_model_path, tmp_path, loss_type):
    """With gradient accumulation (2 micro-batches per step), the optimizer step's loss averages over the step's
    non-dropped sequences, as TRL's loss on those rows taken as one batch; a per-micro-batch rescale weighted a
    micro-batch with few such rows like one with many."""
    trainer = _train(
        tiny_model_path,
        tmp_path,
        constant_for_even_prompts,
        trainer_class=DroppedLossRecorder,
        max_steps=3,
        shuffle_dataset=False,
        pods_drop_constant_groups=True,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        loss_type=loss_type,
        beta=0.1,
    )
    kept = [[r["kept"] for r in trainer.loss_records if r["step"] == step] for step in range(3)]
    assert all(sum(step) == 4 for step in kept) and any(len(set(step)) > 1 for step in kept), kept
    for loss, reference in step_losses([trainer.loss_records]):
        assert loss == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_generation_in_rounds_gives_the_same_rollouts(tiny_model_path, tmp_path):
    """Chunked generation returns one rollout per row in order; greedy decoding makes them identical to unchunked
    generation, and sampled rollouts keep the same count and token distribution."""
    model, tokenizer = load(tiny_model_path)
    prompts = [row["prompt"] for row in prompts_dataset(4) for _ in range(6)]  # 4 prompts x N=6
    results = {}
    for chunk in (None, 4):
        config = pods_config(
            tmp_path,
            pods_n=6,
            pods_m=2,
            per_device_train_batch_size=4,
            pods_generation_chunk_size=chunk,
        )
        config.generation_kwargs = {"do_sample": False}  # greedy, to compare rounds exactly (refused for training)
        trainer = PODSGRPOTrainer(
            model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
        )
        trainer.model.train()
        results[chunk] = trainer._generate(prompts)[1]
    assert len(results[4]) == 24 and results[4] == results[None]

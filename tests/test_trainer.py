"""PODSGRPOTrainer end to end on a real tiny model: what each stage sees, equivalence with GRPO, options."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import QUIET, load, pods_config, prompts_dataset, token_sum_reward
from trl import GRPOConfig, GRPOTrainer

from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.advantages import full_group_advantages, group_objective
from trl_pods.down_sampling import max_variance


class SpyTrainer(PODSGRPOTrainer):
    """Records the rows that every log-prob pass and every phase sees."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.logp_passes: list[tuple[str, int]] = []
        self.selections: list[dict] = []
        self.outputs: list[dict] = []

    def _get_per_token_logps_and_entropies(self, model, input_ids, *args, **kwargs):
        if torch.is_grad_enabled():
            kind = "train"
        else:
            kind = "ref" if model is self.ref_model else "old"
        self.logp_passes.append((kind, input_ids.size(0)))
        return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        self.selections.append(phase1)
        return phase1

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.outputs.append(output)
        return output


class CountingReward:
    """A reward function that records every batch of rows it scores."""

    __name__ = "counting_reward"

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, prompts, completion_ids, **kwargs):
        self.calls.append([p[0]["content"] for p in prompts])
        return token_sum_reward(completion_ids)


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_each_stage_sees_the_right_rows(tiny_model_path, tmp_path):
    """Rewards see N rows per prompt exactly once; old, ref and train log-prob passes only ever see kept rows."""
    n, m, prompts_per_generation = 8, 4, 2
    reward = CountingReward()
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path, pods_n=n, pods_m=m, per_device_train_batch_size=4, steps_per_generation=2, max_steps=4, beta=0.1
    )
    trainer = SpyTrainer(model, reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    before = _params(model)
    trainer.train()

    assert len(reward.calls) == 2, "one reward call per generation: 4 optimizer steps, a generation every 2"
    for call in reward.calls:
        assert len(call) == prompts_per_generation * n
        assert all(call.count(p) == n for p in set(call)), "every prompt scored exactly N times"
    old = [rows for kind, rows in trainer.logp_passes if kind == "old"]
    ref = [rows for kind, rows in trainer.logp_passes if kind == "ref"]
    train = [rows for kind, rows in trainer.logp_passes if kind == "train"]
    assert sum(old) == sum(ref) == 2 * prompts_per_generation * m, "old/ref passes cover the kept rows only"
    assert train and all(rows == 4 for rows in train), "train passes see per_device_train_batch_size kept rows"
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters()), "parameters must change"
    logs = trainer.state.log_history[0]
    assert logs["pods/rollouts_generated"] == prompts_per_generation * n
    assert logs["pods/rollouts_trained"] == prompts_per_generation * m
    assert logs["pods/reward_std_kept"] >= logs["pods/reward_std_all"] - 1e-6, "max_variance keeps the spread"


def test_advantages_are_computed_per_kept_group(tiny_model_path, tmp_path):
    """Advantages are (r - mean) / (std + 1e-4) over each prompt's M kept rewards, in the kept rows' order."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(tmp_path, pods_n=6, pods_m=3, per_device_train_batch_size=6, max_steps=1)
    trainer = SpyTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()
    phase1, output = trainer.selections[0], trainer.outputs[0]
    assert phase1["kept"].sum(1).tolist() == [3, 3], "3 of 6 kept per prompt"
    kept_rewards = phase1["rewards"][phase1["kept"]].view(2, 3)  # [G, M]
    expected = (kept_rewards - kept_rewards.mean(1, keepdim=True)) / (kept_rewards.std(1, keepdim=True) + 1e-4)
    assert torch.allclose(output["advantages"], expected.flatten(), atol=1e-5)
    kept_ids = [phase1["generation"][1][i] for i in range(6)]
    assert [float(sum(ids) % 7) for ids in kept_ids] == kept_rewards.flatten().tolist(), "rows align with rewards"


def test_full_group_advantage_scope(tiny_model_path, tmp_path):
    """pods_advantage_scope='all' normalises the kept rewards with the statistics of all N rollouts."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path, pods_n=6, pods_m=3, per_device_train_batch_size=6, max_steps=1, pods_advantage_scope="all"
    )
    trainer = SpyTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()
    phase1, output = trainer.selections[0], trainer.outputs[0]
    expected = full_group_advantages(phase1["rewards"], "group")[phase1["kept"]]
    assert torch.allclose(output["advantages"], expected)
    rewards = phase1["rewards"][0]
    by_hand = (rewards[phase1["kept"][0]] - rewards.mean()) / (rewards.std() + 1e-4)  # mask indexing
    assert torch.allclose(output["advantages"][:3], by_hand, atol=1e-5)


def _grpo_run(trainer_cls, config_cls, path, out, **extra):
    model, tokenizer = load(path)
    config = config_cls(output_dir=str(out), per_device_train_batch_size=4, max_steps=3, **QUIET, **extra)
    trainer = trainer_cls(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, _params(model)


def test_n_equals_m_reproduces_grpo_exactly(tiny_model_path, tmp_path):
    """pods_n == pods_m is plain GRPO: same seed → identical losses and parameters as trl.GRPOTrainer."""
    grpo_losses, grpo_params = _grpo_run(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "a", num_generations=4)
    pods_losses, pods_params = _grpo_run(
        PODSGRPOTrainer, PODSConfig, tiny_model_path, tmp_path / "b", pods_n=4, pods_m=4
    )
    assert grpo_losses == pods_losses and len(grpo_losses) == 3
    for name, value in grpo_params.items():
        assert torch.equal(value, pods_params[name]), name


@pytest.mark.parametrize(
    "options",
    [
        dict(loss_type="grpo"),
        dict(loss_type="dr_grpo"),
        dict(loss_type="bnpo"),
        dict(loss_type="cispo"),
        dict(loss_type="sapo"),
        dict(loss_type="luspo", importance_sampling_level="sequence"),
        dict(loss_type="vespo"),
        dict(beta=0.04, num_iterations=2),
        dict(steps_per_generation=2, gradient_accumulation_steps=2),
        dict(pods_down_sampler="random", scale_rewards="batch"),
        dict(pods_down_sampler="max_reward", top_entropy_quantile=0.5),
        dict(multi_objective_aggregation="normalize_then_sum"),
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_trains_with_trl_options(tiny_model_path, tmp_path, options):
    """Every loss type and the multi-step / reference-model options train (finite loss, parameters move)."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=4, max_steps=2, **options)
    trainer = PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    before = _params(model)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())


def test_trains_a_lora_adapter_with_reference_from_disabled_adapter(tiny_model_path, tmp_path):
    """PEFT/LoRA with beta > 0: only adapter weights move, and the reference pass runs on kept rows."""
    from peft import LoraConfig

    model, tokenizer = load(tiny_model_path)
    config = pods_config(tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=4, max_steps=2, beta=0.1)
    trainer = SpyTrainer(
        model,
        token_sum_reward,
        config,
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    before = _params(trainer.model)
    trainer.train()
    changed = [k for k, v in trainer.model.named_parameters() if not torch.equal(before[k], v)]
    assert changed and all("lora" in k for k in changed)
    assert all(rows % 4 == 0 and rows <= 4 for kind, rows in trainer.logp_passes if kind != "train")


def test_evaluation_is_plain_grpo(tiny_model_path, tmp_path):
    """Evaluation generates num_generations_eval per prompt and does not down-sample, as in GRPOTrainer."""
    reward = CountingReward()
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=1,
        eval_strategy="steps",
        eval_steps=1,
    )
    trainer = PODSGRPOTrainer(
        model,
        reward,
        config,
        train_dataset=prompts_dataset(),
        eval_dataset=prompts_dataset(2),
        processing_class=tokenizer,
    )
    trainer.train()
    eval_calls = reward.calls[1:]
    assert eval_calls and all(len(call) == 4 and len(set(call)) == 1 for call in eval_calls)
    assert any("eval_reward" in entry for entry in trainer.state.log_history)


def test_rejects_grpo_config(tiny_model_path, tmp_path):
    """Passing a GRPOConfig is a TypeError that says to use PODSConfig."""
    model, tokenizer = load(tiny_model_path)
    config = GRPOConfig(output_dir=str(tmp_path), **QUIET)
    with pytest.raises(TypeError, match="PODSConfig"):
        PODSGRPOTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)


def test_rejects_a_user_rule_with_a_wrong_result(tiny_model_path, tmp_path):
    """A user down-sampler returning duplicate indices fails loudly instead of training on wrong rows."""
    from trl_pods import register_down_sampler

    @register_down_sampler("test_duplicates")
    def duplicates(rewards, m, *, generator=None):
        return torch.zeros(rewards.size(0), m, dtype=torch.long)

    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=4, max_steps=1, pods_down_sampler="test_duplicates"
    )
    trainer = PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    with pytest.raises(ValueError, match="distinct indices"):
        trainer.train()


def test_builds_a_default_config_without_args(tiny_model_path, tmp_path, monkeypatch):
    """Drop-in construction: `PODSGRPOTrainer(model, reward_funcs)` without `args` builds a default PODSConfig whose
    output directory is named as GRPOTrainer names it (``<model name>-GRPO``), as TRL's test_init_minimal expects.
    TRL's default config asks for bf16, which a CPU-only machine refuses for both trainers: the test stands in a
    bf16-capable device."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    _, tokenizer = load(tiny_model_path)
    trainer = PODSGRPOTrainer(
        str(tiny_model_path), token_sum_reward, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    grpo = GRPOTrainer(
        str(tiny_model_path), token_sum_reward, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    assert isinstance(trainer.args, PODSConfig)
    assert trainer.args.output_dir == grpo.args.output_dir == f"{tiny_model_path.name}-GRPO"
    assert (trainer.pods_m, trainer.pods_n) == (8, 32)


def test_seams_fall_through_to_trl_without_pods_init(tiny_model_path, tmp_path):
    """A trainer that TRL's own __init__ built (no PODS __init__, a GRPOConfig) behaves as GRPOTrainer in every
    overridden seam: class-level defaults make each one fall through, so it trains to the same losses and weights.
    A bare object (TRL-style unit tests build trainers with object.__new__) gets TRL's entropy mask."""
    grpo_losses, grpo_params = _grpo_run(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "a", num_generations=4)

    class TRLBuilt(PODSGRPOTrainer):
        def __init__(self, *args, **kwargs):
            GRPOTrainer.__init__(self, *args, **kwargs)

    losses, params = _grpo_run(TRLBuilt, GRPOConfig, tiny_model_path, tmp_path / "b", num_generations=4)
    assert losses == grpo_losses
    assert all(torch.equal(value, params[name]) for name, value in grpo_params.items())

    bare = object.__new__(PODSGRPOTrainer)
    bare.accelerator = SimpleNamespace(gather=lambda t: t, pad_across_processes=lambda t, dim, pad_index: t)
    entropies, mask = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 2.0]]), torch.tensor([[1, 1, 1], [1, 1, 0]])
    expected = GRPOTrainer.get_high_entropy_mask(bare, entropies, mask, 0.5)
    assert torch.equal(bare.get_high_entropy_mask(entropies, mask, 0.5), expected)
    assert bare._pods_phase1 is None and bare.pods_n is None


def _logging_reward(name: str):
    """A reward function that logs each completion's text to the column "text" (every function to the same one)
    and to a column of its own."""

    def reward(completions, completion_ids, log_extra, **kwargs):
        texts = [c[0]["content"] for c in completions]
        log_extra("text", texts)
        log_extra(f"text_{name}", texts)
        return token_sum_reward(completion_ids)

    reward.__name__ = name
    return reward


def test_extra_columns_logged_by_reward_functions_follow_the_kept_rows(tiny_model_path, tmp_path):
    """Columns that reward functions log for every generated row keep only the kept rows, in order, also when two
    functions log the same column (its pending list then holds one block of rows per function), so the completions
    table stays aligned."""
    import pandas as pd

    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=8, max_steps=1, log_completions=True
    )
    trainer = PODSGRPOTrainer(
        model,
        [_logging_reward("first"), _logging_reward("second")],
        config,
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
    )
    trainer.train()
    table = pd.read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    completions = [c[0]["content"] for c in table["completion"]]
    assert len(completions) == 8
    for column in ("text", "text_first", "text_second"):
        assert table[column].tolist() == completions, column


class TokenSpy(PODSGRPOTrainer):
    """Records, per generation, the prompt + completion tokens of every generated row and of the kept rows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generated_tokens: list[int] = []
        self.kept_tokens: list[int] = []

    def _generate(self, prompts):
        generation = super()._generate(prompts)
        if self._pods_phase1 is None and self.model.training:  # phase 1: every generated row
            self.generated_tokens.append(_tokens(generation))
        return generation

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        self.kept_tokens.append(_tokens(phase1["generation"]))
        return phase1


def _tokens(generation: tuple) -> int:
    """Prompt plus completion tokens of the rows of a `_generate` result."""
    return sum(len(p) + len(c) for p, c in zip(generation[0], generation[1], strict=True))


def test_num_tokens_counts_the_trained_rows_and_tokens_generated_every_row(tiny_model_path, tmp_path):
    """TRL's num_tokens counts the prompt and completion tokens of the rows trained on (the kept rows, as
    GRPOTrainer with num_generations = pods_m counts its rows), cumulatively; pods/tokens_generated counts every
    generated row, cumulatively."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=4, max_steps=3)
    trainer = TokenSpy(model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "num_tokens" in e]
    assert len(logs) == len(trainer.kept_tokens) == len(trainer.generated_tokens) == 3
    running_kept = running_generated = 0
    for log, kept, generated in zip(logs, trainer.kept_tokens, trainer.generated_tokens, strict=True):
        running_kept, running_generated = running_kept + kept, running_generated + generated
        assert log["num_tokens"] == running_kept and log["pods/tokens_generated"] == running_generated
    assert trainer.state.num_input_tokens_seen == running_kept < running_generated


def test_resume_state_is_restored_only_with_the_same_generation_layout(tiny_model_path, tmp_path):
    """A checkpoint's per-process PODS state round-trips (micro-step, buffered micro-batches, generated-token count).
    Resumed with another steps_per_generation, the buffer and position are discarded (a new generation, as TRL
    does) and only the token count is kept."""

    def trainer(steps_per_generation: int) -> PODSGRPOTrainer:
        model, tokenizer = load(tiny_model_path)
        config = pods_config(
            tmp_path, pods_n=8, pods_m=4, per_device_train_batch_size=4, steps_per_generation=steps_per_generation
        )
        return PODSGRPOTrainer(
            model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
        )

    saved = trainer(2)
    saved._step, saved._tokens_generated = 3, 123
    saved._buffered_inputs = [{"advantages": torch.tensor([0.5, -0.5])}, {"advantages": torch.tensor([1.0, -1.0])}]
    saved._save_rng_state(str(tmp_path))
    same, other = trainer(2), trainer(1)
    for resumed in (same, other):
        resumed._load_rng_state(str(tmp_path))
        assert resumed._tokens_generated == 123
    assert same._step == 3 and [b["advantages"].tolist() for b in same._buffered_inputs] == [[0.5, -0.5], [1.0, -1.0]]
    assert other._step == 0 and other._buffered_inputs is None


def _large_scale_reward(completion_ids, **kwargs) -> list[float]:
    return [100.0 * (sum(ids) % 7) for ids in completion_ids]


def _flag_reward(completion_ids, **kwargs) -> list[float]:
    return [float(sum(ids) % 3 == 0) for ids in completion_ids]


class RewardMatrixSpy(PODSGRPOTrainer):
    """Records phase 1's gathered ``[rows, F]`` reward matrix and its selection."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.matrices: list[torch.Tensor] = []
        self.kept: list[torch.Tensor] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._pods_phase1 is None:
            self.matrices.append(rewards_per_func.clone())
        return rewards_per_func

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        self.kept.append(phase1["kept"])
        return phase1


def test_normalize_then_sum_selects_on_the_normalised_objective(tiny_model_path, tmp_path):
    """With multi_objective_aggregation='normalize_then_sum' TRL normalises each reward function within the group
    before summing, so a function with a large scale does not dominate. Selection ranks the same objective (each
    function normalised over the group's N rollouts, weighted and summed), not the raw weighted sum, which could keep
    a pair whose advantages TRL then sets to zero."""
    model, tokenizer = load(tiny_model_path)
    config = pods_config(
        tmp_path,
        pods_n=8,
        pods_m=2,
        per_device_train_batch_size=4,
        max_steps=3,
        multi_objective_aggregation="normalize_then_sum",
    )
    trainer = RewardMatrixSpy(
        model, [_large_scale_reward, _flag_reward], config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    trainer.train()
    differs = False
    for matrix, kept in zip(trainer.matrices, trainer.kept, strict=True):
        grouped = matrix.view(-1, 8, 2)  # [G, N, F]
        expected = group_objective(grouped, torch.ones(2), "normalize_then_sum")
        expected_kept = torch.zeros(kept.shape, dtype=torch.bool).scatter_(1, max_variance(expected, 2), True)
        assert torch.equal(kept, expected_kept)
        raw_kept = torch.zeros(kept.shape, dtype=torch.bool).scatter_(1, max_variance(grouped.sum(2), 2), True)
        differs |= not torch.equal(raw_kept, expected_kept)
    assert differs, "the raw weighted sum would have chosen the same rollouts: the test would not discriminate"


def test_group_objective_normalises_each_function_within_the_group():
    """A large-scale function (0..50) and a flag: the raw sum's max-variance pair {0, 5} has opposite normalised
    rewards, so TRL's normalize_then_sum gives both rows almost the same objective over that pair (advantages near
    zero); the normalised objective over all N picks {1, 5} instead. Rows outside `rows` and unscorable rows are
    NaN."""
    grouped = torch.tensor([[[0.0, 1.0], [10.0, 0.0], [20.0, 0.0], [30.0, 0.0], [40.0, 0.0], [50.0, 0.0]]])
    weights = torch.ones(2)
    raw = group_objective(grouped, weights, "sum_then_normalize")
    assert raw.tolist() == [[1.0, 10.0, 20.0, 30.0, 40.0, 50.0]]
    assert max_variance(raw, 2).tolist() == [[0, 5]]
    assert max_variance(group_objective(grouped, weights, "normalize_then_sum"), 2).tolist() == [[1, 5]]
    pair = torch.tensor([[True, False, False, False, False, True]])
    over_pair = group_objective(grouped, weights, "normalize_then_sum", rows=pair)
    assert over_pair[0, [0, 5]].tolist() == pytest.approx([0.0, 0.0], abs=1e-3) and over_pair[0, 1:5].isnan().all()
    unscorable = grouped.clone()
    unscorable[0, 2] = torch.nan
    assert group_objective(unscorable, weights, "normalize_then_sum")[0, 2].isnan()

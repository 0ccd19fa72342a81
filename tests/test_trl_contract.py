"""Contracts with TRL's private internals that PODSGRPOTrainer relies on. If a TRL upgrade breaks one, these fail
loudly (and the trainer tests too) instead of PODS silently training on the wrong rows."""

import hashlib
import inspect

import torch
import trl
from helpers import load, pods_config, prompts_dataset, token_sum_reward
from packaging.version import Version
from transformers import Trainer
from trl import GRPOTrainer

from trl_pods import PODSGRPOTrainer


def test_trl_version_is_in_the_tested_range():
    """The seams below were verified on TRL 1.16; setup.cfg pins trl>=1.16,<1.17."""
    assert Version("1.16") <= Version(trl.__version__) < Version("1.17")


def test_overridden_methods_exist_with_the_expected_signatures():
    """The narrow seams: names and parameters of the private methods that are overridden or called."""
    params = {
        name: list(inspect.signature(getattr(GRPOTrainer, name)).parameters)
        for name in (
            "_generate",
            "_calculate_rewards",
            "_generate_and_score_completions",
            "get_train_dataloader",
            "_get_train_sampler",
        )
    }
    assert params["_generate"] == ["self", "prompts"]
    assert params["_calculate_rewards"] == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert params["_generate_and_score_completions"] == ["self", "inputs"]
    assert "is_training" in inspect.signature(Trainer._get_dataloader).parameters
    assert {"tools", "rollout_func", "environment_factory"} <= set(inspect.signature(GRPOTrainer).parameters)
    assert params["_get_train_sampler"] == ["self", "dataset"]
    run_epoch = inspect.signature(Trainer._run_epoch).parameters  # hands the sampler its epoch (exact resume)
    assert {"epoch", "train_dataloader"} <= set(run_epoch)
    loop = inspect.getsource(Trainer._inner_training_loop)
    assert "self._run_epoch(" in loop and "epoch=epoch," in loop, "called once per epoch with the epoch by keyword"


# What GRPOTrainer._generate_and_score_completions runs before it calls `_generate`, as reviewed for TRL 1.16.0
# (sha256 of its source up to the call, first 16 hex digits): prompt defaults, environment instances drawn from the
# pool and reset, per-row tool dictionaries, image insertion. Nothing there logs, scores or runs the model.
PREPARATION_DIGEST = "3d8d3e4b717da17a"


def test_nothing_observable_happens_before_generate():
    """`rollout_fields.generate_rows` stops TRL's method (`GenerationCaptured`) as soon as `_generate` returns: it
    relies on everything before that call being batch preparation, with no metric, log, reward or forward pass. A
    TRL change to that part fails here until it is reviewed again (update the digest only after reading it)."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    preparation = source[: source.index("self._generate(")]
    for observable in ("_metrics", "_logs", "_calculate_rewards", "_get_per_token_logps", "gather", "self.model("):
        assert observable not in preparation, observable
    assert hashlib.sha256(preparation.encode()).hexdigest()[:16] == PREPARATION_DIGEST


def test_trainer_epoch_accounting_that_refill_replaces():
    """Refill's epochs end when their prompts run out (`prompt_order.DrawingSampler`): the trainer replaces the
    epoch count of `set_initial_training_values` (first of its 7 values) and the resume position that
    `_init_training_state` returns (epochs trained, micro-steps into the epoch); an exhausted epoch iterator ends
    the epoch quietly in `get_batch_samples`."""
    values = inspect.signature(Trainer.set_initial_training_values).parameters
    assert list(values) == ["self", "args", "dataloader"]
    returned = inspect.getsource(Trainer.set_initial_training_values).split("return (")[-1].split(")")[0]
    assert [name.strip() for name in returned.split(",") if name.strip()][0] == "num_train_epochs"
    init = inspect.signature(Trainer._init_training_state).parameters
    assert list(init) == ["self", "max_steps", "num_update_steps_per_epoch", "num_train_epochs",
                          "resume_from_checkpoint", "trial"]  # fmt: skip
    loop = inspect.getsource(Trainer._inner_training_loop)
    assert "epochs_trained, steps_trained_in_current_epoch = self._init_training_state(" in loop
    assert "except StopIteration:" in inspect.getsource(Trainer.get_batch_samples)


def test_repeat_sampler_draws_one_permutation_per_pass_from_its_seeded_generator():
    """`prompt_order.EpochReplay` replays the earlier epochs' permutations (and `DrawingSampler` TRL's batches): it
    relies on RepeatSampler keeping its seed, shuffle flag, row count, generator and layout as attributes and drawing
    exactly one randperm per pass."""
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(list(range(5)), mini_repeat_count=1, batch_size=5, seed=3)
    assert (sampler.seed, sampler.shuffle, sampler.num_samples) == (3, True, 5)
    assert (sampler.mini_repeat_count, sampler.batch_size, sampler.repeat_count) == (1, 5, 1)  # DrawingSampler
    assert sampler.data_source == list(range(5))
    first = list(sampler)
    generator = torch.Generator().manual_seed(3)
    assert first == torch.randperm(5, generator=generator).tolist()
    assert list(sampler) == torch.randperm(5, generator=generator).tolist()


def _trainer(path, tmp_path, **kwargs):
    model, tokenizer = load(path)
    kwargs = {"pods_n": 6, "pods_m": 2, "per_device_train_batch_size": 4, "max_steps": 1, **kwargs}
    config = pods_config(tmp_path, **kwargs)
    return PODSGRPOTrainer(
        model, token_sum_reward, config, train_dataset=prompts_dataset(), processing_class=tokenizer
    )


def test_generate_returns_the_8_tuple_that_is_sliced(tiny_model_path, tmp_path):
    """`_generate` returns (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images,
    tool_images) with one entry per row in the per-row positions."""
    trainer = _trainer(tiny_model_path, tmp_path)
    trainer.model.train()
    prompts = [row["prompt"] for row in prompts_dataset(3)]
    result = trainer._generate(prompts)
    assert len(result) == 8
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images = result
    assert len(prompt_ids) == len(completion_ids) == len(completions) == 3
    assert tool_mask is None and logprobs is None and images is None and extra_fields == {} and tool_images == []


def test_calculate_rewards_returns_a_gathered_rows_by_functions_tensor(tiny_model_path, tmp_path):
    """`_calculate_rewards` returns [rows of all processes, reward functions] (one process here)."""
    trainer = _trainer(tiny_model_path, tmp_path)
    rows = [dict(r) for r in prompts_dataset(3)]
    rewards = trainer._calculate_rewards(rows, [r["prompt"] for r in rows], ["a", "b", "c"], [[1], [2], [3]])
    assert isinstance(rewards, torch.Tensor) and rewards.shape == (3, 1)
    assert rewards[:, 0].tolist() == [1.0, 2.0, 3.0]


def test_train_dataloader_yields_whole_groups_of_n(tiny_model_path, tmp_path):
    """The sampler repeats each prompt pods_n times in a row; a batch holds the generation's prompts x pods_n."""
    trainer = _trainer(tiny_model_path, tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))
    prompts = [row["prompt"][0]["content"] for row in batch]
    assert len(prompts) == 2 * 6, "4 kept rows = 2 prompts of pods_m=2, each generated pods_n=6 times"
    assert prompts[:6] == [prompts[0]] * 6 and prompts[6:] == [prompts[6]] * 6 and prompts[0] != prompts[6]
    assert trainer.num_generations == 2 and trainer.args.generation_batch_size == 4, "layout restored"


def test_steps_per_epoch_match_grpo_with_num_generations_m(tiny_model_path, tmp_path):
    """An optimizer step consumes as many prompts as GRPOTrainer with num_generations = pods_m."""
    trainer = _trainer(tiny_model_path, tmp_path, num_train_epochs=1, max_steps=-1)
    assert len(trainer.get_train_dataloader()) == len(prompts_dataset()) // 2

"""Dynamic sampling end to end on the tiny model (1 process): refill (DAPO; the prompts it draws read on demand) and
screened (pilot, then commit; a pool read per generation) generate for more prompts than they train on, train on B
of them (their M kept rows only reach phase 2), prefer groups with contrast, make at most `pods_max_draws` / exactly
two generation calls on HF generate and on vLLM (stand-in, colocate and server), score every rollout once and log
what they drew and trained. A refill epoch generates for every prompt once."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from helpers import (
    RoleReward,
    constant_for_even_prompts,
    load,
    pods_config,
    prompt_index,
    prompts_dataset,
    record_generate_sizes,
)
from test_trainer import SpyTrainer
from vllm_standin import FakeVLLMGeneration, install

from trl_pods import PODSGRPOTrainer
from trl_pods.adaptive import has_contrast
from trl_pods.loss_seams import use_full_group_advantages

N, M, B, PROMPTS, STEPS = 4, 2, 2, 12, 3  # B prompts trained per generation
ROLES = ("right", "wrong", "half")  # prompt i plays ROLES[i % 3]


class GroupSpy(SpyTrainer):
    """SpyTrainer that also keeps one row per group of the layout (refill: None for a group never drawn)."""

    def _generate_and_score(self, inputs, settings):
        rollouts = super()._generate_and_score(inputs, settings)
        self._rows = inputs if rollouts.rows is None else rollouts.rows
        return rollouts

    def _generate_score_and_select(self, inputs):
        phase1 = super()._generate_score_and_select(inputs)
        phase1["group_inputs"], phase1["epoch"] = self._rows[:: self.pods_n], self._epoch_replay.epoch
        return phase1


def _train(
    model_path, out, generation: str, steps: int = STEPS, prompts: int = PROMPTS, **options
) -> tuple[GroupSpy, RoleReward]:
    model, tokenizer = load(model_path)
    config = pods_config(
        out,
        pods_n=N,
        pods_m=M,
        pods_generation=generation,
        per_device_train_batch_size=B * M,
        max_steps=steps,
        **options,
    )
    reward = RoleReward(ROLES)
    trainer = GroupSpy(model, reward, config, train_dataset=prompts_dataset(prompts), processing_class=tokenizer)
    trainer.train()
    return trainer, reward


def _check(trainer: GroupSpy, reward: RoleReward, pool: int) -> list[dict]:
    """What every dynamic-sampling run must show; returns the logged entries of the generations."""
    assert len(trainer.selections) == STEPS
    for step, phase1 in enumerate(trainer.selections):
        counts, kept, rewards = phase1["counts"], phase1["kept"], phase1["rewards"]
        assert counts.numel() == pool * B, "room for the pool: screened's, or refill's most draws"
        trained = kept.any(dim=1)
        assert int(trained.sum()) == B and kept.sum(1)[trained].tolist() == [M] * B
        if trainer.args.pods_generation == "refill":
            available = int((has_contrast(rewards) & (counts > 0)).sum())
            assert int(has_contrast(rewards[trained]).sum()) == min(B, available), "contrast first"
        prompts = [prompt_index(row["prompt"]) for row in phase1["group_inputs"] if row is not None]
        assert [reward.seen[step, i] for i in prompts] == counts[counts > 0].tolist(), "each rollout scored once"
    assert sum(rows for kind, rows in trainer.logp_passes if kind == "train") == STEPS * B * M
    logs = [e for e in trainer.state.log_history if "pods/prompts_drawn" in e]
    assert len(logs) == STEPS and all(e["pods/prompts_trained"] == B for e in logs)
    assert [e["pods/rollouts_generated"] for e in logs] == [float(s["counts"].sum()) for s in trainer.selections]
    assert [e["pods/rollouts_trained"] for e in logs] == [float(B * M)] * STEPS
    return logs


def test_refill_draws_for_missing_groups_and_trains_on_groups_with_contrast(tiny_model_path, tmp_path, monkeypatch):
    """Refill with HF generate: each draw is one generate call of N rollouts per drawn prompt, at most
    pods_max_draws; the trained groups are those with contrast whenever the drawn prompts offered enough."""
    sizes = record_generate_sizes(monkeypatch)
    trainer, reward = _train(tiny_model_path, tmp_path, "refill", pods_max_draws=3, pods_draw_coverage=0.0)
    logs = _check(trainer, reward, pool=3)
    draws = [int(e["pods/draws"]) for e in logs]
    assert len(sizes) == sum(draws) and all(1 <= d <= 3 for d in draws)
    assert [e["pods/generation_calls"] for e in logs] == [float(d) for d in draws]
    assert [e["pods/prompts_drawn"] for e in logs] == [float((s["counts"] > 0).sum()) for s in trainer.selections]


def test_sized_refill_and_auto_draw_in_fewer_calls(tiny_model_path, tmp_path, monkeypatch):
    """Refill with pods_draw_coverage and auto (with given costs: a call dear, rollouts cheap) over-draw in their
    first call from the contrast rate (a prior, then what the run observed), so they make fewer generate calls than
    refill drawing exactly the missing groups; every check of a refill generation holds (B trained groups of M rows,
    contrast first, each rollout scored once, room for 4 prompts per trained prompt); auto gives every prompt of a
    generation the same count, 2 or 4, and logs its choice. Screened with pods_draw_coverage draws its pool with
    the pilot (2 calls a step, at most its ratio of prompts); with its pilot the whole group, one call a step."""
    sizes = record_generate_sizes(monkeypatch)
    _train(tiny_model_path, tmp_path / "exact", "refill", prompts=36, pods_max_draws=3, pods_draw_coverage=0.0)
    exact_calls = len(sizes)
    sized, reward = _train(
        tiny_model_path, tmp_path / "sized", "refill", prompts=36, pods_max_draws=3, pods_draw_coverage=0.9
    )
    _check(sized, reward, pool=4)
    assert len(sizes) - exact_calls < exact_calls, sizes
    assert all(int((phase1["counts"] > 0).sum()) > B for phase1 in sized.selections), "drew beyond the batch"
    costs = "call=1.0,rollout=0.0001,step=0.3"
    auto, reward = _train(tiny_model_path, tmp_path / "auto", "auto", prompts=36, pods_auto_costs=costs)
    logs = _check(auto, reward, pool=4)
    for phase1 in auto.selections:
        generated = phase1["counts"][phase1["counts"] > 0]
        assert len(set(generated.tolist())) == 1 and generated[0].item() in (2, 4)
    assert all(e["pods/rollouts_per_prompt"] in (2.0, 4.0) and e["pods/exploring"] == 0.0 for e in logs)
    for pilot, calls in ((2, 2.0), (N, 1.0)):
        screened, reward = _train(
            tiny_model_path, tmp_path / f"screened{pilot}", "screened", prompts=36, pods_screen_ratio=3,
            pods_n_initial=pilot, pods_draw_coverage=0.9,
        )  # fmt: skip
        logs = _check(screened, reward, pool=3)
        assert all(e["pods/generation_calls"] == calls and B <= e["pods/prompts_drawn"] <= 3 * B for e in logs)


def test_a_refill_epoch_generates_for_every_prompt_once(tiny_model_path, tmp_path):
    """Refill reads the loader's B prompts per generation and the prompts it draws only when it draws them: over an
    epoch every prompt is generated for exactly once (all but a remainder smaller than B), so the epoch ends sooner
    than TRL's len(dataloader) counts (6 generations), and a max_steps run goes on into the following epochs."""
    trainer, _ = _train(tiny_model_path, tmp_path, "refill", steps=8, pods_max_draws=3, pods_draw_coverage=0.0)
    assert len(trainer.selections) == 8, "the run reached max_steps over several epochs"
    epochs: dict[int, list[int]] = {}
    for phase1 in trainer.selections:
        generated = [prompt_index(row["prompt"]) for row in phase1["group_inputs"] if row is not None]
        epochs.setdefault(phase1["epoch"], []).extend(generated)
    assert len(epochs) >= 2 and sum(phase1["epoch"] == 0 for phase1 in trainer.selections) < PROMPTS // B
    for epoch, prompts in epochs.items():
        assert len(prompts) == len(set(prompts)), f"epoch {epoch} generated for a prompt twice: {prompts}"
    assert PROMPTS - len(epochs[0]) < B, f"the first epoch left more than a remainder: {sorted(epochs[0])}"


def test_screened_pilots_the_pool_then_commits_the_chosen(tiny_model_path, tmp_path, monkeypatch):
    """Screened with HF generate: exactly two generate calls per generation (the pool's pilot, then the chosen
    prompts' remaining rollouts); when the pool offers both, the frontier rule always trains a prompt with pilot
    contrast, and its reserve for prompts whose pilot all failed (a quarter of B = 2 picks: one pick half the time)
    trains one of those alongside it in some generations, never two."""
    sizes = record_generate_sizes(monkeypatch)
    trainer, reward = _train(tiny_model_path, tmp_path, "screened", pods_screen_ratio=3, pods_n_initial=2)
    logs = _check(trainer, reward, pool=3)
    assert sizes == [3 * B * 2, B * (N - 2)] * STEPS
    assert all(e["pods/generation_calls"] == 2.0 and e["pods/prompts_drawn"] == 3 * B for e in logs)
    frontier_picks = []
    for phase1 in trainer.selections:
        roles = [ROLES[prompt_index(row["prompt"]) % 3] for row in phase1["group_inputs"]]
        trained = [role for role, chosen in zip(roles, phase1["kept"].any(dim=1).tolist(), strict=True) if chosen]
        if "wrong" in roles and "half" in roles:
            assert "half" in trained and trained.count("wrong") <= 1, (roles, trained)
            frontier_picks.append(trained.count("wrong"))
    assert 0 < sum(frontier_picks) < len(frontier_picks), frontier_picks
    for entry, phase1 in zip(logs, trainer.selections, strict=True):  # the chosen groups' pilot, then all N
        chosen = phase1["rewards"][phase1["kept"].any(dim=1)]  # [B, N]
        assert entry["pods/predicted_contrast"] == has_contrast(chosen[:, :2]).float().mean().item()
        assert entry["pods/observed_contrast"] == has_contrast(chosen).float().mean().item()


@pytest.mark.parametrize("mode", ["colocate", "server"])
@pytest.mark.parametrize("generation", ["refill", "screened"])
def test_vllm_dynamic_sampling_calls(tiny_model_path, tmp_path, monkeypatch, mode, generation):
    """vLLM (stand-in, TRL's real VLLMGeneration): refill's draws and screened's pilot and commit are one engine call
    each; server mode asks for n = the call's rollouts per prompt (N for a draw, the pilot's size, then the rest);
    the importance-sampling ratio stays 1, so the engine's log-probs follow their rows."""
    install(monkeypatch)
    options = (
        dict(pods_max_draws=3, pods_draw_coverage=0.0)
        if generation == "refill"
        else dict(pods_screen_ratio=3, pods_n_initial=2)
    )
    trainer, reward = _train(tiny_model_path, tmp_path, generation, use_vllm=True, vllm_mode=mode, **options)
    logs = _check(trainer, reward, pool=3)
    engine = FakeVLLMGeneration.instances[-1]
    calls = engine.vllm_client.calls if mode == "server" else engine.llm.calls
    assert len(calls) == sum(e["pods/generation_calls"] for e in logs)
    if mode == "server" and generation == "screened":
        assert [(len(prompts), n) for prompts, n in calls] == [(3 * B, 2), (B, 2)] * STEPS
    elif mode == "server":
        assert all(n == N for _, n in calls)
    key = "sampling/importance_sampling_ratio/mean"
    assert [e[key] for e in trainer.state.log_history if key in e] == pytest.approx([1.0] * STEPS, abs=1e-3)


def test_screened_combines_with_iterations_rounds_and_dropped_groups(tiny_model_path, tmp_path, monkeypatch):
    """Screened with num_iterations=2 (each generation trained on twice), rounds of 4 sequences (each of the two
    calls split into rounds) and dropped constant groups: generations come every other step, the kept rows of each
    reach phase 2, and a trained group without contrast is dropped from the loss."""
    sizes = record_generate_sizes(monkeypatch)
    trainer, reward = _train(
        tiny_model_path, tmp_path, "screened", pods_screen_ratio=3, pods_n_initial=2, num_iterations=2,
        pods_generation_chunk_size=4, pods_drop_constant_groups=True,
    )  # fmt: skip
    assert len(trainer.selections) == 2, "3 steps with 2 iterations: 2 generations"
    assert max(sizes) <= 4 and sum(sizes) == 2 * (3 * B * 2 + B * (N - 2))
    for phase1 in trainer.selections:
        kept, rewards = phase1["kept"], phase1["rewards"]
        trained = kept.any(dim=1).nonzero().squeeze(1).tolist()
        assert len(trained) == B
        constant = [not has_contrast(rewards[g][kept[g]].unsqueeze(0)).item() for g in trained]
        assert phase1["dropped"].tolist() == [flag for flag in constant for _ in range(M)]


def test_full_group_advantages_leave_untrained_groups_out_of_the_batch_std():
    """pods_advantage_scope='all' with scale_rewards='batch': refill and screened leave groups of the generation
    untrained; their rewards must not enter the batch std that scales the trained groups' advantages."""
    nan = float("nan")
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 100.0, nan, nan], [1.0, 0.0, 0.0, 0.0]])
    kept = torch.tensor([[True, True, False, False], [False] * 4, [True, False, True, False]])  # group 1 untrained
    trainer = SimpleNamespace(
        scale_rewards="batch", accelerator=SimpleNamespace(process_index=0), _logs={"advantages": []}
    )
    output = {"advantages": torch.zeros(4)}
    use_full_group_advantages(output, rewards, kept, trainer)
    trained = rewards[[0, 2]]  # [2, 4]
    expected = (trained - trained.mean(dim=1, keepdim=True)) / (trained.std() + 1e-4)
    assert torch.allclose(output["advantages"], expected[kept[[0, 2]]])
    assert trainer._logs["advantages"] == output["advantages"].tolist()


def test_a_save_only_model_checkpoint_resumes_refill_at_its_position(tiny_model_path, tmp_path, caplog):
    """Transformers resumes a `save_only_model` checkpoint, but Trainer saves no RNG state in it, beside which the PODS
    state went: a refill run resumed from one trained 0 of its 2 remaining steps on the uninterrupted run's prompts.
    The PODS state is now saved there too, so the resumed run draws and trains the same prompts, and one warning says
    that the checkpoint holds no optimizer, schedule or random state."""

    def run(out, resume=None) -> list[dict]:
        model, tokenizer = load(tiny_model_path)
        config = pods_config(
            out, pods_n=N, pods_m=M, pods_generation="refill", pods_max_draws=3, pods_draw_coverage=0.0,
            per_device_train_batch_size=B * M, max_steps=4, save_strategy="steps", save_steps=2, save_only_model=True,
        )  # fmt: skip
        data = prompts_dataset(PROMPTS)
        trainer = PODSGRPOTrainer(
            model, constant_for_even_prompts, config, train_dataset=data, processing_class=tokenizer
        )
        trainer.train(resume_from_checkpoint=resume)
        records = [json.loads(line) for line in (out / "pods_selections.jsonl").read_text().splitlines()]
        return [{key: record[key] for key in ("global_step", "prompts", "generated")} for record in records]

    uninterrupted = run(tmp_path / "a")
    assert not (tmp_path / "a" / "checkpoint-2" / "optimizer.pt").exists(), "a save_only_model checkpoint"
    with caplog.at_level(logging.WARNING, logger="trl_pods.resume"):
        resumed = run(tmp_path / "b", resume=str(tmp_path / "a" / "checkpoint-2"))
    assert [r["global_step"] for r in resumed] == [2, 3]
    assert [r["prompts"] for r in resumed] == [r["prompts"] for r in uninterrupted[2:]], "the same prompts"
    assert any(sum(count > 0 for count in r["generated"]) > B for r in uninterrupted[2:]), "no prompt drawn: no test"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "trl_pods.resume"]
    assert "save_only_model" in warning and "new optimizer" in warning

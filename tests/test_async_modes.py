"""Every generation mode in the asynchronous worker: TRL's own generate and score loops (tests/async_worker.py), a
scripted engine in place of the server, and PODS's prompt stream deciding each prompt's rollouts. Each test checks
what the mode gives each prompt, that every rollout is scored once (one prompt per reward call, as in TRL), what is
queued and dropped, and the `pods/*` metrics. The real-server runs of adaptive and screened are in
tests/test_async_grpo_vllm.py."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import pytest
import torch
from async_worker import SCORED, pods_loop, prompts, pushed_metrics, reports, run_until
from vllm_real import async_tokenizer

from trl_pods.adaptive import has_contrast
from trl_pods.budget import BudgetedMode
from trl_pods.streaming import PromptStream, StreamRefillMode
from trl_pods.waves import GenerationMode, Wave, WaveState

N, M = 8, 2


@pytest.fixture
def tokenizer(tiny_model_path):
    SCORED.clear()
    return async_tokenizer(tiny_model_path)


def _finished(loop) -> list:
    """The groups of every window the loop is done with."""
    return [group for window in loop.windows for group in window.groups]


def _rows_by_prompt(rows: list) -> dict[int, list]:
    by_prompt = {}
    for row in rows:
        by_prompt.setdefault(row.group_id, []).append(row)
    return by_prompt


def _check_scored_once(loop, groups: list) -> None:
    """Each reward call scored rollouts of one prompt; the calls for a finished prompt scored exactly its rollouts,
    each once, in the order they fill its slots."""
    assert all(len(set(call_prompts)) == 1 for call_prompts, _ in SCORED)
    for group in groups:
        tokens = [t for call_prompts, ts in SCORED if call_prompts[0] == group.prompt for t in ts]
        assert tokens == group.rewards[: len(group.rollouts)].long().tolist()
        assert len(loop.requests[group.prompt]) == len(group.rollouts), "every rollout generated once"


def _check_kept(rows: list, group) -> None:
    """A trained prompt's queued rows: a max-variance M of its rewards, advantages over those M."""
    kept = torch.tensor([row.metrics["reward"] for row in rows], dtype=torch.float64)
    rewards = group.rewards[: len(group.rollouts)]
    best = max(torch.tensor(c, dtype=torch.float64).var() for c in itertools.combinations(rewards.tolist(), M))
    assert len(rows) == M and torch.isclose(kept.var(), best)
    expected = (kept - kept.mean()) / (kept.std(correction=0) + 1e-8)
    assert torch.allclose(torch.tensor([row.advantage for row in rows], dtype=torch.float64), expected)
    assert rows[0].metrics["reward_std"] == pytest.approx(rewards.double().std(correction=0).item())


def test_adaptive_pilots_each_prompt_and_doubles_it_until_its_rewards_differ(tokenizer):
    """pods_n_initial 2, N 8: a prompt with contrast in its pilot gets 2 rollouts, one that first disagrees at its 3rd
    gets 4, at its 6th gets 8, never gets 8; each decided alone (a window of one prompt); all are trained."""
    first_difference = {0: 1, 1: 2, 2: 5, 3: None}  # prompt i % 4: the rollout whose reward first differs

    def script(i: int, k: int, text: str) -> int:
        return 11 if k == first_difference[i % 4] else 10

    loop = pods_loop(tokenizer, prompts(40), pods_n=N, pods_m=M, pods_generation="adaptive", pods_n_initial=2,
                     script=script)  # fmt: skip
    assert loop.stream.window == 1
    rows = _rows_by_prompt(run_until(loop, lambda: {g.prompt for g in _finished(loop)} >= set(range(8))))
    groups = _finished(loop)
    expected = {0: 2, 1: 4, 2: 8, 3: 8}
    assert {g.prompt: len(g.rollouts) for g in groups} == {g.prompt: expected[g.prompt % 4] for g in groups}
    assert all(g.trained for g in groups) and {g.prompt % 4 for g in groups} == {0, 1, 2, 3}
    _check_scored_once(loop, groups)
    for group in groups:
        _check_kept(rows[group.prompt], group)
    waves = {g.prompt: w.metrics["waves"] for w in loop.windows for g in w.groups}
    assert all(waves[prompt] == {2: 1, 4: 2, 8: 3}[expected[prompt % 4]] for prompt in waves)
    metrics = pushed_metrics(loop)
    assert sum(n for n, _ in metrics["pods/frac_groups_topped_up"][: len(groups)]) == sum(
        len(g.rollouts) > 2 for g in groups
    )
    assert sum(metrics["pods/rollouts_generated_total"]) >= sum(len(g.rollouts) for g in groups)


def test_screened_pilots_a_window_commits_the_rules_picks_and_drops_the_rest(tokenizer):
    """pods_screen_ratio 2, pods_window 2, rule "contrast": every 4 prompts are piloted with 2 rollouts; the 2 whose
    pilot shows contrast get the remaining 6 (the pilot stays in the group) and are trained, their rows stamped with
    the oldest policy version of the group (TRL's staleness limit then keeps or drops them together); the other 2
    are dropped and reported to the trainer as visited."""

    versions = SimpleNamespace(value=0)

    def script(i: int, k: int, text: str) -> int:
        versions.value += 1  # a new policy version after every rollout, as if the trainer synced in between
        return {0: 10 + k % 2, 1: 12, 2: 11 - k % 2, 3: 10}[i % 4]  # 0 and 2 disagree; 1 solved, 3 unsolved

    channel = reports()
    loop = pods_loop(tokenizer, prompts(40), channel, pods_n=N, pods_m=M, pods_generation="screened",
                     pods_n_initial=2, pods_window=2, pods_screen_rule="contrast", script=script,
                     model_version_value=versions)  # fmt: skip
    rows = _rows_by_prompt(run_until(loop, lambda: len(loop.windows) >= 3))
    groups = _finished(loop)
    first = [window.groups[0].prompt for window in loop.windows]
    assert [[g.prompt for g in w.groups] for w in loop.windows] == [list(range(p, p + 4)) for p in first]
    assert all(p % 4 == 0 for p in first), "windows of 2 x 2 consecutive prompts"
    assert {g.prompt for g in groups if g.trained} == {g.prompt for g in groups if g.prompt % 2 == 0}
    assert all(len(g.rollouts) == (N if g.trained else 2) for g in groups)
    for group in groups:
        pilot = sorted(script(group.prompt, k, "") for k in range(2))
        assert sorted(group.rewards[:2].tolist()) == pilot, "the pilot stays in its group"
        assert (group.prompt in rows) == group.trained
        if group.trained:
            _check_kept(rows[group.prompt], group)
            generated = [sample.model_version for rollout in group.rollouts for sample in rollout]
            assert max(generated) > min(generated), "the pilot and the commit started under other versions"
            assert {row.model_version for row in rows[group.prompt]} == {min(generated)}, "the oldest, for all"
    _check_scored_once(loop, groups)
    assert channel.receive() == {g.prompt for g in groups if not g.trained}
    assert all(w.metrics["prompts_drawn"] == 4 and w.metrics["prompts_trained"] == 2 for w in loop.windows)
    assert all(w.metrics["predicted_contrast"] == 1.0 for w in loop.windows)
    metrics = pushed_metrics(loop)
    assert sum(metrics["pods/groups_dropped_total"]) >= 6


def test_budgeted_spends_each_windows_budget_from_the_prompts_history(tokenizer):
    """pods_budget 4, pods_window 4, over 4 prompts visited again and again: every window of 4 prompts gets exactly
    16 rollouts, each between M and N; the windows' forks of the mode share one prompt history, so once it knows the
    prompts, those whose rewards differ half the time get more rollouts than those that never score."""

    def script(i: int, k: int, text: str) -> int:
        return 10 + k % 2 if i % 2 else 10

    loop = pods_loop(tokenizer, prompts(4), pods_n=N, pods_m=M, pods_generation="budgeted", pods_budget=4.0,
                     pods_window=4, script=script)  # fmt: skip
    rows = run_until(loop, lambda: len(loop.windows) >= 6)
    counts = [[len(g.rollouts) for g in window.groups] for window in loop.windows]
    assert all(sum(window) == 16 and min(window) >= M and max(window) <= N for window in counts)
    assert counts[0] == [4, 4, 4, 4], "no history yet: the budget is spread evenly"
    assert counts[-1][1] > counts[-1][0] and counts[-1][3] > counts[-1][2], counts
    assert isinstance(loop.stream.mode, BudgetedMode) and len(loop.stream.mode.allocation.history) == 4
    assert loop.windows[-1].metrics["allocation_mean"] == 4.0
    assert len(rows) >= M * 4 * len(loop.windows) and all(g.trained for g in _finished(loop))
    metrics = pushed_metrics(loop)
    assert metrics["pods/allocation_max"][: len(counts)] == [float(max(window)) for window in counts]


class AskingEnvironment:
    """An environment that owns the data: its reset asks "prompt i" for the row's ``i`` (the dataset has no prompt)."""

    def reset(self, i: int, **row) -> str:
        return f"prompt {i}"


def test_budgeted_keys_each_prompt_on_its_whole_row(tokenizer):
    """Budgeted generation keyed a prompt's history on its ``prompt`` column: an environment's dataset without one
    (TRL allows it) raised KeyError at the first window, and rows sharing a question but differing in another column
    shared one history. Each row now has its own: 4 rows, two questions, two variants each, 4 histories."""
    dataset = [{"i": i, "variant": variant} for i in (0, 1) for variant in ("a", "b")]
    loop = pods_loop(tokenizer, dataset, pods_n=N, pods_m=M, pods_generation="budgeted", pods_budget=4.0,
                     pods_window=4, environment_factory=AskingEnvironment)  # fmt: skip
    run_until(loop, lambda: len(loop.windows) >= 2)
    assert len(loop.stream.mode.allocation.history) == 4
    assert all(sum(len(g.rollouts) for g in window.groups) == 16 for window in loop.windows)


class CountingEnvironment:
    """An environment whose every reset hands out the next observation " obs<k>" (k counting resets)."""

    resets = 0

    def reset(self, **row) -> str:
        CountingEnvironment.resets += 1
        return f" obs{CountingEnvironment.resets}"


def test_adaptive_top_ups_get_fresh_environments_and_rows_keep_their_own(tokenizer):
    """With `environment_factory`, TRL's generate loop draws and resets an environment for every rollout, top-ups
    included (every request carries an observation of its own), and each kept row is the rollout of its own reset:
    its reward is the one scripted for the observation in its own prompt."""
    CountingEnvironment.resets = 0

    def script(i: int, k: int, text: str) -> int:
        return 10 + int(re.findall(r"obs(\d+)", text)[-1]) % 2 if i % 2 == 0 else 10  # odd prompts never differ

    loop = pods_loop(tokenizer, prompts(40), pods_n=N, pods_m=M, pods_generation="adaptive", pods_n_initial=2,
                     script=script, environment_factory=CountingEnvironment)  # fmt: skip
    rows = run_until(loop, lambda: {g.prompt for g in _finished(loop)} >= set(range(6)))
    groups = _finished(loop)
    assert any(len(g.rollouts) == N for g in groups), "prompts were topped up"
    requests = [text for made in loop.requests.values() for text in made]
    observations = [re.findall(r"obs(\d+)", text)[-1] for text in requests]
    assert len(set(observations)) == len(requests), "no environment served two rollouts without a reset"
    assert 0 <= CountingEnvironment.resets - len(requests) <= 4, "resets of rollouts in flight when stopped"
    for row in rows:
        assert row.metrics["reward"] == script(row.group_id, 0, tokenizer.decode(row.input_ids.tolist()))
    _check_scored_once(loop, groups)


class GreedyMode(GenerationMode):
    """A mode that breaks the stream's rules: ``size`` rollouts per prompt, every group trained."""

    def __init__(self, size: int):
        self.size = size

    def first_wave(self, state: WaveState) -> Wave:
        return Wave.uniform(torch.arange(state.rewards.size(0)), self.size)


def _finish(stream: PromptStream, rewards: list[float]):
    """Generate (one work item after another) and score the stream's first window's first prompt."""
    work = stream.work(iter(enumerate(["a", "b"])))
    done = None
    for _ in rewards:
        work_id, _row = next(work)
        part = stream.generated(work_id, "rollout")
        if part is not None:
            window, group, rollouts = part
            done = stream.scored(window, group, rewards, rollouts)
    return done


def test_stream_refuses_waves_and_choices_it_cannot_carry_out():
    """A mode whose wave gives a prompt more than N, or that trains a prompt with fewer rollouts than M kept, gets
    an error saying so; refill's stream form trains exactly the prompts whose rewards differ."""
    with pytest.raises(ValueError, match="more than pods_n"):
        _finish(PromptStream(GreedyMode(5), 4, 2, 1, 0, key=hash), [1.0] * 5)
    with pytest.raises(ValueError, match="fewer than the pods_m"):
        _finish(PromptStream(GreedyMode(1), 4, 2, 1, 0, key=hash), [1.0])
    done = _finish(PromptStream(StreamRefillMode(), 4, 2, 1, 0, key=hash), [1.0, 2.0, 1.0, 1.0])
    assert [group.trained for group in done.groups] == has_contrast(torch.tensor([[1.0, 2.0, 1.0, 1.0]])).tolist()

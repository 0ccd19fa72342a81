"""Phase 1's loop (`trl_pods.phase1`) with each generation mode (`trl_pods.waves`, `generation_modes`), driven
without a model: fake generate and score steps record their calls, so the tests see which rows each step received,
the slot layout, the NaN padding and the selection (`trl_pods.selection`)."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from trl_pods.adaptive import AdaptiveMode
from trl_pods.budget import BudgetedMode
from trl_pods.down_sampling import get_down_sampler
from trl_pods.phase1 import GenerationSteps, generate_and_score
from trl_pods.refill import RefillMode
from trl_pods.rollout_fields import RolloutRows
from trl_pods.screening import ScreenedMode
from trl_pods.selection import Phase1Settings, kept_generation, select_rollouts, selection_seed
from trl_pods.waves import FixedMode


def _inputs(groups: list[str], n: int) -> list[dict]:
    return [{"prompt": prompt} for prompt in groups for _ in range(n)]


def _settings(n: int, processes: int = 1, **overrides) -> Phase1Settings:
    defaults = dict(down_sampler=get_down_sampler("max_variance"), down_sampler_name="max_variance")
    return Phase1Settings(
        n=n,
        process_index=0,
        processes=processes,
        reward_weights=torch.ones(1),
        aggregation="sum_then_normalize",
        **{**defaults, **overrides},
    )


def _config(**fields) -> SimpleNamespace:
    """The `PODSConfig` fields a mode reads."""
    return SimpleNamespace(**fields)


class FakeSteps:
    """Generation and scoring without a model. A completion is ``[call, copy]`` (the generation call and the row's
    index among that call's copies of its prompt); its reward comes from ``rewards[prompt]``, a list consumed in
    order (one reward per rollout scored). ``others`` plays the other processes: per wave, the rewards their rows
    add to the gathered tensor (``other_keys``: their groups' prompt keys)."""

    def __init__(
        self, rewards: dict[str, list[float]], others: list[list[float]] | None = None, other_keys: list | None = None
    ):
        self.rewards = {prompt: list(values) for prompt, values in rewards.items()}
        self.others, self.other_keys = list(others or []), list(other_keys or [])
        self.calls: list[tuple] = []

    def _generation(self, rows: list[dict]) -> tuple:
        call, copies = sum(c[0].startswith("generate") for c in self.calls) - 1, {}
        completions = []
        for row in rows:
            copies[row["prompt"]] = copies.get(row["prompt"], -1) + 1
            completions.append([call, copies[row["prompt"]]])
        prompts = [[ord(row["prompt"][0])] for row in rows]
        return prompts, completions, None, [str(c) for c in completions], None, {}, None, []

    def _score_rows(self, rows: list[dict]) -> torch.Tensor:
        return torch.tensor([self.rewards[row["prompt"]].pop(0) for row in rows]).view(-1, 1)  # [rows, 1]

    def generate(self, rows: list[dict], request: int) -> RolloutRows:
        self.calls.append(("generate", [row["prompt"] for row in rows], request))
        return RolloutRows([row["prompt"] for row in rows], self._generation(rows), None)

    def score(self, rows: list[dict], generated: RolloutRows, real: int) -> tuple[torch.Tensor, dict]:
        self.calls.append(("score", len(rows), real))
        local = torch.full((len(rows), 1), torch.nan)
        local[:real] = self._score_rows(rows[:real])
        others = [torch.tensor(values).view(-1, 1) for values in self.others.pop(0)] if self.others else []
        return torch.cat([local, *others]), {"note": [f"r{i}" for i in range(max(real, 1))]}

    def steps(self, draws: list[str] | None = None, n: int = 2) -> GenerationSteps:
        """The steps; ``draws`` is the order refill's further prompts are read in (all processes', this process
        being the first: each draw serves the processes in order), each drawn prompt ``n`` rows (the slots)."""
        pending = list(draws or [])

        def group_keys(rows: list[dict]) -> list:
            return [row["prompt"] for row in rows] + self.other_keys

        def draw(counts: list[int]) -> tuple[list[int], list[dict]]:
            self.calls.append(("draw", counts))
            taken = [pending.pop(0) for _ in range(min(sum(counts), len(pending)))]
            got = [min(count, len(taken) - sum(counts[:r])) for r, count in enumerate(counts)]
            got = [max(count, 0) for count in got]
            return got, _inputs(taken[: got[0]], n)

        @contextmanager
        def one_weight_load():
            self.calls.append(("weights loaded",))
            yield
            self.calls.append(("weights released",))

        return GenerationSteps(self.generate, self.score, one_weight_load, draw, group_keys)


def test_fixed_generation_generates_and_scores_every_row_once_then_keeps_m():
    """Fixed: one generate call and one score call, each with every row (N copies of each prompt in a row); every
    slot is generated; max variance keeps the extremes of each group, and the kept generation holds those rows."""
    fake = FakeSteps({"a": [0.0, 3.0, 1.0, 2.0], "b": [5.0, 5.0, 4.0, 6.0]})
    settings = _settings(n=4)
    inputs = _inputs(["a", "b"], 4)
    rollouts = generate_and_score(inputs, settings, FixedMode(), fake.steps())
    assert fake.calls == [("generate", ["a"] * 4 + ["b"] * 4, 4), ("score", 8, 8)], "N per prompt at once"
    assert rollouts.counts.tolist() == [4, 4] and rollouts.calls == 1
    assert rollouts.metrics == {"generation_calls": 1.0}
    assert rollouts.extra_columns == {"note": [f"r{i}" for i in range(8)]}, "log_extra in slot layout"
    selection = select_rollouts(rollouts.rewards_per_func, rollouts.counts, len(inputs), 2, 0, settings)
    assert selection.kept.tolist() == [[True, True, False, False], [False, False, True, True]]
    assert selection.local == [0, 1, 6, 7] and selection.kept_rows.tolist() == [0, 1, 6, 7]
    kept = kept_generation(rollouts.generation, selection, drop_constant_groups=False)
    assert kept[1] == [[0, 0], [0, 1], [0, 2], [0, 3]] and kept[2] is None and kept[5] == {} and kept[7] == []
    assert rollouts.prompts == [row["prompt"] for row in inputs] and rollouts.environments is None


def test_adaptive_waves_top_up_groups_without_contrast_into_their_slots():
    """Adaptive, one process: the first wave gives each prompt n_initial rollouts; only the prompt without contrast
    is topped up (doubling up to N); rows land in slot layout (row g * N + s), unfilled slots are None with NaN
    rewards, log_extra values go to their slots, and selection keeps only generated slots."""
    fake = FakeSteps({"a": [0.0, 1.0], "b": [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 9.0, 2.0]})
    settings = _settings(n=8)
    inputs = _inputs(["a", "b"], 8)
    rollouts = generate_and_score(inputs, settings, AdaptiveMode(_config(pods_n_initial=2)), fake.steps())
    assert fake.calls == [
        ("weights loaded",),  # dependent waves share one weight load
        ("generate", ["a", "a", "b", "b"], 2),
        ("score", 4, 4),
        ("generate", ["b", "b"], 2),
        ("score", 2, 2),
        ("generate", ["b"] * 4, 4),
        ("score", 4, 4),
        ("weights released",),
    ]
    assert rollouts.counts.tolist() == [2, 8] and rollouts.calls == 3
    assert rollouts.metrics == {
        "waves": 3.0, "rollouts_padding": 0.0, "frac_groups_topped_up": 0.5, "frac_topped_up_with_contrast": 1.0,
    }  # fmt: skip
    completions = rollouts.generation[1]
    assert completions[:8] == [[0, 0], [0, 1]] + [None] * 6
    assert completions[8:] == [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1], [2, 2], [2, 3]]
    rewards = rollouts.rewards_per_func[:, 0]
    assert rewards[:2].tolist() == [0.0, 1.0] and rewards[2:8].isnan().all()
    assert rewards[8:].tolist() == [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 9.0, 2.0]
    assert rollouts.extra_columns["note"] == ["r0", "r1", *[None] * 6, "r2", "r3", "r0", "r1", "r0", "r1", "r2", "r3"]
    selection = select_rollouts(rollouts.rewards_per_func, rollouts.counts, len(inputs), 2, 0, settings)
    assert selection.kept[0].nonzero().squeeze(1).tolist() == [0, 1], "only generated slots"
    assert selection.kept[1, 6] and selection.kept[1].sum() == 2


def test_adaptive_process_without_a_waiting_group_pads_its_wave():
    """Two processes: when only the other process's group waits, this one generates as many rows (copies of its
    first prompt) so the processes stay in step, scores none of them as real (NaN padding), and keeps its slots
    empty; the gathered rewards place the other process's top-up in its slots."""
    fake = FakeSteps({"a": [0.0, 1.0]}, others=[[1.0, 1.0], [1.0, 0.0]])
    settings = _settings(n=4, processes=2)
    inputs = _inputs(["a"], 4)
    rollouts = generate_and_score(inputs, settings, AdaptiveMode(_config(pods_n_initial=2)), fake.steps())
    assert fake.calls == [
        ("weights loaded",),
        ("generate", ["a", "a"], 2),
        ("score", 2, 2),
        ("generate", ["a", "a"], 2),
        ("score", 2, 0),
        ("weights released",),
    ]
    assert rollouts.counts.tolist() == [2, 4]
    assert rollouts.generation[1] == [[0, 0], [0, 1], None, None], "padding rows are not kept"
    rewards = rollouts.rewards_per_func[:, 0]
    assert rewards[:2].tolist() == [0.0, 1.0] and rewards[2:4].isnan().all()
    assert rewards[4:].tolist() == [1.0, 1.0, 1.0, 0.0]


class PresetAllocation:
    """Stands in for `BudgetedAllocation`: records what `plan` is given, allocates preset counts."""

    def __init__(self, counts: list[int]):
        self.counts, self.planned = counts, []

    def plan(self, keys: list, processes: int) -> torch.Tensor:
        self.planned.append((keys, processes))
        return torch.tensor(self.counts)

    def observe(self, rewards: torch.Tensor) -> dict[str, float]:
        return {"observed": float(rewards.isfinite().sum())}


def test_budgeted_generation_fills_the_allocated_slots_in_one_call():
    """Budgeted, two processes (this one holds groups 0 and 1 of 4, allocated 2, 4, 3, 2 from all groups' prompt
    keys and the number of processes): one call with every allocated row, each its own request (group size 1, which
    vLLM server mode takes unchanged); the other process needs 5 rows and pads one, and the recorded cost says so.
    Rows land in slot layout, the gathered rewards of the other process in its slots, and scoring comes after
    generating, outside any weight load; the allocation observes every generated reward."""
    others = [[7.0, 7.0, 7.0, 9.0, 9.0, 0.0]]
    fake = FakeSteps({"a": [0.0, 1.0], "b": [2.0, 3.0, 4.0, 5.0]}, others=others, other_keys=["c", "d"])
    settings = _settings(n=4, processes=2)
    inputs = _inputs(["a", "b"], 4)
    mode = BudgetedMode(_config(pods_m=2, pods_n=4, pods_budget=3, pods_allocation="expected_signal",
                                pods_history_size=10, pods_history_decay=0.8))  # fmt: skip
    mode.allocation = PresetAllocation([2, 4, 3, 2])
    rollouts = generate_and_score(inputs, settings, mode, fake.steps())
    assert fake.calls == [("generate", ["a", "a", "b", "b", "b", "b"], 1), ("score", 6, 6)]
    assert mode.allocation.planned == [(["a", "b", "c", "d"], 2)]
    assert rollouts.counts.tolist() == [2, 4, 3, 2]
    assert (rollouts.calls, rollouts.generated, rollouts.padding) == (1, 12, 1)
    assert rollouts.metrics == {"generation_calls": 1.0, "rollouts_padding": 1.0, "observed": 11.0}
    assert rollouts.generation[1][2:4] == [None, None], "group 0 holds 2 slots"
    rewards = rollouts.rewards_per_func[:, 0].nan_to_num(-1).tolist()
    assert rewards == [0.0, 1.0, -1, -1, 2.0, 3.0, 4.0, 5.0, 7.0, 7.0, 7.0, -1, 9.0, 9.0, -1, -1]


def test_refill_draws_further_prompts_for_the_missing_groups_on_every_process():
    """Refill, two processes, two trained prompts each: the first draw is each process's loader prompts (N each);
    this process found one group with contrast, so a second draw reads one further prompt for it (and none for the
    other process, already full, which pads); draws stop once both hold their share. The chosen groups are those
    with contrast, in draw order; the layout keeps room for max_draws x 2 groups per process, undrawn slots empty
    (rows None); the selection keeps M rows of chosen groups only."""
    nan = float("nan")
    fake = FakeSteps({"a": [1.0, 1.0], "b": [0.0, 1.0], "c": [0.0, 1.0]}, others=[[0.0, 1.0, 1.0, 0.0], [nan, nan]])
    settings = _settings(n=2, processes=2)
    inputs = _inputs(["a", "b"], 2)
    mode = RefillMode(_config(pods_max_draws=2, pods_draw_coverage=None))
    rollouts = generate_and_score(inputs, settings, mode, fake.steps(["c", "e", "f"]))
    assert fake.calls == [
        ("weights loaded",),  # a draw depends on the last one's rewards: one weight load for all
        ("generate", ["a", "a", "b", "b"], 2),
        ("score", 4, 4),
        ("draw", [1, 0]),  # read only now, and only what is missing
        ("generate", ["c", "c"], 2),
        ("score", 2, 2),
        ("weights released",),
    ]
    assert rollouts.rows == [*inputs, *_inputs(["c"], 2), None, None]
    assert rollouts.counts.tolist() == [2, 2, 2, 0, 2, 2, 0, 0]
    assert rollouts.chosen.tolist() == [False, True, True, False, True, True, False, False]
    assert (rollouts.calls, rollouts.generated, rollouts.padding) == (2, 12, 2)
    assert rollouts.metrics == {
        "generation_calls": 2.0, "rollouts_padding": 2.0, "draws": 2.0, "groups_filled_without_contrast": 0.0,
        "prompts_drawn": 5.0, "prompts_trained": 4.0,
    }  # fmt: skip
    rows = len(rollouts.rows)
    selection = select_rollouts(rollouts.rewards_per_func, rollouts.counts, rows, 2, 0, settings, rollouts.chosen)
    assert selection.local == [2, 3, 4, 5], "this process trains on b and c, M rows each"
    assert selection.kept.sum(1).tolist() == [0, 2, 2, 0, 2, 2, 0, 0]


def test_refill_fills_with_groups_without_contrast_after_its_last_draw():
    """When the draws run out (max_draws), the remainder is filled with the first drawn groups without contrast."""
    fake = FakeSteps({"a": [1.0, 1.0], "b": [0.0, 0.0], "c": [1.0, 0.0], "d": [1.0, 1.0]})
    mode = RefillMode(_config(pods_max_draws=2, pods_draw_coverage=None))
    rollouts = generate_and_score(_inputs(["a", "b"], 2), _settings(n=2), mode, fake.steps(draws=["c", "d", "e"]))
    assert [call[1] for call in fake.calls if call[0] in ("generate", "draw")] == [
        ["a", "a", "b", "b"],
        [2],
        ["c", "c", "d", "d"],
    ]
    assert rollouts.chosen.tolist() == [True, False, True, False], "c (contrast), then a, the first without"
    assert rollouts.metrics["groups_filled_without_contrast"] == 1.0 and rollouts.metrics["draws"] == 2.0


def test_refill_stops_drawing_when_the_epoch_runs_out():
    """A draw may get fewer prompts than missing (the epoch's last ones): refill generates for what it got, asks
    again for what is still missing, and stops when a draw gets nothing, filling with groups without contrast."""
    fake = FakeSteps({"a": [1.0, 1.0], "b": [0.0, 0.0], "c": [1.0, 1.0]})
    mode = RefillMode(_config(pods_max_draws=3, pods_draw_coverage=None))
    rollouts = generate_and_score(_inputs(["a", "b"], 2), _settings(n=2), mode, fake.steps(draws=["c"]))
    assert [call[1] for call in fake.calls if call[0] in ("generate", "draw")] == [
        ["a", "a", "b", "b"],
        [2],
        ["c", "c"],
        [2],
    ]
    assert rollouts.counts.tolist() == [2, 2, 2, 0, 0, 0] and rollouts.chosen.tolist() == [True, True] + [False] * 4
    assert rollouts.metrics["groups_filled_without_contrast"] == 2.0 and rollouts.metrics["draws"] == 2.0


def test_screened_pilots_every_pool_prompt_then_commits_the_chosen():
    """Screened, one process, two trained prompts from a pool of four: one pilot call (2 rollouts each), the rule
    (frontier) picks b (pilot contrast) and c (unsolved, reserved), and one commit call gives them their other 2
    rollouts in slots 2..3, their pilot staying in the group; the pilot's and the commit's contrast are reported."""
    rewards = {"a": [1.0, 1.0], "b": [0.0, 1.0, 1.0, 0.0], "c": [0.0, 0.0, 0.0, 1.0], "d": [0.0, 0.0]}
    fake = FakeSteps(rewards)
    settings = _settings(n=4)
    inputs = _inputs(["a", "b", "c", "d"], 4)
    mode = ScreenedMode(
        _config(pods_screen_ratio=2, pods_n_initial=2, pods_screen_rule="frontier", pods_draw_coverage=None)
    )
    rollouts = generate_and_score(inputs, settings, mode, fake.steps())
    assert fake.calls == [
        ("weights loaded",),
        ("generate", ["a", "a", "b", "b", "c", "c", "d", "d"], 2),
        ("score", 8, 8),
        ("generate", ["b", "b", "c", "c"], 2),
        ("score", 4, 4),
        ("weights released",),
    ]
    assert rollouts.counts.tolist() == [2, 4, 4, 2] and rollouts.chosen.tolist() == [False, True, True, False]
    assert rollouts.rewards_per_func[4:12, 0].tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert rollouts.metrics == {
        "generation_calls": 2.0, "rollouts_padding": 0.0, "predicted_contrast": 0.5, "observed_contrast": 1.0,
        "prompts_drawn": 4.0, "prompts_trained": 2.0,
    }  # fmt: skip
    selection = select_rollouts(
        rollouts.rewards_per_func, rollouts.counts, len(inputs), 2, 0, settings, rollouts.chosen
    )
    assert selection.kept.sum(1).tolist() == [0, 2, 2, 0] and selection.kept[2, 3], "c keeps its one success"


def test_a_screening_rule_returning_wrong_picks_is_refused():
    """A rule must pick exactly its share of distinct groups of its pool."""
    fake = FakeSteps({"a": [0.0, 1.0], "b": [0.0, 1.0]})
    mode = ScreenedMode(
        _config(pods_screen_ratio=2, pods_n_initial=2, pods_screen_rule="frontier", pods_draw_coverage=None)
    )
    mode.rule = lambda pilot, chosen, generator: torch.arange(2)  # two picks where one is the share
    with pytest.raises(ValueError, match="pods_screen_rule"):
        generate_and_score(_inputs(["a", "b"], 4), _settings(n=4), mode, fake.steps())


def test_cross_group_and_dropped_groups_selection():
    """Cross-group selection spends one budget of groups x M over the process's groups; with dropped constant
    groups the kept rows of a constant group get a zero loss mask."""
    fake = FakeSteps({"a": [0.0, 0.0, 0.0, 0.0], "b": [0.0, 1.0, 2.0, 3.0]})
    settings = _settings(n=4, cross_group=True, advantage_scope="all", drop_constant_groups=True)
    inputs = _inputs(["a", "b"], 4)
    rollouts = generate_and_score(inputs, settings, FixedMode(), fake.steps())
    selection = select_rollouts(rollouts.rewards_per_func, rollouts.counts, len(inputs), 2, 0, settings)
    assert selection.kept.sum() == 4
    assert selection.dropped.tolist() == [True] * int(selection.kept[0].sum()) + [False] * int(selection.kept[1].sum())
    kept = kept_generation(rollouts.generation, selection, drop_constant_groups=True)
    assert [mask[0] for mask in kept[2]] == [0 if drop else 1 for drop in selection.local_dropped.tolist()]


def test_a_rule_returning_wrong_indices_is_refused():
    """A down-sampler must return distinct in-range indices of shape [G, M]; anything else fails loudly."""

    def duplicates(rewards, m, generator=None):
        return torch.zeros(rewards.size(0), m, dtype=torch.long)

    settings = _settings(n=4, down_sampler=duplicates, down_sampler_name="duplicates")
    with pytest.raises(ValueError, match="distinct indices"):
        select_rollouts(torch.arange(8.0).view(8, 1), torch.tensor([4, 4]), 8, 2, 0, settings)


def test_selection_seed_depends_on_the_step_and_the_generation_within_it():
    """The per-group rule's seed is the same on every process and differs between generations."""
    seeds = {selection_seed(0, step, micro, 2) for step in range(3) for micro in range(2)}
    assert len(seeds) == 6 and selection_seed(0, 1, 3, 2) == selection_seed(0, 1, 1, 2)


def test_the_documented_custom_mode_runs_in_the_loop():
    """The mode of your own in docs/generation.md, executed as written: registered, built from a config, and run by
    phase 1's loop, it gives every prompt 4 rollouts and 4 more to those without contrast, once."""
    from pathlib import Path

    from trl_pods.generation_modes import GENERATION_MODES, build_generation_mode

    page = (Path(__file__).parent.parent / "docs" / "generation.md").read_text()
    section = page[page.index("## Generation modes are policies of one loop") :]
    code = section[
        section.index("```python") + len("```python") : section.index("```", section.index("```python") + 9)
    ]
    try:
        exec(compile(code, "docs/generation.md", "exec"), {})
        mode = build_generation_mode(SimpleNamespace(pods_generation="two_chances"))
        fake = FakeSteps({"a": [0.0, 1.0, 0.0, 0.0], "b": [1.0] * 8})
        rollouts = generate_and_score(_inputs(["a", "b"], 8), _settings(n=8), mode, fake.steps())
    finally:
        GENERATION_MODES.pop("two_chances", None)
    assert [call[1:] for call in fake.calls if call[0] == "generate"] == [(["a"] * 4 + ["b"] * 4, 4), (["b"] * 4, 4)]
    assert rollouts.counts.tolist() == [4, 8] and rollouts.metrics == {
        "generation_calls": 2.0,
        "rollouts_padding": 0.0,
    }

"""Phase 1 of a PODS generation: the one loop that carries out a generation mode's waves, scoring every rollout once.

The data loader repeats every prompt N times, each process holding whole groups. Rollouts sit in **slot layout**:
local row ``g * N + s`` is the ``s``-th rollout of the process's group ``g``; the layout holds the loader's groups and,
for a mode that draws further prompts (refill), room for them (rows None until drawn). The generation mode
(`trl_pods.waves.GenerationMode`, built from `pods_generation`) decides each wave: which groups get how many more
rollouts, or which further prompts to draw; `generate_and_score` carries it out without knowing the mode:

1. each process takes its own groups' rows for the wave, padded with copies of one of its prompts to the rows of the
   busiest process (`lockstep_rows`): TRL gathers, vLLM server mode slices the broadcast by rank, tensor-parallel vLLM
   and ZeRO-3 generate collectively, so every process makes every call with equal rows;
2. the rows go through TRL's own batch preparation and generation (``steps.generate``: environments drawn and reset
   per rollout, per-row tool dictionaries, image insertion, `rollout_func`), then its reward functions score the
   process's real rows once (``steps.score``), gathered;
3. what came back lands in its slots (`SlotLayout`: the 8-tuple of `_generate`, the prompts as generated, the
   environments, `rollout_func`'s fields, the `log_extra` columns), and the mode sees the gathered rewards so far.

Waves that depend on earlier rewards share one weight load (``steps.one_weight_load``). Each call is timed (generation
and scoring, `Rollouts.call_seconds`; the first call's weight load included, the mode's planning left out); a mode
that plans from the costs (`GenerationMode.timed`) sees the previous generation's timing (``steps.timing``). This
module is pure orchestration: it imports neither TRL nor a model, so tests drive it with fakes; the trainer's steps,
the glue that reads and flips `GRPOTrainer`'s state, are in `trl_pods.trainer_steps`. Selection follows
(`trl_pods.selection`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from .advantages import group_objective
from .rollout_fields import RolloutRows, check_fields, per_row
from .selection import Phase1Settings
from .waves import GenerationMode, GenerationTiming, Wave, WaveState

PER_ROW = (0, 1, 2, 3, 4, 6)  # per-row items of the 8-tuple: prompt_ids, completion_ids, tool_mask, completions,
# logprobs, images; extra_fields (5) and tool_images (7) are per row or shared, by their value


@dataclass(frozen=True)
class GenerationSteps:
    """The steps phase 1 calls (the trainer's generation and reward code, or fakes in tests).

    Attributes:
        generate: ``(rows, request) -> RolloutRows``: one generation call through TRL's batch preparation, one
            rollout per row (rows of a prompt consecutive, ``request`` per prompt asked of the engine at once).
        score: ``(rows, generated, real) -> ([P * rows, F], log_extra columns)``: rewards of the first ``real`` rows
            (the others are padding: NaN), gathered over processes, and the `log_extra` columns the reward functions
            logged for them.
        one_weight_load: Context manager under which dependent calls share one weight load.
        draw: ``counts -> (got, rows)``: up to ``counts[r]`` further prompts for process ``r`` (the same list on every
            process), read on demand; how many each process got and this process's rows, each prompt N times.
        group_keys: ``rows -> [G]``: digests of the prompts of this process's groups (one row each), gathered.
        timing: ``() -> GenerationTiming | None``: the previous generation's timing, the same on every process (called
            once per generation, by every process, for a `GenerationMode.timed` mode).
    """

    generate: Callable[[list[dict], int], RolloutRows]
    score: Callable[[list[dict], RolloutRows, int], tuple[torch.Tensor, dict[str, list]]]
    one_weight_load: Callable[[], AbstractContextManager] = nullcontext
    draw: Callable[[list[int]], tuple[list[int], list[dict]]] | None = None
    group_keys: Callable[[list[dict]], list[int]] | None = None
    timing: Callable[[], GenerationTiming | None] | None = None


@dataclass
class Rollouts:
    """Phase 1's rollouts in slot layout.

    Attributes:
        generation: The 8-tuple of `_generate`, per-row items None where nothing was generated.
        rewards_per_func: ``[G * N, F]`` rewards gathered over processes, NaN rows where nothing was generated.
        counts: ``[G]`` rollouts generated per group (CPU), G counting the groups of all processes.
        rows: This process's dataset rows in slot layout, drawn prompts included (None: a group never drawn).
        prompts: The prompt each generated row was generated from (after environment resets and image insertion).
        environments: The environment instance of each generated row (its state after the rollout), or None.
        extra_columns: The reward functions' `log_extra` columns in slot layout.
        calls: Generation calls made.
        generated: Rollouts generated over all processes, padding included.
        padding: Of those, rollouts generated only to keep the processes in step, then discarded.
        call_rows: Rollouts of each generation call over all processes, padding included.
        call_seconds: Wall seconds of each generation call on this process (generating and scoring; the first also
            loading the weights the calls share).
        chosen: ``[G]`` bool, the groups to train on (None: all).
        metrics: What the mode reports (`pods/<name>`), the same on every process.
    """

    generation: tuple
    rewards_per_func: torch.Tensor
    counts: torch.Tensor
    rows: list
    prompts: list
    environments: list | None = None
    extra_columns: dict[str, list] = field(default_factory=dict)
    calls: int = 1
    generated: int = 0
    padding: int = 0
    call_rows: list[int] = field(default_factory=list)
    call_seconds: list[float] = field(default_factory=list)
    chosen: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class SlotLayout:
    """Collects the rows of several generation calls (waves) into slot layout: local row ``g * N + s`` holds the
    ``s``-th rollout of the process's group ``g``, None where nothing was generated. Rows generated only to keep the
    processes in step (target None) are dropped."""

    def __init__(self, rows: int):
        self.rows = rows
        self.items: list = [None] * 8  # the 8-tuple of `_generate`
        self.prompts: list = [None] * rows
        self.environments: list | None = None
        self.fields: dict[str, list] = {}  # rollout_func's extra fields, one value per slot
        self.shared: dict[str, Any] = {}  # fields every call so far returned as this same non-list value
        self.extra: dict[str, list[list]] = {}  # log_extra column -> one block of rows per reward function

    def add(self, generated: RolloutRows, targets: list[int | None]) -> None:
        self._place("prompts", generated.prompts, targets)
        if generated.environments is not None:
            self.environments = self.environments or [None] * self.rows
            self._place("environments", generated.environments, targets)
        for i, values in enumerate(generated.generation):
            if i == 5:
                self._add_fields(values, targets)
            elif i in PER_ROW or (i == 7 and per_row(values, len(targets))):
                if values is not None:
                    self.items[i] = self.items[i] or [None] * self.rows
                    self._place_item(i, values, targets)
            elif self.items[i] is None:  # shared by the rows (tool images without tools: [])
                self.items[i] = values

    def _place(self, name: str, values: list, targets: list[int | None]) -> None:
        slots = getattr(self, name)
        for value, target in zip(values, targets, strict=True):
            if target is not None:
                slots[target] = value

    def _place_item(self, i: int, values: list, targets: list[int | None]) -> None:
        for value, target in zip(values, targets, strict=True):
            if target is not None:
                self.items[i][target] = value

    def _add_fields(self, fields: dict[str, Any], targets: list[int | None]) -> None:
        """`rollout_func`'s extra fields of a call: a list holds one value per row (`check_fields`), any other value
        is shared by the call's rows; a field stays shared while every call returns that same value."""
        check_fields(fields, len(targets))
        for key, values in fields.items():
            shared = not isinstance(values, list) and (key not in self.fields or key in self.shared)
            if shared and (key not in self.shared or _same(self.shared[key], values)):
                self.shared[key] = values
            else:
                self.shared.pop(key, None)
            per_row_values = values if isinstance(values, list) else [values] * len(targets)
            slots = self.fields.setdefault(key, [None] * self.rows)
            for value, target in zip(per_row_values, targets, strict=True):
                if target is not None:
                    slots[target] = value

    def extra_fields(self) -> dict[str, Any]:
        return {key: self.shared.get(key, values) for key, values in self.fields.items()}

    def add_extra(self, columns: dict[str, list], scored: int, targets: list[int]) -> None:
        """A wave's `log_extra` columns. Each holds one block of ``scored`` values per reward function that logged
        it; the first ``len(targets)`` rows of a block are the rollouts of those slots (the rest is padding)."""
        for column, values in columns.items():
            blocks = self.extra.setdefault(column, [])
            for b in range(len(values) // scored):
                if b == len(blocks):
                    blocks.append([None] * self.rows)
                for value, target in zip(values[b * scored : b * scored + len(targets)], targets, strict=True):
                    blocks[b][target] = value

    def extra_columns(self) -> dict[str, list]:
        """The `log_extra` columns in slot layout: one block of ``rows`` values per reward function that logged it."""
        return {column: [value for block in blocks for value in block] for column, blocks in self.extra.items()}

    def generation(self) -> tuple:
        items = list(self.items)
        items[5] = self.extra_fields()
        return tuple(items)


def _same(a: Any, b: Any) -> bool:
    """Whether two field values are the same (``==`` where it gives a truth value, else identity)."""
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError, RuntimeError):
        return False


def lockstep_rows(groups: torch.Tensor, sizes: torch.Tensor, groups_per_process: int, processes: int) -> int:
    """Rows every process generates in a call: the most that any one process needs (the others pad).

    Args:
        groups: ``[A]`` global indices of the call's groups, ascending; process ``r`` owns groups
            ``r * groups_per_process .. (r + 1) * groups_per_process - 1``.
        sizes: ``[A]`` rollouts generated for each.
        groups_per_process: groups each process holds.
        processes: number of processes.
    """
    per_process = torch.zeros(processes, dtype=torch.long).index_add_(0, groups // groups_per_process, sizes)
    return int(per_process.max())


def gathered_rows(groups: torch.Tensor, sizes: torch.Tensor, groups_per_process: int, lockstep: int) -> torch.Tensor:
    """``[sizes.sum()]`` rows of a call's gathered rewards that belong to ``groups``, group by group.

    Each process contributes ``lockstep`` rows (`lockstep_rows`): its own groups first, in ascending order,
    ``sizes[i]`` rows each, then its padding.
    """
    rank = groups // groups_per_process  # [A]
    before = sizes.cumsum(0) - sizes  # [A]: rows of all earlier groups of the call
    first_of_rank = torch.searchsorted(groups, rank * groups_per_process)  # [A]: index of the rank's first group
    start = rank * lockstep + before - before[first_of_rank]  # [A]
    return torch.cat([torch.arange(s, s + size) for s, size in zip(start.tolist(), sizes.tolist(), strict=True)])


def generate_and_score(
    inputs: list[dict[str, Any]], settings: Phase1Settings, mode: GenerationMode, steps: GenerationSteps
) -> Rollouts:
    """Phase 1's rollouts of this process's ``inputs`` (the loader's rows, each prompt N times in a row): the
    ``mode``'s waves, carried out in slot layout (see the module docstring)."""
    filler = SlotFiller(inputs, settings, mode, steps)
    state = filler.state
    with steps.one_weight_load() if mode.dependent_waves else nullcontext():
        planning = time.perf_counter()
        wave = mode.first_wave(state)
        filler.began += time.perf_counter() - planning  # planning is not generating: the first call's clock skips it
        while wave is not None:
            if wave.draw is not None:
                wave = filler.draw(wave)
                if wave.groups.numel() == 0:  # the data ran out
                    break
            filler.fill(wave)
            wave = mode.next_wave(state)
    mode.finished(state)
    return filler.rollouts(mode.chosen(state), mode.metrics(state))


class SlotFiller:
    """Fills the slots of a generation, one call at a time, every process in step (see the module docstring), and
    keeps the gathered `WaveState` the mode decides from."""

    def __init__(self, inputs: list[dict], settings: Phase1Settings, mode: GenerationMode, steps: GenerationSteps):
        n, processes = settings.n, settings.processes
        loaded = len(inputs) // n  # groups the data loader gave this process
        share = loaded // mode.prompts_read
        self.per_process = share * mode.groups_laid_out
        self.rows = [*inputs, *[None] * ((self.per_process - loaded) * n)]
        self.settings, self.steps = settings, steps
        self.layout = SlotLayout(len(self.rows))
        self.rewards_per_func: torch.Tensor | None = None  # [G * N, F]
        self.call_rows: list[int] = []  # rollouts of each call, over all processes
        self.call_seconds: list[float] = []  # wall seconds of each call on this process
        groups = self.per_process * processes
        self.state = WaveState(
            n=n,
            processes=processes,
            groups_per_process=self.per_process,
            share=share,
            rewards=torch.full((groups, n), torch.nan),
            counts=torch.zeros(groups, dtype=torch.long),
            drawn=(torch.arange(groups) % self.per_process) < loaded,
            seed=settings.seed,
            group_keys=None if steps.group_keys is None else lambda: steps.group_keys(self.rows[::n]),
            timing=steps.timing() if mode.timed and steps.timing is not None else None,
        )
        self.began = time.perf_counter()  # the first call is timed from here, its weight load included

    def draw(self, wave: Wave) -> Wave:
        """Read the wave's further prompts into each process's next empty groups; the wave of its own groups and
        those."""
        got, rows = self.steps.draw(wave.draw)
        state, n = self.state, self.settings.n
        first = [block.start + int(state.drawn[block].sum()) for block in state.blocks()]  # next empty group
        mine = first[self.settings.process_index] - self.settings.process_index * self.per_process
        self.rows[mine * n : mine * n + len(rows)] = rows
        groups = torch.cat([torch.arange(start, start + count) for start, count in zip(first, got, strict=True)])
        state.drawn[groups] = True
        drawn = Wave.uniform(groups, wave.request)
        order = torch.cat([wave.groups, drawn.groups]).sort()
        return Wave(order.values, torch.cat([wave.sizes, drawn.sizes])[order.indices], wave.request)

    def fill(self, wave: Wave) -> None:
        """Generate and score the wave's rollouts into the groups' next slots."""
        groups, sizes, settings, state = wave.groups, wave.sizes, self.settings, self.state
        n, per_process = settings.n, self.per_process
        first_group = settings.process_index * per_process
        first_slots = state.counts[groups]  # [A]
        lockstep = lockstep_rows(groups, sizes, per_process, settings.processes)
        mine = (groups >= first_group) & (groups < first_group + per_process)
        own = list(
            zip((groups[mine] - first_group).tolist(), sizes[mine].tolist(), first_slots[mine].tolist(), strict=True)
        )
        rows = [self.rows[group * n] for group, size, _ in own for _ in range(size)]
        targets = [group * n + first + j for group, size, first in own for j in range(size)]
        rows += [self.rows[own[0][0] * n if own else 0]] * (lockstep - len(rows))
        began = time.perf_counter() if self.call_seconds else self.began
        generated = self.steps.generate(rows, wave.request)
        self.layout.add(generated, targets + [None] * (len(rows) - len(targets)))
        call_rewards, extra = self.steps.score(rows, generated, len(targets))  # [P * rows, F]
        self.call_seconds.append(time.perf_counter() - began)
        self.layout.add_extra(extra, max(len(targets), 1), targets)
        ours = call_rewards[gathered_rows(groups, sizes, per_process, lockstep).to(call_rewards.device)]
        if self.rewards_per_func is None:
            self.rewards_per_func = call_rewards.new_full((state.rewards.numel(), ours.size(1)), torch.nan)
        offsets = torch.arange(int(sizes.sum())) - (sizes.cumsum(0) - sizes).repeat_interleave(sizes)
        slots = (groups * n + first_slots).repeat_interleave(sizes) + offsets  # [sizes.sum()]
        self.rewards_per_func[slots.to(self.rewards_per_func.device)] = ours
        reward = group_objective(ours.detach().cpu().unsqueeze(0), settings.reward_weights, "sum_then_normalize")
        state.rewards.view(-1)[slots] = reward[0]  # TRL's reward of each new rollout
        state.counts[groups] += sizes
        state.calls += 1
        state.generated += lockstep * settings.processes
        self.call_rows.append(lockstep * settings.processes)
        state.padding += lockstep * settings.processes - int(sizes.sum())

    def rollouts(self, chosen: torch.Tensor | None, metrics: dict[str, float]) -> Rollouts:
        layout, state = self.layout, self.state
        return Rollouts(
            layout.generation(), self.rewards_per_func, state.counts, self.rows, layout.prompts,
            layout.environments, layout.extra_columns(), state.calls, state.generated, state.padding, self.call_rows,
            self.call_seconds, chosen, metrics,
        )  # fmt: skip

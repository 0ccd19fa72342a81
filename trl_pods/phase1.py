"""Phase 1 of a PODS generation: generate N rollouts per prompt, score each once, keep M per prompt.

The data loader repeats every prompt N times (`generation_layout`), each process holding whole groups, so a process's
rows are ``G_local * N``. Rollouts sit in **slot layout**: local row ``g * N + s`` is the ``s``-th rollout of the
process's group ``g``. With ``pods_generation="fixed"`` one generation call fills every slot; with ``"adaptive"``
(`trl_pods.adaptive`) waves fill the first slots of each group and leave the rest empty (None, NaN rewards); with
``"budgeted"`` (`trl_pods.budget`) each group's count is decided before generating and filled in one call (in vLLM
server mode one call too).

This module is the pure orchestration: it takes its steps as callables (`GenerationSteps`: generate, score, and
their per-call variants) and imports neither TRL nor a model, so tests drive it with fakes; the trainer's steps, the
glue that reads and flips `GRPOTrainer`'s state, are in `trl_pods.trainer_steps`. Selection (`select`) works on the
gathered ``[G, N]`` objective, so every process computes the same kept mask.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from .adaptive import gathered_rows, generated_slots, has_contrast, lockstep_rows, top_up_waves
from .advantages import full_group_advantages, group_objective
from .down_sampling import max_variance_across_groups
from .rollout_fields import kept_fields, per_row
from .schedules import kept_per_prompt, scheduled_value
from .screening import missing_groups, refill_choice

Generation = tuple  # the 8-tuple of GRPOTrainer._generate
PER_ROW = (0, 1, 2, 3, 4, 6)  # its per-row items: prompt_ids, completion_ids, tool_mask, completions, logprobs, images


@dataclass(frozen=True)
class Phase1Settings:
    """What phase 1 reads from the configuration and the process layout.

    Attributes:
        n: Rollouts per prompt (N, slots per group).
        generation: `pods_generation`: ``"fixed"``, ``"adaptive"``, ``"budgeted"``, ``"refill"`` or ``"screened"``.
        n_initial: Rollouts per prompt in the first adaptive wave.
        process_index: This process's index.
        processes: Number of processes.
        reward_weights: ``[F]`` weights of the reward functions.
        aggregation: TRL's `multi_objective_aggregation` (the objective selection ranks).
        down_sampler: The per-group rule, ``(rewards [G, N], m, generator) -> [G, m]`` indices.
        down_sampler_name: Its configured name, for error messages.
        cross_group: D3S cross-group selection.
        scale_rewards: TRL's `scale_rewards` (full-group advantages).
        drop_constant_groups: Mark groups with all-zero advantages as dropped.
        advantage_scope: ``"kept"`` or ``"all"``.
        pool: Groups laid out per trained group (refill: `pods_max_draws`, the most its draws can fill; screened:
            `pods_screen_ratio`, the prompts piloted; 1 otherwise): a process trains on ``groups / pool`` of them.
        screen_rule: Screened: ``(pilot [G, k], chosen, generator) -> [chosen]`` (`trl_pods.screening`).
        seed: Seed of the generation's random rules (the same on every process).
    """

    n: int
    generation: str
    n_initial: int | None
    process_index: int
    processes: int
    reward_weights: torch.Tensor
    aggregation: str
    down_sampler: Callable
    down_sampler_name: str
    cross_group: bool = False
    scale_rewards: str = "group"
    drop_constant_groups: bool = False
    advantage_scope: str = "kept"
    pool: int = 1
    screen_rule: Callable | None = None
    seed: int = 0


@dataclass(frozen=True)
class GenerationSteps:
    """The steps phase 1 calls (the trainer's generation and reward code, or fakes in tests).

    Attributes:
        generate: ``rows -> Generation``: N rollouts of each prompt of ``rows`` (one row per rollout).
        score: ``(rows, generation) -> [P * rows, F]``: rewards of every row, gathered over processes.
        generate_wave: ``(rows, size) -> Generation``: one call of a wave or an allocation, requesting ``size``
            rollouts per prompt (consecutive rows; 1: every row is its own request).
        score_wave: ``(rows, generation, real) -> ([P * rows, F], log_extra columns)``: rewards of the first ``real``
            rows (the others are padding: NaN), gathered, and the `log_extra` columns the reward functions logged.
        one_weight_load: Context manager under which dependent calls (waves) share one weight load.
        allocate: Budgeted: ``(processes) -> [G]`` rollouts per group, all processes, the same on each.
        draw: Refill: ``counts -> (got, rows)``: up to ``counts[r]`` further prompts for process ``r`` (the same list
            on every process), read on demand; how many each process got (the same on every process) and this
            process's rows, each prompt N times.
    """

    generate: Callable[[list[dict]], Generation]
    score: Callable[[list[dict], Generation], torch.Tensor]
    generate_wave: Callable[[list[dict], int], Generation] | None = None
    score_wave: Callable[[list[dict], Generation, int], tuple[torch.Tensor, dict[str, list]]] | None = None
    one_weight_load: Callable[[], AbstractContextManager] = nullcontext
    allocate: Callable[[], torch.Tensor] | None = None
    draw: Callable[[list[int]], tuple[list[int], list[dict]]] | None = None


@dataclass
class Rollouts:
    """Phase 1's rollouts in slot layout.

    Attributes:
        generation: The 8-tuple of `_generate`, per-row items None where nothing was generated.
        rewards_per_func: ``[G * N, F]`` rewards gathered over processes, NaN rows where nothing was generated.
        counts: ``[G]`` rollouts generated per group (CPU), G counting the groups of all processes.
        extra_columns: Adaptive, budgeted: the reward functions' `log_extra` columns in slot layout.
        calls: Generation calls made (recorded: 1 for fixed generation).
        generated: Rollouts generated over all processes, padding included (recorded).
        padding: Of those, rollouts generated only to keep the processes in step, then discarded.
        chosen: Refill, screened: ``[G]`` bool, the groups to train on (None: all).
        metrics: What the mode reports besides (`pods/<name>`), the same on every process.
        rows: Refill: this process's rows in slot layout, the drawn prompts' included (None: the inputs).
    """

    generation: Generation
    rewards_per_func: torch.Tensor
    counts: torch.Tensor
    extra_columns: dict[str, list] = field(default_factory=dict)
    calls: int = 1
    generated: int = 0
    padding: int = 0
    chosen: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    rows: list | None = None


@dataclass
class Selection:
    """The kept rollouts of one generation.

    Attributes:
        rewards: ``[G, N]`` TRL's reward (weighted sum), NaN where nothing was generated.
        kept: ``[G, N]`` bool, the same on every process.
        m: Rollouts kept per prompt.
        seconds: Time the selection rule took.
        kept_rows: ``[K]`` global row indices of the kept rollouts, by group then slot.
        local: This process's kept rows (local indices, in order).
        dropped: ``[K]`` bool, kept rows of constant groups (`pods_drop_constant_groups`), all processes.
        local_dropped: ``[len(local)]`` the same for this process's kept rows.
    """

    rewards: torch.Tensor
    kept: torch.Tensor
    m: int
    seconds: float
    kept_rows: torch.Tensor
    local: list[int]
    dropped: torch.Tensor
    local_dropped: torch.Tensor


def take(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[i] for i in rows]


class SlotLayout:
    """Collects the rows of several `_generate` calls (waves) into slot layout: local row ``g * N + s`` holds the
    ``s``-th rollout of the process's group ``g``, None where nothing was generated. Rows generated only to keep the
    processes in step (target None) are dropped."""

    def __init__(self, rows: int):
        self.rows = rows
        self.items: list = [None] * 8  # the 8-tuple of `_generate`
        self.extra: dict[str, list[list]] = {}  # log_extra column -> one block of rows per reward function

    def add(self, generation: Generation, targets: list[int | None]) -> None:
        for i, values in enumerate(generation):
            if i not in PER_ROW:
                self.items[i] = values if self.items[i] is None else self.items[i]  # per call: extra_fields, ...
            elif values is not None:
                self.items[i] = self.items[i] or [None] * self.rows
                for value, target in zip(values, targets, strict=True):
                    if target is not None:
                        self.items[i][target] = value

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


def generate_and_score(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Phase 1's rollouts of this process's ``inputs`` (``G_local * N`` rows, each prompt N times in a row)."""
    if settings.generation == "adaptive":
        return generate_in_waves(inputs, settings, steps)
    if settings.generation == "budgeted":
        return generate_budgeted(inputs, settings, steps)
    if settings.generation == "refill":
        return generate_refill(inputs, settings, steps)
    if settings.generation == "screened":
        return generate_screened(inputs, settings, steps)
    generation = steps.generate(inputs)
    rewards_per_func = steps.score(inputs, generation)  # [G * N, F]
    counts = torch.full((rewards_per_func.size(0) // settings.n,), settings.n)
    return Rollouts(generation, rewards_per_func, counts, generated=rewards_per_func.size(0))


class SlotFiller:
    """Fills the slots of chosen groups, one generation call at a time, every process in step.

    In each call every process generates the same number of rows (its own groups' rows, then copies of one of its
    prompts as padding), since TRL's generation gathers, vLLM server mode and tensor-parallel vLLM need equal rows
    on all processes; only its own rows are scored (``steps.score_wave``).
    """

    def __init__(self, inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps):
        self.inputs, self.settings, self.steps = inputs, settings, steps
        self.groups_per_process = len(inputs) // settings.n
        self.layout = SlotLayout(len(inputs))
        self.rewards_per_func: torch.Tensor | None = None  # [G * N, F]
        self.calls = self.generated = self.padding = 0  # recorded over all processes

    def fill(self, groups: torch.Tensor, first_slot: int, sizes: torch.Tensor, group_size: int) -> torch.Tensor:
        """Generate ``sizes[i]`` rollouts of group ``groups[i]`` (global indices, ascending, the same on every
        process) into slots ``first_slot ..``, in one call that requests ``group_size`` rollouts per prompt, and
        return their gathered rewards ``[sizes.sum(), F]``, group by group."""
        n, per_process, settings = self.settings.n, self.groups_per_process, self.settings
        first_group = settings.process_index * per_process
        lockstep = lockstep_rows(groups, sizes, per_process, settings.processes)
        mine = (groups >= first_group) & (groups < first_group + per_process)
        own = list(zip((groups[mine] - first_group).tolist(), sizes[mine].tolist(), strict=True))
        rows = [self.inputs[group * n] for group, size in own for _ in range(size)]
        targets = [group * n + first_slot + j for group, size in own for j in range(size)]
        rows += [self.inputs[own[0][0] * n if own else 0]] * (lockstep - len(rows))
        generation = self.steps.generate_wave(rows, group_size)
        self.layout.add(generation, targets + [None] * (len(rows) - len(targets)))
        call_rewards, extra = self.steps.score_wave(rows, generation, len(targets))  # [P * rows, F]
        self.layout.add_extra(extra, max(len(targets), 1), targets)
        ours = call_rewards[gathered_rows(groups, sizes, per_process, lockstep).to(call_rewards.device)]
        if self.rewards_per_func is None:
            rows_all = per_process * settings.processes * n
            self.rewards_per_func = call_rewards.new_full((rows_all, ours.size(1)), torch.nan)
        offsets = torch.arange(int(sizes.sum())) - (sizes.cumsum(0) - sizes).repeat_interleave(sizes)
        slots = (groups * n + first_slot).repeat_interleave(sizes) + offsets  # [sizes.sum()]
        self.rewards_per_func[slots.to(self.rewards_per_func.device)] = ours
        self.calls += 1
        self.generated += lockstep * settings.processes
        self.padding += lockstep * settings.processes - int(sizes.sum())
        return ours

    def rollouts(self, counts: torch.Tensor, **chosen_and_metrics: Any) -> Rollouts:
        layout, rewards = self.layout, self.rewards_per_func
        extra = layout.extra_columns()
        return Rollouts(
            tuple(layout.items), rewards, counts, extra, self.calls, self.generated, self.padding, **chosen_and_metrics
        )

    def objective(self, groups: torch.Tensor, size: int, ours: torch.Tensor) -> torch.Tensor:
        """``[A, size]`` TRL's reward of the ``size`` rollouts just filled for each of ``groups``, from ``ours``."""
        per_func = ours.view(groups.numel(), size, ours.size(1)).detach().cpu()  # [A, size, F]
        return group_objective(per_func, self.settings.reward_weights, "sum_then_normalize")


def generate_in_waves(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Adaptive generation: waves decided by `top_up_waves` from the gathered rewards, so identical on every process;
    they share one weight load (``steps.one_weight_load``)."""
    filler = SlotFiller(inputs, settings, steps)

    def wave(groups: torch.Tensor, first_slot: int, size: int) -> torch.Tensor:
        ours = filler.fill(groups, first_slot, torch.full_like(groups, size), size)  # [A * size, F]
        return filler.objective(groups, size, ours)  # [A, size], TRL's reward

    with steps.one_weight_load():
        waves = top_up_waves(filler.groups_per_process * settings.processes, settings.n_initial, settings.n, wave)
    return filler.rollouts(waves.counts)


def generate_budgeted(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Budgeted generation: ``steps.allocate`` gives every group its count before anything is generated (each
    process's groups share its own budget, so processes generate alike), then one call generates them, every row its
    own request (group size 1, which vLLM server mode also takes unchanged), and the rewards are computed after it,
    once the engine has released the weights, as TRL does."""
    filler = SlotFiller(inputs, settings, steps)
    counts = steps.allocate(settings.processes)  # [G], the same on every process
    filler.fill(torch.arange(counts.numel()), 0, counts, 1)
    return filler.rollouts(counts)


def generate_refill(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Refill (DAPO's dynamic sampling, `trl_pods.screening`): N rollouts for each of the data loader's prompts, then
    draws of further prompts (``steps.draw``, read on demand), N rollouts each, every process taking as many as it
    lacks groups with contrast, until every process holds its share or ``settings.pool`` draws are made; the draws
    share one weight load (each depends on the last one's rewards). The layout holds ``settings.pool`` times the
    loader's groups per process; slots of prompts never drawn stay empty (rows None)."""
    n, processes = settings.n, settings.processes
    share = len(inputs) // n  # groups each process trains on: the loader's prompts, its first draw
    per_process = share * settings.pool
    rows = [*inputs, *[None] * (len(inputs) * (settings.pool - 1))]
    filler = SlotFiller(rows, settings, steps)
    groups = per_process * processes
    rewards = torch.full((groups, n), torch.nan)  # [G, N]
    drawn = torch.zeros(groups, dtype=torch.bool)
    taken = [0] * processes  # groups each process has drawn
    missing = [share] * processes
    with steps.one_weight_load():
        for draw_index in range(settings.pool):
            if draw_index:  # further prompts, read now
                missing, new_rows = steps.draw(missing)
                mine = taken[settings.process_index] * n
                rows[mine : mine + len(new_rows)] = new_rows
                if not any(missing):
                    break
            starts = [r * per_process + taken[r] for r in range(processes)]
            draw = torch.cat([torch.arange(start, start + size) for start, size in zip(starts, missing, strict=True)])
            ours = filler.fill(draw, 0, torch.full_like(draw, n), n)  # [A * N, F]
            rewards[draw], drawn[draw] = filler.objective(draw, n, ours), True
            for r in range(processes):
                taken[r] += missing[r]
                block = slice(r * per_process, (r + 1) * per_process)
                missing[r] = min(missing_groups(rewards[block], drawn[block], share), per_process - taken[r])
            if not any(missing):
                break
    chosen, filled = torch.zeros(groups, dtype=torch.bool), 0
    for r in range(processes):
        block = slice(r * per_process, (r + 1) * per_process)
        picked, lacking = refill_choice(rewards[block], drawn[block], share)
        chosen[r * per_process + picked], filled = True, filled + lacking
    metrics = {"draws": float(filler.calls), "groups_filled_without_contrast": float(filled)}
    metrics.update(prompts_drawn=float(drawn.sum()), prompts_trained=float(chosen.sum()))
    return filler.rollouts(drawn.long() * n, chosen=chosen, metrics=metrics, rows=rows)


def generate_screened(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Screened (pilot, then commit, `trl_pods.screening`): a pilot of ``n_initial`` rollouts for every pool prompt in
    one call; each process's rule picks its share from its own pool; the chosen get their other ``N - n_initial``
    rollouts in a second call (one weight load for both: the commit depends on the pilot's rewards)."""
    filler = SlotFiller(inputs, settings, steps)
    n, k, per_process = settings.n, settings.n_initial, filler.groups_per_process
    share, groups = per_process // settings.pool, per_process * settings.processes
    everyone = torch.arange(groups)
    with steps.one_weight_load():
        pilot = filler.objective(everyone, k, filler.fill(everyone, 0, torch.full_like(everyone, k), k))  # [G, k]
        chosen = torch.zeros(groups, dtype=torch.bool)
        for first in range(0, groups, per_process):
            generator = torch.Generator().manual_seed(settings.seed + first)
            picked = settings.screen_rule(pilot[first : first + per_process], share, generator)
            _check_screen_choice(picked, per_process, share)
            chosen[first + picked] = True
        commit = chosen.nonzero().squeeze(1)
        if n > k:
            full = filler.objective(commit, n - k, filler.fill(commit, k, torch.full_like(commit, n - k), n - k))
    rewards = torch.cat([pilot[commit], full], dim=1) if n > k else pilot[commit]  # [B, N]
    metrics = {
        "predicted_contrast": has_contrast(pilot[commit]).float().mean().item(),
        "observed_contrast": has_contrast(rewards).float().mean().item(),
        "prompts_drawn": float(groups),
        "prompts_trained": float(commit.numel()),
    }
    counts = torch.where(chosen, n, k)
    return filler.rollouts(counts, chosen=chosen, metrics=metrics)


def _check_screen_choice(picked: Any, pool: int, share: int) -> None:
    if (
        not isinstance(picked, torch.Tensor)
        or picked.dtype != torch.long
        or tuple(picked.shape) != (share,)
        or picked.unique().numel() != share
        or (share and (picked.min() < 0 or picked.max() >= pool))
    ):
        raise ValueError(
            f"The screening rule (pods_screen_rule) must return a LongTensor of {share} distinct group indices in "
            f"[0, {pool}) (the groups of one process's pool to train on)."
        )


def select(
    rewards: torch.Tensor,
    m: int,
    groups_per_process: int,
    counts: torch.Tensor,
    settings: Phase1Settings,
    seed: int,
    chosen: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[G, N]`` bool mask of the kept rollouts, computed from the gathered ``[G, N]`` objective (the same on every
    process).

    Per-group rules keep exactly ``m`` per group (``seed`` seeds their generator); with cross-group selection each
    process's groups share one budget of ``groups_per_process * m`` rollouts, chosen on full-group advantages. Only
    generated slots (the first ``counts[g]`` of group ``g``) may be kept, and with ``chosen`` (``[G]`` bool: refill,
    screened) only rows of the chosen groups.
    """
    if chosen is not None:
        mask = torch.zeros_like(rewards, dtype=torch.bool)
        mask[chosen] = select(rewards[chosen], m, groups_per_process, counts[chosen], settings, seed)
        return mask
    g, n = rewards.shape
    generated = generated_slots(counts, n)  # [G, N]
    if settings.cross_group:
        advantages = full_group_advantages(rewards, settings.scale_rewards).masked_fill(rewards.isnan(), torch.nan)
        return max_variance_across_groups(advantages, m, groups_per_process, generated=generated)
    if m == n:
        kept = torch.arange(n).expand(g, -1)
    else:
        kept = settings.down_sampler(rewards, m, generator=torch.Generator().manual_seed(seed))
        if (
            not isinstance(kept, torch.Tensor)
            or tuple(kept.shape) != (g, m)
            or kept.dtype != torch.long
            or (kept.numel() and (kept.min() < 0 or kept.max() >= n))
            or (kept.sort(dim=1).values.diff(dim=1) == 0).any()
        ):
            raise ValueError(
                f"The down-sampler {settings.down_sampler_name!r} must return a LongTensor of shape {(g, m)} "
                f"with distinct indices in [0, {n}) per row."
            )
    mask = torch.zeros(g, n, dtype=torch.bool).scatter_(1, kept, True)
    if (mask & ~generated).any():
        raise ValueError(
            f"The down-sampler {settings.down_sampler_name!r} kept a slot that was never generated: with "
            "pods_generation='adaptive' group g holds only its first counts[g] slots (the rest are NaN). Keep "
            "scored rollouts first, then unscorable (NaN) ones by lowest index, as the built-in rules do."
        )
    return mask


def constant_groups(grouped: torch.Tensor, kept: torch.Tensor, settings: Phase1Settings) -> torch.Tensor:
    """``[G]`` bool: groups whose advantages are all zero, so they carry no signal (`pods_drop_constant_groups`).

    Those are groups whose objective (`group_objective`: the weighted reward sum, or with `normalize_then_sum`
    the sum of normalised rewards) is constant over the kept rollouts (``advantage_scope="kept"``) or over all N
    (``"all"``). ``grouped`` is ``[G, N, F]``.
    """
    if not settings.drop_constant_groups:
        return torch.zeros(grouped.size(0), dtype=torch.bool)
    rows = None if settings.advantage_scope == "all" else kept
    return ~has_contrast(group_objective(grouped, settings.reward_weights, settings.aggregation, rows))


def select_rollouts(
    rewards_per_func: torch.Tensor,
    counts: torch.Tensor,
    local_rows: int,
    m: int,
    seed: int,
    settings: Phase1Settings,
    chosen: torch.Tensor | None = None,
) -> Selection:
    """Select M per prompt (of the ``chosen`` groups, refill and screened) from the gathered ``[G * N, F]``
    rewards; ``local_rows`` is this process's row count."""
    n = settings.n
    grouped = rewards_per_func.view(-1, n, rewards_per_func.size(1)).detach().cpu()  # [G, N, F], all processes
    rewards = group_objective(grouped, settings.reward_weights, "sum_then_normalize")  # [G, N], TRL's reward
    objective = group_objective(grouped, settings.reward_weights, settings.aggregation)  # [G, N]
    start = time.perf_counter()
    kept = select(objective, m, local_rows // n, counts, settings, seed, chosen)  # [G, N] bool
    seconds = time.perf_counter() - start
    kept_rows = kept.flatten().nonzero().squeeze(1)  # [K], ordered by group, then rollout
    first_row = settings.process_index * local_rows
    local = [row - first_row for row in kept_rows.tolist() if first_row <= row < first_row + local_rows]
    dropped = constant_groups(grouped, kept, settings).repeat_interleave(n)[kept_rows]  # [K]
    local_dropped = dropped[(kept_rows >= first_row) & (kept_rows < first_row + local_rows)]  # [len(local)]
    return Selection(rewards, kept, m, seconds, kept_rows, local, dropped, local_dropped)


def kept_generation(generation: Generation, selection: Selection, drop_constant_groups: bool) -> Generation:
    """The 8-tuple of this process's kept rows, `rollout_func`'s extra fields and tool images included. With dropped
    groups, a zero loss mask (`tool_mask`) keeps their rows out of the loss and its normaliser."""
    prompt_ids, completion_ids, tool_mask, completions, logps, extra_fields, images, tool_images = generation
    local, rows = selection.local, len(completion_ids)
    kept_ids, tool_mask = take(completion_ids, local), take(tool_mask, local)  # tool_mask: 0 on tool-output tokens
    if drop_constant_groups:
        drops = selection.local_dropped.tolist()
        masks = tool_mask or [[1] * len(ids) for ids in kept_ids]
        tool_mask = [[0 if drop else keep for keep in mask] for mask, drop in zip(masks, drops, strict=True)]
    kept = (take(prompt_ids, local), kept_ids, tool_mask, take(completions, local), take(logps, local))
    tool_images = take(tool_images, local) if per_row(tool_images, rows) else tool_images
    return (*kept, kept_fields(extra_fields, local, rows), take(images, local), tool_images)


def kept_per_step(args: Any, progress: float, prompts_per_process: int) -> int:
    """M for this step: `pods_m`, or the scheduled value (`pods_schedule`), rounded to keep batches even."""
    if args.pods_m_start is None:
        return args.pods_m
    target = scheduled_value(args.pods_m_start, args.pods_m, progress, args.pods_schedule)
    return kept_per_prompt(target, args.pods_m, prompts_per_process, args.steps_per_generation)


def selection_seed(seed: int, global_step: int, micro_step: int, accumulation: int) -> int:
    """Seed of a per-group rule's generator: the same on every process; depends on the seed, the optimizer step and
    the generation within it (``micro_step`` is TRL's micro-step counter)."""
    position = global_step * accumulation + micro_step % accumulation
    return (seed * 1_000_003 + position) % (2**63)

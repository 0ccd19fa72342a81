"""Phase 1 of a PODS generation: generate N rollouts per prompt, score each once, keep M per prompt.

The data loader repeats every prompt N times (`generation_layout`), each process holding whole groups, so a process's
rows are ``G_local * N``. Rollouts sit in **slot layout**: local row ``g * N + s`` is the ``s``-th rollout of the
process's group ``g``. With ``pods_generation="fixed"`` one generation call fills every slot; with ``"adaptive"``
(`trl_pods.adaptive`) waves fill the first slots of each group and leave the rest empty (None, NaN rewards); with
``"budgeted"`` (`trl_pods.budget`) each group's count is decided before generating and filled in one call (one per
distinct count in vLLM server mode).

The orchestration takes its steps as callables (`GenerationSteps`: generate, score, and their per-wave variants), so
it runs without a model; the trainer passes its own `_generate` and `_calculate_rewards`. Selection (`select`) works
on the gathered ``[G, N]`` objective, so every process computes the same kept mask.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_trainer_module
from trl.models import unwrap_model_for_generation

from .adaptive import gathered_rows, generated_slots, has_contrast, lockstep_rows, top_up_waves
from .advantages import full_group_advantages, group_objective
from .budget import generation_calls, prompt_key
from .down_sampling import max_variance_across_groups
from .rollout_fields import kept_fields, per_row
from .schedules import kept_per_prompt, scheduled_value
from .vllm_engine import engine_awake

Generation = tuple  # the 8-tuple of GRPOTrainer._generate
PER_ROW = (0, 1, 2, 3, 4, 6)  # its per-row items: prompt_ids, completion_ids, tool_mask, completions, logprobs, images


@dataclass(frozen=True)
class Phase1Settings:
    """What phase 1 reads from the configuration and the process layout.

    Attributes:
        n: Rollouts per prompt (N, slots per group).
        generation: `pods_generation`: ``"fixed"``, ``"adaptive"`` or ``"budgeted"``.
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
        one_size_per_call: Each generation call requests one group size for all its prompts (vLLM server mode).
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
    one_size_per_call: bool = False


@dataclass(frozen=True)
class GenerationSteps:
    """The steps phase 1 calls (the trainer's generation and reward code, or fakes in tests).

    Attributes:
        generate: ``rows -> Generation``: N rollouts of each prompt of ``rows`` (one row per rollout).
        score: ``(rows, generation) -> [P * rows, F]``: rewards of every row, gathered over processes.
        generate_wave: ``(rows, size) -> Generation``: one call of several (waves, budgeted), requesting ``size``
            rollouts per prompt (consecutive rows; 1: every row is its own request).
        score_wave: ``(rows, generation, real) -> ([P * rows, F], log_extra columns)``: rewards of the first ``real``
            rows (the others are padding: NaN), gathered, and the `log_extra` columns the reward functions logged.
        one_weight_load: Context manager under which all calls of a generation run.
        allocate: Budgeted: ``() -> [G]`` rollouts per group, all processes, the same on each.
    """

    generate: Callable[[list[dict]], Generation]
    score: Callable[[list[dict], Generation], torch.Tensor]
    generate_wave: Callable[[list[dict], int], Generation] | None = None
    score_wave: Callable[[list[dict], Generation, int], tuple[torch.Tensor, dict[str, list]]] | None = None
    one_weight_load: Callable[[], AbstractContextManager] = nullcontext
    allocate: Callable[[], torch.Tensor] | None = None


@dataclass
class Rollouts:
    """Phase 1's rollouts in slot layout.

    Attributes:
        generation: The 8-tuple of `_generate`, per-row items None where nothing was generated.
        rewards_per_func: ``[G * N, F]`` rewards gathered over processes, NaN rows where nothing was generated.
        counts: ``[G]`` rollouts generated per group (CPU), G counting the groups of all processes.
        extra_columns: Adaptive, budgeted: the reward functions' `log_extra` columns in slot layout.
        waves: Adaptive, budgeted: the number of generation calls (0 for fixed generation).
    """

    generation: Generation
    rewards_per_func: torch.Tensor
    counts: torch.Tensor
    extra_columns: dict[str, list] = field(default_factory=dict)
    waves: int = 0


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
    generation = steps.generate(inputs)
    rewards_per_func = steps.score(inputs, generation)  # [G * N, F]
    return Rollouts(generation, rewards_per_func, torch.full((rewards_per_func.size(0) // settings.n,), settings.n))


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
        self.calls = 0

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
        return ours

    def rollouts(self, counts: torch.Tensor) -> Rollouts:
        layout = self.layout
        return Rollouts(tuple(layout.items), self.rewards_per_func, counts, layout.extra_columns(), self.calls)


def generate_in_waves(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Adaptive generation: waves decided by `top_up_waves` from the gathered rewards, so identical on every process;
    they share one weight load (``steps.one_weight_load``)."""
    filler = SlotFiller(inputs, settings, steps)

    def wave(groups: torch.Tensor, first_slot: int, size: int) -> torch.Tensor:
        ours = filler.fill(groups, first_slot, torch.full_like(groups, size), size)  # [A * size, F]
        per_func = ours.view(-1, size, ours.size(1)).detach().cpu()  # [A, size, F]
        return group_objective(per_func, settings.reward_weights, "sum_then_normalize")  # [A, size], TRL's reward

    with steps.one_weight_load():
        waves = top_up_waves(filler.groups_per_process * settings.processes, settings.n_initial, settings.n, wave)
    return filler.rollouts(waves.counts)


def generate_budgeted(inputs: list[dict[str, Any]], settings: Phase1Settings, steps: GenerationSteps) -> Rollouts:
    """Budgeted generation: ``steps.allocate`` gives every group its count before anything is generated; the calls
    (`budget.generation_calls`: one, or one per distinct count) are independent and share one weight load."""
    filler = SlotFiller(inputs, settings, steps)
    counts = steps.allocate()  # [G], the same on every process
    with steps.one_weight_load():
        for groups, group_size in generation_calls(counts, settings.one_size_per_call):
            filler.fill(groups, 0, counts[groups], group_size)
    return filler.rollouts(counts)


def select(
    rewards: torch.Tensor, m: int, groups_per_process: int, counts: torch.Tensor, settings: Phase1Settings, seed: int
) -> torch.Tensor:
    """``[G, N]`` bool mask of the kept rollouts, computed from the gathered ``[G, N]`` objective (the same on every
    process).

    Per-group rules keep exactly ``m`` per group (``seed`` seeds their generator); with cross-group selection each
    process's groups share one budget of ``groups_per_process * m`` rollouts, chosen on full-group advantages. Only
    generated slots (the first ``counts[g]`` of group ``g``) may be kept.
    """
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
    rewards_per_func: torch.Tensor, counts: torch.Tensor, local_rows: int, m: int, seed: int, settings: Phase1Settings
) -> Selection:
    """Select M per prompt from the gathered ``[G * N, F]`` rewards; ``local_rows`` is this process's row count."""
    n = settings.n
    grouped = rewards_per_func.view(-1, n, rewards_per_func.size(1)).detach().cpu()  # [G, N, F], all processes
    rewards = group_objective(grouped, settings.reward_weights, "sum_then_normalize")  # [G, N], TRL's reward
    objective = group_objective(grouped, settings.reward_weights, settings.aggregation)  # [G, N]
    start = time.perf_counter()
    kept = select(objective, m, local_rows // n, counts, settings, seed)  # [G, N] bool
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


# ---------------------------------------------------------------- the trainer's side of the steps


@contextmanager
def generation_layout(trainer: Any):
    """Within the block, TRL sees the batch as generated: groups of `pods_n` rows instead of `pods_m`."""
    if trainer.pods_n is None:
        yield
        return
    kept_batch = trainer.args.generation_batch_size
    trainer.num_generations = trainer.pods_n
    trainer.args.generation_batch_size = kept_batch // trainer.pods_m * trainer.pods_n
    try:
        yield
    finally:
        trainer.num_generations = trainer.pods_m
        trainer.args.generation_batch_size = kept_batch


@contextmanager
def group_size(trainer: Any, size: int):
    """Within the block, TRL generates groups of ``size`` rows (what vLLM server mode requests per prompt)."""
    trainer.num_generations = size
    try:
        yield
    finally:
        trainer.num_generations = trainer.pods_m


@contextmanager
def rewards_not_gathered():
    """Within the block, TRL's `_calculate_rewards` returns this process's rewards (it skips its final gather)."""
    gather = grpo_trainer_module.gather
    grpo_trainer_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_trainer_module.gather = gather


def take_new(pending: dict[str, list], before: dict[str, int]) -> dict[str, list]:
    """Remove and return what was appended to each list of ``pending`` since the lengths ``before`` were taken."""
    new = {}
    for key, values in pending.items():
        start = before.get(key, 0)
        if len(values) > start:
            new[key] = values[start:]
            del values[start:]
    return new


def score_own_rows(trainer: Any, rows: list[dict], generation: Generation, real: int) -> tuple[torch.Tensor, dict]:
    """Score a wave's own rows (the first ``real``), not its padding, and gather them: ``[P * len(rows), F]``, NaN on
    padding rows; with the `log_extra` columns the reward functions logged for the scored rows.

    Reward functions see the process's rows that have a slot, or its first padding row when it has none, so every
    process calls them once per wave (a reward model under ZeRO-3 needs every process). What they log then describes
    real rollouts: `log_extra` values go to their slots, and each `log_metric` value counts once per rollout scored,
    so TRL's average over the step is per rollout, as without waves.
    """
    scored = max(real, 1)
    extra_before = {column: len(values) for column, values in trainer._pending_extra_logs.items()}
    metrics_before = {name: len(values) for name, values in trainer._pending_metrics.items()}
    prompts = [row["prompt"] for row in rows[:scored]]
    with rewards_not_gathered():
        local = trainer._calculate_rewards(rows[:scored], prompts, generation[3][:scored], generation[1][:scored])
    extra = take_new(trainer._pending_extra_logs, extra_before)
    for name, values in take_new(trainer._pending_metrics, metrics_before).items():
        trainer._pending_metrics[name].extend(value for value in values for _ in range(real))
    padded = local.new_full((len(rows), local.size(1)), torch.nan)  # [rows, F]
    padded[:real] = local[:real]
    return trainer.accelerator.gather(padded), extra


def one_size_per_call(args: Any) -> bool:
    """A generation call requests one group size for all its prompts: vLLM server mode (`generate_budgeted`)."""
    return args.use_vllm and args.vllm_mode == "server"


def allocate_groups(trainer: Any, inputs: list[dict[str, Any]]) -> torch.Tensor:
    """Budgeted generation: ``[G]`` rollouts for this generation's groups (all processes), from the prompts' keys,
    gathered so that every process allocates alike."""
    keys = [prompt_key(row["prompt"]) for row in inputs[:: trainer.pods_n]]
    gathered = trainer.accelerator.gather(torch.tensor(keys, device=trainer.accelerator.device))
    return trainer._pods_budget.plan(gathered.tolist())


@contextmanager
def one_weight_load_per_generation(trainer: Any):
    """Within the block, the generation calls of one generation (rounds, waves, budgeted calls) share one weight load.

    vLLM colocate with sleep mode: the engine stays awake between the calls (`engine_awake`), so the weights are
    pushed once. HF generate under DeepSpeed ZeRO-3 with `ds3_gather_for_generation`: TRL gathers the full weights
    around each `generate` call; they are gathered once for the block instead, as TRL does for one call.
    """
    if trainer.use_vllm:

        def sync() -> None:  # as TRL's generation does once per optimizer step
            trainer.vllm_generation.sync_weights()
            trainer._last_loaded_step = trainer.state.global_step

        with engine_awake(getattr(trainer, "vllm_generation", None), sync):
            yield
        return
    if not (trainer._dist.is_zero3 and trainer.args.ds3_gather_for_generation):
        yield
        return
    with unwrap_model_for_generation(
        trainer.model_wrapped,
        trainer.accelerator,
        gather_deepspeed3_params=True,
        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
    ):
        trainer.args.ds3_gather_for_generation = False
        try:
            yield
        finally:
            trainer.args.ds3_gather_for_generation = True

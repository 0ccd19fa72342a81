"""`PODSConfig`: `trl.GRPOConfig` plus the PODS down-sampling settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from .budget import get_allocation_rule
from .costs import parse_costs
from .down_sampling import get_down_sampler
from .fields import ADVANTAGE_SCOPES, PODSFields
from .generation_modes import get_generation_mode
from .losses import MICRO_BATCH_TOKEN_LOSSES, SEQUENCE_AVERAGE_LOSSES
from .refill import DEFAULT_DRAW_COVERAGE, sized_draws
from .schedules import SCHEDULES
from .screening import get_screen_rule

DRAWING = ("refill", "auto")  # the generation modes that draw further prompts into a generation
DEFAULT_PROMPT_RATIO = 4  # pods_max_prompt_ratio's default


@dataclass
class PODSConfig(PODSFields, GRPOConfig):
    r"""
    Configuration for [`PODSGRPOTrainer`]: every [`trl.GRPOConfig`] parameter, with its TRL meaning, plus the
    parameters below.

    Each prompt gets `pods_n` rollouts (at most `pods_n` with `pods_generation="adaptive"` or `"budgeted"`); all are
    scored; only
    `pods_m` of them per prompt enter the policy update.
    The update is laid out exactly as `GRPOTrainer`'s with `num_generations = pods_m`: `per_device_train_batch_size`
    counts kept completions per backward micro-batch, and an optimizer step consumes the same number of prompts. So
    `pods_n > pods_m` only generates more, and `pods_n == pods_m` is plain GRPO. An unset `bf16` stays TRL's default
    (True) wherever bf16 can run, and is False on a machine without a bf16 GPU (e.g. a laptop: float32 on the CPU).

    Parameters:
        > The PODS parameters both trainers take (`trl_pods.fields.PODSFields`): `num_generations`, `pods_n`,
        > `pods_m`, `pods_down_sampler`, `pods_advantage_scope`, `pods_generation`, `pods_n_initial`, `pods_budget`,
        > `pods_allocation`, `pods_history_size`, `pods_history_decay`, `pods_screen_ratio`, `pods_screen_rule`,
        > `pods_draw_coverage`.

        > Parameters of D3S, dynamic schedules and memory-bounded generation

        pods_cross_group (`bool`, *optional*, defaults to `False`):
            D3S cross-group selection: each process keeps `pods_m` rollouts per prompt on average, chosen across
            all its prompts to maximise the variance of full-group advantages (needs `pods_advantage_scope="all"`).
        pods_drop_constant_groups (`bool`, *optional*, defaults to `False`):
            Keep groups whose advantages are all zero (equal rewards) out of the loss and of its normaliser: the loss
            equals TRL's loss on the other rows of the optimizer step. Not with `loss_type="bnpo"`; with a
            sequence-averaged loss, `steps_per_generation` must be a multiple of `gradient_accumulation_steps`.
        pods_schedule (`str`, *optional*, defaults to `"constant"`):
            Shape of the ramps from `pods_m_start` to `pods_m` and from `pods_token_fraction_start` to
            `pods_token_fraction` over training: `"constant"`, `"linear"` or `"cosine"`.
        pods_m_start (`int`, *optional*):
            Rollouts kept per prompt at the first step (aggressive; at most `pods_m`); M then follows
            `pods_schedule` up to `pods_m`, rounded so that micro-batches stay even.
        pods_token_fraction (`float`, *optional*, defaults to `1.0`):
            D3S token-level selection: fraction of completion tokens kept in the policy-gradient loss, ranked by
            |advantage| x entropy (1.0: all tokens). Exactly `round(fraction x valid tokens)` are kept, ties broken by
            position, per process (over all processes for `dapo`, `cispo`, `vespo`). The loss normaliser counts the
            kept tokens.
        pods_token_fraction_start (`float`, *optional*):
            Token fraction at the first step; it follows `pods_schedule` up to `pods_token_fraction`.
        pods_generation_chunk_size (`int`, *optional*):
            Generate with HF `generate` in rounds of at most this many sequences, so that peak generation memory is
            set by it rather than by the number of rollouts (Infinite Sampling's micro-groups).

        > Parameters of the synchronous generation modes (see `pods_generation`), and observability

        Adaptive generation learns which prompts lack contrast by generating for them, in up to `1 + log2(pods_n /
        pods_n_initial)` dependent waves and with no cap on the total; budgeted spends a fixed budget in one call, and
        needs prompts that recur (epochs) to do better than spreading it evenly. Refill reads the prompts it draws
        from the epoch's order only when it draws them (`trl_pods.prompt_order`: an epoch ends when its prompts run
        out). Every mode works with tools, environments, `rollout_func` and images.

        pods_max_draws (`int`, *optional*, defaults to `3`):
            Refill and auto: the most draws (generation calls) per generation, the first being the data loader's
            batch; the further prompts are read when drawn.
        pods_max_prompt_ratio (`int`, *optional*):
            Refill drawing sized draws (`pods_draw_coverage` above 0, the default), and auto: the most prompts
            generated for in one generation, per prompt trained on (the room laid out). Defaults to 4.
        pods_auto_costs (`str`, *optional*):
            Auto: the costs to plan with instead of measuring them on the run, as seconds
            `"call=...,rollout=...,step=..."` (a generation call, a rollout per process, the rest of a step). With
            them every choice is reproducible; e.g. another machine's measured costs, to plan for it.
        pods_log_all_rollouts (`bool`, *optional*, defaults to `False`):
            With `log_completions`, the completions table shows every generated rollout of the logged prompts, with
            a `kept` column (discarded rows have no advantage), instead of the kept rows only.
        pods_selection_log (`bool`, *optional*, defaults to `True`):
            Append every generation's kept indices and rollouts per prompt, with digests of its prompts and rewards,
            to `output_dir/pods_selections.jsonl` (main process), so selections can be audited and runs compared.
    """

    pods_cross_group: bool = field(
        default=False,
        metadata={
            "help": "D3S cross-group selection: each process keeps pods_m rollouts per prompt on average, chosen "
            "across its prompts to maximise the variance of full-group advantages (needs pods_advantage_scope='all')."
        },
    )
    pods_drop_constant_groups: bool = field(
        default=False,
        metadata={
            "help": "Keep groups whose advantages are all zero (equal rewards) out of the loss and its normaliser: "
            "the loss equals TRL's loss on the other rows of the optimizer step."
        },
    )
    pods_schedule: str = field(
        default="constant",
        metadata={
            "help": "Shape of the ramps pods_m_start -> pods_m and pods_token_fraction_start -> pods_token_fraction "
            "over training.",
            "choices": list(SCHEDULES),
        },
    )
    pods_m_start: int | None = field(
        default=None,
        metadata={
            "help": "Rollouts kept per prompt at the first step (<= pods_m); M follows pods_schedule to pods_m."
        },
    )
    pods_token_fraction: float = field(
        default=1.0,
        metadata={
            "help": "D3S token selection: fraction of completion tokens kept in the policy-gradient loss, ranked by "
            "|advantage| x entropy (1.0 keeps all)."
        },
    )
    pods_token_fraction_start: float | None = field(
        default=None,
        metadata={"help": "Token fraction at the first step; it follows pods_schedule to pods_token_fraction."},
    )
    pods_generation_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "Generate (HF generate) in rounds of at most this many sequences: peak generation memory is set "
            "by it, not by the number of rollouts."
        },
    )
    pods_max_draws: int = field(
        default=3,
        metadata={
            "help": "Refill and auto: the most draws (generation calls) per generation, the first being the data "
            "loader's batch; further prompts are read from the epoch's order when drawn (drawn and not trained: "
            "consumed)."
        },
    )
    pods_max_prompt_ratio: int | None = field(
        default=None,
        metadata={
            "help": "Refill with sized draws (pods_draw_coverage above 0, the default), and auto: the most prompts "
            "generated for in one generation, per prompt trained on. Default: 4."
        },
    )
    pods_auto_costs: str | None = field(
        default=None,
        metadata={
            "help": "Auto: plan with these costs instead of measuring them on the run, as seconds "
            "'call=...,rollout=...,step=...' (a generation call, a rollout per process, the rest of a step)."
        },
    )
    pods_log_all_rollouts: bool = field(
        default=False,
        metadata={
            "help": "With log_completions: the completions table shows every generated rollout of the logged "
            "prompts with a 'kept' column, not only the kept rows."
        },
    )
    pods_selection_log: bool = field(
        default=True,
        metadata={
            "help": "Append every generation's kept indices and rollouts per prompt (with digests of its prompts and "
            "rewards) to output_dir/pods_selections.jsonl, to audit selections and compare runs step by step."
        },
    )

    def __post_init__(self):
        _bf16_where_it_runs(self)
        _check_max_steps(self)
        _resolve_group_sizes(self)
        if self.generation_batch_size is None:  # checked before GRPOConfig's coarser check, for a PODS message
            steps = self.steps_per_generation or self.gradient_accumulation_steps
            _check_whole_groups_per_process(self, self.per_device_train_batch_size * steps)
        super().__post_init__()
        _check_whole_groups_per_process(self, self.per_device_train_batch_size * self.steps_per_generation)
        get_down_sampler(self.pods_down_sampler)  # raises with the list of known names
        _check_d3s(self)
        _check_adaptive_generation(self)
        _check_budgeted_generation(self)
        _check_dynamic_sampling(self)
        _check_rollouts_can_differ(self)
        if self.pods_advantage_scope not in ADVANTAGE_SCOPES:
            raise ValueError(
                f"pods_advantage_scope must be one of {ADVANTAGE_SCOPES}; got {self.pods_advantage_scope!r}."
            )
        if self.pods_advantage_scope == "all" and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "pods_advantage_scope='all' normalises the weighted reward sum over all pods_n rollouts, which needs "
                "multi_objective_aggregation='sum_then_normalize'; set it, or use pods_advantage_scope='kept'."
            )


def _check_max_steps(config: PODSConfig) -> None:
    """Refuse ``max_steps=0``, which trains one step and saves a checkpoint (transformers checks the count after a
    step). TRL's meaning of every other value stays: a positive count of steps, or -1 (any negative) for
    ``num_train_epochs`` epochs."""
    if config.max_steps == 0:
        raise ValueError(
            "max_steps=0 would still train one step (transformers checks the count after a step): give the steps to "
            "train (at least 1), or leave max_steps at -1 to train num_train_epochs epochs."
        )


def _check_d3s(config: PODSConfig) -> None:
    if config.pods_cross_group and config.pods_advantage_scope != "all":
        raise ValueError(
            "pods_cross_group compares advantages across prompts, which needs full-group advantages: set "
            "pods_advantage_scope='all'."
        )
    if config.pods_schedule not in SCHEDULES:
        raise ValueError(f"pods_schedule must be one of {SCHEDULES}; got {config.pods_schedule!r}.")
    has_start = config.pods_m_start is not None or config.pods_token_fraction_start is not None
    if has_start == (config.pods_schedule == "constant"):
        raise ValueError(
            "A schedule needs a start value and a shape: set pods_m_start and/or pods_token_fraction_start with "
            f"pods_schedule='linear' or 'cosine' (got pods_schedule={config.pods_schedule!r})."
        )
    if config.pods_m_start is not None and not 2 <= config.pods_m_start <= config.pods_m:
        raise ValueError(f"pods_m_start must be between 2 and pods_m ({config.pods_m}); got {config.pods_m_start}.")
    for name in ("pods_token_fraction", "pods_token_fraction_start"):
        value = getattr(config, name)
        if value is not None and not 0.0 < value <= 1.0:
            raise ValueError(f"{name} must be in (0, 1]; got {value}.")
    token_selection = config.pods_token_fraction < 1.0 or config.pods_token_fraction_start is not None
    if token_selection and config.top_entropy_quantile < 1.0:
        raise ValueError(
            "pods_token_fraction replaces TRL's top_entropy_quantile (its score, |advantage| x entropy, ranks "
            "tokens by entropy within a sequence too): set top_entropy_quantile=1.0."
        )
    if token_selection and (config.entropy_coef != 0.0 or config.use_adaptive_entropy):
        raise ValueError(
            "pods_token_fraction weights the per-token loss, which would also weight TRL's entropy bonus: set "
            "entropy_coef=0 and use_adaptive_entropy=False, or pods_token_fraction=1.0."
        )
    if config.pods_drop_constant_groups:
        _check_dropping(config)
    if config.pods_generation_chunk_size is not None:
        if config.pods_generation_chunk_size < 1:
            raise ValueError(f"pods_generation_chunk_size must be >= 1; got {config.pods_generation_chunk_size}.")
        if config.use_vllm or config.use_transformers_continuous_batching:
            raise ValueError(
                "pods_generation_chunk_size bounds HF generate; vLLM and continuous batching already schedule "
                "sequences within their memory budget (max_num_seqs, paged KV cache). Unset it."
            )


def _check_dropping(config: PODSConfig) -> None:
    if config.loss_type in MICRO_BATCH_TOKEN_LOSSES:
        raise ValueError(
            f"pods_drop_constant_groups cannot keep loss_type={config.loss_type!r} exact: it divides each process's "
            "micro-batch by its own token count, so which micro-batch a dropped row lands in would reweight the "
            "others. Use loss_type='dapo' (normalised by the tokens of the whole batch) or a sequence-averaged "
            "loss ('grpo', 'dr_grpo', 'sapo', 'luspo')."
        )
    steps, accumulation = config.steps_per_generation, config.gradient_accumulation_steps
    if config.loss_type in SEQUENCE_AVERAGE_LOSSES and steps % accumulation:
        raise ValueError(
            f"pods_drop_constant_groups with loss_type={config.loss_type!r} averages over the sequences an "
            "optimizer step keeps, counted when a generation is split, so each optimizer step must lie within one "
            f"generation: steps_per_generation ({config.steps_per_generation}) must be a multiple of "
            f"gradient_accumulation_steps ({config.gradient_accumulation_steps})."
        )


def _check_whole_groups_per_process(config: PODSConfig, rows: int) -> None:
    if rows % config.pods_m != 0:
        raise ValueError(
            f"Each process keeps per_device_train_batch_size * steps_per_generation = {rows} rows per generation, "
            f"which is not a multiple of pods_m ({config.pods_m}). A prompt's pods_n rollouts must be generated, "
            f"scored and down-sampled on one process: make it a multiple of {config.pods_m}."
        )


def _bf16_where_it_runs(config: PODSConfig) -> None:
    """An unset ``bf16`` becomes False where TRL's default (True) would make transformers refuse to start: no GPU with
    bf16, no TPU and no ``use_cpu`` (e.g. a laptop). Everywhere bf16 can run, TRL's default stands."""
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

    bf16_runs = is_torch_bf16_gpu_available() or is_torch_xla_available()
    if config.bf16 is None and not (config.fp16 or config.use_cpu or bf16_runs):
        config.bf16 = False


def _resolve_group_sizes(config: PODSConfig) -> None:
    if config.pods_m is None and config.num_generations is None:
        config.pods_m = 8
    elif config.pods_m is None:
        config.pods_m = config.num_generations
    elif config.num_generations is not None and config.num_generations != config.pods_m:
        raise ValueError(
            f"pods_m ({config.pods_m}) and num_generations ({config.num_generations}) disagree. pods_m is the GRPO "
            "group size of the update, so set only pods_m (num_generations follows it) or set both equal."
        )
    config.num_generations = config.pods_m
    if config.pods_m < 2:
        raise ValueError(
            f"pods_m must be at least 2 (got {config.pods_m}): advantages are computed relative to the other kept "
            "rollouts of the same prompt."
        )
    if config.pods_n is None:
        config.pods_n = 4 * config.pods_m
    if config.pods_n < config.pods_m:
        raise ValueError(
            f"pods_n ({config.pods_n}) is smaller than pods_m ({config.pods_m}): a prompt cannot keep more rollouts "
            "than it generates. Set pods_n >= pods_m (pods_n == pods_m is plain GRPO)."
        )


def _check_adaptive_generation(config: PODSConfig) -> None:
    get_generation_mode(config.pods_generation)  # raises with the list of known names
    _resolve_n_initial(config)
    if config.pods_log_all_rollouts and not config.log_completions:
        raise ValueError(
            "pods_log_all_rollouts adds rows to the completions table, which is only kept with "
            "log_completions=True: set it, or unset pods_log_all_rollouts."
        )


def _resolve_n_initial(config: PODSConfig) -> None:
    """`pods_n_initial`: adaptive generation's first wave or screened generation's pilot, `pods_m` by default (also
    checked by the asynchronous trainer's config, `trl_pods.async_grpo`)."""
    if config.pods_generation not in ("adaptive", "screened"):
        if config.pods_n_initial is not None:
            raise ValueError(
                f"pods_n_initial only applies to pods_generation='adaptive' or 'screened' (got "
                f"{config.pods_generation!r}): set one of them, or unset pods_n_initial."
            )
        return
    if config.pods_n_initial is None:
        config.pods_n_initial = config.pods_m
    if config.pods_generation == "adaptive" and not config.pods_m <= config.pods_n_initial <= config.pods_n:
        raise ValueError(
            f"pods_n_initial ({config.pods_n_initial}) must be between pods_m ({config.pods_m}) and pods_n "
            f"({config.pods_n}): the first wave must give every prompt at least the pods_m rollouts it keeps, "
            "and pods_n is the most a prompt may get."
        )
    if config.pods_generation == "screened" and not 2 <= config.pods_n_initial <= config.pods_n:
        raise ValueError(
            f"pods_n_initial, the pilot's rollouts per prompt, must be between 2 (to show contrast) and pods_n "
            f"({config.pods_n}); got {config.pods_n_initial}."
        )


def _check_budgeted_generation(config: PODSConfig) -> None:
    if config.pods_generation != "budgeted":
        if config.pods_budget is not None:
            raise ValueError("pods_budget only applies to pods_generation='budgeted': set it, or unset pods_budget.")
        return
    if config.pods_budget is None or not config.pods_m <= config.pods_budget <= config.pods_n:
        raise ValueError(
            f"pods_generation='budgeted' needs pods_budget, the mean rollouts per prompt, between pods_m "
            f"({config.pods_m}) and pods_n ({config.pods_n}); got {config.pods_budget}. Every prompt gets at least "
            "the pods_m it keeps and at most pods_n."
        )
    get_allocation_rule(config.pods_allocation)  # raises with the list of known names
    if config.pods_history_size < 1:
        raise ValueError(f"pods_history_size must be >= 1; got {config.pods_history_size}.")
    if not 0.0 < config.pods_history_decay <= 1.0:
        raise ValueError(f"pods_history_decay must be in (0, 1]; got {config.pods_history_decay}.")


def _check_dynamic_sampling(config: PODSConfig) -> None:
    generation = config.pods_generation
    counts = (config.pods_max_draws, config.pods_screen_ratio)
    if not all(isinstance(count, int) and not isinstance(count, bool) for count in counts):
        raise ValueError(
            f"pods_max_draws and pods_screen_ratio count draws and prompts: give whole numbers (got "
            f"{config.pods_max_draws!r} and {config.pods_screen_ratio!r})."
        )
    if config.pods_max_draws < 1 or config.pods_screen_ratio < 2:
        raise ValueError(
            f"pods_max_draws must be >= 1 and pods_screen_ratio >= 2 (got {config.pods_max_draws} and "
            f"{config.pods_screen_ratio}): a screen needs more prompts than it trains on."
        )
    _check_draw_sizing(config)
    per_generation = config.steps_per_generation * config.num_iterations
    drawing = generation in DRAWING or (generation == "screened" and config.pods_draw_coverage is not None)
    if drawing and per_generation % config.gradient_accumulation_steps:
        raise ValueError(
            f"pods_generation={generation!r} ends an epoch when its prompts run out, after a whole generation, which "
            f"must end an optimizer step: steps_per_generation x num_iterations ({per_generation}) must be a multiple "
            f"of gradient_accumulation_steps ({config.gradient_accumulation_steps})."
        )
    if generation not in (*DRAWING, "screened"):
        return
    if config.pods_cross_group:
        raise ValueError(
            f"pods_generation={generation!r} chooses which prompts to train on, and pods_cross_group would then "
            "move their rollouts across prompts again; use one or the other."
        )
    if generation == "screened":
        get_screen_rule(config.pods_screen_rule)  # raises with the list of known names


def _check_draw_sizing(config: PODSConfig) -> None:
    """`pods_draw_coverage`, `pods_max_prompt_ratio` and `pods_auto_costs`: only where they apply, in range;
    `pods_draw_coverage` (refill and auto) and `pods_max_prompt_ratio` resolved to their defaults."""
    generation, coverage = config.pods_generation, config.pods_draw_coverage
    if coverage is None and generation in DRAWING:
        config.pods_draw_coverage = coverage = DEFAULT_DRAW_COVERAGE
    exact = 0.0 if generation == "refill" else None  # refill takes 0: exactly the missing groups
    if coverage is not None and generation not in (*DRAWING, "screened"):
        raise ValueError(
            f"pods_draw_coverage sizes the draws of pods_generation='refill', 'auto' or 'screened', and "
            f"pods_generation={generation!r} draws no prompts: unset pods_draw_coverage, or choose one of those."
        )
    if coverage is not None and not (0.0 < coverage < 1.0 or coverage == exact):
        raise ValueError(
            f"pods_draw_coverage is a probability in (0, 1); got {coverage!r} (refill: 0 draws exactly the missing "
            "groups; auto, which never plans below sized refill, takes no 0)."
        )
    sized = sized_draws(generation, coverage)
    ratio = config.pods_max_prompt_ratio
    if ratio is not None and not sized:
        raise ValueError(
            "pods_max_prompt_ratio bounds the prompts of sized draws: it applies to pods_generation='auto' and to "
            "'refill' with pods_draw_coverage above 0; unset it."
        )
    if sized:
        config.pods_max_prompt_ratio = ratio = DEFAULT_PROMPT_RATIO if ratio is None else ratio
        if not isinstance(ratio, int) or isinstance(ratio, bool) or ratio < 1:
            raise ValueError(
                f"pods_max_prompt_ratio counts prompts per trained prompt: a whole number >= 1; got {ratio!r}."
            )
    if config.pods_auto_costs is not None:
        if generation != "auto":
            raise ValueError(
                "pods_auto_costs gives pods_generation='auto' the costs to plan with: set it, or unset them."
            )
        parse_costs(config.pods_auto_costs)  # raises with the expected form


def _check_rollouts_can_differ(config: PODSConfig) -> None:
    """Refuse sampling settings that make the rollouts of a prompt identical: its group would carry no signal
    however many rollouts are generated, and down-sampling would have nothing to choose from."""
    kwargs = config.generation_kwargs or {}
    if config.use_vllm and kwargs.get("seed") is not None:
        raise ValueError(
            f"generation_kwargs sets seed={kwargs['seed']!r}: vLLM then samples every rollout of a prompt with "
            "the same seed, so the pods_n rollouts are identical (measured on a real engine). Remove the seed; "
            "the training seed (`seed`) already makes runs reproducible."
        )
    greedy = {
        "do_sample=False": kwargs.get("do_sample") is False,
        "temperature=0": config.temperature == 0 or kwargs.get("temperature") == 0,
        "top_k=1": config.top_k == 1 or kwargs.get("top_k") == 1,
    }
    chosen = [setting for setting, is_set in greedy.items() if is_set]
    if chosen:
        raise ValueError(
            f"{', '.join(chosen)} makes generation greedy, so the pods_n rollouts of a prompt are identical and "
            "carry no signal. Sample (do_sample, temperature > 0, top_k != 1)."
        )

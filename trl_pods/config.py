"""`PODSConfig`: `trl.GRPOConfig` plus the PODS down-sampling settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from .down_sampling import get_down_sampler

ADVANTAGE_SCOPES = ("kept", "all")


@dataclass
class PODSConfig(GRPOConfig):
    r"""
    Configuration for [`PODSGRPOTrainer`]: every [`trl.GRPOConfig`] parameter, with its TRL meaning, plus the
    parameters below.

    Each prompt gets `pods_n` rollouts; all are scored; only `pods_m` of them per prompt enter the policy update.
    The update is laid out exactly as `GRPOTrainer`'s with `num_generations = pods_m`: `per_device_train_batch_size`
    counts kept completions per backward micro-batch, and an optimizer step consumes the same number of prompts. So
    `pods_n > pods_m` only generates more, and `pods_n == pods_m` is plain GRPO.

    Parameters:
        > Parameters that control PODS down-sampling

        pods_n (`int`, *optional*):
            Rollouts generated and scored per prompt (N). Defaults to `4 * pods_m`, the ratio of every setting in the
            PODS paper.
        pods_m (`int`, *optional*):
            Rollouts kept per prompt for the policy update (M): the GRPO group size of the update. Defaults to
            `num_generations` (8 if neither is set); setting both to different values is an error.
        pods_down_sampler (`str`, *optional*, defaults to `"max_variance"`):
            Rule that picks the M kept rollouts: `"max_variance"`, `"max_reward"`, `"random"`, another name registered
            with `trl_pods.register_down_sampler`, or a dotted import path `"pkg.module.fn"`.
        pods_advantage_scope (`str`, *optional*, defaults to `"kept"`):
            Rewards the advantage baseline is computed over: `"kept"` (mean and std of the M kept rewards, as in the
            paper) or `"all"` (of all N generated rewards, as in D3S).
        pods_selection_log (`bool`, *optional*, defaults to `True`):
            Append every generation's kept indices, with digests of its prompts and rewards, to
            `output_dir/pods_selections.jsonl` (main process), so selections can be audited and runs compared.
    """

    num_generations: int | None = field(
        default=None,
        metadata={
            "help": "GRPO group size of the policy update. With PODS this is `pods_m`; set either one (8 if neither)."
        },
    )
    pods_n: int | None = field(
        default=None,
        metadata={"help": "Rollouts generated and scored per prompt (N). Defaults to 4 * pods_m."},
    )
    pods_m: int | None = field(
        default=None,
        metadata={
            "help": "Rollouts kept per prompt for the policy update (M), i.e. the GRPO group size of the update. "
            "Defaults to num_generations; the two may not disagree."
        },
    )
    pods_down_sampler: str = field(
        default="max_variance",
        metadata={
            "help": "Rule choosing the kept rollouts: 'max_variance', 'max_reward', 'random', a registered name, or a "
            "dotted import path to fn(rewards[G, N], m, *, generator=None) -> indices[G, m]."
        },
    )
    pods_advantage_scope: str = field(
        default="kept",
        metadata={
            "help": "Rewards the advantage mean/std are computed over: 'kept' (the M kept, as in the paper) or 'all' "
            "(all N generated, as in D3S).",
            "choices": list(ADVANTAGE_SCOPES),
        },
    )

    pods_selection_log: bool = field(
        default=True,
        metadata={
            "help": "Append every generation's kept indices (with digests of its prompts and rewards) to "
            "output_dir/pods_selections.jsonl, to audit selections and compare runs step by step."
        },
    )

    def __post_init__(self):
        self._resolve_group_sizes()
        if self.generation_batch_size is None:  # checked before GRPOConfig's coarser check, for a PODS message
            steps = self.steps_per_generation or self.gradient_accumulation_steps
            self._check_whole_groups_per_process(self.per_device_train_batch_size * steps)
        super().__post_init__()
        self._check_whole_groups_per_process(self.per_device_train_batch_size * self.steps_per_generation)
        get_down_sampler(self.pods_down_sampler)  # raises with the list of known names
        if self.pods_advantage_scope not in ADVANTAGE_SCOPES:
            raise ValueError(
                f"pods_advantage_scope must be one of {ADVANTAGE_SCOPES}; got {self.pods_advantage_scope!r}."
            )
        if self.pods_advantage_scope == "all" and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "pods_advantage_scope='all' normalises the weighted reward sum over all pods_n rollouts, which needs "
                "multi_objective_aggregation='sum_then_normalize'; set it, or use pods_advantage_scope='kept'."
            )

    def _check_whole_groups_per_process(self, rows: int) -> None:
        if rows % self.pods_m != 0:
            raise ValueError(
                f"Each process keeps per_device_train_batch_size * steps_per_generation = {rows} rows per generation, "
                f"which is not a multiple of pods_m ({self.pods_m}). A prompt's pods_n rollouts must be generated, "
                f"scored and down-sampled on one process: make it a multiple of {self.pods_m}."
            )

    def _resolve_group_sizes(self) -> None:
        if self.pods_m is None and self.num_generations is None:
            self.pods_m = 8
        elif self.pods_m is None:
            self.pods_m = self.num_generations
        elif self.num_generations is not None and self.num_generations != self.pods_m:
            raise ValueError(
                f"pods_m ({self.pods_m}) and num_generations ({self.num_generations}) disagree. pods_m is the GRPO "
                "group size of the update, so set only pods_m (num_generations follows it) or set both equal."
            )
        self.num_generations = self.pods_m
        if self.pods_m < 2:
            raise ValueError(
                f"pods_m must be at least 2 (got {self.pods_m}): advantages are computed relative to the other kept "
                "rollouts of the same prompt."
            )
        if self.pods_n is None:
            self.pods_n = 4 * self.pods_m
        if self.pods_n < self.pods_m:
            raise ValueError(
                f"pods_n ({self.pods_n}) is smaller than pods_m ({self.pods_m}): a prompt cannot keep more rollouts "
                "than it generates. Set pods_n >= pods_m (pods_n == pods_m is plain GRPO)."
            )

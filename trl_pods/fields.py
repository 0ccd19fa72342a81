"""`PODSFields`: the PODS settings both trainers take, declared once.

`trl_pods.PODSConfig` (the synchronous `PODSGRPOTrainer`) and `trl_pods.async_grpo.PODSAsyncGRPOConfig` (TRL's
asynchronous trainer) inherit these fields, each with one default and one help text that says where the two trainers
differ; each config adds its own fields and checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ADVANTAGE_SCOPES = ("kept", "all")


@dataclass
class PODSFields:
    r"""
    The PODS parameters of both trainers.

    Parameters:
        num_generations (`int`, *optional*):
            Group size the update sees: with PODS this is `pods_m`; set either one (8 if neither).
        pods_n (`int`, *optional*):
            Rollouts generated and scored per prompt (N), the most a prompt gets with adaptive, budgeted and auto
            generation. Defaults to `4 * pods_m`, the ratio of every setting in the PODS paper.
        pods_m (`int`, *optional*):
            Rollouts kept per prompt for the policy update (M): the GRPO group size of the update. Defaults to
            `num_generations` (8 if neither is set); setting both to different values is an error.
        pods_down_sampler (`str`, *optional*, defaults to `"max_variance"`):
            Rule that picks the M kept rollouts: `"max_variance"`, `"max_reward"`, `"random"`, another name registered
            with `trl_pods.register_down_sampler`, or a dotted import path `"pkg.module.fn"`.
        pods_advantage_scope (`str`, *optional*, defaults to `"kept"`):
            Rewards the advantage baseline is computed over: `"kept"` (mean and std of the M kept rewards, as in the
            paper) or `"all"` (of all the prompt's generated rewards, as in D3S).
        pods_generation (`str`, *optional*, defaults to `"fixed"`):
            Which prompts get how many rollouts: `"fixed"` (`pods_n` each), `"adaptive"` (`pods_n_initial`, doubled
            while a prompt's rewards are all equal, at most `pods_n`), `"budgeted"` (`pods_budget` per prompt on
            average, allocated from each prompt's history), `"refill"` (DAPO's dynamic sampling: groups whose rewards
            are all equal are not trained on; the synchronous trainer draws further prompts in their place, the
            asynchronous one goes on to the next prompts), `"screened"` (a pilot of `pods_n_initial` for
            `pods_screen_ratio` times the prompts trained on, the rest of `pods_n` for those `pods_screen_rule`
            picks), `"auto"` (synchronous trainer: refill at `pods_n` rollouts per prompt whose prompts per call and
            calls per step are chosen from the costs measured on the run and its contrast rate), or a mode registered
            with `trl_pods.generation_modes.register_generation_mode` (a dotted import path also works). Prompts
            generated for and not trained on are consumed (visited).
        pods_n_initial (`int`, *optional*):
            Adaptive: rollouts per prompt in the first wave (`pods_m` to `pods_n`); screened: in the pilot (2 to
            `pods_n`). Defaults to `pods_m`.
        pods_budget (`float`, *optional*):
            Budgeted: mean rollouts generated per prompt (`pods_m` to `pods_n`), over each process's prompts of a
            generation (synchronous; each process spends `floor(pods_budget x its prompts)`, so none pads) or over
            each window of prompts (asynchronous).
        pods_allocation (`str`, *optional*, defaults to `"expected_signal"`):
            Budgeted: the rule scoring what `n` rollouts of a prompt are worth, maximised under the budget:
            `"expected_signal"` (probability of contrast x p(1-p)^2, over the history's uncertainty), `"contrast"`,
            a name registered with `trl_pods.budget.register_allocation_rule`, or a dotted import path.
        pods_history_size (`int`, *optional*, defaults to `1000000`):
            Budgeted: the most prompts whose reward history is kept (the least recently visited are forgotten first);
            under 100 bytes per prompt with 0/1 rewards, 64 more with continuous rewards (16 quantile bins).
        pods_history_decay (`float`, *optional*, defaults to `0.8`):
            Budgeted: weight of a prompt's earlier outcomes at each new visit (1.0: every visit counts alike), so the
            history follows the changing policy.
        pods_screen_ratio (`int`, *optional*, defaults to `2`):
            Screened: prompts piloted per trained prompt; those not chosen are consumed (visited, not trained).
        pods_screen_rule (`str`, *optional*, defaults to `"frontier"`):
            Screened: the rule picking the prompts to train on from their pilots: `"frontier"` (pilot contrast first,
            a quarter of the picks reserved for prompts whose pilot all failed), `"contrast"`, `"random"`, a name
            registered with `trl_pods.screening.register_screen_rule`, or a dotted import path.
        pods_draw_coverage (`float`, *optional*):
            Synchronous trainer (the asynchronous one draws nothing, and refuses it). Refill and auto: size each draw
            from the contrast rate the run has observed, so that the groups with contrast cover what the step lacks
            with this probability: refill's first call already generates for more prompts than the batch, and a
            later call only for what is still missing (`trl_pods.refill`). Defaults to 0.9 for both; `0` draws
            exactly the missing groups (refill's exact form; auto, which never plans below sized refill, refuses
            it). Screened: the pool is drawn with the pilot, as many prompts as hold the batch's groups with pilot
            contrast with this probability (at most `pods_screen_ratio` per trained prompt), instead of
            `pods_screen_ratio` each step (unset).
    """

    num_generations: int | None = field(
        default=None,
        metadata={"help": "Group size the update sees. With PODS this is `pods_m`; set either one (8 if neither)."},
    )
    pods_n: int | None = field(
        default=None,
        metadata={
            "help": "Rollouts generated and scored per prompt (N), the most with adaptive, budgeted and auto "
            "generation. Defaults to 4 * pods_m."
        },
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
            "(all the prompt's generated rewards, as in D3S).",
            "choices": list(ADVANTAGE_SCOPES),
        },
    )
    pods_generation: str = field(
        default="fixed",
        metadata={
            "help": "'fixed': pods_n rollouts per prompt. 'adaptive': pods_n_initial per prompt, doubled while its "
            "rewards are all equal, at most pods_n. 'budgeted': pods_budget per prompt on average, from each "
            "prompt's history. 'refill' (DAPO's dynamic sampling): groups whose rewards are all equal are not "
            "trained on (synchronous: further prompts are drawn in their place). 'screened': a pilot for "
            "pods_screen_ratio x the prompts, the rest of pods_n for those pods_screen_rule picks. 'auto' "
            "(synchronous): refill at pods_n rollouts per prompt whose prompts per call and calls per step are chosen "
            "from the costs measured on the run and its contrast rate. Or a mode registered with "
            "trl_pods.generation_modes.register_generation_mode, or a dotted import path."
        },
    )
    pods_n_initial: int | None = field(
        default=None,
        metadata={
            "help": "Adaptive generation: rollouts per prompt in the first wave (pods_m <= pods_n_initial <= pods_n); "
            "screened generation: rollouts per prompt in the pilot (2 <= pods_n_initial <= pods_n). Default: pods_m."
        },
    )
    pods_budget: float | None = field(
        default=None,
        metadata={
            "help": "Budgeted generation: mean rollouts generated per prompt (pods_m <= pods_budget <= pods_n), over "
            "a generation's prompts (synchronous) or each window (asynchronous)."
        },
    )
    pods_allocation: str = field(
        default="expected_signal",
        metadata={
            "help": "Budgeted generation: rule scoring n rollouts of a prompt: 'expected_signal' (P(contrast) x "
            "p(1-p)^2 over the history's uncertainty), 'contrast', a registered name or a dotted import path."
        },
    )
    pods_history_size: int = field(
        default=1_000_000,
        metadata={"help": "Budgeted generation: the most prompts whose reward history is kept (LRU)."},
    )
    pods_history_decay: float = field(
        default=0.8,
        metadata={
            "help": "Budgeted generation: weight of a prompt's earlier outcomes at each new visit (1.0: no decay)."
        },
    )
    pods_screen_ratio: int = field(
        default=2,
        metadata={
            "help": "Screened: prompts piloted per trained prompt (those not chosen are consumed: visited, not "
            "trained)."
        },
    )
    pods_screen_rule: str = field(
        default="frontier",
        metadata={
            "help": "Screened: rule picking the prompts to train on from their pilots: 'frontier' (contrast first, a "
            "quarter of the picks for prompts whose pilot all failed), 'contrast', 'random', a registered name or a "
            "dotted import path."
        },
    )
    pods_draw_coverage: float | None = field(
        default=None,
        metadata={
            "help": "Synchronous trainer. Refill and auto: size draws from the observed contrast rate so that the "
            "groups with contrast cover what the step lacks with this probability; refill's first call generates for "
            "more prompts than the batch. Default for both: 0.9; refill: 0 draws exactly the missing groups. "
            "Screened: the pool is sized so (at most pods_screen_ratio per trained prompt); unset: pods_screen_ratio "
            "each step."
        },
    )

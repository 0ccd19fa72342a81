"""PODSConfig: defaults, TRL's batch meaning, and one test per rejected configuration."""

import dataclasses

import pytest

from trl_pods import PODSConfig
from trl_pods.refill import DEFAULT_DRAW_COVERAGE, RefillMode


def make(**kwargs) -> PODSConfig:
    defaults = dict(output_dir="unused", use_cpu=True, bf16=False, report_to=[], per_device_train_batch_size=8)
    return PODSConfig(**{**defaults, **kwargs})


def test_defaults_follow_the_paper_ratio_and_trl_group_size():
    """pods_m defaults to num_generations (TRL's 8), pods_n to 4 * pods_m, max_variance and kept-scope advantages."""
    config = make()
    assert (config.pods_m, config.num_generations, config.pods_n) == (8, 8, 32)
    assert config.pods_down_sampler == "max_variance" and config.pods_advantage_scope == "kept"


def test_pods_m_and_num_generations_follow_each_other():
    """Setting either group size sets both: the update is GRPO with num_generations = pods_m."""
    assert make(pods_m=4).num_generations == 4
    assert make(num_generations=4).pods_m == 4
    assert make(pods_m=4, num_generations=4, pods_n=4).pods_n == 4


def test_trl_batch_parameters_keep_their_meaning():
    """per_device_train_batch_size, steps_per_generation and generation_batch_size are TRL's (kept rows)."""
    config = make(pods_n=16, pods_m=4, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert config.steps_per_generation == 2 and config.generation_batch_size == 8


def test_every_field_has_help_text():
    """Every PODS field (and the overridden num_generations) documents itself for --help."""
    for f in dataclasses.fields(PODSConfig):
        if f.name.startswith("pods_") or f.name == "num_generations":
            assert f.metadata.get("help"), f.name


def test_rejects_pods_m_below_two():
    """GRPO advantages need at least two kept rollouts per prompt."""
    with pytest.raises(ValueError, match="pods_m must be at least 2"):
        make(pods_m=1, pods_n=4)


def test_rejects_pods_m_above_pods_n():
    """A prompt cannot keep more rollouts than it generates."""
    with pytest.raises(ValueError, match=r"pods_n \(4\) is smaller than pods_m \(8\)"):
        make(pods_m=8, pods_n=4)


def test_rejects_disagreeing_group_sizes():
    """pods_m and num_generations are the same quantity; different values are a mistake."""
    with pytest.raises(ValueError, match=r"pods_m \(4\) and num_generations \(8\) disagree"):
        make(pods_m=4, num_generations=8)


def test_rejects_groups_split_across_processes():
    """Each process must hold whole prompt groups, else it could not down-sample on its own rows."""
    with pytest.raises(ValueError, match="not a multiple of pods_m"):
        make(pods_m=8, pods_n=16, per_device_train_batch_size=4)  # 4 rows per process < one group of 8


def test_layout_check_counts_steps_per_generation():
    """Rows per process are per_device_train_batch_size * steps_per_generation: 4 * 2 holds one group of 8."""
    assert make(pods_m=8, pods_n=16, per_device_train_batch_size=4, steps_per_generation=2).pods_m == 8
    with pytest.raises(ValueError, match="not a multiple of pods_m"):
        make(pods_m=8, pods_n=16, per_device_train_batch_size=4, steps_per_generation=3)


def test_rejects_unknown_down_sampler():
    """A typo in the rule name fails at configuration time, listing the known rules."""
    with pytest.raises(ValueError, match="Unknown down-sampler 'max_varience'.*'max_variance'"):
        make(pods_down_sampler="max_varience")


def test_accepts_dotted_path_down_sampler():
    """A user rule given as a dotted import path is accepted."""
    assert make(pods_down_sampler="trl_pods.down_sampling.random").pods_down_sampler.endswith("random")


def test_rejects_unknown_advantage_scope():
    """Only 'kept' and 'all' are advantage scopes."""
    with pytest.raises(ValueError, match="pods_advantage_scope must be one of"):
        make(pods_advantage_scope="group")


def test_rejects_full_scope_with_normalize_then_sum():
    """'all'-scope advantages normalise the weighted sum, which TRL's normalize_then_sum does not compute."""
    with pytest.raises(ValueError, match="sum_then_normalize"):
        make(pods_advantage_scope="all", multi_objective_aggregation="normalize_then_sum")


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(pods_cross_group=True), "pods_cross_group compares advantages across prompts"),
        (dict(pods_m_start=2), "A schedule needs a start value and a shape"),
        (dict(pods_schedule="linear"), "A schedule needs a start value and a shape"),
        (dict(pods_schedule="exponential", pods_m_start=2), "pods_schedule must be one of"),
        (dict(pods_schedule="linear", pods_m_start=1), "pods_m_start must be between 2 and pods_m"),
        (dict(pods_schedule="linear", pods_m_start=16), "pods_m_start must be between 2 and pods_m"),
        (dict(pods_token_fraction=0.0), r"pods_token_fraction must be in \(0, 1\]"),
        (dict(pods_schedule="cosine", pods_token_fraction_start=1.5), "pods_token_fraction_start must be in"),
        (dict(pods_token_fraction=0.5, top_entropy_quantile=0.2), "set top_entropy_quantile=1.0"),
        (dict(pods_token_fraction=0.5, entropy_coef=0.01), "set entropy_coef=0"),
        (dict(pods_drop_constant_groups=True, loss_type="bnpo"), "cannot keep loss_type='bnpo' exact"),
        (
            dict(
                pods_drop_constant_groups=True, loss_type="grpo", gradient_accumulation_steps=2, steps_per_generation=1
            ),
            r"steps_per_generation \(1\) must be a multiple of gradient_accumulation_steps \(2\)",
        ),
        (dict(pods_generation_chunk_size=0), "pods_generation_chunk_size must be >= 1"),
        (dict(pods_generation_chunk_size=8, use_vllm=True), "vLLM and continuous batching already schedule"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(f"{k}={v}" for k, v in value.items()),
)
def test_rejects_inconsistent_d3s_and_generation_options(options, message):
    """Each unsupported or inconsistent D3S / schedule / chunking setting fails with a message naming the fix."""
    with pytest.raises(ValueError, match=message):
        make(pods_m=8, pods_n=16, **options)


def test_accepts_a_full_d3s_configuration():
    """Scope 'all' + cross-group + cosine schedules of M and token fraction + dropping + chunking is valid."""
    config = make(
        pods_m=8, pods_n=32, pods_advantage_scope="all", pods_cross_group=True, pods_schedule="cosine",
        pods_m_start=4, pods_token_fraction_start=0.2, pods_token_fraction=0.6, pods_drop_constant_groups=True,
        pods_generation_chunk_size=16,
    )  # fmt: skip
    assert config.pods_m_start == 4 and config.pods_token_fraction == 0.6


def test_adaptive_generation_defaults():
    """Generation is fixed by default (pods_n_initial unset); adaptive starts with pods_m rollouts per prompt."""
    assert make().pods_generation == "fixed" and make().pods_n_initial is None
    assert make(pods_m=4, pods_n=16, pods_generation="adaptive").pods_n_initial == 4
    assert make(pods_m=4, pods_n=16, pods_generation="adaptive", pods_n_initial=8).pods_n_initial == 8


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(pods_generation="dynamic"), "Unknown generation mode 'dynamic'. Use one of 'adaptive', 'auto', "),
        (dict(pods_n_initial=8), "pods_n_initial only applies to pods_generation='adaptive'"),
        (dict(pods_generation="adaptive", pods_n_initial=2), r"pods_n_initial \(2\) must be between pods_m \(4\)"),
        (dict(pods_generation="adaptive", pods_n_initial=32), r"and pods_n \(16\)"),
        (dict(pods_log_all_rollouts=True), "pods_log_all_rollouts adds rows to the completions table"),
    ],
    ids=["unknown-mode", "initial-with-fixed", "initial-below-m", "initial-above-n", "all-rollouts-without-log"],
)
def test_rejects_inconsistent_adaptive_generation_options(options, message):
    """Each inconsistent adaptive-generation / observability setting fails with a message naming the fix."""
    with pytest.raises(ValueError, match=message):
        make(pods_m=4, pods_n=16, **options)


@pytest.mark.parametrize(
    "options",
    [
        dict(use_vllm=True, generation_kwargs={"seed": 7}),
        dict(temperature=0.0),
        dict(top_k=1),
        dict(generation_kwargs={"do_sample": False}),
        dict(generation_kwargs={"temperature": 0}),
    ],
    ids=["vllm-seed", "temperature-0", "top_k-1", "do_sample-false", "kwargs-temperature-0"],
)
def test_settings_that_make_a_prompts_rollouts_identical_are_refused(options):
    """A fixed vLLM seed in generation_kwargs (the real engine then returns N identical rollouts; see
    test_vllm_engine.py) or greedy decoding makes a prompt's N rollouts identical: no signal to down-sample."""
    with pytest.raises(ValueError, match="identical"):
        PODSConfig(
            "/tmp/unused", use_cpu=True, bf16=False, pods_n=8, pods_m=4, per_device_train_batch_size=4, **options
        )


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(pods_budget=8), "pods_budget only applies to pods_generation='budgeted'"),
        (dict(pods_generation="budgeted"), r"needs pods_budget, .* between pods_m \(4\) and pods_n \(16\); got None"),
        (dict(pods_generation="budgeted", pods_budget=3), "got 3"),
        (dict(pods_generation="budgeted", pods_budget=17), "got 17"),
        (dict(pods_generation="budgeted", pods_budget=8, pods_n_initial=4), "pods_n_initial only applies"),
        (dict(pods_generation="budgeted", pods_budget=8, pods_allocation="nope"), "Unknown allocation rule"),
        (dict(pods_generation="budgeted", pods_budget=8, pods_history_size=0), "pods_history_size must be >= 1"),
        (dict(pods_generation="budgeted", pods_budget=8, pods_history_decay=0.0), r"must be in \(0, 1\]"),
    ],
    ids=["budget-without-mode", "no-budget", "below-m", "above-n", "n-initial", "rule", "history-size", "decay"],
)
def test_rejects_inconsistent_budgeted_generation_options(options, message):
    """Each inconsistent budgeted-generation setting fails with a message naming the fix."""
    with pytest.raises(ValueError, match=message):
        make(pods_m=4, pods_n=16, **options)


def test_accepts_budgeted_generation_with_a_fractional_budget():
    """A mean budget need not be a whole number; the rule may be a dotted path."""
    config = make(
        pods_m=4,
        pods_n=16,
        pods_generation="budgeted",
        pods_budget=6.5,
        pods_allocation="trl_pods.budget.contrast_probability",
    )
    assert config.pods_budget == 6.5 and config.pods_history_decay == 0.8


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(pods_generation="screened", pods_screen_ratio=2.5), "give whole numbers"),
        (dict(pods_generation="screened", pods_screen_ratio=4.0), "give whole numbers"),
        (dict(pods_generation="refill", pods_max_draws=2.0), "give whole numbers"),
        (dict(pods_generation="screened", pods_screen_ratio=1), "a screen needs more prompts than it trains on"),
        (dict(pods_generation="refill", pods_max_draws=0), "a screen needs more prompts than it trains on"),
        (dict(pods_generation="refill", pods_cross_group=True, pods_advantage_scope="all"), "use one or the other"),
        (
            dict(pods_generation="refill", gradient_accumulation_steps=2, steps_per_generation=1),
            r"steps_per_generation x num_iterations \(1\) must be a multiple of gradient_accumulation_steps \(2\)",
        ),
    ],
    ids=["ratio-2.5", "ratio-4.0", "draws-2.0", "ratio-1", "draws-0", "cross-group", "epoch-ends-mid-step"],
)
def test_rejects_inconsistent_dynamic_sampling_options(options, message):
    """Dynamic sampling counts prompts and draws in whole numbers (a float ratio used to pass the config and crash
    the data loader: "batch_size should be a positive integer value, but got batch_size=80.0"), screens more
    prompts than it trains, and a refill epoch, which ends when its prompts run out, must end an optimizer step."""
    with pytest.raises(ValueError, match=message):
        make(pods_m=4, pods_n=16, per_device_train_batch_size=8, **options)


def test_refill_accepts_generations_spanning_optimizer_steps():
    """A refill epoch ends after a whole generation: steps_per_generation a multiple of the accumulation is fine."""
    config = make(
        pods_m=4, pods_n=16, per_device_train_batch_size=8, pods_generation="refill", steps_per_generation=4,
        gradient_accumulation_steps=2,
    )  # fmt: skip
    assert config.pods_max_draws == 3


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(pods_generation="refill", pods_draw_coverage=1.0), r"probability in \(0, 1\)"),
        (dict(pods_generation="adaptive", pods_draw_coverage=0.9), "sizes the draws of pods_generation='refill'"),
        (
            dict(pods_generation="refill", pods_draw_coverage=0.0, pods_max_prompt_ratio=4),
            "with pods_draw_coverage above 0; unset it",
        ),
        (dict(pods_generation="auto", pods_max_prompt_ratio=0), "a whole number >= 1"),
        (dict(pods_generation="refill", pods_auto_costs="call=1,rollout=0,step=1"), "pods_auto_costs gives"),
        (dict(pods_generation="auto", pods_auto_costs="call=1,rollout=0"), "seconds for each of call, rollout"),
        (
            dict(pods_generation="auto", gradient_accumulation_steps=2, steps_per_generation=1),
            r"pods_generation='auto' ends an epoch when its prompts run out",
        ),
        (dict(pods_generation="auto", pods_cross_group=True, pods_advantage_scope="all"), "use one or the other"),
    ],
    ids=[
        "coverage-1",
        "coverage-screened",
        "ratio-exact-refill",
        "ratio-0",
        "costs-refill",
        "costs-form",
        "auto-epoch-mid-step",
        "auto-cross-group",
    ],  # fmt: skip
)
def test_rejects_draw_sizing_options_where_they_do_not_apply(options, message):
    """Draw sizing: a coverage is a probability and sizes only refill's and auto's draws; the prompt ratio bounds
    only sized draws; given costs are auto's, in their one form; auto draws like refill, so its epochs must end an
    optimizer step and it does not combine with cross-group selection."""
    with pytest.raises(ValueError, match=message):
        make(pods_m=4, pods_n=16, per_device_train_batch_size=8, **options)


def test_sized_draws_default_to_four_prompts_per_trained_prompt():
    """Sized refill and auto lay out room for 4 prompts per trained prompt unless told; exact refill keeps its
    pods_max_draws (its draws never exceed it), so its selections stay as pinned."""
    assert make(pods_m=4, pods_generation="auto").pods_max_prompt_ratio == 4
    assert make(pods_m=4, pods_generation="refill", pods_draw_coverage=0.9).pods_max_prompt_ratio == 4
    assert make(pods_m=4, pods_generation="refill", pods_draw_coverage=0.0).pods_max_prompt_ratio is None


def test_max_steps_0_is_refused_and_trls_other_values_keep_their_meaning():
    """`PODSConfig(max_steps=0)` from Python trained one step and saved a checkpoint (transformers checks the count
    after a step; the command line already refused it). The config refuses it now, with what to give; TRL's -1
    (train num_train_epochs epochs) and a positive count are unchanged."""
    with pytest.raises(ValueError, match=r"max_steps=0 would still train one step .*at least 1"):
        make(max_steps=0)
    assert make().max_steps == -1 and make(max_steps=3).max_steps == 3


def test_refill_sizes_its_draws_by_default_and_draws_exactly_the_missing_groups_at_coverage_0():
    """Refill's default is its sized form (coverage 0.9: 1.22 generation calls a step at 50% contrast against 2.67 for
    drawing exactly the missing groups), declared once for refill and auto; `pods_draw_coverage=0` is the exact
    form; screened, whose unset coverage means a fixed pool, takes no 0."""
    assert make(pods_m=4, pods_generation="refill").pods_draw_coverage == DEFAULT_DRAW_COVERAGE == 0.9
    assert make(pods_m=4, pods_generation="auto").pods_draw_coverage == DEFAULT_DRAW_COVERAGE
    exact = make(pods_m=4, pods_generation="refill", pods_draw_coverage=0.0)
    assert exact.pods_draw_coverage == 0.0 and RefillMode(exact).history is None
    assert make(pods_m=4, pods_generation="screened").pods_draw_coverage is None
    with pytest.raises(ValueError, match="0 draws exactly the missing groups"):
        make(pods_m=4, pods_generation="screened", pods_draw_coverage=0.0)


def test_auto_refuses_the_exact_form_whose_draws_have_no_sized_refill_floor():
    """Auto never plans below sized refill's plan, its floor; with `pods_draw_coverage=0` there is no sized plan to
    hold it to (it took the setting and planned without a floor), so the config refuses it in one line."""
    with pytest.raises(ValueError, match="auto, which never plans below sized refill, takes no 0"):
        make(pods_m=4, pods_generation="auto", pods_draw_coverage=0.0)


def test_a_coverage_out_of_range_and_one_its_mode_does_not_use_get_different_messages():
    """``--pods_draw_coverage 1.5`` and ``--pods_draw_coverage 0.5`` with fixed generation got the same 281-character
    message, which read as if 0.5 were out of range. Out of range, it says the range and the value; in range but
    given to a mode that draws nothing, it names the mode and the modes that use it, and says nothing of a range."""
    with pytest.raises(ValueError) as out_of_range:
        make(pods_m=4, pods_generation="refill", pods_draw_coverage=1.5)
    assert "a probability in (0, 1)" in str(out_of_range.value) and "1.5" in str(out_of_range.value)
    assert "pods_generation=" not in str(out_of_range.value)
    with pytest.raises(ValueError) as unused:
        make(pods_m=4, pods_draw_coverage=0.5)
    message = str(unused.value)
    assert "pods_generation='fixed'" in message and "'refill', 'auto' or 'screened'" in message
    assert "probability" not in message and "(0, 1)" not in message

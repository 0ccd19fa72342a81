"""What a rollout carries besides token ids: tools, environments, `rollout_func` fields and images.

TRL prepares a batch in `GRPOTrainer._generate_and_score_completions` before it calls `_generate`: it draws one
environment instance per row from its pool and resets it (the observation extends the prompt), builds each row's tool
dictionaries, and inserts the dataset's images into conversational prompts. Phase 1 runs that preparation unchanged
for every generation call of every mode (`generate_rows`): the parent method is called with the call's rows, and its
call of `_generate` raises `GenerationCaptured` as soon as the trainer's generation (TRL's tool loop, environments,
`rollout_func`) has returned, before any no-grad forward. What TRL prepared is kept beside the 8-tuple (`RolloutRows`)
and follows each row into its slot (`trl_pods.phase1.SlotLayout`). Within one generation every call gets environment
instances no earlier call of it used (`fresh_environments`), so a top-up or refill wave never resets the environment
of a rollout generated before it; a rollout's reward functions see its own environment and fields (`scoring_rows`).

Phase 2 must see each kept row with exactly its own data and nothing of a discarded rollout:

- `rollout_func`'s extra fields hold one value per row (or one value shared by all rows): `kept_fields` keeps the
  kept rows' values, and refuses a list of another length, which cannot be down-sampled.
- The tool mask and the tool images are per-row items of the 8-tuple (`selection.kept_generation`).
- Environments are reset once per rollout, as TRL does, in phase 1 only: in phase 2 (`kept_environments`) TRL sees no
  environment factory, so it neither draws nor resets instances, the kept rows carry the prompts their environments
  produced, and `trainer.environments` holds the kept rows' own instances (their state after the rollout).
- Images: TRL builds the pixel inputs of phase 2 from the kept rows' image columns, so they cover the kept rows only.

Refused (`check_supported`), because no mode could give each row its own data: a generation chunk size with
`rollout_func` or image inputs, and environments with image inputs.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

IMAGE_COLUMNS = ("image", "images")
Generation = tuple  # the 8-tuple of GRPOTrainer._generate


class GenerationCaptured(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """Raised in phase 1 once the trainer's `_generate` returned, to stop TRL's method before it scores."""

    def __init__(self, prompts: list, generation: Generation):
        super().__init__("phase 1 generation captured")
        self.prompts, self.generation = prompts, generation


@dataclass
class RolloutRows:
    """Phase 1's rows as TRL prepared and generated them.

    Attributes:
        prompts: The prompts `_generate` received, one per row (after environment resets and image insertion).
        generation: The 8-tuple of `_generate`.
        environments: The environment instance of each row (their state after the rollout), or None.
    """

    prompts: list
    generation: Generation
    environments: list | None


def check_supported(args: Any, features: list[str]) -> None:
    """Refuse what phase 1 cannot down-sample, with what to change.

    Args:
        args: The `PODSConfig`.
        features: What the run uses, among ``"tools"``, ``"rollout_func"``, ``"environment_factory"`` and
            ``"image inputs"`` (a vision-language model, or an image column).
    """
    if args.pods_generation_chunk_size is not None and {"rollout_func", "image inputs"} & set(features):
        raise ValueError(
            "pods_generation_chunk_size cannot split the generation of a rollout_func (it generates every row itself) "
            "or of image prompts (their pixel inputs cover the whole batch): unset it."
        )
    if {"environment_factory", "image inputs"} <= set(features):
        raise ValueError(
            "PODSGRPOTrainer does not support environment_factory with image inputs: phase 2 would insert the images "
            "a second time into the prompts the environments' reset produced. Use trl.GRPOTrainer for that "
            "combination."
        )


def features_in_use(trainer: Any, columns: list[str]) -> list[str]:
    """What of `check_supported`'s list a built trainer uses; ``columns`` are its dataset's columns, if known."""
    features = [
        name
        for name, used in (
            ("tools", trainer._standalone_tools),
            ("rollout_func", trainer.rollout_func),
            ("environment_factory", trainer.environment_factories),
        )
        if used
    ]
    return features + (["image inputs"] if trainer._is_vlm or set(IMAGE_COLUMNS) & set(columns) else [])


def check_rows(trainer: Any, rows: list[dict[str, Any]]) -> None:
    """`check_supported` for a batch's rows (an iterable dataset's columns are seen only when read)."""
    check_supported(trainer.args, features_in_use(trainer, [column for row in rows for column in row]))


def generate_rows(trainer: Any, parent_generate_and_score, rows: list[dict[str, Any]]) -> RolloutRows:
    """Generate ``rows`` through TRL's own batch preparation and generation, without scoring them.

    Args:
        trainer: The trainer.
        parent_generate_and_score: `GRPOTrainer._generate_and_score_completions`, bound to the trainer.
        rows: One row per rollout (each prompt N times in a row).
    """
    generate = trainer._generate  # the trainer's own, subclasses' overrides included

    def generate_and_stop(prompts: list) -> Generation:
        raise GenerationCaptured(prompts, generate(prompts))

    trainer._generate = generate_and_stop  # for the parent method's call only (an instance attribute)
    try:
        parent_generate_and_score(rows)
    except GenerationCaptured as captured:
        environments = list(trainer.environments) if trainer.environment_factories is not None else None
        return RolloutRows(captured.prompts, captured.generation, environments)
    finally:
        del trainer._generate
    raise RuntimeError("GRPOTrainer._generate_and_score_completions returned without calling _generate.")


def scoring_rows(rows: list[dict[str, Any]], extra_fields: dict[str, Any], scored: int) -> list[dict[str, Any]]:
    """Copies of the first ``scored`` of a call's ``rows`` with `rollout_func`'s extra fields merged as TRL merges them
    before scoring: a list gives row ``i`` its ``i``-th value (`check_fields`), any other value goes to every row."""
    check_fields(extra_fields, len(rows))
    if not extra_fields:
        return rows[:scored]
    merged = [dict(row) for row in rows[:scored]]
    for i, row in enumerate(merged):
        for key, values in extra_fields.items():
            row[key] = values[i] if isinstance(values, list) else values
    return merged


def check_fields(extra_fields: dict[str, Any], rows: int) -> None:
    """Refuse a list-valued `rollout_func` field without one value per generated row: it cannot follow the kept
    rows."""
    for key, values in extra_fields.items():
        if isinstance(values, list) and len(values) != rows:
            raise ValueError(
                f"rollout_func returned {len(values)} values for {key!r} for {rows} rows. With PODS a list field must "
                "hold one value per row it received (each prompt pods_n times), so that it can follow the kept rows; "
                "return a non-list value to share it between all rows."
            )


def kept_fields(extra_fields: dict[str, Any], local: list[int], rows: int) -> dict[str, Any]:
    """`rollout_func`'s extra fields for the kept rows ``local`` of ``rows`` generated rows (`check_fields`)."""
    check_fields(extra_fields, rows)
    return {
        key: [values[i] for i in local] if isinstance(values, list) else values for key, values in extra_fields.items()
    }


def kept_rows(rows: list[dict[str, Any]], prompts: list, environments: list | None, local: list[int]) -> list[dict]:
    """Phase 2's rows: the kept rows; with environments, each carrying the prompt its environment's reset produced
    (phase 2 does not reset them again)."""
    if environments is None:
        return [rows[i] for i in local]
    return [{**rows[i], "prompt": prompts[i]} for i in local]


@contextmanager
def kept_environments(trainer: Any, environments: list | None, local: list[int]):
    """Within the block (phase 2), TRL sees no environment factory, so it neither draws nor resets instances; after
    it, ``trainer.environments`` holds the kept rows' own environments."""
    if environments is None:
        yield
        return
    factories = trainer.environment_factories
    trainer.environment_factories, trainer.environments = None, None  # TRL resets whatever `environments` holds
    try:
        yield
    finally:
        trainer.environment_factories = factories
        trainer.environments = [environments[i] for i in local]


@contextmanager
def fresh_environments(trainer: Any, in_use: list):
    """Within the block, TRL's environment pools leave out the instances ``in_use`` (those of the generation's
    earlier calls), so the call draws other instances, creating them as it needs; they join the pools after it."""
    pools = getattr(trainer, "_environment_pool", None)
    if not in_use or not pools:
        yield
        return
    used = {id(environment) for environment in in_use}
    kept = {name: [env for env in pool if id(env) in used] for name, pool in pools.items()}
    for name, pool in pools.items():
        pools[name] = [env for env in pool if id(env) not in used]
    try:
        yield
    finally:
        for name in pools:
            pools[name] = kept.get(name, []) + pools[name]


def per_row(values: Any, rows: int) -> bool:
    """``values`` is a per-row item of the 8-tuple for ``rows`` rows (tool images are ``[]`` without tools)."""
    return isinstance(values, list) and len(values) == rows

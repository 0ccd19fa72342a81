"""The model card (``README.md``) of a PODS run, in its output folder and in every checkpoint.

TRL's card names the base model only when it is a Hub name: a run from a local folder said "a fine-tuned version of
[None](https://huggingface.co/None)", and its usage example loaded ``model="None"``; each checkpoint held PEFT's blank
template instead, its ``base_model`` a local path. The PODS card names

* the method: PODS, its paper and the run's N -> M, down-sampler and generation mode;
* the base model by a name that means something once the run is shared: a Hub name; SmolLM2 as `trl_pods.smollm2`
  builds it (its Hub name, and the command that builds it; the usage example loads it with `fetch_smollm2()`); or
  another local folder by its name and the Hub model that its own card names as its ``base_model`` (the usage
  example loads it from the path it was trained from, marked as the one line to change);
* how to load this run: the adapter on its base model (LoRA), or the model itself;

and the framework versions and the PODS citation. `PODSModelCard` puts it where TRL and transformers write theirs,
in a folder that holds the model (so that its usage example runs), and never ends a run over it: a card that cannot be
written is a warning.
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import version
from pathlib import Path
from typing import Any

from accelerate.utils import is_peft_model
from datasets import Dataset
from huggingface_hub import ModelCardData, metadata_load
from trl.trainer.utils import get_config_model_id

from .paper import PODS_PAPER
from .smollm2 import MODEL_NAME, is_built

__all__ = [
    "PODSModelCard",
    "holds_model",
    "hub_base_model",
    "model_card",
    "write_model_card",
    "write_model_card_or_warn",
]

logger = logging.getLogger(__name__)

EXAMPLE = [{"role": "user", "content": "What is 7 + 4?"}]
"""The usage example's conversation when the training set's first prompt is not a plain conversation."""


def hub_base_model(name_or_path: str) -> str | None:
    """The Hub model that ``name_or_path`` is: itself unless it is a local folder; for a folder, the ``base_model``
    that its own card (``README.md``) names, or None (no card, a card without metadata). A model built from its
    config (``""``) has none: its name is not the current folder."""
    if not name_or_path:
        return None
    folder = Path(name_or_path)
    if not folder.is_dir():
        return name_or_path
    card = folder / "README.md"
    base = (metadata_load(card) or {}).get("base_model") if card.is_file() else None
    return ", ".join(base) if isinstance(base, list) else base


def _example_messages(dataset: Any) -> list[dict[str, str]]:
    """The first training prompt when it is a conversation of text messages, else `EXAMPLE`."""
    prompt = dataset[0].get("prompt") if isinstance(dataset, Dataset) and len(dataset) else None
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt)
    ):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    return EXAMPLE


def _built_smollm2(base: str) -> bool:
    """Whether ``base`` is the SmolLM2 folder that `trl_pods.smollm2` builds (in any cache)."""
    return bool(base) and Path(base).name == MODEL_NAME and is_built(Path(base).parent)


def _usage(base: str, run: str, adapter: bool, messages: list[dict[str, str]], max_new_tokens: int) -> str:
    """Python that loads the run (``adapter``: on the ``base`` model) and answers ``messages``."""
    smollm2 = adapter and _built_smollm2(base)
    if not base:
        base_load = "...  # the model built from its config in training"
    elif smollm2:
        base_load = "AutoModelForCausalLM.from_pretrained(fetch_smollm2())"
    elif Path(base).is_dir():
        base_load = f"AutoModelForCausalLM.from_pretrained({base!r})  # the base model's folder here: your copy's path"
    else:
        base_load = f"AutoModelForCausalLM.from_pretrained({base!r})"
    load = (
        f"base = {base_load}\nmodel = PeftModel.from_pretrained(base, {run!r})"
        if adapter
        else f"model = AutoModelForCausalLM.from_pretrained({run!r})"
    )
    return "\n".join([
        *(["from peft import PeftModel"] if adapter else []),
        *(["from trl_pods.smollm2 import fetch_smollm2"] if smollm2 else []),
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        load,
        f"tokenizer = AutoTokenizer.from_pretrained({run!r})",
        "messages = [", *(f"    {json.dumps(message, ensure_ascii=False)}," for message in messages), "]",
        "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\", "
        "return_dict=True)",
        f"output = model.generate(**inputs, max_new_tokens={max_new_tokens})",
        "print(tokenizer.decode(output[0, inputs[\"input_ids\"].shape[1] :], skip_special_tokens=True))",
    ])  # fmt: skip


def _hub_link(name: str) -> str:
    return f"[{name}](https://huggingface.co/{name})"


def _base_model(base: str, hub: str | None) -> str:
    """The base model in words, by names that hold once the run is shared (no local path): a Hub link; SmolLM2 as
    `trl_pods.smollm2` builds it, and how; a local folder by its name and the Hub model its card names; or none (a
    model built from its config)."""
    if not base:
        return "none (a model built from its config, not loaded from a folder or the Hub)"
    if not Path(base).is_dir():
        return _hub_link(base)
    name = Path(base).name
    if _built_smollm2(base) and hub:
        return (
            f"{_hub_link(hub)} as `trl_pods.smollm2` builds it offline (the folder `{name}`; "
            "`python -m trl_pods.smollm2` builds it and prints its path)"
        )
    named = f"; its card names {_hub_link(hub)} as its base model" if hub else ""
    return f"the local folder `{name}`{named}"


def _method(args: Any) -> str:
    """The run's PODS settings in words."""
    generation = "" if args.pods_generation == "fixed" else f", {args.pods_generation} generation"
    return (
        f"{args.pods_n} → {args.pods_m} rollouts per prompt ({args.pods_down_sampler} down-sampling{generation}), "
        f"learning rate {args.learning_rate:g}, completions of at most {args.max_completion_length} tokens"
    )


def model_card(
    trainer: Any, folder: Path, model_name: str | None = None, dataset_name: str | None = None, tags: Any = None
) -> str:
    """The card of the run of ``trainer`` as saved in ``folder`` (its output folder or a checkpoint)."""
    args = trainer.args
    base = get_config_model_id(trainer.model.config)
    hub = hub_base_model(base)
    adapter = is_peft_model(trainer.model)
    output_dir = Path(args.output_dir)
    run = args.hub_model_id if args.push_to_hub and args.hub_model_id and folder == output_dir else str(folder)
    step = trainer.state.global_step
    data = ModelCardData(
        base_model=hub, datasets=dataset_name, library_name="peft" if adapter else "transformers",
        model_name=model_name or output_dir.name,
        tags=sorted({*([tags] if isinstance(tags, str) else tags or []), *trainer._tag_names}),
    )  # fmt: skip
    paper = f"[{PODS_PAPER['title']}](https://huggingface.co/papers/{PODS_PAPER['id']})"
    saved = f"the checkpoint at step {step} of the run in `{output_dir}`" if folder != output_dir else f"step {step}"
    data_line = (
        [f"- **Data:** [{dataset_name}](https://huggingface.co/datasets/{dataset_name})"] if dataset_name else []
    )
    messages = _example_messages(trainer.train_dataset)
    versions = ", ".join(f"{name} {version(name)}" for name in ("trl", "transformers", "torch", "datasets"))
    return "\n".join([
        f"---\n{data.to_yaml()}\n---",
        "",
        f"# {data.model_name}",
        "",
        f"{'A LoRA adapter' if adapter else 'A model'} trained with PODS (Policy Optimization with Down-Sampling, "
        f"{paper}): each prompt gets N rollouts, all are scored, and the policy update uses the M that carry the most "
        "signal. Trained with `trl_pods` on TRL's `GRPOTrainer`.",
        "",
        f"- **Base model:** {_base_model(base, hub)}",
        f"- **Method:** PODS, {_method(args)}",
        *data_line,
        f"- **This folder:** {saved}",
        "",
        "## Usage",
        "",
        f"```python\n{_usage(base, run, adapter, messages, args.max_completion_length)}\n```",
        "",
        "## Framework versions",
        "",
        f"{versions}" + (f", peft {version('peft')}" if adapter else ""),
        "",
        "## Citation",
        "",
        f"```bibtex\n{PODS_PAPER['citation']}\n```",
        "",
    ])  # fmt: skip


def write_model_card(trainer: Any, folder: Path, **card: Any) -> Path:
    """Write `model_card` (``card``: its ``model_name``, ``dataset_name``, ``tags``) to ``folder/README.md``."""
    path = Path(folder) / "README.md"
    path.write_text(model_card(trainer, Path(folder), **card))
    return path


def holds_model(folder: Path, adapter: bool) -> bool:
    """Whether ``folder`` holds a saved model (``adapter``: a PEFT adapter), which a card's usage example loads."""
    return (folder / ("adapter_config.json" if adapter else "config.json")).is_file()


def write_model_card_or_warn(trainer: Any, folder: Path, **card: Any) -> Path | None:
    """`write_model_card`, or one warning when it fails: a card is cosmetic, and must never end a training run."""
    try:
        return write_model_card(trainer, folder, **card)
    except Exception as error:  # noqa: BLE001 - whatever went wrong, training goes on without the card
        logger.warning("PODS model card not written in %s (%s: %s); training goes on.", folder, type(error).__name__,
                       error)  # fmt: skip
        return None


class PODSModelCard:
    """The trainer's seams that write the PODS card: TRL's ``create_model_card`` (the output folder's card, written
    at every checkpoint and before a push to the Hub) and transformers' ``_save`` (after the model of the output
    folder or of a checkpoint is saved, which with PEFT leaves PEFT's blank card there). The card goes only where the
    model is: TRL writes the output folder's card at every checkpoint, before any model is saved there, and its usage
    example then loaded a folder without a model (`holds_model`). A card that cannot be written is a warning
    (`write_model_card_or_warn`)."""

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags: Any = None):
        if self.is_world_process_zero() and holds_model(Path(self.args.output_dir), is_peft_model(self.model)):
            write_model_card_or_warn(
                self, Path(self.args.output_dir), model_name=model_name, dataset_name=dataset_name, tags=tags
            )

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            write_model_card_or_warn(self, Path(output_dir if output_dir is not None else self.args.output_dir))

"""The PODS model card, in a run's folder and in each checkpoint: it names the method, the base model and how to load
the run, and its usage example runs (on the tiny model, as a LoRA run of `trl-pods train`)."""

import contextlib
import io
import logging
import re
import shutil
from pathlib import Path

from helpers import load, pods_config, prompts_dataset, token_sum_reward
from peft import LoraConfig
from test_train_script import _flags
from transformers import AutoModelForCausalLM

from trl_pods import PODSGRPOTrainer
from trl_pods import model_card as model_card_module
from trl_pods.model_card import hub_base_model
from trl_pods.train import main


def _usage(card: str) -> str:
    (code,) = re.findall(r"```python\n(.*?)```", card, re.DOTALL)
    return code


def test_run_and_checkpoint_cards_name_pods_the_base_folder_and_load_the_run(tiny_model_path, tmp_path):
    """TRL's card for a run from a local folder said "a fine-tuned version of [None](https://huggingface.co/None)" and
    loaded `model="None"`; each checkpoint held PEFT's blank template with a local path as `base_model`. Both cards are
    now the PODS card: the method and its N -> M, the base model by its folder (not claimed as a Hub model), and a
    usage example that loads this folder's adapter on that base and generates."""
    out = tmp_path / "run"
    main(_flags(tiny_model_path, out, "--max_steps", "2", "--save_steps", "1", "--use_peft", "--lora_target_modules",
                "all-linear"))  # fmt: skip
    for folder, saved in ((out, "step 2"), (out / "checkpoint-1", f"the checkpoint at step 1 of the run in `{out}`")):
        card = (folder / "README.md").read_text()
        assert "A LoRA adapter trained with PODS (Policy Optimization with Down-Sampling" in card, folder
        assert "2504.13818" in card and "8 → 4 rollouts per prompt (max_variance down-sampling)" in card
        assert f"- **Base model:** the local folder `{tiny_model_path.name}`\n" in card
        assert f"- **This folder:** {saved}" in card
        assert "None" not in card and "base_model:" not in card and "library_name: peft" in card
        usage = _usage(card)
        assert f"PeftModel.from_pretrained(base, '{folder}')" in usage
        namespace = {}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(usage, namespace)  # the example as a user pastes it
        assert type(namespace["model"]).__name__ == "PeftModelForCausalLM"
        assert namespace["output"].shape[1] > namespace["inputs"]["input_ids"].shape[1]  # it generated


def test_hub_base_model_reads_a_local_folders_card(tmp_path):
    """A Hub name is its own base; a local folder is named by its card's `base_model` (a list is joined), or not at
    all when it has no card."""
    assert hub_base_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert hub_base_model(str(tmp_path)) is None
    (tmp_path / "README.md").write_text("---\nbase_model:\n- a/b\n- c/d\n---\n\n# merged\n")
    assert hub_base_model(str(tmp_path)) == "a/b, c/d"


def test_a_card_without_metadata_and_a_model_built_from_a_config_name_no_base(tmp_path, monkeypatch):
    """`metadata_load` returns None for a README without a YAML block: reading its `base_model` raised AttributeError
    inside `save_model` at the first checkpoint. A model built from a config (`_name_or_path == ""`) read the current
    directory's README as its card; it has no base model to name."""
    (tmp_path / "README.md").write_text("# A model folder with a plain README\n")
    assert hub_base_model(str(tmp_path)) is None
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "README.md").write_text("---\nbase_model: not/this-one\n---\n")
    monkeypatch.chdir(checkout)
    assert hub_base_model("") is None


def test_a_local_model_with_a_plain_readme_trains_and_saves_its_card(tiny_model_path, tmp_path):
    """The first checkpoint of a run from a local folder whose README has no YAML block crashed in `save_model`;
    now the run trains, and the run's and the checkpoint's cards name the folder without a Hub base model."""
    model = tmp_path / "plain-readme-model"
    shutil.copytree(tiny_model_path, model)
    (model / "README.md").write_text("# My model\n\nNo metadata here.\n")
    out = tmp_path / "run"
    main(_flags(model, out, "--max_steps", "1", "--save_steps", "1"))
    for folder in (out, out / "checkpoint-1"):
        assert f"- **Base model:** the local folder `{model.name}`\n" in (folder / "README.md").read_text()


def test_a_card_that_cannot_be_written_is_a_warning(tiny_model_path, tmp_path, monkeypatch, caplog):
    """A cosmetic feature never ends a run: when the card cannot be written (here its writer raises), each save logs
    one warning naming the folder and training goes on to save the model and its checkpoint."""

    def broken(*args, **kwargs):
        raise OSError("disk says no")

    monkeypatch.setattr(model_card_module, "model_card", broken)
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="trl_pods.model_card"):
        main(_flags(tiny_model_path, out, "--max_steps", "1", "--save_steps", "1"))
    assert (out / "checkpoint-1" / "model.safetensors").is_file() and (out / "model.safetensors").is_file()
    warnings = [r.getMessage() for r in caplog.records if r.name == "trl_pods.model_card"]
    assert warnings and all("PODS model card not written" in w and "disk says no" in w for w in warnings)
    assert any(str(out / "checkpoint-1") in w for w in warnings)


def test_a_model_built_from_its_config_trains_beside_a_plain_readme(tiny_model_path, tmp_path, monkeypatch):
    """A model built from a config has ``_name_or_path == ""``, which the card read as the current folder: run from a
    checkout whose README has no YAML block, its first checkpoint crashed. Now its card says it has no base model,
    and its usage example does not load one from ``''``."""
    monkeypatch.chdir(tmp_path)
    Path("README.md").write_text("# A project checkout\n")
    pretrained, tokenizer = load(tiny_model_path)
    pretrained.config._name_or_path = ""  # as a config built in Python has it
    model = AutoModelForCausalLM.from_config(pretrained.config)
    config = pods_config(tmp_path / "run", pods_n=4, pods_m=2, per_device_train_batch_size=2, max_steps=1,
                         save_strategy="steps", save_steps=1)  # fmt: skip
    data = prompts_dataset()
    PODSGRPOTrainer(model, token_sum_reward, config, train_dataset=data, processing_class=tokenizer).train()
    card = (tmp_path / "run" / "checkpoint-1" / "README.md").read_text()
    assert "- **Base model:** none (a model built from its config" in card
    assert "from_pretrained('')" not in card


def test_the_output_folders_card_is_written_only_with_its_model(tiny_model_path, tmp_path):
    """TRL writes the output folder's card at every checkpoint: a run that never saved its model there (the README's
    quick start) left a card whose usage example loaded a folder without an adapter ("Can't find
    'adapter_config.json'"). The card now goes only where the model is: the checkpoint has one, the output folder
    gets one with `save_model`, and its usage example runs."""
    model, tokenizer = load(tiny_model_path)
    out = tmp_path / "run"
    config = pods_config(out, pods_n=4, pods_m=2, per_device_train_batch_size=2, max_steps=1, save_strategy="steps",
                         save_steps=1)  # fmt: skip
    peft = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = PODSGRPOTrainer(model, token_sum_reward, config, train_dataset=prompts_dataset(),
                              processing_class=tokenizer, peft_config=peft)  # fmt: skip
    trainer.train()
    assert (out / "checkpoint-1" / "README.md").is_file() and (out / "checkpoint-1" / "adapter_config.json").is_file()
    assert not (out / "README.md").exists(), "a card in a folder without the model"
    trainer.save_model()
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(_usage((out / "README.md").read_text()), namespace)
    assert type(namespace["model"]).__name__ == "PeftModelForCausalLM"


def test_a_card_names_its_base_model_portably_and_says_how_to_get_it(smollm2_cache, tmp_path):
    """The card named the base model by its absolute cache path (``/root/.cache/trl_pods/SmolLM2-135M-Instruct``),
    which means nothing once the run is shared. A folder that `trl_pods.smollm2` built is named by its Hub model, with
    the command that builds it, and the usage example loads the adapter on `fetch_smollm2()`; no path of the base
    folder is left in the card."""
    from trl_pods import smollm2

    base = smollm2_cache / smollm2.MODEL_NAME
    smollm2._write_card(base)
    model, tokenizer = load(base)
    trainer = PODSGRPOTrainer(
        model=model,
        reward_funcs=token_sum_reward,
        args=pods_config(tmp_path / "run", pods_n=4, pods_m=2, per_device_train_batch_size=2),
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"),
    )
    trainer.save_model()
    card = (tmp_path / "run" / "README.md").read_text()
    hub = f"[{smollm2.HUB_NAME}](https://huggingface.co/{smollm2.HUB_NAME})"
    assert f"- **Base model:** {hub} as `trl_pods.smollm2` builds it offline" in card
    assert "`python -m trl_pods.smollm2` builds it and prints its path" in card
    assert str(smollm2_cache) not in card
    usage = _usage(card)
    assert "from trl_pods.smollm2 import fetch_smollm2" in usage
    assert "base = AutoModelForCausalLM.from_pretrained(fetch_smollm2())" in usage

"""The PODS model card, in a run's folder and in each checkpoint: it names the method, the base model and how to load
the run, and its usage example runs (on the tiny model, as a LoRA run of `trl-pods train`)."""

import contextlib
import io
import re

from test_train_script import _flags

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
        assert f"- **Base model:** `{tiny_model_path}` (a local folder)" in card
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

"""`PODSGRPOTrainer`: `trl.GRPOTrainer` that generates N rollouts per prompt and trains on M of them.

A training batch goes through two phases, both built from `GRPOTrainer`'s own methods:

1. **Generate and select** (`trl_pods.phase1`, `trl_pods.selection`). The generation mode (`pods_generation`,
   `trl_pods.generation_modes`) decides, wave by wave, which prompts get how many rollouts (up to N); each wave goes
   through TRL's own batch preparation and `_generate` (environment resets, tool dictionaries, image insertion,
   `rollout_func`; `trl_pods.rollout_fields`) and the parent's `_calculate_rewards` scores each rollout once
   (gathered over processes). Rollouts are laid out in slots (row ``g * N + s`` is the ``s``-th rollout of group
   ``g``; NaN rewards where nothing was generated). The down-sampler picks M per prompt from the gathered
   ``[groups, N]`` reward matrix, so every process computes the same selection.
2. **Train on the kept rows.** The parent's `_generate_and_score_completions` runs on the kept rows only, with
   `_generate` and `_calculate_rewards` answering from the phase-1 results and the group size at M. Padding,
   masks, old/reference log-probs, the vLLM importance-sampling correction, advantages, metrics and the loss are
   TRL's code, and none of them sees a discarded rollout.

The data loader is sized for the generated rows: each prompt is repeated N times, and each process receives whole
prompt groups (`PODSConfig` checks the layout). This module holds only the methods TRL calls; each hands its work to
the module owning the concern: `phase1` (generation, scoring), `selection`, `reporting` (metrics, selection log,
completions table, token counts), `loss_seams` (D3S dropped groups, token selection, full-group advantages),
`rollout_fields` (what a kept row carries besides token ids: tool masks, environments, `rollout_func` fields,
images) and `resume` (exact-resume state).
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_trainer_module
from datasets import Dataset
from trl import GRPOTrainer
from trl.trainer.utils import get_config_model_id

from . import loss_seams, phase1, reporting, resume, rollout_fields, selection, trainer_steps
from .config import PODSConfig
from .cpu import set_up_cpu
from .down_sampling import get_down_sampler
from .generation_modes import build_generation_mode
from .losses import SEQUENCE_AVERAGE_LOSSES
from .model_card import PODSModelCard
from .paper import PODS_PAPER
from .prompt_order import DrawingSampler, EpochReplay, check_drawable
from .vllm_engine import colocate_engine
from .waves import GenerationMode


class PODSGRPOTrainer(PODSModelCard, GRPOTrainer):  # PODSModelCard: the model card's seams (`model_card`)
    """Drop-in replacement for `trl.GRPOTrainer` that trains on a down-sampled subset of the rollouts.

    Takes the same arguments as `GRPOTrainer`; `args` must be a [`PODSConfig`] (without `args`, a default one is
    built, its output directory named as `GRPOTrainer` names it). Evaluation is unchanged (no down-sampling). Tools,
    environments, `rollout_func` and vision inputs work with every generation mode (`rollout_fields`); what cannot be
    down-sampled is refused at construction (an image column of an iterable dataset at the first training step).
    """

    _tag_names = [*GRPOTrainer._tag_names, "pods"]
    _name, _paper = "PODS", PODS_PAPER  # the method and paper TRL's model card names
    # What the overridden seams read. With these class-level values every seam falls through to GRPOTrainer's
    # behaviour on an object that this __init__ did not set up (built by TRL's __init__, or by object.__new__).
    pods_n: int | None = None
    pods_m: int | None = None
    _pods_phase1: dict[str, Any] | None = None  # phase-1 results served to the parent in phase 2
    _loss_advantages: torch.Tensor | None = None  # the micro-batch's advantages, for token selection
    _token_selection: bool = False
    _generation_chunk_size: int | None = None
    _tokens_generated: int = 0  # prompt + completion tokens of every generated row, all processes, cumulative
    _count_step_sequences: bool = False  # dropped groups with a sequence-averaged loss: rescale its policy term
    _loss_forward: dict[str, Any] | None = None  # what the training forward computed, while it is rescaled
    _pods_mode: GenerationMode | None = None  # `pods_generation`: which prompts get how many rollouts, wave by wave
    _epoch_replay: EpochReplay | None = None  # the training sampler, told each epoch by `_run_epoch`
    _pods_pool: int = 1  # prompts the data loader reads per trained prompt (the mode's `prompts_read`)
    _pods_last_generation: tuple | None = None  # the last generation's timing, for a timed mode (`trainer_steps`)

    def __init__(self, model, reward_funcs=None, args: PODSConfig | None = None, *trainer_args, **trainer_kwargs):
        if args is None:  # as GRPOTrainer does
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = PODSConfig(f"{model_name.split('/')[-1]}-GRPO")
        if not isinstance(args, PODSConfig):
            raise TypeError(
                f"PODSGRPOTrainer needs `args=trl_pods.PODSConfig(...)`, got {type(args).__name__}. PODSConfig takes "
                "every GRPOConfig parameter plus pods_n, pods_m, pods_down_sampler and pods_advantage_scope."
            )
        set_up_cpu()  # without a GPU: DeepSpeed on the CPU, no pin-memory warning; the threads stay the program's
        with colocate_engine(args, grpo_trainer_module):
            super().__init__(model, reward_funcs, args, *trainer_args, **trainer_kwargs)
        columns = self.train_dataset.column_names if isinstance(self.train_dataset, Dataset) else []
        rollout_fields.check_supported(args, rollout_fields.features_in_use(self, columns))
        self._pods_mode = build_generation_mode(args)
        self._pods_pool = self._pods_mode.prompts_read
        if self._pods_mode.draws:
            check_drawable(self.train_dataset, args.pods_generation)
        self.pods_n, self.pods_m = args.pods_n, args.pods_m
        self.down_sampler = get_down_sampler(args.pods_down_sampler)
        self._generation_chunk_size = args.pods_generation_chunk_size
        self._count_step_sequences = args.pods_drop_constant_groups and args.loss_type in SEQUENCE_AVERAGE_LOSSES
        self._token_selection = loss_seams.token_selection_on(args)
        if self._token_selection:
            self.top_entropy_quantile = 0.0  # routes TRL's token-mask seam (get_high_entropy_mask) to D3S

    # ---------------------------------------------------------------- data layout: N rollouts per prompt

    def get_train_dataloader(self):
        # The sampler repeats every prompt pods_n times and each batch holds the prompts of pods_m-sized groups.
        with trainer_steps.generation_layout(self):
            return super().get_train_dataloader()

    def _get_train_sampler(self, dataset=None):
        # A resumed epoch keeps its order; a mode that draws (refill) reads its further prompts from it on demand.
        order = DrawingSampler if self._pods_mode is not None and self._pods_mode.draws else EpochReplay
        self._epoch_replay = order(super()._get_train_sampler(dataset))
        return self._epoch_replay

    def _run_epoch(self, *args, epoch: int, **kwargs):
        # Trainer's set_epoch does not reach the sampler through accelerate's SkipBatchSampler(BatchSamplerShard(..))
        # when a multi-process run resumes mid-epoch, so the epoch is handed to it here.
        if self._epoch_replay is not None:
            self._epoch_replay.start_epoch(epoch, self.state.global_step)
        return super()._run_epoch(*args, epoch=epoch, **kwargs)

    def set_initial_training_values(self, args, dataloader):
        values = super().set_initial_training_values(args, dataloader)
        if isinstance(self._epoch_replay, DrawingSampler) and args.max_steps > 0:  # refill epochs end when drawn out
            values = (sys.maxsize, *values[1:])  # as many epochs as max_steps takes
        return values

    def _init_training_state(self, max_steps, steps_per_epoch, epochs, resume_from_checkpoint, trial):
        position = super()._init_training_state(max_steps, steps_per_epoch, epochs, resume_from_checkpoint, trial)
        if isinstance(self._epoch_replay, DrawingSampler):  # a refill epoch is shorter than TRL's steps per epoch
            return resume.refill_position(self, resume_from_checkpoint, position)
        return position

    def _get_dataloader(self, dataset, description, batch_size, *args, **kwargs):
        if kwargs.get("is_training") and self.pods_n is not None:  # sized by TRL for the kept rows: pods_m per prompt
            batch_size = batch_size // self.pods_m * self.pods_n * self._pods_pool
        return super()._get_dataloader(dataset, description, batch_size, *args, **kwargs)

    # ---------------------------------------------------------------- the two phases

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.pods_n is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        rollout_fields.check_rows(self, inputs)  # e.g. the image column of an iterable dataset
        kept = self._generate_score_and_select(inputs)
        reporting.clear_completion_logs(self._logs)
        self._pods_phase1 = kept
        self.num_generations = kept["m"]  # the group size TRL's advantage code reads
        try:
            with rollout_fields.kept_environments(self, kept["rollouts"].environments, kept["local"]):
                output = super()._generate_and_score_completions(kept["inputs"])
        finally:
            self._pods_phase1 = None
            self.num_generations = self.pods_m
        if self.args.pods_advantage_scope == "all":
            loss_seams.use_full_group_advantages(output, kept["rewards"], kept["kept"], self)
        if self.args.pods_drop_constant_groups:
            output["pods_dropped"] = kept["dropped"].to(output["advantages"].device)
        if self.args.pods_log_all_rollouts:
            reporting.log_all_rollouts(self._logs, kept["all_rollouts"], self.reward_func_names)
        return output

    def _generate(self, prompts: list):
        if self._pods_phase1 is not None:
            return self._pods_phase1["generation"]
        return super()._generate(prompts)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._pods_phase1 is not None:
            return self._pods_phase1["rewards_per_func"]
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_score_and_select(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Phase 1: generate up to N per prompt as the generation mode decides, score every rollout once, keep M per
        prompt (same on every process); report it. Returns what phase 2 serves to TRL, for this process's kept rows."""
        args, tokens_seen = self.args, self.state.num_input_tokens_seen
        settings = trainer_steps.phase1_settings(self)
        rollouts = self._generate_and_score(inputs, settings)  # slot layout
        generation, rewards_per_func, counts, rows = (
            rollouts.generation, rollouts.rewards_per_func, rollouts.counts, rollouts.rows
        )  # fmt: skip
        m = selection.kept_per_step(args, self._progress(), len(inputs) // self.pods_n // self._pods_pool)
        chosen = selection.select_rollouts(
            rewards_per_func, counts, len(rows), m, settings.seed, settings, rollouts.chosen
        )
        if args.pods_log_all_rollouts:  # with the prompts as generated (after environment resets)
            all_rollouts = reporting.gather_all_rollouts(
                rollouts.prompts, generation[3], rewards_per_func, counts, chosen.kept,
                self.accelerator.process_index, self._pending_extra_logs,
            )  # fmt: skip
        reporting.filter_pending_extra_logs(self._pending_extra_logs, chosen.local, len(rows))
        reporting.count_tokens(self, tokens_seen, generation, chosen.local)
        fraction = loss_seams.token_fraction(args, self._progress()) if self._token_selection else None
        reporting.log_selection(self._metrics["train"], chosen, rollouts, args, fraction)
        if args.pods_selection_log:
            position = {
                "global_step": self.state.global_step,
                "generation": self._step % args.gradient_accumulation_steps,
            }
            main = self.accelerator.is_main_process
            prompts = [row.get("prompt") for row in rows[:: self.pods_n] if row is not None]  # the groups' prompts
            reporting.record_selection(args.output_dir, main, position, prompts, chosen, counts)
        return {
            "inputs": rollout_fields.kept_rows(rows, rollouts.prompts, rollouts.environments, chosen.local),
            "rollouts": rollouts,
            "local": chosen.local,
            "generation": selection.kept_generation(generation, chosen, args.pods_drop_constant_groups),
            "rewards_per_func": rewards_per_func[chosen.kept_rows.to(rewards_per_func.device)],
            "rewards": chosen.rewards,
            "kept": chosen.kept,
            "counts": counts,
            "m": m,
            "dropped": chosen.local_dropped,
            **({"all_rollouts": all_rollouts} if args.pods_log_all_rollouts else {}),
        }

    def _generate_and_score(self, inputs: list[dict[str, Any]], settings: selection.Phase1Settings) -> phase1.Rollouts:
        """Phase 1's rollouts in slot layout (`phase1.generate_and_score`: the generation mode's waves with this
        trainer's generation and reward steps, `trainer_steps`): the 8-tuple of `_generate`, the gathered rewards
        ``[G * N, F]`` and the rollouts per group ``[G]``, with what generating them cost."""
        steps = phase1.GenerationSteps(
            generate=partial(trainer_steps.generate_call, self, super()._generate_and_score_completions, []),
            score=partial(trainer_steps.score_own_rows, self),
            one_weight_load=partial(trainer_steps.one_weight_load_per_generation, self),
            draw=partial(trainer_steps.draw_prompts, self),
            group_keys=partial(trainer_steps.group_keys, self),
            timing=partial(trainer_steps.generation_timing, self),
        )
        rollouts = phase1.generate_and_score(inputs, settings, self._pods_mode, steps)
        trainer_steps.end_generation(self, rollouts)
        self._pending_extra_logs.update(rollouts.extra_columns)  # the reward functions' log_extra, in slot layout
        if rollouts.calls > 1 or rollouts.padding:  # one length entry over every rollout generated, padding excluded
            ends = [*self.eos_token_ids, self._tokenizer.pad_token_id]
            generation = rollouts.generation
            reporting.log_lengths_once(self._metrics["train"], rollouts.calls, generation[1], generation[2], ends)
        if rollouts.calls > 1 and self.tools:  # TRL's tool-call metrics, over every rollout generated
            reporting.log_tool_calls_once(self._metrics["train"], rollouts.call_rows)
        return rollouts

    def _progress(self) -> float:
        return self.state.global_step / max(self.state.max_steps - 1, 1)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        chunk = self._generation_chunk_size
        if chunk is None or len(prompt_ids) <= chunk:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, **kwargs)
        completion_ids = []
        with trainer_steps.one_weight_load_per_generation(self):
            for first in range(0, len(prompt_ids), chunk):  # peak generation memory is set by `chunk`, not by N
                ids, _ = super()._generate_single_turn(
                    prompt_ids[first : first + chunk], images, multimodal_fields, num_generations, **kwargs
                )
                completion_ids.extend(ids)
        return completion_ids, None

    # ---------------------------------------------------------------- loss: dropped groups, D3S token selection

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        if not self._count_step_sequences:
            return super()._prepare_inputs(generation_batch)
        buffered = self._buffered_inputs
        inputs = super()._prepare_inputs(generation_batch)
        if self._buffered_inputs is not buffered:  # a new generation, shuffled and split into micro-batches
            accumulation = self.args.gradient_accumulation_steps
            loss_seams.annotate_step_sequences(self._buffered_inputs, self.accelerator, accumulation)
        return inputs

    def _compute_loss(self, model, inputs):
        """TRL's loss; with dropped constant groups, a sequence-averaged policy term (with its KL) averages over the
        optimizer step's non-dropped sequences on all processes (`loss_seams.rescale_policy_term`)."""
        rescaled = inputs.get("pods_step_sequences") is not None  # set by loss_seams.annotate_step_sequences
        entropy_coef = loss_seams.applied_entropy_coef(self) if rescaled else 0.0
        self._loss_advantages = inputs["advantages"]  # read by get_high_entropy_mask (token selection)
        self._loss_forward = {} if rescaled else None
        try:
            loss = super()._compute_loss(model, inputs)
            forward = self._loss_forward
        finally:
            self._loss_advantages = self._loss_forward = None
        if not rescaled:
            return loss
        return loss_seams.rescale_policy_term(self, loss, inputs, forward, entropy_coef)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._loss_forward is not None:  # the training forward of a micro-batch whose policy term is rescaled
            self._loss_forward.update(entropies=entropies, aux_loss=aux_loss)
        return logps, entropies, aux_loss

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        """With D3S token selection, TRL's entropy-mask seam keeps exactly the top `pods_token_fraction` of tokens by
        |advantage| x entropy instead (`loss_seams.token_selection_weights`)."""
        if self._token_selection:
            fraction = loss_seams.token_fraction(self.args, self._progress())
            weights = loss_seams.token_selection_weights(self, self._loss_advantages, entropies, mask, fraction)
        else:
            weights = super().get_high_entropy_mask(entropies, mask, threshold)
        if self._loss_forward is not None:  # the entropy bonus of a rescaled micro-batch acts on these tokens
            self._loss_forward["entropy_mask"] = weights
        return weights

    # ---------------------------------------------------------------- resume: the position in the generation cycle

    def _save_checkpoint(self, model, trial) -> None:
        if self.pods_n is not None and self.args.save_only_model:  # Trainer saves no RNG state, where PODS's goes
            resume.save_model_only_state(self, trial)
        super()._save_checkpoint(model, trial)

    def _save_rng_state(self, output_dir: str) -> None:
        super()._save_rng_state(output_dir)
        if self.pods_n is not None:
            resume.save_state(self, output_dir)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        """Trainer calls this once when it resumes, just before the first step (`resume.load_state`)."""
        super()._load_rng_state(checkpoint)
        if checkpoint is not None and self.pods_n is not None:
            resume.load_state(self, checkpoint)

"""Worker of the multi-process tests: `torchrun --nproc_per_node K tests/multiprocess_run.py MODEL OUT [options]`, or
`... MODEL OUT [options] + OUT2 [options] + ...` for several runs in turn in one launch (each from the saved model,
with its own trainer and output folder; the processes, their imports and their process group are set up once).

Trains PODS for `--steps` optimizer steps (2) on a global batch of 2 prompts x 4 kept rows (whatever K is) and
writes, per rank, what that rank saw: its prompts, the gathered rewards, the selection, its advantages and the global
token count, so the test can compare ranks with each other and with a 1-process run.

`--generation deterministic` replaces only the sampling step by a deterministic function of (prompt, generation
call within the phase, index among the call's copies of the prompt), so a 1-process and a K-process run see identical
rollouts; `--generation real-vllm-colocate` / `real-vllm-server` (with `--server-port`) generate on a real vLLM
engine (the vLLM test environment; see tests/vllm_real.py); `--generation vllm-server` generates through the vLLM
stand-in in server mode (rank 0 calls the engine; TRL's real code gathers, deduplicates and scatters),
`--generation vllm-colocate-tp2` in colocate mode with tensor parallel size 2 (TRL's real all-gather and slicing
within the TP group).

`--adaptive` generates in waves (pods_n_initial 4, pods_n 8); `--reward sevens-constant` gives the prompts numbered 0
and 7 a constant reward, so their groups are topped up to 8 while the others stop after the first wave. With seed 0
the two steps draw prompts (4, 0) and (7, 3), one per rank: rank 1 alone tops up in the first step, rank 0 in the
second. `--budgeted` allocates 4 to 8 rollouts per prompt, 6 on average (each rank within its own share), from each
prompt's history; with `--prompts 4 --prompts-per-step 4` every prompt comes back every step (`--steps` of them), and
`--reward zero-solved` makes prompt 0 always solved (1) and the others coin flips (token-sum parity), so from the
second step prompt 0 gets 4 and its rank's other prompt 8. `--dynamic refill` draws further prompts (2 draws at most,
a pool of 2 prompts per trained prompt) and `--dynamic screened` pilots 4 rollouts of twice the prompts.

`--drop-constant` makes the groups of even prompts constant and drops them (prompts in order, so with 2 processes
rank 0 holds only dropped rows), recording each micro-batch's loss against TRL's; `--token-fraction` turns on token
selection and records the tokens each rank keeps; `--chunk-size` generates in rounds and records how many times
DeepSpeed ZeRO-3 gathered the weights for each generation, over all its rounds or waves (launch it with accelerate
and a ZeRO-3 config).
"""

import argparse
import json
import os
import sys
import zlib
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from helpers import (  # noqa: E402
    DroppedLossRecorder,
    constant_for_even_prompts,
    exit_together,
    load,
    pods_config,
    prompts_dataset,
    token_sum_reward,
    worker_runs,
    zero_solved_reward,
)

from trl_pods.cpu import set_up_cpu  # noqa: E402


class RecordingTrainer(DroppedLossRecorder):
    def __init__(self, *args, deterministic: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []
        self.token_counts = []
        self.weight_gathers = []
        self.deterministic = deterministic

    def get_high_entropy_mask(self, entropies, mask, threshold):
        weights = super().get_high_entropy_mask(entropies, mask, threshold)
        if self._token_selection:
            self.token_counts.append(dict(kept=int((weights > 0).sum()), valid=int(mask.sum())))
        return weights

    def _generate_and_score(self, inputs, settings):
        if not self.is_deepspeed_enabled:
            result = super()._generate_and_score(inputs, settings)
        else:
            with _counting_weight_gathers() as gathers:  # over every generation call (round, wave) of a generation
                result = super()._generate_and_score(inputs, settings)
            self.weight_gathers.append(len(gathers))
        self.rows = [row for row in (inputs if result.rows is None else result.rows) if row is not None]  # + drawn
        return result

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        if self.is_deepspeed_enabled or not self.deterministic:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, **kwargs)
        completions, copies = [], {}
        for ids in prompt_ids:
            copy = copies[tuple(ids)] = copies.get(tuple(ids), -1) + 1
            seed = zlib.crc32(json.dumps([ids, self.calls, copy]).encode())
            completions.append(torch.randint(10, 200, (6,), generator=torch.Generator().manual_seed(seed)).tolist())
        self.calls += 1
        return completions, None

    def _generate_score_and_select(self, inputs):
        self.calls = 0  # generation calls (waves) within this phase 1
        phase1 = super()._generate_score_and_select(inputs)
        rows = self.rows  # the loader's rows, and refill's drawn ones
        prompt_ids = self._tokenize_prompts([row["prompt"] for row in rows])[0]
        self.records.append(
            dict(
                prompts=[row["prompt"][0]["content"] for row in rows],
                kept_prompts=[row["prompt"][0]["content"] for row in phase1["inputs"]],
                kept=phase1["kept"].tolist(),
                counts=phase1["counts"].tolist(),
                rewards=phase1["rewards"].tolist(),
                prompt_ids_match=[list(p) for p in phase1["generation"][0]]
                == [prompt_ids[rows.index(row)] for row in phase1["inputs"]],
            )
        )
        return phase1

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.records[-1].update(
                advantages=output["advantages"].tolist(), num_items_in_batch=int(output["num_items_in_batch"])
            )
        return output


def sevens_constant_reward(prompts, completion_ids, **kwargs) -> list[float]:
    """0 for the prompts "What is i plus ..." with i = 0 or 7 (groups without contrast), else `token_sum_reward`."""
    sums = token_sum_reward(completion_ids)
    return [0.0 if int(p[0]["content"].split()[2]) % 7 == 0 else r for p, r in zip(prompts, sums, strict=True)]


@contextmanager
def _counting_weight_gathers():
    """Within the block, count the DeepSpeed ZeRO-3 gathers of the full weights (`GatheredParameters` entered)."""
    import deepspeed

    gathered_parameters = deepspeed.zero.GatheredParameters
    gathers, enter = [], gathered_parameters.__enter__

    def counting_enter(self):
        gathers.append(1)
        return enter(self)

    gathered_parameters.__enter__ = counting_enter
    try:
        yield gathers
    finally:
        gathered_parameters.__enter__ = enter


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--sampler", default="random")
    parser.add_argument(
        "--generation",
        default="model",
        choices=[
            "model",
            "deterministic",
            "vllm-server",
            "vllm-colocate-tp2",
            "real-vllm-colocate",
            "real-vllm-server",
        ],
    )
    parser.add_argument("--server-port", type=int, help="port of the real `trl vllm-serve` (real-vllm-server)")
    parser.add_argument("--m-start", type=int, help="ramp the kept count from this value to 4 (linear schedule)")
    parser.add_argument("--cross-group", action="store_true", help="D3S cross-group selection")
    parser.add_argument("--adaptive", action="store_true", help="adaptive over-generation: 4 first, up to 8")
    parser.add_argument("--budgeted", action="store_true", help="budgeted generation: 6 per prompt on average, 4-8")
    parser.add_argument(
        "--dynamic",
        choices=["refill", "screened", "auto"],
        help="refill (2 draws at most), screened (pilot 4 of twice the prompts) or auto (costs measured)",
    )
    parser.add_argument("--prompts", type=int, default=8, help="prompts in the data set (2: both in every step)")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps")
    parser.add_argument("--prompts-per-step", type=int, default=2, help="prompts per optimizer step, all ranks")
    parser.add_argument("--reward", default="token-sum", choices=["token-sum", "sevens-constant", "zero-solved"])
    parser.add_argument("--drop-constant", action="store_true", help="constant groups for even prompts, dropped")
    parser.add_argument("--loss-type", default="dapo")
    parser.add_argument("--token-fraction", type=float, default=1.0, help="D3S token selection")
    parser.add_argument("--accumulation", type=int, default=1, help="gradient accumulation steps")
    parser.add_argument("--chunk-size", type=int, help="generate in rounds of this many sequences")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    set_up_cpu()  # first, as `trl-pods train` does: DeepSpeed set up for the CPU before the config starts it
    world = int(os.environ.get("WORLD_SIZE", "1"))
    extra = {}
    if args.generation.startswith("vllm"):
        from vllm_standin import patch_trl

        patch_trl()
        extra = dict(use_vllm=True, vllm_mode=args.generation.split("-")[1], temperature=1.0)
        if args.generation == "vllm-colocate-tp2":
            extra.update(vllm_tensor_parallel_size=2)
    syncs = []
    if args.generation.startswith("real-vllm"):
        from vllm_real import MAX_MODEL_LENGTH, replace_nccl_weight_transfer

        extra = dict(use_vllm=True, vllm_mode=args.generation.split("-")[2], vllm_max_model_length=MAX_MODEL_LENGTH)
        if args.server_port:
            replace_nccl_weight_transfer(setattr, syncs)
            extra.update(vllm_server_base_url=f"http://127.0.0.1:{args.server_port}")
    if args.m_start:
        extra.update(pods_m_start=args.m_start, pods_schedule="linear")
    if args.cross_group:
        extra.update(pods_cross_group=True, pods_advantage_scope="all")
    if args.adaptive:
        extra.update(pods_generation="adaptive", pods_n_initial=4)
    if args.budgeted:
        extra.update(pods_generation="budgeted", pods_budget=6)
    if args.dynamic == "refill":
        extra.update(pods_generation="refill", pods_max_draws=2, pods_draw_coverage=0.0)
    if args.dynamic == "screened":
        extra.update(pods_generation="screened", pods_screen_ratio=2, pods_n_initial=4)
    if args.dynamic == "auto":
        extra.update(pods_generation="auto")
    if args.drop_constant:
        extra.update(pods_drop_constant_groups=True, shuffle_dataset=False, beta=0.1)
    model, tokenizer = load(args.model)
    config = pods_config(
        args.out,
        pods_n=8,
        pods_m=4,
        per_device_train_batch_size=4 * args.prompts_per_step // world // args.accumulation,
        gradient_accumulation_steps=args.accumulation,
        max_steps=args.steps,
        pods_down_sampler=args.sampler,
        ddp_backend="gloo" if world > 1 or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true" else None,
        pods_generation_chunk_size=args.chunk_size,
        loss_type=args.loss_type,
        pods_token_fraction=args.token_fraction,
        **extra,
    )
    trainer = RecordingTrainer(
        model,
        constant_for_even_prompts
        if args.drop_constant
        else {"sevens-constant": sevens_constant_reward, "zero-solved": zero_solved_reward}.get(
            args.reward, token_sum_reward
        ),
        config,
        train_dataset=prompts_dataset(args.prompts),
        processing_class=tokenizer,
        deterministic=args.generation == "deterministic",
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    logs = [
        {k: v for k, v in e.items() if k.startswith(("pods/", "reward", "sampling/"))}
        for e in trainer.state.log_history
    ]
    result = {
        "records": trainer.records,
        "logs": logs,
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
        "grad_norms": [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e],
        "world": world,
        "loss_records": getattr(trainer, "loss_records", []),
        "token_counts": trainer.token_counts,
        "weight_gathers": trainer.weight_gathers,
        "server_syncs": len(syncs),
    }
    if args.generation.startswith("vllm"):
        from vllm_standin import FakeVLLMGeneration

        engine = FakeVLLMGeneration.instances[-1]
        if args.generation == "vllm-server" and rank == 0:
            result["server_calls"] = [(len(prompts), n) for prompts, n in engine.vllm_client.calls]
        if args.generation == "vllm-colocate-tp2":
            result["engine"] = dict(max_num_seqs=engine.llm.max_num_seqs, calls=engine.llm.calls)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    for run in worker_runs(sys.argv[1:]):
        main(run)
    exit_together()

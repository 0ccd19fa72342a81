#!/usr/bin/env bash
# The device check for a lent CUDA GPU (about 10 minutes on an H200), writing under $OUT:
#   1. the smallest pair of the reasoning-gym race (benchmarks/time_to_target_rg.py): the pilot's trl.GRPOTrainer setting
#      against trl_pods's auto (the arm auto 16->4 (pods_n)) on $TASK (default basic_arithmetic, a task the race's
#      pilot chose), 2 seeds, $STEPS steps, an evaluation every $EVAL_EVERY steps on 200 held-out problems
#      -> $OUT/race_rg_pair.jsonl (outside the plan: labelled as the smallest pair on a GPU);
#   2. $ZERO_STEPS steps of the ZeRO-2 and ZeRO-3 recipes (recipes/accelerate/zero{2,3}.yaml) on one process, PODS
#      8 -> 4 on arithmetic, bf16 -> $OUT/zero{2,3}.json (step times and peak GPU memory, for docs/scaling.md).
# vLLM colocated on the GPU when vllm imports, else HF generate in the trainer (--engine hf).
#
#   MODEL=/path/to/SmolLM2-135M-Instruct OUT=out bash benchmarks/gpu_check.sh
#   MODEL=... bash benchmarks/gpu_check.sh --dry-run     # print the commands, run nothing (no GPU needed)
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [[ $# -gt 0 ]]; then
  if [[ $1 == --dry-run && $# -eq 1 ]]; then DRY=1
  else echo "error: unknown arguments '$*' (usage: MODEL=DIR OUT=DIR bash benchmarks/gpu_check.sh [--dry-run])" >&2; exit 2
  fi
fi
if [[ -z ${MODEL:-} ]]; then
  echo "error: set MODEL to a local model folder (python -m trl_pods.smollm2 prints SmolLM2-135M-Instruct's)" >&2; exit 2
fi
OUT=${OUT:-gpu_check_out}
TASK=${TASK:-reasoning_gym:basic_arithmetic}
STEPS=${STEPS:-20}
EVAL_EVERY=${EVAL_EVERY:-10}
ZERO_STEPS=${ZERO_STEPS:-6}
PY=${PYTHON:-python}
if [[ $DRY == 0 ]] && ! nvidia-smi > /dev/null 2>&1; then
  echo "error: no CUDA GPU (nvidia-smi fails): run it on a lent GPU machine, or with --dry-run" >&2; exit 2
fi
ENGINE=hf
if "$PY" -c "import vllm" > /dev/null 2>&1; then ENGINE=vllm-cuda; fi
run() { printf '+'; printf ' %q' "$@"; printf '\n'; if [[ $DRY == 0 ]]; then "$@"; fi; }
mkdir -p "$OUT"

run "$PY" benchmarks/time_to_target_rg.py --smoke --engine "$ENGINE" --model "$MODEL" --seeds 2 --steps "$STEPS" \
  --eval_every "$EVAL_EVERY" --held_out 200 --task "$TASK" \
  --arms "trl.GRPOTrainer 8, 1 step/gen, lr 2e-04" "auto 16->4 (pods_n)" --pair "$OUT/race_rg_pair.jsonl"

for stage in 2 3; do
  if [[ $DRY == 0 ]]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$OUT/zero$stage.memory" &
    SAMPLER=$!
  fi
  run "$PY" -m accelerate.commands.launch --config_file "recipes/accelerate/zero$stage.yaml" --num_processes 1 \
    scripts/train_pods.py --model_name_or_path "$MODEL" --task arithmetic --output_dir "$OUT/zero$stage" \
    --pods_n 8 --pods_m 4 --per_device_train_batch_size 4 --max_completion_length 16 --max_steps "$ZERO_STEPS" \
    --bf16 true --logging_steps 1 --save_strategy no --report_to none --disable_tqdm true
  if [[ $DRY == 0 ]]; then
    kill "$SAMPLER"
    "$PY" scripts/gpu_check_summary.py "$OUT/zero$stage" "$OUT/zero$stage.memory" "$stage" > "$OUT/zero$stage.json"
    cat "$OUT/zero$stage.json"
  fi
done

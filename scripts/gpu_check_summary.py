"""What `gpu_check.sh` measured in a ZeRO recipe's few steps on one CUDA GPU, for docs/scaling.md: the steps' times
from the run's ``trainer_state.json`` (TRL's ``step_time``; the first step, the warm-up, reported apart) and the peak
GPU memory the ``nvidia-smi`` samples saw while it ran.

    python scripts/gpu_check_summary.py RUN_DIR MEMORY_LOG STAGE > zero2.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def summarize(run_dir: Path, memory_log: Path, stage: int) -> dict:
    """Step times and peak memory of one ZeRO run: ``{"stage", "steps", "first_step_s", "median_step_s",
    "peak_memory_mib", "samples"}``.

    Raises:
        ValueError: the run logged no step time, or the memory log holds no sample (the check did not run).
    """
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    times = [entry["step_time"] for entry in history if "step_time" in entry]
    samples = [int(line.split(",")[0]) for line in memory_log.read_text().split() if line.strip().isdigit()]
    if not times or not samples:
        raise ValueError(f"{run_dir}: {len(times)} step times, {memory_log}: {len(samples)} memory samples.")
    return {
        "stage": stage,
        "steps": len(times),
        "first_step_s": times[0],
        "median_step_s": statistics.median(times[1:] or times),
        "peak_memory_mib": max(samples),
        "samples": len(samples),
    }


if __name__ == "__main__":
    print(json.dumps(summarize(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))))

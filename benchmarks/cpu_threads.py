"""CPU threads for the offline demo: step time with 1 and 2 threads, on an idle machine and beside a busy process.

Each point trains the demo's configuration (SmolLM2-135M-Instruct + LoRA, PODS 8 -> 4, one prompt per step) for a few
steps in a fresh process with ``OMP_NUM_THREADS`` set, and reads TRL's per-step ``step_time``. "Busy" runs one other
single-threaded CPU-bound process (a Python busy loop) for the whole point, as a user's other work would. The first
step (warm-up) is reported apart. Points run interleaved (all conditions once, then again), so drift in the machine's
background load spreads over all of them.

    python benchmarks/cpu_threads.py             # threads {1, 2} x {idle, busy}, 3 steps, 2 repeats
    python benchmarks/cpu_threads.py --quick     # 2 steps, 1 repeat, nothing written
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _report import REPO, environment, write_section

BUSY_LOOP = "while True: pass"


def measure(steps: int) -> list[float]:
    """Run in a child process: train the demo's configuration for ``steps`` steps; return each step's time."""
    from trl_pods.demo import demo_arguments
    from trl_pods.smollm2 import fetch_smollm2
    from trl_pods.train import train

    with tempfile.TemporaryDirectory() as out:
        arguments = demo_arguments(fetch_smollm2(), Path(out), max_steps=steps, save_steps=10_000)
        trainer = train(*arguments)
    return [e["step_time"] for e in trainer.state.log_history if "step_time" in e]


def run_point(threads: int, busy: bool, steps: int) -> dict:
    code = f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import cpu_threads as c, json; "
    code += f"print('RESULT', json.dumps(c.measure({steps})))"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    load = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    finally:
        if load is not None:
            load.kill()
            load.wait()
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    times = json.loads(line.removeprefix("RESULT "))
    return {"threads": threads, "busy": busy, "first": times[0], "steps": times[1:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 steps, 1 repeat; print only")
    args = parser.parse_args()
    steps, repeats = (2, 1) if args.quick else (3, 2)
    conditions = [(threads, busy) for busy in (False, True) for threads in (1, 2)]
    points = [run_point(t, b, steps) for _ in range(repeats) for t, b in conditions]
    summary = {}
    for threads, busy in conditions:
        runs = [p for p in points if (p["threads"], p["busy"]) == (threads, busy)]
        later = [s for p in runs for s in p["steps"]]
        summary[(threads, busy)] = (statistics.median(later), max(later), statistics.median(p["first"] for p in runs))
        print(threads, "busy" if busy else "idle", summary[(threads, busy)])
    if args.quick:
        return
    rows = "\n".join(
        f"| {threads} | {'busy' if busy else 'idle'} | {med:.1f} | {worst:.1f} | {first:.1f} |"
        for (threads, busy), (med, worst, first) in summary.items()
    )
    idle = summary[(1, False)][0] / summary[(2, False)][0]
    busy = summary[(2, True)][0] / summary[(1, True)][0]
    write_section(
        "cpu_threads",
        f"""## CPU threads for the offline demo: idle and beside a busy process

Seconds per training step of `trl-pods demo`'s configuration (SmolLM2-135M-Instruct + LoRA, PODS 8 → 4, one prompt
of 16-token completions per step) with `OMP_NUM_THREADS` = 1 or 2, on the idle machine and beside one other
single-threaded CPU-bound process. Steps after the first: median and worst of {repeats} × {steps - 1} steps; the
first step apart (warm-up).

| threads | machine | s/step (median) | s/step (worst) | first step (s) |
|---|---|---|---|---|
{rows}

- Idle, 1 thread costs {idle:.2f}× the time of 2 threads; beside a busy process, 2 threads cost {busy:.1f}× the time
  of 1 thread. OpenMP threads that wait for a core held by another process stall every matrix product.
- So `trl-pods demo` uses every core but one (`trl_pods.demo.cpu_threads`; 1 thread on a 2-core machine) unless
  `OMP_NUM_THREADS` is set. For `trl-pods train` and `trl-pods eval` on a CPU, set `OMP_NUM_THREADS` the same way.
- The issue that asked for this reported worse stalls on another 2-core machine (62–145 s per step with 2 threads
  beside a busy process); the direction is the same.
- Command: `python benchmarks/cpu_threads.py` (nothing else running but the benchmark's own busy process)
{environment()}
""",
    )


if __name__ == "__main__":
    main()

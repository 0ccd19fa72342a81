"""The offline demo's report and thread choice (the demo itself runs end to end in CI)."""

import pytest

from trl_pods.demo import cpu_threads, verdict


def test_verdict_says_plainly_when_training_ended_worse_and_names_the_best_checkpoint():
    """A run cut short by the time guard that ends below the base model must say so, and point to the best
    checkpoint (or to the base model when no checkpoint beats it) instead of presenting the last one."""
    lines = verdict([(0, 0.46), (10, 0.52), (20, 0.42)], steps_planned=40)
    assert lines[0] == "held-out accuracy: 0.46 before -> 0.42 after 20 PODS steps"
    assert any("stopped training at step 20 of 40" in line for line in lines)
    assert any(line.startswith("WARNING") and "worse than the base model" in line for line in lines)
    assert any("checkpoint-10 (0.52)" in line for line in lines)

    lines = verdict([(0, 0.46), (4, 0.40)], steps_planned=4)
    assert any("keep the base model" in line for line in lines)
    assert not any("stopped" in line for line in lines)


def test_verdict_is_quiet_when_the_last_checkpoint_is_the_best():
    """A normal run (the last checkpoint best, all steps done) reports before and after, nothing else."""
    assert verdict([(0, 0.46), (20, 0.78), (40, 0.88)], steps_planned=40) == [
        "held-out accuracy: 0.46 before -> 0.88 after 40 PODS steps"
    ]


@pytest.mark.parametrize(("env", "cores", "expected"), [(None, 2, 1), (None, 1, 1), (None, 16, 15), ("3", 2, 3)])
def test_cpu_threads_leaves_a_core_free_unless_the_user_chose(monkeypatch, env, cores, expected):
    """One core is left to other processes (2 cores -> 1 thread); OMP_NUM_THREADS, when set, wins."""
    if env is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", env)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    assert cpu_threads() == expected

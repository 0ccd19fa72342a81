"""A run that cannot learn says so (`trl_pods.no_signal`): one warning once `FLAT_STEPS` steps in a row trained no
group with contrast (counted across logs of several steps, restarted by a step with contrast), and one line at the end
of a run whose every logged step had none. The command's own run is in tests/test_train_script.py."""

import logging
from types import SimpleNamespace

import pytest

from trl_pods.no_signal import FLAT, FLAT_STEPS, NoSignalWarning, no_signal_line


def _warnings(logs: list[tuple[int, float]], caplog) -> list[str]:
    """The warnings of a `NoSignalWarning` given ``(step, frac_reward_zero_std)`` logs."""
    callback = NoSignalWarning()
    with caplog.at_level(logging.WARNING, logger="trl_pods.no_signal"):
        for step, value in logs:
            callback.on_log(None, SimpleNamespace(global_step=step, is_world_process_zero=True), None, {FLAT: value})
    return [record.getMessage() for record in caplog.records if record.name == "trl_pods.no_signal"]


@pytest.mark.parametrize(
    ("logs", "expected"),
    [
        ([(step, 1.0) for step in range(1, FLAT_STEPS)], None),
        ([(step, 1.0) for step in range(1, 3 * FLAT_STEPS)], f"Steps 1-{FLAT_STEPS} "),
        ([(step, 1.0) for step in range(5, 2 * FLAT_STEPS + 1, 5)], f"Steps 1-{FLAT_STEPS} "),  # a log every 5 steps
        ([(1, 1.0), (2, 0.75)] + [(step, 1.0) for step in range(3, FLAT_STEPS + 3)], f"Steps 3-{FLAT_STEPS + 2} "),
        ([(step, 1.0 if step % FLAT_STEPS else 0.5) for step in range(1, 3 * FLAT_STEPS)], None),
    ],
    ids=["too few", "once", "logs of several steps", "restarted by contrast", "contrast every few steps"],
)
def test_a_run_of_steps_without_contrast_warns_once(logs, expected, caplog):
    """One warning, naming the steps, once `FLAT_STEPS` steps in a row had no trained group with contrast; none before,
    none again, and none where a step with contrast comes in time."""
    warnings = _warnings(logs, caplog)
    if expected is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warnings[0].startswith(expected + "trained no group with contrast"), warnings


def test_the_end_line_only_where_no_logged_step_had_contrast():
    """The closing line is there only where every step that logged the metric had no group with contrast; a run that
    logged none says nothing."""
    assert no_signal_line([]) is None and no_signal_line([{"loss": 0.0}]) is None
    assert no_signal_line([{FLAT: 1.0}, {FLAT: 0.5}]) is None
    assert "nothing was learned" in no_signal_line([{FLAT: 1.0, "loss": 0.0}, {"train_runtime": 1.0}, {FLAT: 1.0}])

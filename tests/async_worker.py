"""TRL's asynchronous rollout loop in the test process, without a server: what the tests of the PODS worker share.

`rollout_loop` builds TRL's loop (or PODS's subclass) with plain queues in place of the worker's process channels.
`ScriptedEngine` stands in for the `vllm serve` the loop talks to: it replaces the one call that reaches the server
(`_generate_one_turn`, an HTTP request) with a script of first tokens per prompt, so TRL's own generate and score loops
run unchanged around it (environments drawn and reset per rollout, the in-flight cap, the scoring queue, the rollout
queue). `run_until` runs both loops until a condition holds, as the worker's child runs them until it is stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import queue
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from accelerate.state import PartialState
from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

from trl_pods.async_grpo import DroppedGroupReports, PODSAsyncGRPOConfig, PODSRolloutLoop
from trl_pods.streaming import build_stream_mode

SCORED: list[tuple[list[int], list[int]]] = []  # every reward call in this process: its prompts, first tokens


def first_token_reward(prompts, completion_ids, **kwargs) -> list[float]:
    """The first completion token's id, so a test chooses each rollout's reward; records the call in `SCORED`."""
    SCORED.append(([prompt_of(prompt[-1]["content"]) for prompt in prompts], [ids[0] for ids in completion_ids]))
    return [float(ids[0]) for ids in completion_ids]


def prompts(count: int) -> list[dict]:
    """Dataset rows "prompt i" for i < ``count``."""
    return [{"prompt": [{"role": "user", "content": f"prompt {i}"}]} for i in range(count)]


def prompt_of(text: str) -> int:
    """``i`` of the last "prompt i" in ``text`` (a rendered conversation)."""
    return int(re.findall(r"prompt (\d+)", text)[-1])


def reports(maxsize: int = 0) -> DroppedGroupReports:
    """The worker-to-trainer report channel, both ends in this process: a plain queue, a real shared integer."""
    return DroppedGroupReports(queue.Queue(maxsize=maxsize), multiprocessing.get_context("spawn").Value("q", 0))


def rollout_loop(
    cls: type,
    tokenizer,
    dataset: list[dict],
    num_generations: int,
    metrics: queue.Queue | None = None,
    inflight: int = 4,
    **kwargs: Any,
) -> _AsyncRolloutLoop:
    """TRL's rollout loop (or a subclass), in this process: a plain queue for the rollouts and one for the metrics, and
    the policy version a namespace (``kwargs["model_version_value"]``, else 0 throughout). Accelerate's state is set
    up first, as TRL's child process does: the loop logs through accelerate."""
    PartialState()
    kwargs.setdefault("model_version_value", SimpleNamespace(value=0))
    return cls(
        model_name="tiny",
        dataset=dataset,
        reward_funcs=[first_token_reward],
        processing_class=tokenizer,
        eos_token_ids=[tokenizer.eos_token_id],
        rollout_buffer=queue.Queue(),
        heartbeat_value=SimpleNamespace(value=0.0),
        failed_event=None,
        exception_info_queue=None,
        metrics_queue=queue.Queue() if metrics is None else metrics,
        num_generations=num_generations,
        max_inflight_tasks=inflight,
        **kwargs,
    )


def pods_loop(
    tokenizer, dataset: list[dict], channel: DroppedGroupReports | None = None, loop_class: type | None = None,
    **settings: Any,
):  # fmt: skip
    """`PODSRolloutLoop` (with `ScriptedEngine`; or ``loop_class``) as `PODSAsyncGRPOTrainer` builds it from a
    `PODSAsyncGRPOConfig` of the ``settings`` that are config fields; the others (`script`, `metrics`, `inflight`,
    TRL's loop arguments) go to `rollout_loop`."""
    fields = {spec.name for spec in dataclasses.fields(PODSAsyncGRPOConfig)}
    loop_settings = {key: settings.pop(key) for key in list(settings) if key not in fields}
    config = PODSAsyncGRPOConfig("unused", use_cpu=True, **settings)
    return rollout_loop(
        loop_class or ScriptedPODSLoop,
        tokenizer,
        dataset,
        1,
        pods_n=config.pods_n,
        pods_m=config.pods_m,
        pods_down_sampler=config.pods_down_sampler,
        pods_advantage_scope=config.pods_advantage_scope,
        pods_mode=build_stream_mode(config),
        pods_window=config.pods_window,
        pods_seed=config.seed,
        dropped_groups=reports() if channel is None else channel,
        **loop_settings,
    )


class ScriptedEngine:
    """In place of the server: the ``k``-th turn generated for prompt ``i`` (counted in the order requests are made)
    from the rendered prompt ``text`` is the token ``script(i, k, text)`` then end of sequence, each with log-prob -1.
    Records, per prompt, the rendered prompt of every request (`requests`)."""

    def __init__(self, *args: Any, script: Callable[[int, int, str], int] = lambda i, k, text: 10, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.script = script
        self.requests: dict[int, list[str]] = {}

    async def _generate_one_turn(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        await asyncio.sleep(0)  # let other rollouts in flight advance, as a server would
        text = self.tokenizer.decode(prompt_ids)
        made = self.requests.setdefault(prompt_of(text), [])
        made.append(text)
        return [self.script(prompt_of(text), len(made) - 1, text), self.eos_token_ids[0]], [-1.0, -1.0]


class ScriptedTRLLoop(ScriptedEngine, _AsyncRolloutLoop):
    """TRL's rollout loop on the scripted engine."""


class ScriptedPODSLoop(ScriptedEngine, PODSRolloutLoop):
    """PODS's rollout loop on the scripted engine; records every window it is done with (`windows`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.windows = []

    def _queue(self, done):
        self.windows.append(done)
        return super()._queue(done)


def run_until(loop: _AsyncRolloutLoop, done: Callable[[], bool]) -> list:
    """Run the loop's generate and score loops until ``done()``, then stop them as the worker's stop event does;
    the rows it queued, in order."""

    async def run() -> None:
        stop = asyncio.Event()

        async def watch() -> None:
            while not done():
                await asyncio.sleep(0.001)
            stop.set()

        await asyncio.gather(loop._generate_loop(stop), loop._score_loop(stop), watch())

    try:
        loop._loop.run_until_complete(asyncio.wait_for(run(), timeout=60))
    finally:
        loop._loop.close()
        loop._tool_pool.shutdown()
    return [loop.rollout_buffer.get_nowait() for _ in range(loop.rollout_buffer.qsize())]


def pushed_metrics(loop: _AsyncRolloutLoop) -> dict[str, list]:
    """Every value each ``pods/`` metric was pushed with, in order."""
    values: dict[str, list] = {}
    while True:
        try:
            payload = loop._metrics_queue.get_nowait()
        except queue.Empty:
            return values
        for key, value in payload.items():
            if key.startswith("pods/"):
                values.setdefault(key, []).append(value)

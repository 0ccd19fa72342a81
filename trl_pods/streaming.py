"""Generation modes in the asynchronous rollout worker: its stream of prompts, decided window by window.

TRL's asynchronous worker (`trl_pods.async_grpo`) has no batch. It keeps a number of rollouts in flight, and each time
one finishes it starts the next. `PromptStream` decides which rollouts those are, with the synchronous trainer's
generation modes (`trl_pods.waves.GenerationMode`). It cuts the stream of prompts into *windows* of consecutive
prompts and runs each window as one generation of the mode, on one process:

1. `work` yields the next rollout to generate, as ``(work id, prompt's row)``: the open windows' next waves first,
   else the first wave of a new window;
2. the worker hands each generated rollout back through `generated`; once a group's part of its window's wave has
   come back, the worker scores it (TRL's reward functions, one prompt per call as in TRL) and passes the rewards to
   `scored`;
3. once every group of the wave is scored, the mode sees the rewards (`WaveState`) and gives its next wave, or none:
   then the window is done, and `scored` returns its groups (`StreamGroup`: rewards and rollouts in slot order,
   trained or dropped as the mode chose) with the mode's metrics.

Many windows are in flight at once, each with its own fork of the mode (`GenerationMode.fork`) that shares what the
mode keeps across generations (budgeted generation's prompt history). A window is ``pods_window`` x the mode's
`prompts_read` prompts (`window_size` gives the defaults):

* fixed, refill and adaptive decide each prompt alone, so a window is one prompt, and a prompt's top-ups wait for no
  other prompt;
* budgeted spends ``pods_budget x window`` rollouts among the window's prompts, from their history: the window is the
  batch that the budget is an average over, and a window of one prompt would give every prompt the same count;
* screened pilots ``pods_screen_ratio x window`` prompts and trains on the ``window`` its rule picks from them (a
  rule ranks prompts against each other: "frontier" reserves a quarter of its picks for unsolved prompts).

Refill needs no draws in a stream: the worker goes on to the next prompt anyway. Its stream form (`StreamRefillMode`)
generates N per prompt and drops the groups without contrast. A mode that draws further prompts into its generation
(`GenerationMode.draws`) is refused.

This module imports only torch.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .adaptive import has_contrast
from .generation_modes import build_generation_mode, get_generation_mode
from .waves import FixedMode, GenerationMode, Wave, WaveState

__all__ = ["PromptStream", "StreamGroup", "StreamRefillMode", "WindowResult", "build_stream_mode", "window_size"]

WINDOWS = {"budgeted": 8, "screened": 8}  # default prompts per window (trained ones for screened); others: 1


class StreamRefillMode(FixedMode):
    """``pods_generation="refill"`` in the stream: ``N`` rollouts per prompt, trained only if they show contrast. The
    synchronous refill draws further prompts for the groups without contrast; the stream goes on to them anyway."""

    def chosen(self, state: WaveState) -> torch.Tensor:
        return has_contrast(state.rewards)


STREAM_MODES: dict[str, Callable[[Any], GenerationMode]] = {"refill": StreamRefillMode}


def build_stream_mode(config: Any) -> GenerationMode:
    """The mode of ``config.pods_generation`` for the stream: its stream form (refill), or the synchronous trainer's
    mode (`trl_pods.generation_modes`, a registered name or a dotted path), which must not draw prompts (checked on
    the mode's class before it is built, as a drawing mode reads settings only the synchronous trainer has)."""
    name = config.pods_generation
    if name in STREAM_MODES:
        return STREAM_MODES[name](config)
    if getattr(get_generation_mode(name), "draws", False):
        _refuse_drawing(name)
    mode = build_generation_mode(config)
    if mode.draws:
        _refuse_drawing(name)
    return mode


def _refuse_drawing(name: str) -> None:
    raise ValueError(
        f"pods_generation={name!r} draws further prompts into a generation (GenerationMode.draws), which the "
        "asynchronous worker does not do: it never runs out of prompts to go on to. Use 'refill' (groups without "
        "contrast are dropped), or choose which prompts to train on in `chosen`, as 'refill' and 'screened' do."
    )


def window_size(generation: str) -> int:
    """The default prompts per window (trained ones, for screened) of a mode (see the module docstring)."""
    return WINDOWS.get(generation, 1)


@dataclass(frozen=True)
class StreamGroup:
    """A prompt whose window is done: its id in the stream, its ``rewards`` ``[N]`` and its ``rollouts`` (the results
    the worker scored) in slot order (NaN past the rollouts it got), and whether the mode chose it for training."""

    prompt: int
    rewards: torch.Tensor
    rollouts: list[Any]
    trained: bool


@dataclass(frozen=True)
class WindowResult:
    """A window that is done: its groups, and the mode's metrics (`GenerationMode.metrics`)."""

    groups: list[StreamGroup]
    metrics: dict[str, float]


@dataclass
class _Window:
    """One generation of the mode: its prompts (ids and rows), its `WaveState`, the results of each group's filled
    slots, and of the current wave, the rollouts still out per group and those back but not yet scored."""

    mode: GenerationMode
    state: WaveState
    prompts: list[int]
    rows: list[Any]
    slots: list[list[Any]]
    outstanding: dict[int, int] = field(default_factory=dict)  # group -> rollouts of the wave not yet scored
    arrived: dict[int, list[Any]] = field(default_factory=lambda: collections.defaultdict(list))


class PromptStream:
    """The worker's stream of prompts, run window by window through a generation mode (see the module docstring).

    Args:
        mode: the mode (`build_stream_mode`), forked for each window.
        n: the most rollouts a prompt may get (`pods_n`).
        m: rollouts kept per trained prompt (`pods_m`), which a trained prompt must have.
        window: prompts per window, times the mode's `prompts_read`; trained prompts per window for a mode that
            chooses (its `WaveState.share`).
        seed: seed of the first window's random decisions; each later window's is one more.
        key: ``row -> int``, a digest of a prompt's row (budgeted generation's history is keyed by it).
    """

    def __init__(self, mode: GenerationMode, n: int, m: int, window: int, seed: int, key: Callable[[Any], int]):
        self.mode, self.n, self.m, self.window, self.key = mode, n, m, window, key
        self.seeds = itertools.count(seed)
        self.work_ids = itertools.count()
        self.queue: collections.deque[tuple[int, Any]] = collections.deque()  # (work id, row) to generate
        self.owner: dict[int, tuple[_Window, int]] = {}  # work id -> its window and group

    def work(self, prompts: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        """``(work id, row)`` of every rollout to generate, without end: the open windows' next waves first, then a
        new window of prompts from ``prompts`` (``(prompt id, row)``, one per prompt)."""
        while True:
            if not self.queue:
                self._open([next(prompts) for _ in range(self.mode.prompts_read * self.window)])
            yield self.queue.popleft()

    def generated(self, work_id: int, rollout: Any) -> tuple[Any, int, list[Any]] | None:
        """Take back the generated rollout of ``work_id``. Once its group's part of the wave is complete: the window
        (a handle for `scored`), the group, and the part's rollouts in the order they came back; else None."""
        window, group = self.owner.pop(work_id)
        arrived = window.arrived[group]
        arrived.append(rollout)
        return (window, group, window.arrived.pop(group)) if len(arrived) == window.outstanding[group] else None

    def scored(self, window: Any, group: int, rewards: Sequence[float], results: Sequence[Any]) -> WindowResult | None:
        """The rewards of a group's part of the wave (NaN: unscorable), and what the worker keeps of each rollout, in
        the order `generated` gave them. Returns the window's result once the mode is done with it, else None."""
        state = window.state
        first = int(state.counts[group])
        state.rewards[group, first : first + len(rewards)] = torch.tensor(rewards, dtype=state.rewards.dtype)
        state.counts[group] += len(rewards)
        window.slots[group].extend(results)
        del window.outstanding[group]
        if window.outstanding:  # other groups of the wave are still out
            return None
        wave = window.mode.next_wave(state)
        if wave is not None:
            self._start(window, wave, first=False)
            return None
        return self._finish(window)

    def _open(self, prompts: list[tuple[int, Any]]) -> None:
        ids, rows = (list(column) for column in zip(*prompts, strict=True))
        groups = len(rows)
        state = WaveState(
            n=self.n,
            processes=1,
            groups_per_process=groups,
            share=self.window,
            rewards=torch.full((groups, self.n), torch.nan, dtype=torch.float64),  # TRL scores in float64
            counts=torch.zeros(groups, dtype=torch.long),
            drawn=torch.ones(groups, dtype=torch.bool),
            seed=next(self.seeds),
            group_keys=lambda: [self.key(row) for row in rows],
        )
        window = _Window(self.mode.fork(), state, ids, rows, [[] for _ in rows])
        self._start(window, window.mode.first_wave(state), first=True)

    def _start(self, window: _Window, wave: Wave, first: bool) -> None:
        """Queue the wave's rollouts: a first wave behind what is queued, a later one ahead of it (an open window
        goes first)."""
        if wave.draw is not None or int(wave.sizes.sum()) == 0 or (wave.sizes < 0).any():
            raise ValueError(
                f"A wave of pods_generation's mode ({type(window.mode).__name__}) must give rollouts to some of the "
                "window's groups and draw no prompts: the asynchronous worker carries out no other waves."
            )
        state, items = window.state, []
        if (state.counts[wave.groups] + wave.sizes > self.n).any():
            raise ValueError(f"{type(window.mode).__name__} gave a prompt more than pods_n ({self.n}) rollouts.")
        for group, size in zip(wave.groups.tolist(), wave.sizes.tolist(), strict=True):
            if size:
                window.outstanding[group] = size
            for _ in range(size):
                work_id = next(self.work_ids)
                self.owner[work_id] = (window, group)
                items.append((work_id, window.rows[group]))
        state.calls += 1
        state.generated += len(items)
        if first:
            self.queue.extend(items)
        else:
            self.queue.extendleft(reversed(items))

    def _finish(self, window: _Window) -> WindowResult:
        state = window.state
        window.mode.finished(state)
        chosen = window.mode.chosen(state)
        trained = torch.ones(len(window.rows), dtype=torch.bool) if chosen is None else chosen
        short = trained & (state.counts < self.m)
        if short.any():
            raise ValueError(
                f"{type(window.mode).__name__} chose a prompt with {int(state.counts[short][0])} rollouts to train "
                f"on, fewer than the pods_m ({self.m}) it keeps."
            )
        groups = [
            StreamGroup(prompt, state.rewards[g], window.slots[g], bool(trained[g]))
            for g, prompt in enumerate(window.prompts)
        ]
        return WindowResult(groups, window.mode.metrics(state))

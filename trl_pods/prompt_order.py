"""The order the training prompts are read in: TRL's, replayed exactly on resume, and refill's draws on demand.

**Resume** (`EpochReplay`). TRL's `RepeatSampler` draws one permutation per epoch from a generator seeded once, so a
run resumed at a later epoch would start the sequence again; `EpochReplay` gives epoch ``e`` the ``e``-th permutation
however training got there.

**Refill** (`DrawingSampler`). With ``pods_generation="refill"`` (DAPO's dynamic sampling) a generation starts from the
``B`` prompts the data loader gives it and draws further prompts, ``N`` rollouts each, only for the groups without
contrast it must replace. Those further prompts come from the same epoch's order, on demand, as DAPO pulls its next
batch only when it needs one: the data loader gets TRL's order from the front (TRL's generation batches, chunk after
chunk), and `DrawingSampler.draw` takes prompts from the back of that order, inward. The two meet in the middle, so
over an epoch every prompt is generated for exactly once: by the loader, or by a draw. Only the remainder that fills
no whole generation batch is left, as TRL's sampler leaves it.

The loader may read ahead (accelerate fetches the next batch while this one trains; workers prefetch more): a draw
takes only prompts that no batch has been handed yet (``front``), and a batch is handed only if all its prompts are
still undrawn. The front's batches depend on the order alone, so a resumed run that skips the epoch's first batches
gets the same ones; only the count drawn from the back (`DrawingSampler.state`) must be restored, before the epoch is
iterated again.

An epoch therefore ends when its prompts run out, after fewer optimizer steps than TRL's ``len(dataloader)`` counts:
the trainer keeps a ``max_steps`` run going over as many epochs as it takes, and resumes a checkpoint at the epoch
and step the uninterrupted run was at (`trl_pods.resume.refill_position`).
"""

from __future__ import annotations

from typing import Any

import torch
from datasets import IterableDataset
from torch.utils.data import IterableDataset as TorchIterableDataset
from torch.utils.data import Sampler


class EpochReplay(Sampler):
    """TRL's `RepeatSampler` whose epoch ``e`` yields the ``e``-th order of its seeded sequence, however training
    got there: before each pass the generator is re-seeded and the permutations of earlier epochs drawn again, so an
    uninterrupted run sees TRL's order and a run resumed at epoch ``e`` the same (Trainer calls `set_epoch`)."""

    def __init__(self, sampler: Any):
        self.sampler, self.epoch = sampler, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def start_epoch(self, epoch: int, step: int) -> None:
        """The trainer's epoch ``epoch`` begins (or resumes) at optimizer step ``step``."""
        self.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        self._reseed()
        return iter(self.sampler)

    def _reseed(self) -> None:
        """Put the sampler's generator where TRL's uninterrupted run has it at the start of this epoch."""
        sampler = self.sampler
        if sampler.shuffle and sampler.seed is not None:
            sampler.generator.manual_seed(sampler.seed)
            for _ in range(self.epoch):
                torch.randperm(sampler.num_samples, generator=sampler.generator)


class DrawingSampler(EpochReplay):
    """TRL's `RepeatSampler` order (per epoch as `EpochReplay` replays it), handed out in generation batches from the
    front while `draw` takes single prompts from the back. Every process holds one and makes the same draws, so
    their states agree."""

    def __init__(self, sampler: Any):
        super().__init__(sampler)
        self.order: list[int] = []  # this epoch's permutation of the dataset's indices
        self.front = 0  # prompts of `order` handed to the data loader (read-ahead included)
        self.back = 0  # prompts of `order` drawn, from its end
        self.first_step = 0  # the optimizer step this epoch began at
        self._resumed: dict[str, int] | None = None  # a checkpoint's `state`, until its epoch is iterated

    def start_epoch(self, epoch: int, step: int) -> None:
        super().start_epoch(epoch, step)
        resumed = self._resumed is not None and self._resumed["epoch"] == epoch
        self.first_step = self._resumed["first_step"] if resumed else step

    def __iter__(self):
        sampler, batch = self.sampler, self.sampler.batch_size
        self._reseed()
        count = sampler.num_samples  # TRL's permutation of the epoch (`RepeatSampler.__iter__`)
        self.order = (
            torch.randperm(count, generator=sampler.generator).tolist() if sampler.shuffle else [*range(count)]
        )
        resumed = self._resumed is not None and self._resumed["epoch"] == self.epoch
        self.front, self.back = 0, self._resumed["drawn"] if resumed else 0
        self._resumed = None
        while self.front + batch <= len(self.order) - self.back:  # read lazily: after the draws made so far
            chunk = self.order[self.front : self.front + batch]
            self.front += batch
            for _ in range(sampler.repeat_count):
                for index in chunk:
                    yield from [index] * sampler.mini_repeat_count

    def draw(self, count: int) -> list[dict[str, Any]]:
        """The dataset rows of up to ``count`` prompts that no batch or earlier draw has taken (fewer when the epoch
        runs out), one row each."""
        end = len(self.order) - self.back
        taken = self.order[max(end - count, self.front) : end][::-1]
        self.back += len(taken)
        return [self.sampler.data_source[index] for index in taken]

    def state(self) -> dict[str, int]:
        """What a checkpoint keeps: the epoch, the step it began at and the prompts drawn in it."""
        return {"epoch": self.epoch, "first_step": self.first_step, "drawn": self.back}

    def resume(self, state: dict[str, int]) -> None:
        """Restore ``state`` (`state`) before its epoch is started and iterated again."""
        self._resumed = dict(state)


def check_drawable(dataset: Any, mode: str = "refill") -> None:
    """A mode that draws (refill, auto, screened with ``pods_draw_coverage``) reads the prompts it draws by index from
    the epoch's order: refuse a dataset without one (an iterable dataset), naming ``mode`` (``pods_generation``)."""
    if isinstance(dataset, (IterableDataset, TorchIterableDataset)) or not hasattr(dataset, "__getitem__"):
        alternative = (
            "or unset pods_draw_coverage: screened then reads a fixed pool per generation"
            if mode == "screened"
            else "or use pods_generation='screened' without pods_draw_coverage (it reads a fixed pool per generation)"
        )
        raise ValueError(
            f"pods_generation={mode!r} reads the prompts it draws by index from the epoch's order, which needs a "
            f"map-style dataset (e.g. datasets.Dataset); got {type(dataset).__name__}. Convert it (e.g. "
            f"Dataset.from_generator), {alternative}."
        )

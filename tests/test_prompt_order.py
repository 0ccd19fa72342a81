"""The order training prompts are read in (`trl_pods.prompt_order`), driven without a trainer: TRL's generation
batches from the front of each epoch's order, refill's draws from its back, never a prompt twice, and an exact resume
of a partly drawn epoch."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl.trainer.utils import RepeatSampler

from trl_pods.prompt_order import DrawingSampler, EpochReplay, check_drawable

PROMPTS, BATCH, COPIES = 11, 2, 3  # 11 prompts, 2 per generation batch, each repeated 3 times (N)


def _sampler(seed: int = 5, repeat: int = 1) -> RepeatSampler:
    data = [{"prompt": f"p{i}", "index": i} for i in range(PROMPTS)]
    return RepeatSampler(data, mini_repeat_count=COPIES, batch_size=BATCH, repeat_count=repeat, seed=seed)


def _batches(iterator, repeat: int = 1):
    """The generation batches (distinct prompt indices, in order) an iterator of sampler indices yields."""
    rows = BATCH * COPIES * repeat
    indices = list(iterator)
    assert len(indices) % rows == 0
    return [indices[i : i + rows : COPIES][:BATCH] for i in range(0, len(indices), rows)]


def _read(sampler: DrawingSampler, draws: list[int], read_ahead: int = 1) -> tuple[list[list[int]], list[list[int]]]:
    """Read one epoch as a data loader that fetches ``read_ahead`` batches ahead does, drawing ``draws[i]`` prompts
    while batch ``i`` trains; returns the batches trained and the prompts each draw got."""
    rows = BATCH * COPIES
    iterator = iter(sampler)
    fetched, trained, drawn = [], [], []
    for i in range(PROMPTS):
        while len(fetched) <= i + read_ahead:
            batch = [next(iterator, None) for _ in range(rows)]
            if batch[0] is None:
                break
            fetched.append(batch[::COPIES])
        if i >= len(fetched):
            break
        trained.append(fetched[i])
        drawn.append([row["index"] for row in sampler.draw(draws[i] if i < len(draws) else 0)])
    return trained, drawn


def test_without_draws_the_batches_are_trls():
    """Undrawn, the sampler yields exactly TRL's RepeatSampler sequence (batches, copies and repeats), epoch by
    epoch as EpochReplay replays it."""
    for repeat in (1, 2):
        for epoch in (0, 2):
            drawing, replay = DrawingSampler(_sampler(repeat=repeat)), EpochReplay(_sampler(repeat=repeat))
            drawing.start_epoch(epoch, 0)
            replay.start_epoch(epoch, 0)
            assert list(drawing) == list(replay), (repeat, epoch)
    assert len(DrawingSampler(_sampler())) == len(_sampler())


def test_draws_read_from_the_back_and_every_prompt_once():
    """Draws take prompts from the end of the epoch's order, inward; batches and draws never share a prompt, a
    draw never takes one a batch read ahead has already taken, and the epoch ends when the prompts run out, having
    read every prompt once but for a remainder smaller than a batch."""
    sampler = DrawingSampler(_sampler())
    trained, drawn = _read(sampler, draws=[2, 0, 3, 5, 5])
    order = sampler.order
    assert trained[0] == order[:2] and drawn[0] == [order[-1], order[-2]], "front batches, draws from the back"
    prompts = [p for batch in trained for p in batch] + [p for draw in drawn for p in draw]
    assert len(prompts) == len(set(prompts)), "no prompt is read twice"
    assert PROMPTS - len(prompts) < BATCH, "the epoch reads all but a remainder smaller than a batch"
    assert len(trained) < PROMPTS // BATCH, "the epoch ends sooner than TRL's"
    assert sum(map(len, drawn)) < 2 + 0 + 3 + 5 + 5, "the last draws got fewer than asked"


def test_a_draw_never_takes_a_batch_read_ahead():
    """With the loader reading two batches ahead, a draw gets only prompts outside them."""
    sampler = DrawingSampler(_sampler())
    trained, drawn = _read(sampler, draws=[PROMPTS], read_ahead=2)
    assert drawn[0] == sampler.order[3 * BATCH :][::-1], "every prompt but the 3 batches read"
    assert [p for batch in trained for p in batch] == sampler.order[: 3 * BATCH]


def test_a_resumed_epoch_reads_what_the_uninterrupted_one_reads():
    """A checkpoint's state (epoch, the step it began at, prompts drawn) restored into a new sampler before the
    epoch starts: skipping the trained batches, as the Trainer does, leads to the same next batches and draws."""
    draws = [1, 2, 0, 1]
    uninterrupted = DrawingSampler(_sampler())
    uninterrupted.start_epoch(1, 40)
    trained, drawn = _read(uninterrupted, draws)

    interrupted = DrawingSampler(_sampler())
    interrupted.start_epoch(1, 40)
    _read(interrupted, draws[:2])  # killed after two batches and their draws (the third read ahead)
    state = interrupted.state()
    assert state["epoch"] == 1 and state["first_step"] == 40 and state["drawn"] == 3
    resumed = DrawingSampler(_sampler())
    resumed.resume(state)
    resumed.start_epoch(1, 43)
    assert resumed.first_step == 40, "the epoch began where the checkpoint's epoch began"
    iterator = iter(resumed)
    skipped = [next(iterator) for _ in range(2 * BATCH * COPIES)]
    assert _batches(skipped) == trained[:2]
    rest = _batches(iterator)
    assert rest == trained[2:] and [[row["index"] for row in resumed.draw(n)] for n in draws[2:]] == drawn[2:4]


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield {"prompt": "a"}


def test_refill_refuses_a_dataset_it_cannot_draw_from():
    """An iterable dataset has no order to draw from by index: a clear refusal names the mode that draws and the
    alternative that fits it (screened users who draw are told to unset pods_draw_coverage, not to pick screened)."""
    check_drawable(Dataset.from_dict({"prompt": ["a"]}))
    with pytest.raises(ValueError, match="pods_generation='refill'.*map-style dataset.*pods_generation='screened'"):
        check_drawable(Dataset.from_dict({"prompt": ["a"]}).to_iterable_dataset())
    with pytest.raises(ValueError, match="pods_generation='auto'.*map-style dataset"):
        check_drawable(Stream(), "auto")
    with pytest.raises(ValueError, match="pods_generation='screened'.*unset pods_draw_coverage"):
        check_drawable(Stream(), "screened")

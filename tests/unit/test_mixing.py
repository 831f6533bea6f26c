"""The mixed-batch rule (`rlrun.algorithms.mixing`, `data.mixing`): round(fraction × batch) rows from
the dataset, the rest from the online memory, in that order, each drawn with the generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlrun.algorithms.mixing import mixed_batch
from rlrun.algorithms.replay import ReplayMemory
from rlrun.data import Transitions
from rlrun.spec import MemorySpec

DATASET_ROWS, ONLINE_ROWS, BATCH = 50, 30, 10


def _dataset() -> Transitions:
    """Rows whose observation is its index (1000 + i): where a batch row came from is readable."""
    index = np.arange(DATASET_ROWS, dtype=np.float32)
    return Transitions(
        obs=(1000 + index)[:, None],
        action=index[:, None],
        reward=index.astype(np.float64),
        terminated=np.zeros(DATASET_ROWS, dtype=bool),
        truncated=np.zeros(DATASET_ROWS, dtype=bool),
        next_obs=(1000 + index)[:, None] + 0.5,
    )


def _memory(rows: int) -> ReplayMemory:
    """A memory of `rows` online steps of one episode, step i's observation −i."""
    memory = ReplayMemory(MemorySpec(capacity=100), (1,), np.dtype(np.float32), (1,), np.dtype(np.float32))
    for i in range(rows):
        obs = np.array([[-float(i)]], dtype=np.float32)
        memory.add(obs, obs, np.array([1.0]), obs - 1, np.array([False]), np.array([False]))
    return memory


@pytest.mark.parametrize(("fraction", "from_dataset"), [(0.5, 5), (0.25, 2), (1.0, 10), (0.0, 0), (0.74, 7)])
def test_rows_come_from_where_the_fraction_says_dataset_first(fraction: float, from_dataset: int) -> None:
    dataset, memory = _dataset(), _memory(ONLINE_ROWS)
    batch = mixed_batch(dataset, memory, BATCH, fraction, torch.Generator().manual_seed(3))
    obs = batch.obs[:, 0].numpy()
    assert (obs[:from_dataset] >= 1000).all() and (obs[from_dataset:] <= 0).all()
    # the same draws, made by hand: the dataset's indices first, then the memory's slots
    generator = torch.Generator().manual_seed(3)
    index = torch.randint(DATASET_ROWS, (from_dataset,), generator=generator).numpy() if from_dataset else []
    slots = memory.draw(BATCH - from_dataset, generator) if from_dataset < BATCH else []
    assert obs.tolist() == [1000.0 + i for i in index] + [-float(s) for s in slots]
    assert batch.actions.dtype == torch.float32 and batch.actions.shape == (BATCH, 1)
    assert batch.rewards.dtype == torch.float32 and batch.terminated.dtype == torch.float32


def test_an_empty_memory_gives_every_row_to_the_dataset() -> None:
    batch = mixed_batch(_dataset(), _memory(0), BATCH, 0.5, torch.Generator().manual_seed(0))
    assert (batch.obs[:, 0] >= 1000).all() and len(batch.obs) == BATCH
    assert torch.equal(batch.next_obs, batch.obs + 0.5) and torch.equal(batch.rewards, batch.obs[:, 0] - 1000)

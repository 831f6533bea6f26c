"""Batches that mix a dataset's rows with an online replay memory's (`data.mixing`): the one rule
for every algorithm that learns offline, then online (RLPD's symmetric sampling, Ball et al., 2023).

A batch of `batch_size` rows takes round(fraction × batch_size) of them from the dataset and the
rest from the online memory, in that order: the dataset's first, drawn uniformly with replacement
by `torch.randint` from the agent's generator, then the memory's, drawn by the memory's own uniform
rule (`ReplayMemory.draw`) from the same generator. While the memory is empty (the offline phase)
every row is the dataset's. So a batch depends only on the generator's state, the dataset's rows
(fixed, pinned by the run) and the memory's contents: the same batch on every resume.
"""

from __future__ import annotations

import numpy as np
import torch

from rlrun.algorithms.replay import BATCH_FIELDS, ReplayMemory, Transitions
from rlrun.data import Transitions as Dataset


def _dataset_rows(batch_size: int, fraction: float, memory: ReplayMemory) -> int:
    """How many of a batch's rows are the dataset's: all while the memory is empty, else
    round(fraction × batch_size)."""
    return batch_size if memory.size == 0 else round(fraction * batch_size)


def _joined(parts: list[Transitions]) -> Transitions:
    """The dataset's rows, then the memory's, as one batch."""
    if len(parts) == 1:
        return parts[0]
    return Transitions(*(torch.cat([getattr(part, name) for part in parts]) for name in BATCH_FIELDS))


def mixed_batch(
    rows: Dataset, memory: ReplayMemory, batch_size: int, fraction: float, generator: torch.Generator
) -> Transitions:
    """A batch of `batch_size` transitions: `_dataset_rows` of them from the dataset `rows`, then the
    rest from `memory`, both drawn with `generator`. Actions in the memory's dtype and shape, as the
    env takes them; rewards and `terminated` float32, as the memory keeps them."""
    offline = _dataset_rows(batch_size, fraction, memory)
    parts = []
    if offline:
        index = torch.randint(len(rows), (offline,), generator=generator).numpy()
        parts.append(_from_dataset(rows, index, memory))
    if batch_size > offline:
        parts.append(memory.batch(memory.draw(batch_size - offline, generator)))
    return _joined(parts)


def _from_dataset(rows: Dataset, index: np.ndarray, memory: ReplayMemory) -> Transitions:
    action = memory.rows.dtype["action"]
    actions = rows.action[index].astype(action.base).reshape(len(index), *action.shape)
    return Transitions(
        torch.from_numpy(np.ascontiguousarray(rows.obs[index])),
        torch.from_numpy(np.ascontiguousarray(actions)),
        torch.from_numpy(rows.reward[index].astype(np.float32)),
        torch.from_numpy(np.ascontiguousarray(rows.next_obs[index])),
        torch.from_numpy(rows.terminated[index].astype(np.float32)),
    )

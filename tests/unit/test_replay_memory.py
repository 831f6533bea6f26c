"""The replay memory (each frame stored once, next observations and stacks rebuilt from frame
numbers) against a naive one that stores every observation and next observation in full: for random
episodes, with terminations, truncations, several vector-env copies, frame stacks of 1 and 4 and
rings that wrap many times, every row the memory lets be sampled is exactly the naive one's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from memory_reference import FRAME, NaiveMemory, StackedEnvs, assert_same_batches, squeeze

from rlrun.algorithms.replay import ReplayMemory
from rlrun.spec import MemorySpec


def fill(
    capacity: int, num_envs: int, stack: int, end: float, steps: int, seed: int = 0
) -> tuple[ReplayMemory, NaiveMemory]:
    obs_shape = (stack, *FRAME) if stack > 1 else FRAME
    memory = ReplayMemory(
        MemorySpec(capacity=capacity),
        obs_shape,
        np.dtype(np.uint8),
        (),
        np.dtype(np.int64),
        num_envs=num_envs,
        frame_stack=stack,
    )
    naive = NaiveMemory(capacity, obs_shape)
    envs = StackedEnvs(num_envs, stack, end, seed)
    for _ in range(steps):
        obs, actions, rewards, true_next, terminated, truncated = envs.step()
        obs, true_next = squeeze(obs, stack), squeeze(true_next, stack)
        memory.add(obs, actions, rewards, true_next, terminated, truncated)
        naive.add(obs, actions, rewards, true_next, terminated)
    return memory, naive


CASES = [(1, 1), (1, 4), (3, 1), (3, 4), (2, 4)]


@pytest.mark.parametrize(("num_envs", "stack"), CASES)
@pytest.mark.parametrize("end", [0.0, 0.02, 0.3])
def test_same_transitions_as_a_memory_that_stores_everything(num_envs: int, stack: int, end: float) -> None:
    capacity = 97  # not a multiple of the copies: rows of a copy land on different slots each lap
    memory, naive = fill(capacity, num_envs, stack, end, steps=0)
    envs = StackedEnvs(num_envs, stack, end, seed=num_envs * 10 + stack)
    for step in range(400):
        obs, actions, rewards, true_next, terminated, truncated = envs.step()
        obs, true_next = squeeze(obs, stack), squeeze(true_next, stack)
        memory.add(obs, actions, rewards, true_next, terminated, truncated)
        naive.add(obs, actions, rewards, true_next, terminated)
        if step % 7 == 0 or step > 390:
            ok = assert_same_batches(memory, naive)
            assert ok[(memory.rows_end - 1) % capacity], "the newest row can always be sampled"
    ok = assert_same_batches(memory, naive)
    if end == 0.0:
        assert ok.all(), "without episode ends every row in the ring keeps its frames"
    elif end == 0.02:
        assert ok.mean() > 0.9
    assert memory.frames.dtype == np.uint8


def test_rows_whose_frames_were_overwritten_are_excluded_and_never_sampled() -> None:
    memory, naive = fill(200, 2, 4, end=0.5, steps=500)  # two frames per row: half the ring's rows lose theirs
    ok = assert_same_batches(memory, naive)
    assert 0.2 < ok.mean() < 0.9, "short episodes overflow the frame ring"
    keys = {naive.obs[s].tobytes() + naive.next_obs[s].tobytes() for s in np.flatnonzero(ok)}
    batch = memory.sample(4000, torch.Generator().manual_seed(3))
    sampled = {o.tobytes() + n.tobytes() for o, n in zip(batch.obs.numpy(), batch.next_obs.numpy(), strict=True)}
    assert sampled <= keys
    assert len(sampled) > 0.9 * len(keys), "uniform over the sampleable rows: nearly all drawn in 4000"


def test_sampling_is_deterministic_from_the_generator() -> None:
    memory, _ = fill(150, 3, 4, end=0.3, steps=200)
    first = memory.sample(64, torch.Generator().manual_seed(7))
    again = memory.sample(64, torch.Generator().manual_seed(7))
    for name, value in first._asdict().items():
        other = getattr(again, name)
        assert (value is None and other is None) or torch.equal(value, other), name


def test_a_memory_that_starts_mid_episode_stores_the_whole_stack() -> None:
    """A memory left out of a snapshot restarts empty while the env is mid-episode: the first
    observation it sees is a stack of distinct frames."""
    memory, naive = fill(64, 2, 4, end=0.0, steps=0)
    envs = StackedEnvs(2, 4, 0.0, seed=5)
    for _ in range(5):
        envs.step()
    for _ in range(30):
        obs, actions, rewards, true_next, terminated, truncated = envs.step()
        memory.add(obs, actions, rewards, true_next, terminated, truncated)
        naive.add(obs, actions, rewards, true_next, terminated)
    assert assert_same_batches(memory, naive).all()


def test_an_atari_sized_memory_stays_within_eight_gigabytes() -> None:
    memory = ReplayMemory(
        MemorySpec(capacity=1_000_000),
        (4, 84, 84),
        np.dtype(np.uint8),
        (),
        np.dtype(np.int64),
        num_envs=8,
        frame_stack=4,
    )
    total = memory.frames.nbytes + memory.rows.nbytes
    assert total < 7.7e9, total  # a naive float32 memory with next_obs: 226 GB; uint8 stacks: 56 GB

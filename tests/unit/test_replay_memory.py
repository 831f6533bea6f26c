"""The replay memory (each frame stored once, next observations and stacks rebuilt from frame
numbers) against a naive one that stores every observation and next observation in full: for random
episodes, with terminations, truncations, several vector-env copies, frame stacks of 1 and 4 and
rings that wrap many times, every row the memory lets be sampled is exactly the naive one's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlrun.algorithms.replay import ReplayMemory
from rlrun.spec import MemorySpec

FRAME = (3, 2)


class NaiveMemory:
    """The reference: full obs and next_obs per row, in the same slots."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...]) -> None:
        self.capacity, self.end = capacity, 0
        self.obs = np.zeros((capacity, *obs_shape), np.uint8)
        self.next_obs = np.zeros((capacity, *obs_shape), np.uint8)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, np.float32)

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray) -> None:
        slots = np.arange(self.end, self.end + len(obs)) % self.capacity
        self.obs[slots], self.next_obs[slots], self.actions[slots] = obs, next_obs, actions
        self.rewards[slots], self.terminated[slots] = rewards, terminated
        self.end += len(obs)

    def batch(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        return {"obs": self.obs[slots], "actions": self.actions[slots], "rewards": self.rewards[slots],
                "next_obs": self.next_obs[slots], "terminated": self.terminated[slots]}


class StackedEnvs:
    """Vector-env copies of a made-up pixel env with same-step autoreset and a reset-padded frame
    stack (as gymnasium's FrameStackObservation(padding_type="reset")): random frames, episodes
    that end by termination or truncation with probability `end` per step."""

    def __init__(self, num_envs: int, stack: int, end: float, seed: int) -> None:
        self.random = np.random.default_rng(seed)
        self.num_envs, self.stack, self.end = num_envs, stack, end
        self.obs = np.stack([self._reset() for _ in range(num_envs)])

    def _frame(self) -> np.ndarray:
        return self.random.integers(0, 256, FRAME, dtype=np.uint8)

    def _reset(self) -> np.ndarray:
        return np.repeat(self._frame()[None], self.stack, axis=0)

    def step(self) -> tuple[np.ndarray, ...]:
        """obs, actions, rewards, true next obs, terminated, truncated; advances to the next obs."""
        n = self.num_envs
        obs = self.obs.copy()
        true_next = np.concatenate([obs[:, 1:], np.stack([self._frame() for _ in range(n)])[:, None]], axis=1)
        ended = self.random.random(n) < self.end
        terminated = ended & (self.random.random(n) < 0.5)
        truncated = ended & ~terminated
        self.obs = true_next.copy()
        for copy in np.flatnonzero(ended):
            self.obs[copy] = self._reset()
        actions = self.random.integers(0, 4, n)
        rewards = self.random.standard_normal(n).astype(np.float32)
        return obs, actions, rewards, true_next, terminated, truncated


def squeeze(obs: np.ndarray, stack: int) -> np.ndarray:
    return obs if stack > 1 else obs[:, 0]


def fill(capacity: int, num_envs: int, stack: int, end: float, steps: int,
         seed: int = 0) -> tuple[ReplayMemory, NaiveMemory]:
    obs_shape = (stack, *FRAME) if stack > 1 else FRAME
    memory = ReplayMemory(MemorySpec(capacity=capacity), obs_shape, np.dtype(np.uint8), (), np.dtype(np.int64),
                          num_envs=num_envs, frame_stack=stack)
    naive = NaiveMemory(capacity, obs_shape)
    envs = StackedEnvs(num_envs, stack, end, seed)
    for _ in range(steps):
        obs, actions, rewards, true_next, terminated, truncated = envs.step()
        obs, true_next = squeeze(obs, stack), squeeze(true_next, stack)
        memory.add(obs, actions, rewards, true_next, terminated, truncated)
        naive.add(obs, actions, rewards, true_next, terminated)
    return memory, naive


def assert_same_batches(memory: ReplayMemory, naive: NaiveMemory) -> np.ndarray:
    """Every sampleable slot gives the naive memory's transition; returns the sampleable mask."""
    slots = np.arange(memory.size)
    ok = memory.sampleable(slots)
    got = {k: v.numpy() for k, v in memory.batch(slots[ok]).items()}
    want = naive.batch(slots[ok])
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    return ok


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
    sampled = {o.tobytes() + n.tobytes() for o, n in zip(batch["obs"].numpy(), batch["next_obs"].numpy(), strict=True)}
    assert sampled <= keys
    assert len(sampled) > 0.9 * len(keys), "uniform over the sampleable rows: nearly all drawn in 4000"


def test_sampling_is_deterministic_from_the_generator() -> None:
    memory, _ = fill(150, 3, 4, end=0.3, steps=200)
    first = memory.sample(64, torch.Generator().manual_seed(7))
    again = memory.sample(64, torch.Generator().manual_seed(7))
    for key in first:
        assert torch.equal(first[key], again[key])


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
    memory = ReplayMemory(MemorySpec(capacity=1_000_000), (4, 84, 84), np.dtype(np.uint8), (), np.dtype(np.int64),
                          num_envs=8, frame_stack=4)
    total = memory.frames.nbytes + memory.rows.nbytes
    assert total < 7.7e9, total  # a naive float32 memory with next_obs: 226 GB; uint8 stacks: 56 GB


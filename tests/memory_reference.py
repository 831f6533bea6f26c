"""A reference for the replay memory: a naive memory that stores every observation and next
observation in full, vector-env copies of a made-up pixel env with frame stacks, and the check that
every row the real memory lets be sampled is the naive one's (tests/unit/test_replay_memory.py,
test_snapshot_logs.py)."""

from __future__ import annotations

import numpy as np

from rlrun.algorithms.replay import ReplayMemory

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

    def add(
        self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray
    ) -> None:
        slots = np.arange(self.end, self.end + len(obs)) % self.capacity
        self.obs[slots], self.next_obs[slots], self.actions[slots] = obs, next_obs, actions
        self.rewards[slots], self.terminated[slots] = rewards, terminated
        self.end += len(obs)

    def batch(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "obs": self.obs[slots],
            "actions": self.actions[slots],
            "rewards": self.rewards[slots],
            "next_obs": self.next_obs[slots],
            "terminated": self.terminated[slots],
        }


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


def assert_same_batches(memory: ReplayMemory, naive: NaiveMemory) -> np.ndarray:
    """Every sampleable slot gives the naive memory's transition; returns the sampleable mask."""
    slots = np.arange(memory.size)
    ok = memory.sampleable(slots)
    got = {k: v.numpy() for k, v in memory.batch(slots[ok])._asdict().items() if v is not None}
    want = naive.batch(slots[ok])
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    return ok

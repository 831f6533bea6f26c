"""Replay memory for off-policy algorithms: preallocated NumPy arrays, one per field.

A snapshot carries the memory as plain arrays (one `.npy` per field, only the filled part, written
straight from the arrays without a copy) when the spec's `memory.snapshot` is on. When it is off,
a resumed session starts with an empty memory that refills from new experience, and the registry
records the resume as approximate.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlrun.spec import MemorySpec

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")


class ReplayMemory:
    def __init__(self, spec: MemorySpec, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                 action_dtype: np.dtype[Any]) -> None:
        self.spec = spec
        capacity = spec.capacity
        self.obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.actions = np.zeros((capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.position = 0
        """Where the next transition goes."""
        self.size = 0

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray) -> None:
        """Add one transition per vector-env copy (a batch along the first axis)."""
        count = len(rewards)
        end, capacity = self.position + count, self.spec.capacity
        index: Any = slice(self.position, end) if end <= capacity else np.arange(self.position, end) % capacity
        self.obs[index], self.actions[index], self.rewards[index] = obs, actions, rewards
        self.next_obs[index], self.terminated[index] = next_obs, terminated
        self.position = (self.position + count) % self.spec.capacity
        self.size = min(self.size + count, self.spec.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """A uniform batch (with replacement), drawn with the agent's generator."""
        index = torch.randint(self.size, (batch_size,), generator=generator).numpy()
        return {name: torch.from_numpy(getattr(self, name)[index]) for name in FIELDS}

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Two entries to merge into the agent's state: "memory", the counters as plain values, and
        "arrays", views of the filled part (no copy), which the session writes as .npy files.
        Without `snapshot`, the counters only say the memory was left out."""
        if not self.spec.snapshot:
            return {"memory": {"included": False}, "arrays": {}}
        return {"memory": {"included": True, "position": self.position, "size": self.size},
                "arrays": {name: getattr(self, name)[: self.size] for name in FIELDS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from the agent's state, which holds the "memory" and "arrays" entries above."""
        counters = state["memory"]
        if not counters["included"]:
            return  # starts empty and refills; the session records the resume as approximate
        self.position, self.size = counters["position"], counters["size"]
        for name in FIELDS:
            getattr(self, name)[: self.size] = state["arrays"][name]

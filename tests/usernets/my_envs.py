"""Small envs with the spaces users bring (a Dict observation, MultiDiscrete and MultiBinary actions,
an observation no network takes), registered with Gymnasium on import. Deterministic given their
seed, and all their state is plain attributes, so a snapshot captures them mid-episode.

`sitecustomize.py` here imports this module in every Python process started with this folder on
PYTHONPATH (the `rlrun` subprocesses and the sessions they spawn); tests import it themselves."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class DictObs(gym.Env[dict[str, Any], np.int64]):
    """Walk a point along a line towards a goal slot: observes its position (Box) and the goal (Discrete)."""

    observation_space = spaces.Dict({"position": spaces.Box(-1.0, 1.0, (2,), np.float32), "goal": spaces.Discrete(3)})
    action_space = spaces.Discrete(3)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-0.5, 0.5, 2).astype(np.float32)
        self.goal = int(self.np_random.integers(3))
        return self._observation(), {}

    def step(self, action: np.int64) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.position = np.clip(self.position + 0.1 * (int(action) - 1), -1, 1).astype(np.float32)
        target = self.goal - 1.0
        reward = float(-abs(self.position[0] - target)) + 0.01 * float(self.np_random.normal())
        return self._observation(), reward, bool(abs(self.position[0] - target) < 0.05), False, {}

    def _observation(self) -> dict[str, Any]:
        return {"goal": self.goal, "position": self.position.copy()}


class MultiDiscreteActions(gym.Env[np.ndarray, np.ndarray]):
    """Match each component of a random target with one of the action's (components start at 1)."""

    observation_space = spaces.Box(0.0, 3.0, (2,), np.float32)
    action_space = spaces.MultiDiscrete([3, 2], start=[1, 1])

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.target = self._draw()
        return self.target.astype(np.float32), {}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(np.asarray(action, dtype=np.int64)), action
        reward = float((np.asarray(action) == self.target).sum())
        self.target = self._draw()
        return self.target.astype(np.float32), reward, False, False, {}

    def _draw(self) -> np.ndarray:
        return np.array([self.np_random.integers(1, 4), self.np_random.integers(1, 3)], dtype=np.int64)


class MultiBinaryActions(gym.Env[np.ndarray, np.ndarray]):
    """Set each bit of the action to the sign of the matching observation."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.MultiBinary(3)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.obs.copy(), {}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(np.asarray(action)), action
        reward = float((np.asarray(action) == (self.obs > 0)).sum())
        self.obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.obs.copy(), reward, False, False, {}


class TextObs(MultiBinaryActions):
    """Observes text: no network takes it."""

    observation_space = spaces.Text(8)  # type: ignore[assignment]


ENVS = {
    "DictObs-v0": "DictObs",
    "MultiDiscreteActions-v0": "MultiDiscreteActions",
    "MultiBinaryActions-v0": "MultiBinaryActions",
    "TextObs-v0": "TextObs",
}

for _id, _class in ENVS.items():
    if _id not in gym.registry:  # imported under two names (my_envs, usernets.my_envs): registered once
        gym.register(_id, entry_point=f"{__name__}:{_class}", max_episode_steps=50)

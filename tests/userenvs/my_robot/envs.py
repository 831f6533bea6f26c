"""Reach-v0: move an arm towards a target on a plane; every step slips by a draw from the env's own
generator (self.np_random), and the arm is an object with slots (as an extension type's would be),
not plain data, so rlrun cannot copy the env attribute by attribute: a snapshot replays its episode.
Push-v0: the same env, handing its state over through rlrun's state protocol (`get_rlrun_state` /
`set_rlrun_state`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MOVES = np.array([[0.1, 0.0], [-0.1, 0.0], [0.0, 0.1], [0.0, -0.1]])


class Arm:
    """The simulated arm: no `__dict__`, so not a plain object whose attributes rlrun could copy."""

    __slots__ = ("position",)

    def __init__(self, position: np.ndarray) -> None:
        self.position = position

    def move(self, delta: np.ndarray) -> None:
        self.position = np.clip(self.position + delta, -1.0, 1.0)


class Reach(gym.Env[np.ndarray, np.int64]):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}  # noqa: RUF012
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, render_mode: str | None = None, slip: float = 0.05) -> None:
        self.render_mode = render_mode
        self.slip = slip
        self.arm = Arm(np.zeros(2))
        self.target = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.arm = Arm(self.np_random.uniform(-1.0, 1.0, 2))
        self.target = self.np_random.uniform(-1.0, 1.0, 2)
        return self._observation(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.arm.move(MOVES[int(action)] + self.np_random.normal(0.0, self.slip, 2))
        distance = float(np.linalg.norm(self.arm.position - self.target))
        return self._observation(), -distance, distance < 0.1, False, {}

    def render(self) -> np.ndarray:
        frame = np.zeros((64, 64, 3), np.uint8)
        for (x, y), colour in ((self.arm.position, 0), (self.target, 1)):
            frame[int((y + 1) * 31.5), int((x + 1) * 31.5), colour] = 255
        return frame

    def _observation(self) -> np.ndarray:
        return np.concatenate([self.arm.position, self.target]).astype(np.float32)


class Push(Reach):
    """Reach, with rlrun's state protocol: the state as plain data (rlrun keeps self.np_random)."""

    def get_rlrun_state(self) -> dict[str, Any]:
        return {"arm": self.arm.position.copy(), "target": self.target.copy()}

    def set_rlrun_state(self, state: dict[str, Any]) -> None:
        self.arm = Arm(state["arm"])
        self.target = state["target"]


gym.register("Reach-v0", entry_point=Reach, max_episode_steps=150)
gym.register("Push-v0", entry_point=Push, max_episode_steps=150)

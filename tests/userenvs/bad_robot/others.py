"""Registrations rlrun cannot train: a class that is no Gymnasium env, a factory that gives
something else, and envs whose spaces rlrun does not train on."""

from typing import Any

import gymnasium as gym
import numpy as np
from my_robot.envs import Reach


class Robot:
    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode


def robot_factory(render_mode: str | None = None) -> Robot:
    return Robot(render_mode)


class Sensors(Reach):
    observation_space = gym.spaces.Dict({"arm": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),  # type: ignore[assignment]
                                         "target": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def _observation(self) -> Any:
        return {"arm": self.arm.position.astype(np.float32), "target": self.target.astype(np.float32)}


class Joints(Reach):
    action_space = gym.spaces.MultiDiscrete([4, 4])  # type: ignore[assignment]

    def step(self, action: Any) -> Any:
        return super().step(action[0])


gym.register("Robot-v0", entry_point=Robot)
gym.register("RobotFactory-v0", entry_point=robot_factory)
gym.register("Sensors-v0", entry_point=Sensors, max_episode_steps=100)
gym.register("Joints-v0", entry_point=Joints, max_episode_steps=100)

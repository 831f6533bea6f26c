"""Registrations rlrun cannot train: a class that is no Gymnasium env, a factory that gives
something else, and envs whose spaces rlrun does not train on."""

from typing import Any

import gymnasium as gym
from my_robot.envs import Reach


class Robot:
    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode


def robot_factory(render_mode: str | None = None) -> Robot:
    return Robot(render_mode)


class Sensors(Reach):
    """Observes its sensors as text: no network takes that."""

    observation_space = gym.spaces.Text(16)  # type: ignore[assignment]

    def _observation(self) -> Any:
        return f"{self.arm.position[0]:.2f}"


class Joints(Reach):
    """Acts in a Tuple of two joints' moves: no algorithm acts in that."""

    action_space = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Discrete(4)))  # type: ignore[assignment]

    def step(self, action: Any) -> Any:
        return super().step(action[0])


gym.register("Robot-v0", entry_point=Robot)
gym.register("RobotFactory-v0", entry_point=robot_factory)
gym.register("Sensors-v0", entry_point=Sensors, max_episode_steps=100)
gym.register("Joints-v0", entry_point=Joints, max_episode_steps=100)

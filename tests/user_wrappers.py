"""A user's wrappers, imported by path (`user_wrappers:EpisodeBonus`) from specs in the tests (this
folder is on the import path of the test process and of every training it starts)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class EpisodeBonus(gym.Wrapper):  # type: ignore[type-arg]
    """Keeps state across episodes, as plain attributes: a count of episodes and a running array
    of the actions taken, both of which change the reward. A resume that lost either would learn
    from other rewards."""

    def __init__(self, env: gym.Env[Any, Any], scale: float = 0.01) -> None:
        super().__init__(env)
        self.scale = scale
        self.episodes = 0
        self.action_total = np.zeros(2, np.float64)

    def reset(self, **kwargs: Any) -> Any:
        self.episodes += 1
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.action_total[self.episodes % 2] += float(np.sum(action))
        bonus = self.scale * self.episodes + 1e-3 * float(np.tanh(self.action_total).sum())
        return obs, float(reward) + bonus, terminated, truncated, info


class NotAWrapper:
    """Named in a spec by mistake: not a gymnasium.Wrapper."""

    def __init__(self, env: Any) -> None:
        self.env = env

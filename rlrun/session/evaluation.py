"""Scoring a policy on a separate env whose randomness is its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlrun import seeding
from rlrun.algorithms.base import Agent


@dataclass(frozen=True)
class Evaluation:
    frame: int
    returns: list[float]
    lengths: list[int]

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def summary(self) -> dict[str, Any]:
        return {"frame": self.frame, "mean": self.mean, "std": self.std, "min": float(np.min(self.returns)),
                "max": float(np.max(self.returns)), "episodes": len(self.returns)}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(agent: Agent, env: gym.Env[Any, Any], *, seed: int, frame: int, episodes: int,
             deterministic: bool = True) -> Evaluation:
    """Run `episodes` episodes. Episode k at frame f is seeded from (seed, f, k) alone, so an
    evaluation neither depends on nor disturbs any other random stream."""
    seeds = [seeding.derive(seed, seeding.EVAL, frame, k) for k in range(episodes)]
    returns, lengths = play(agent, env, seeds, deterministic=deterministic)
    return Evaluation(frame=frame, returns=returns, lengths=lengths)


def play(agent: Agent, env: gym.Env[Any, Any], seeds: list[int], *, deterministic: bool,
         on_frame: Callable[[Any], None] | None = None) -> tuple[list[float], list[int]]:
    """One episode per seed; the env and any action sampling are seeded from it. `on_frame` gets
    the env's render after every step."""
    returns, lengths = [], []
    for episode_seed in seeds:
        generator = None if deterministic else torch.Generator().manual_seed(episode_seed)
        obs, _ = env.reset(seed=episode_seed)
        total, length, done = 0.0, 0, False
        while not done:
            action = agent.act(np.asarray(obs)[None], deterministic=deterministic, generator=generator)[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            if on_frame is not None:
                on_frame(env.render())
            total += float(reward)
            length += 1
            done = bool(terminated or truncated)
        returns.append(total)
        lengths.append(length)
    return returns, lengths

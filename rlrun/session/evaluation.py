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
from rlrun.envs.normalize import Normalizer


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
             deterministic: bool = True, normalizer: Normalizer | None = None) -> Evaluation:
    """Run `episodes` episodes. Episode k at frame f is seeded from (seed, f, k) alone, so an
    evaluation neither depends on nor disturbs any other random stream (nor the training env's
    normalisation statistics, which it reads frozen)."""
    seeds = [seeding.derive(seed, seeding.EVAL, frame, k) for k in range(episodes)]
    returns, lengths = play(agent, env, seeds, deterministic=deterministic, normalizer=normalizer)
    return Evaluation(frame=frame, returns=returns, lengths=lengths)


def play(agent: Agent, env: gym.Env[Any, Any], seeds: list[int], *, deterministic: bool,
         on_frame: Callable[[Any], None] | None = None, normalizer: Normalizer | None = None
         ) -> tuple[list[float], list[int]]:
    """One episode per seed; the env and any action sampling are seeded from it. `on_frame` gets
    the env's render after every step. The agent sees observations through `normalizer`, frozen
    (never updated here); returns are the env's own rewards."""
    returns, lengths = [], []
    for episode_seed in seeds:
        generator = None if deterministic else torch.Generator().manual_seed(episode_seed)
        obs, _ = env.reset(seed=episode_seed)
        total, length, done = 0.0, 0, False
        while not done:
            seen = np.asarray(obs)[None] if normalizer is None else normalizer.observation(np.asarray(obs)[None])
            action = agent.act(seen, deterministic=deterministic, generator=generator)[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            if on_frame is not None:
                on_frame(env.render())
            total += float(reward)
            length += 1
            done = bool(terminated or truncated)
        returns.append(total)
        lengths.append(length)
    return returns, lengths

"""Observations as arrays: a Dict or Tuple observation is flattened into one Box (what
`gymnasium.spaces.flatten` makes of it), so rollouts, replay memories and snapshots hold plain arrays
in one dtype, each frame once. The rule saying which spaces are flattened is `rlrun.spec.spaces`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlrun.spec.spaces import observation_handling


class Flattened(spaces.Box):
    """The Box a structured observation space flattens to, remembering that space: a network of the
    user's own is handed the observations in their structure (`rlrun.algorithms.user_network`)."""

    def __init__(self, structure: spaces.Space[Any]) -> None:
        flat = spaces.flatten_space(structure)
        assert isinstance(flat, spaces.Box)
        super().__init__(flat.low, flat.high, flat.shape, flat.dtype)
        self.structure = structure


class FlattenStructured(gym.ObservationWrapper[np.ndarray, Any, Any]):
    """Gymnasium's FlattenObservation, with the flat space a `Flattened` (no state of its own)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = Flattened(env.observation_space)

    def observation(self, observation: Any) -> np.ndarray:
        flat = spaces.flatten(self.env.observation_space, observation)
        assert isinstance(flat, np.ndarray)  # a Dict or Tuple of fixed size flattens to an array
        return flat


def observations_as_arrays(env: gym.Env[Any, Any], env_id: str) -> gym.Env[Any, Any]:
    """`env`, its structured observations flattened; BadInput for a space no network can take."""
    if observation_handling(env.observation_space, env_id) == "flattened":
        return FlattenStructured(env)
    return env

"""Partially observed versions (POMDPs) of the classic tasks: `HideVelocities` zeroes the velocity terms of an
observation, so an agent must infer motion from what it remembers (a recurrent core) or from a
stack of frames. As the RL Zoo's `MaskVelocityWrapper` (its `CartPoleNoVel-v1`, `PendulumNoVel-v1`,
`LunarLanderNoVel-v3`): the terms are zeroed, not dropped, so the observation keeps its shape and
a result compares with sb3-contrib's recurrent benchmarks.

    "env": {"id": "CartPole-v1", "wrappers": [{"class": "rlrun.envs.pomdp:HideVelocities"}]}

Any env with a flat Box observation takes it with `"kwargs": {"indices": [...]}`, the positions to
hide; the classic tasks below know theirs. The wrapper keeps no state: a snapshot needs nothing
from it, and a resumed run sees the same observations as the run that was never stopped.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlrun.errors import BadInput

VELOCITIES: dict[str, tuple[int, ...]] = {
    "CartPole": (1, 3),  # cart velocity, pole angular velocity
    "Pendulum": (2,),  # angular velocity
    "MountainCar": (1,),
    "MountainCarContinuous": (1,),
    "Acrobot": (4, 5),  # the two joints' angular velocities
    "LunarLander": (2, 3, 5),  # horizontal and vertical speed, angular speed
    "LunarLanderContinuous": (2, 3, 5),  # as LunarLander's (the RL Zoo hides the same three)
}
"""Where each classic task keeps its velocities, by Gymnasium's name for it (any version)."""


class HideVelocities(gym.ObservationWrapper[Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any], indices: list[int] | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise BadInput(f"HideVelocities hides terms of a flat Box observation; {self._name()} observes {space}")
        hidden = tuple(indices) if indices is not None else VELOCITIES.get(self._name())
        if hidden is None:
            raise BadInput(
                f"HideVelocities does not know where {self._name()} keeps its velocities; give them:"
                f' "kwargs": {{"indices": [...]}} (it knows {", ".join(VELOCITIES)})'
            )
        if not hidden or any(not 0 <= i < space.shape[0] for i in hidden):
            raise BadInput(
                f"HideVelocities indices {list(hidden)}: each must be a position in {self._name()}'s"
                f" {space.shape[0]} observation terms (0 to {space.shape[0] - 1})"
            )
        self.hidden = hidden
        self._keep = np.ones(space.shape, dtype=space.dtype)
        self._keep[list(hidden)] = 0
        low, high = space.low.copy(), space.high.copy()
        low[list(hidden)], high[list(hidden)] = 0, 0
        self.observation_space = gym.spaces.Box(low, high, space.shape, space.dtype)

    def _name(self) -> str:
        spec = self.env.spec
        return spec.name if spec is not None else type(self.env.unwrapped).__name__

    def observation(self, observation: Any) -> Any:
        return observation * self._keep

"""HideVelocities: the classic tasks' velocity terms zeroed, the rest untouched, the space to match;
an env it does not know, or positions that are not there, are bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control import CartPoleEnv

from rlrun.envs.pomdp import HideVelocities
from rlrun.errors import BadInput


@pytest.mark.parametrize(
    "env_id, hidden",
    [("CartPole-v1", [1, 3]), ("Pendulum-v1", [2]), ("Acrobot-v1", [4, 5]), ("LunarLanderContinuous-v3", [2, 3, 5])],
)
def test_the_velocities_are_zero_and_the_rest_is_the_envs(env_id: str, hidden: list[int]) -> None:
    if env_id.startswith("LunarLander"):
        pytest.importorskip("Box2D", reason="LunarLander needs the box2d extra (pip install 'rlrun[box2d]')")
    plain, masked = gym.make(env_id), HideVelocities(gym.make(env_id))
    seen, _ = plain.reset(seed=3)
    kept, _ = masked.reset(seed=3)
    for _ in range(5):
        action = plain.action_space.sample()
        seen, *_ = plain.step(action)
        kept, *_ = masked.step(action)
        shown = [i for i in range(seen.shape[0]) if i not in hidden]
        assert np.array_equal(kept[shown], seen[shown]) and not kept[hidden].any()
        assert kept.dtype == seen.dtype and masked.observation_space.contains(kept)
    assert np.abs(seen[hidden]).sum() > 0, "the velocities were zero anyway: nothing was tested"


def test_positions_given_for_any_flat_env() -> None:
    masked = HideVelocities(gym.make("CartPole-v1"), indices=[0])
    observation, _ = masked.reset(seed=0)
    assert observation[0] == 0 and masked.observation_space.high[0] == 0


def test_what_it_cannot_hide_is_bad_input() -> None:
    with pytest.raises(BadInput, match="flat Box observation; FrozenLake observes Discrete"):
        HideVelocities(gym.make("FrozenLake-v1"), indices=[0])
    unnamed = CartPoleEnv()  # made without gym.make: no registered name to look up
    with pytest.raises(BadInput, match=r'where CartPoleEnv keeps its velocities; give them: "kwargs"'):
        HideVelocities(unnamed)


def test_positions_outside_the_observation_are_bad_input() -> None:
    with pytest.raises(BadInput, match=r"indices \[4\]: each must be a position in CartPole's 4"):
        HideVelocities(gym.make("CartPole-v1"), indices=[4])

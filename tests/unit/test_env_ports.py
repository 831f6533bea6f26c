"""Exact ports (rlrun.envs.ports): the port steps Gymnasium's env to the very same bits, is used
only where the rule says, and is captured and restored as Gymnasium's own env is."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.acrobot import AcrobotEnv

from rlrun.envs import make_env, ports
from rlrun.envs.ports import ExactAcrobot, use_exact_ports
from rlrun.envs.state import capture_env, restore_env
from rlrun.spec import EnvSpec


def acrobots() -> tuple[Any, Any]:
    """Gymnasium's Acrobot-v1 and the same env stepped by the port."""
    original, ported = gym.make("Acrobot-v1"), gym.make("Acrobot-v1")
    use_exact_ports(ported)
    assert type(original.unwrapped) is AcrobotEnv and type(ported.unwrapped) is ExactAcrobot
    return original, ported


def _policy(kind: int, rng: np.random.Generator, state: np.ndarray) -> Any:
    """Random actions (numpy and Python ints), or torque along the second joint's speed, which
    swings the acrobot up within about a hundred steps (episodes that terminate)."""
    if kind == 0:
        return rng.integers(3)
    if kind == 1:
        return int(rng.integers(3))
    return 2 if state[3] > 0 else 0


def _same_step(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    obs_a, reward_a, terminated_a, truncated_a, info_a = a
    obs_b, reward_b, terminated_b, truncated_b, info_b = b
    assert obs_a.dtype == obs_b.dtype and obs_a.shape == obs_b.shape and obs_a.tobytes() == obs_b.tobytes()
    assert type(reward_a) is type(reward_b) and reward_a == reward_b
    assert (terminated_a, truncated_a, info_a) == (terminated_b, truncated_b, info_b)
    assert type(terminated_a) is type(terminated_b) and type(truncated_a) is type(truncated_b)


def _same_state(original: Any, ported: Any) -> None:
    s, t = original.unwrapped.state, ported.unwrapped.state
    assert s.dtype == t.dtype and s.shape == t.shape and s.tobytes() == t.tobytes()
    assert original.unwrapped.np_random.bit_generator.state == ported.unwrapped.np_random.bit_generator.state


@pytest.mark.parametrize("seed", range(6))
def test_the_acrobot_port_gives_gymnasiums_bits(seed: int) -> None:
    original, ported = acrobots()
    rng = np.random.default_rng(seed)
    kind, steps, episodes, ends = seed % 3, 0, 0, set()
    original.reset(seed=seed)
    ported.reset(seed=seed)
    while steps < 2500:
        action = _policy(kind, rng, original.unwrapped.state)
        a, b = original.step(action), ported.step(action)
        _same_step(a, b)
        _same_state(original, ported)
        steps += 1
        if a[2] or a[3]:
            ends.add("terminated" if a[2] else "truncated")
            episodes += 1
            kind = (kind + 1) % 3
            # unseeded resets draw from the env's generator; now and then a seeded one, with options
            if episodes % 3 == 0:
                reset_a = original.reset(seed=seed + episodes, options={"low": -0.2, "high": 0.2})
                reset_b = ported.reset(seed=seed + episodes, options={"low": -0.2, "high": 0.2})
            else:
                reset_a, reset_b = original.reset(), ported.reset()
            assert reset_a[0].tobytes() == reset_b[0].tobytes() and reset_a[1] == reset_b[1]
            _same_state(original, ported)
    assert episodes >= 2 and ends == {"terminated", "truncated"}


def test_the_acrobot_port_wraps_and_bounds_as_gymnasium_does() -> None:
    """From states no policy reaches often (angles past ±π, speeds beyond their bounds, either
    dtype a state has), the port's wrap and bound take Gymnasium's branches to the same bits."""
    original, ported = acrobots()
    original.reset(seed=0)
    ported.reset(seed=0)
    rng = np.random.default_rng(1)
    bounded = 0
    for trial in range(3000):
        state = rng.uniform(-1, 1, 4) * np.array([4.0, 4.0, 16.0, 32.0])
        state = state.astype(np.float32) if trial % 2 else state
        original.unwrapped.state, ported.unwrapped.state = state.copy(), state.copy()
        _same_step(original.unwrapped.step(trial % 3), ported.unwrapped.step(trial % 3))
        _same_state(original, ported)
        speeds = original.unwrapped.state[2:]
        bounded += int(abs(speeds[0]) == AcrobotEnv.MAX_VEL_1 or abs(speeds[1]) == AcrobotEnv.MAX_VEL_2)
    assert bounded > 100


def test_a_snapshot_of_either_restores_into_the_other() -> None:
    """The port adds no attribute: a capture of Gymnasium's env and of the port are the same JSON,
    and each restores into the other (runs resumed across old and new code stay exact)."""
    original, ported = acrobots()
    for env in (original, ported):
        env.reset(seed=11)
        for step in range(137):
            env.step(step % 3)
    captured = json.dumps(capture_env(original), sort_keys=True)
    assert captured == json.dumps(capture_env(ported), sort_keys=True)
    fresh_original, fresh_ported = acrobots()
    fresh_original.reset(seed=0)
    fresh_ported.reset(seed=0)
    restore_env(fresh_ported, json.loads(json.dumps(capture_env(original))))
    restore_env(fresh_original, json.loads(json.dumps(capture_env(ported))))
    for step in range(600):
        _same_step(original.step(step % 3), fresh_ported.step(step % 3))
        _same_step(ported.step(step % 3), fresh_original.step(step % 3))


class MyAcrobot(AcrobotEnv):
    """A user's subclass: its own code, never the port's."""


@pytest.mark.parametrize("change", ["subclass", "noise", "nips", "instance", "numpy"])
def test_anything_but_gymnasiums_own_default_acrobot_keeps_its_code(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if change == "numpy":  # a NumPy whose sine or cosine gives other bits than math's
        monkeypatch.setattr(ports, "_math_is_numpy", lambda: False)
    env = MyAcrobot() if change == "subclass" else AcrobotEnv()
    if change == "noise":
        env.torque_noise_max = 0.1
    elif change == "nips":
        env.book_or_nips = "nips"
    elif change == "instance":
        env.LINK_MASS_2 = 2.0
    use_exact_ports(env)
    assert type(env) is (MyAcrobot if change == "subclass" else AcrobotEnv)


def test_every_acrobot_copy_rlrun_makes_is_ported_and_other_envs_are_not() -> None:
    assert type(make_env(EnvSpec(id="Acrobot-v1")).unwrapped) is ExactAcrobot
    assert type(make_env(EnvSpec(id="Acrobot-v1", max_episode_steps=50)).unwrapped) is ExactAcrobot
    assert type(make_env(EnvSpec(id="CartPole-v1")).unwrapped).__name__ == "CartPoleEnv"

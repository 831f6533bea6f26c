"""Env state as plain JSON: values, generators and whole classic-control envs round-trip exactly."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlrun.envs.state import (
    NotCapturable,
    capture_env,
    capture_vector_env,
    decode,
    encode,
    generator_state,
    make_generator,
    restore_env,
    restore_vector_env,
)


def through_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        "text",
        0.1 + 0.2,
        np.float32(1.5),
        np.int64(-7),
        np.bool_(True),
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([1, 2], dtype=np.uint8),
        (1, 2.5, "a"),
        [np.float64(0.3)],
        {"a": (np.int32(1), [2.0])},
    ],
)
def test_plain_values_round_trip_with_type_dtype_and_shape(value: Any) -> None:
    back = decode(through_json(encode(value, "x")))
    assert type(back) is type(value)
    if isinstance(value, np.ndarray | np.generic):
        assert back.dtype == value.dtype and np.shape(back) == np.shape(value)
        np.testing.assert_array_equal(back, value)
    else:
        assert repr(back) == repr(value)


def test_an_object_is_not_capturable_and_says_where() -> None:
    with pytest.raises(NotCapturable, match=r"env\.thing\[1\] is a object"):
        encode(("ok", object()), "env.thing")


def test_generators_round_trip_and_continue_the_same_stream() -> None:
    generator = np.random.default_rng(42)
    generator.random(3)
    copy = make_generator(through_json(generator_state(generator)))
    assert copy is not None
    assert copy.random(5).tolist() == generator.random(5).tolist()
    assert make_generator(generator_state(None)) is None


def rollout(env: Any, steps: int) -> list[Any]:
    out = []
    for _ in range(steps):
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((np.asarray(obs).tolist(), float(reward), terminated, truncated))
        if terminated or truncated:
            out.append(np.asarray(env.reset()[0]).tolist())
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0"])
def test_a_classic_control_env_resumes_mid_episode_exactly(env_id: str) -> None:
    env = gym.make(env_id)
    env.reset(seed=3)
    env.action_space.seed(4)
    rollout(env, 17)
    state = through_json(capture_env(env))
    expected = rollout(env, 40)

    other = gym.make(env_id)
    other.reset(seed=999)
    other.action_space.seed(999)
    restore_env(other, state)
    assert rollout(other, 40) == expected


def test_a_different_wrapper_chain_is_refused() -> None:
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    state = capture_env(env)
    with pytest.raises(NotCapturable, match="wrappers differ"):
        restore_env(gym.make("CartPole-v1", disable_env_checker=False).unwrapped, state)


def test_a_sync_vector_env_round_trips() -> None:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    envs.reset(seed=1)
    envs.action_space.seed(2)
    for _ in range(9):
        envs.step(envs.action_space.sample())
    state = through_json(capture_vector_env(envs))
    expected = [envs.step(envs.action_space.sample())[0].tolist() for _ in range(30)]

    other = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    other.reset(seed=5)
    restore_vector_env(other, state)
    assert [other.step(other.action_space.sample())[0].tolist() for _ in range(30)] == expected

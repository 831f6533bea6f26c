"""Atari preprocessing plays its frame skip on the emulator itself (`rlrun.envs.atari.Preprocessing`):
the same game as Gymnasium's frame loop through every layer below, bit for bit."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlrun.envs import make_vector_env, seed_spaces
from rlrun.envs.state import capture_vector_env
from rlrun.spec import AtariSpec, EnvSpec


def _preprocessing(copy: Any) -> Any:
    from rlrun.envs.atari import Preprocessing

    while not isinstance(copy, Preprocessing):
        copy = copy.env
    return copy


def _through_every_layer(env: Any) -> Any:
    """`env` with Gymnasium's own frame loop in each copy's preprocessing."""
    for copy in env.envs:
        layer = _preprocessing(copy)
        layer.step = partial(gym.wrappers.AtariPreprocessing.step, layer)
    return env


@pytest.mark.parametrize(
    ("game", "kwargs", "atari"),
    [
        ("ALE/Breakout-v5", {}, {}),  # sticky actions, lost lives, game overs
        ("ALE/Breakout-v5", {"repeat_action_probability": 0.0}, {"frame_skip": 3}),  # no sticky layer
        ("ALE/Pong-v5", {"obs_type": "rgb"}, {"grayscale": False}),  # colour screens max-pooled
    ],
)
def test_the_frame_loop_plays_what_the_layers_below_play(
    game: str, kwargs: dict[str, Any], atari: dict[str, Any]
) -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from rlrun.envs.atari import _plain_emulator_below

    spec = EnvSpec(id=game, num_envs=2, frame_stack=4, atari=AtariSpec(**atari), kwargs=kwargs)
    fast: Any = make_vector_env(spec)
    slow = _through_every_layer(make_vector_env(spec))
    for env in (fast, slow):
        seed_spaces(env, 0)  # their generators are in the state compared at the end
    for obs in zip(fast.reset(seed=3)[0], slow.reset(seed=3)[0], strict=True):
        assert np.array_equal(*obs)
    rng, ends = np.random.default_rng(1), 0
    for _ in range(400):
        actions = rng.integers(0, fast.single_action_space.n, 2)
        a, b = fast.step(actions), slow.step(actions)
        for x, y in zip(a[:4], b[:4], strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        assert a[4].keys() == b[4].keys()
        for key in ("lives", "episode_frame_number", "frame_number"):
            assert np.array_equal(a[4][key], b[4][key]), key
        ends += int(a[2].sum())
    assert all(_plain_emulator_below(_preprocessing(copy).env)[0] for copy in fast.envs), "the loop was not taken"
    assert ends > 0 or "Pong" in game, "no episode ended: the test saw no reset"
    assert capture_vector_env(fast)["envs"] == capture_vector_env(slow)["envs"]


def test_a_layer_it_does_not_know_takes_the_layers_path() -> None:
    """A wrapper of the user's between the preprocessing and the emulator is stepped as it was."""
    pytest.importorskip("ale_py")
    from rlrun.envs.atari import StickyActions, _plain_emulator_below

    env = gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0)
    env.reset(seed=0)
    env.step(0)
    assert _plain_emulator_below(env) == (False, None), "the second step is checked too"
    env.step(0)  # the passive checker is done
    assert _plain_emulator_below(env) == (True, None)
    sticky = StickyActions(env, 0.25)
    assert _plain_emulator_below(sticky) == (True, sticky)
    assert _plain_emulator_below(gym.wrappers.RecordEpisodeStatistics(env)) == (False, None)
    fresh = gym.make("ALE/Breakout-v5", frameskip=1)
    assert _plain_emulator_below(fresh) == (False, None), "the first steps go through the checker"

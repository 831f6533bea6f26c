"""Running normalisation (`rlrun.envs.normalize`) without training: the running statistics against
a direct NumPy computation, Stable-Baselines3 parity of every formula (bit for bit, when SB3 is
installed), the round trip through a snapshot's tensors, frozen statistics in evaluation, and a
replay memory's batches normalised as sampled."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlrun.envs.normalize import Normalizer, RunningMeanStd
from rlrun.spec import NormalizeSpec


def _batches(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=3.0, scale=2.0, size=(int(n), 3)) for n in rng.integers(1, 9, size=40)]


def test_running_statistics_are_the_mean_and_variance_of_everything_seen() -> None:
    rms = RunningMeanStd((3,))
    batches = _batches()
    for batch in batches:
        rms.update(batch)
    everything = np.concatenate(batches)
    # the prior (mean 0, variance 1) weighs 1e-4 samples: negligible against ~180
    np.testing.assert_allclose(rms.mean, everything.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(rms.var, everything.var(axis=0), rtol=1e-5)
    assert rms.count == pytest.approx(len(everything) + 1e-4, abs=1e-9)


def test_normalised_observations_and_rewards_follow_the_formulas() -> None:
    spec = NormalizeSpec(clip_obs=2.0, clip_reward=3.0, gamma=0.5)
    normalizer = Normalizer(spec, gym.spaces.Box(-np.inf, np.inf, (3,)), num_envs=2)
    obs = np.array([[1.0, 2.0, 30.0], [3.0, -4.0, 5.0]])
    normalizer.reset(obs)
    rewards = normalizer.step(obs * 2, np.array([1.0, -2.0]), np.array([False, True]))
    rms = normalizer.obs_rms
    assert rms is not None and normalizer.ret_rms is not None
    expected = np.clip((obs - rms.mean) / np.sqrt(rms.var + spec.epsilon), -2, 2).astype(np.float32)
    assert normalizer.observation(obs).dtype == np.float32
    np.testing.assert_array_equal(normalizer.observation(obs), expected)
    returns = np.array([1.0, -2.0])  # 0.5 · 0 + r: the first step after a reset
    np.testing.assert_allclose(normalizer.ret_rms.mean, returns.mean() * 2 / (2 + 1e-4))
    np.testing.assert_array_equal(
        rewards, np.clip(np.array([1.0, -2.0]) / np.sqrt(normalizer.ret_rms.var + 1e-8), -3, 3).astype(np.float32)
    )
    np.testing.assert_array_equal(normalizer.returns, [1.0, 0.0])  # the ended episode's return restarts


def test_parity_with_stable_baselines3_vec_normalize_bit_for_bit() -> None:
    """The same raw observations and rewards through SB3's VecNormalize and rlrun's Normalizer give
    the same normalised observations and rewards and the same statistics, across episode ends."""
    vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    sb3 = vec_env.VecNormalize(
        vec_env.DummyVecEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=50)] * 2),
        gamma=0.95,
        clip_obs=3.0,
        clip_reward=4.0,
    )
    sb3.seed(3)
    ours = Normalizer(NormalizeSpec(gamma=0.95, clip_obs=3.0, clip_reward=4.0), sb3.observation_space, 2)
    first = sb3.reset()
    ours.reset(sb3.get_original_obs())
    np.testing.assert_array_equal(ours.observation(sb3.get_original_obs()), first)
    rng = np.random.default_rng(0)
    for _ in range(130):  # episodes of 50 steps: two ends for each copy
        obs, reward, done, _ = sb3.step(rng.uniform(-2, 2, (2, 1)).astype(np.float32))
        learned = ours.step(sb3.get_original_obs(), sb3.get_original_reward(), done)
        np.testing.assert_array_equal(ours.observation(sb3.get_original_obs()), obs)
        np.testing.assert_array_equal(learned, reward)
    assert ours.obs_rms is not None and ours.ret_rms is not None
    for mine, theirs in ((ours.obs_rms, sb3.obs_rms), (ours.ret_rms, sb3.ret_rms)):
        np.testing.assert_array_equal(mine.mean, theirs.mean)
        np.testing.assert_array_equal(mine.var, theirs.var)
        assert mine.count == theirs.count
    np.testing.assert_array_equal(ours.returns, sb3.returns)


def test_running_statistics_update_like_stable_baselines3() -> None:
    common = pytest.importorskip("stable_baselines3.common.running_mean_std")
    theirs, ours = common.RunningMeanStd(shape=(3,)), RunningMeanStd((3,))
    for batch in _batches(7):
        theirs.update(batch)
        ours.update(batch)
        np.testing.assert_array_equal(ours.mean, theirs.mean)
        np.testing.assert_array_equal(ours.var, theirs.var)
        assert ours.count == theirs.count


def _trained_normalizer() -> Normalizer:
    normalizer = Normalizer(NormalizeSpec(), gym.spaces.Box(-np.inf, np.inf, (3,)), num_envs=2)
    rng = np.random.default_rng(1)
    normalizer.reset(rng.normal(size=(2, 3)))
    for _ in range(20):
        normalizer.step(rng.normal(5, 3, size=(2, 3)), rng.normal(size=2), rng.random(2) < 0.1)
    return normalizer


def test_the_statistics_round_trip_through_a_snapshot_bit_for_bit(tmp_path: Any) -> None:
    normalizer = _trained_normalizer()
    path = tmp_path / "state.pt"
    torch.save({"normalize": normalizer.state_dict()}, path)
    back = Normalizer(NormalizeSpec(), gym.spaces.Box(-np.inf, np.inf, (3,)), num_envs=2)
    back.load_state_dict(torch.load(path, weights_only=True)["normalize"])
    for name, tensor in normalizer.state_dict().items():
        assert tensor.dtype == torch.float64 and torch.equal(tensor, back.state_dict()[name]), name
    obs, reward, done = np.full((2, 3), 4.0), np.array([0.5, 2.0]), np.array([False, False])
    np.testing.assert_array_equal(normalizer.step(obs, reward, done), back.step(obs, reward, done))


def test_evaluation_reads_the_statistics_frozen() -> None:
    from rlrun.algorithms import build_agent
    from rlrun.session.evaluation import evaluate
    from rlrun.spec import builtin_document, validate_spec

    spec = validate_spec({**builtin_document("ppo_pendulum"), "env": {"id": "Pendulum-v1", "normalize": {}}})
    env = gym.make("Pendulum-v1", max_episode_steps=20)
    agent = build_agent(spec, env.observation_space, env.action_space, seed=0)
    normalizer = _trained_normalizer()
    before = normalizer.state_dict()
    frozen = evaluate(agent, env, seed=0, frame=0, episodes=2, normalizer=normalizer)
    assert all(torch.equal(before[k], v) for k, v in normalizer.state_dict().items())
    raw = evaluate(agent, env, seed=0, frame=0, episodes=2)
    assert frozen.returns != raw.returns, "the agent did not see normalised observations"


def test_a_replay_memory_keeps_raw_data_and_normalises_what_it_samples() -> None:
    from rlrun.algorithms.replay import ReplayMemory
    from rlrun.spec import MemorySpec

    memory = ReplayMemory(MemorySpec(capacity=16), (3,), np.dtype(np.float32), (), np.dtype(np.int64))
    obs = np.arange(3, dtype=np.float32)[None]
    memory.add(obs, np.array([1]), np.array([2.0]), obs + 1, np.array([False]), np.array([False]))
    normalizer = _trained_normalizer()
    raw = memory.batch(np.array([0]))
    memory.view = normalizer.batch
    seen = memory.batch(np.array([0]))
    np.testing.assert_array_equal(raw.obs.numpy(), obs)  # stored as the env gave it
    np.testing.assert_array_equal(seen.obs.numpy(), normalizer.observation(obs))
    np.testing.assert_array_equal(seen.next_obs.numpy(), normalizer.observation(obs + 1))
    np.testing.assert_array_equal(seen.rewards.numpy(), normalizer.reward(np.array([2.0], np.float32)))
    assert torch.equal(seen.actions, raw.actions)


def test_a_normalised_observation_must_be_a_box() -> None:
    from rlrun.errors import BadInput

    with pytest.raises(BadInput, match=r"env\.normalize\.observation: normalises Box observations"):
        Normalizer(NormalizeSpec(), gym.spaces.Discrete(4), num_envs=1)
    assert Normalizer(NormalizeSpec(observation=False), gym.spaces.Discrete(4), num_envs=1).obs_rms is None


def test_a_datasets_statistics_are_fixed_and_rewards_left_alone() -> None:
    """`data.normalize`: the mean and variance of a dataset's observations, never moved by training
    steps; rewards as the env gave them; a Discrete observation refused naming the key."""
    from rlrun.envs.normalize import DATASET
    from rlrun.errors import BadInput

    space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    rows = np.concatenate(_batches()).astype(np.float32)
    normalizer = Normalizer(DATASET, space, num_envs=2, fixed=True)
    normalizer.fit(rows)
    mean, var = rows.astype(np.float64).mean(axis=0), rows.astype(np.float64).var(axis=0)
    assert np.array_equal(normalizer.obs_rms.mean, mean) and np.array_equal(normalizer.obs_rms.var, var)
    normalizer.reset(np.full((2, 3), 100.0))
    reward = np.array([1.5, -2.0], np.float32)
    assert np.array_equal(normalizer.step(np.full((2, 3), -50.0), reward, np.array([False, True])), reward)
    assert np.array_equal(normalizer.obs_rms.mean, mean) and np.array_equal(normalizer.obs_rms.var, var)
    expected = np.clip((rows[:4] - mean) / np.sqrt(var + 1e-6), -10, 10).astype(np.float32)
    assert np.array_equal(normalizer.observation(rows[:4]), expected)
    with pytest.raises(BadInput, match=r"^data\.normalize: normalises Box observations"):
        Normalizer(DATASET, gym.spaces.Discrete(4), num_envs=1, fixed=True)

"""Running normalisation of observations and rewards (`env.normalize`), at the vector env's level.

The semantics are Stable-Baselines3's `VecNormalize` (`common/vec_env/vec_normalize.py`,
`common/running_mean_std.py`), formula for formula and in the same float64 arithmetic:

- observations: `clip((obs − mean) / sqrt(var + epsilon), ±clip_obs)`, as float32, where mean and
  var are those of every observation the training env returned so far: the first reset's, then
  each step's (the next episode's first observation where one ended, as the agent sees it);
- rewards: `clip(r / sqrt(var_R + epsilon), ±clip_reward)`, as float32, where var_R is the variance
  of the running discounted return `R ← gamma·R + r`, which restarts at 0 where an episode ends.

`data.normalize` makes the same normaliser with fixed statistics instead (`DATASET`): the mean and
variance of a dataset's observations (`fit`), never updated, rewards left as they are.

Only a training step (`step`, `reset`) updates the running statistics; everything else reads them frozen:
the agent's view of an observation (`observation`), evaluation, `rlrun enjoy` and a replay memory's
batches (`batch`: SB3's buffers, too, keep the env's own observations and rewards and normalise each
sample with the statistics of the moment). The session owns the one `Normalizer`; algorithms never
see it. Its state is plain float64 arrays, in every snapshot's state.pt (`state_dict`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlrun.errors import BadInput
from rlrun.spec import NormalizeSpec, Spec

COUNT_EPSILON = 1e-4
"""SB3's initial count: the prior (mean 0, variance 1) weighs as this many samples."""
DATASET = NormalizeSpec(observation=True, reward=False, epsilon=1e-6)
"""`data.normalize`: observations by the dataset's statistics, fixed; 1e-6 under the root puts a
floor of 1e-3 under each spread, as CORL's `std + 1e-3` does, so a dimension the dataset never
varied does not blow up online."""


class RunningMeanStd:
    """Mean and variance of a stream of batches, merged batch by batch (Chan et al.'s parallel
    algorithm), exactly as SB3's `RunningMeanStd`."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = COUNT_EPSILON

    def update(self, batch: np.ndarray) -> None:
        """Merge a batch (its first axis: one sample per row)."""
        self.update_from_moments(np.mean(batch, axis=0), np.var(batch, axis=0), batch.shape[0])

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m_2 = self.var * self.count + batch_var * batch_count + np.square(delta) * self.count * batch_count / total
        self.mean, self.var, self.count = new_mean, m_2 / total, batch_count + self.count

    def state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "var": self.var, "count": np.array(self.count, np.float64)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.mean = np.array(state["mean"], np.float64)
        self.var = np.array(state["var"], np.float64)
        self.count = float(state["count"])


class Normalizer:
    """The statistics of one session's training env, and what it makes of observations and rewards."""

    def __init__(
        self, spec: NormalizeSpec, obs_space: spaces.Space[Any], num_envs: int, *, fixed: bool = False
    ) -> None:
        self.spec = spec
        self.fixed = fixed
        """Statistics set once (`fit`: a dataset's) and never updated by training steps."""
        if spec.observation and not isinstance(obs_space, spaces.Box):
            key = "data.normalize" if fixed else "env.normalize.observation"
            raise BadInput(
                f"{key}: normalises Box observations, and this env's are {type(obs_space).__name__}; set it to false"
            )
        self.obs_rms = RunningMeanStd(tuple(obs_space.shape or ())) if spec.observation else None
        self.ret_rms = RunningMeanStd(()) if spec.reward else None
        self.returns = np.zeros(num_envs, np.float64)
        """Each copy's discounted return so far (what the reward scale is the spread of)."""

    # -- frozen: reading the statistics ------------------------------------------------------

    def observation(self, obs: np.ndarray) -> np.ndarray:
        if self.obs_rms is None:
            return obs
        scaled = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.spec.epsilon)
        return np.clip(scaled, -self.spec.clip_obs, self.spec.clip_obs).astype(np.float32)

    def reward(self, reward: np.ndarray) -> np.ndarray:
        if self.ret_rms is None:
            return reward
        scaled = reward / np.sqrt(self.ret_rms.var + self.spec.epsilon)
        return np.clip(scaled, -self.spec.clip_reward, self.spec.clip_reward).astype(np.float32)

    def batch(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A replay memory's batch (the env's own observations and rewards) as the agent learns from it."""
        return {
            **batch,
            "obs": self.observation(batch["obs"]),
            "next_obs": self.observation(batch["next_obs"]),
            "rewards": self.reward(batch["rewards"]),
        }

    # -- training: updating them -----------------------------------------------------------------

    def fit(self, observations: np.ndarray) -> None:
        """Fixed statistics: the mean and variance of `observations` (a dataset's, one per row), in
        float64, as one batch merged into nothing (its count, the rows')."""
        assert self.fixed and self.obs_rms is not None
        rows = np.asarray(observations, np.float64).reshape(len(observations), *self.obs_rms.mean.shape)
        self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count = rows.mean(axis=0), rows.var(axis=0), float(len(rows))

    def reset(self, obs: np.ndarray) -> None:
        """The training env was reset (every copy): its observations count, its returns restart."""
        self.returns[:] = 0.0
        if self.obs_rms is not None and not self.fixed:
            self.obs_rms.update(obs)

    def step(self, next_obs: np.ndarray, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Count a training step's observations (after autoreset) and returns; the reward the agent
        learns from, scaled with the statistics just updated."""
        if self.obs_rms is not None and not self.fixed:
            self.obs_rms.update(next_obs)
        self.returns = self.returns * self.spec.gamma + reward
        if self.ret_rms is not None:
            self.ret_rms.update(self.returns)
        scaled = self.reward(reward)
        self.returns[done] = 0.0
        return scaled

    # -- snapshots --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """float64 tensors (state.pt, loaded with weights_only): the statistics and the returns."""
        state: dict[str, np.ndarray] = {"returns": self.returns}
        for name, rms in (("obs", self.obs_rms), ("ret", self.ret_rms)):
            if rms is not None:
                state.update({f"{name}_{key}": value for key, value in rms.state().items()})
        return {key: torch.from_numpy(np.array(value, np.float64)) for key, value in state.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        arrays = {key: value.numpy() for key, value in state.items()}
        self.returns = np.array(arrays["returns"], np.float64)
        for name, rms in (("obs", self.obs_rms), ("ret", self.ret_rms)):
            if rms is not None:
                rms.load({key: arrays[f"{name}_{key}"] for key in ("mean", "var", "count")})


def make_normalizer(spec: Spec, obs_space: spaces.Space[Any], saved: dict[str, Any] | None = None) -> Normalizer | None:
    """The spec's normaliser (None without `env.normalize` or `data.normalize`), with a snapshot's
    statistics when given its tensors (the session's, or frozen for `rlrun enjoy`). A dataset's
    statistics are the session's to `fit` when there is no snapshot."""
    fixed = spec.data is not None and spec.data.normalize
    normalize = DATASET if fixed else spec.env.normalize
    if normalize is None:
        return None
    normalizer = Normalizer(normalize, obs_space, spec.env.num_envs, fixed=fixed)
    if saved is not None:
        normalizer.load_state_dict(saved["normalize"])
    return normalizer

"""What a snapshot holds of a session, and how a session is put back from one.

The loop's progress is data (`SessionProgress`): the clock, the observation and the unfinished
episodes, the metrics the display keeps, the evaluations and the best, the evaluation env's state.
`capture` takes a snapshot from that progress and the parts it is not (the agent, its replay memory
as shared segments; the training env, captured or noted as not capturable; the normaliser; every
random generator) at the clock's frame. `restore` puts it all back, the generators last, so the
frames that follow are those the snapshotted session would have trained; where it cannot be exact,
it says why (`Resumed.approximate`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from rlrun import seeding, snapshot
from rlrun.algorithms.base import Agent
from rlrun.clock import Clock
from rlrun.envs.normalize import Normalizer
from rlrun.envs.state import NotCapturable, capture_vector_env, restore_vector_env
from rlrun.session import stack
from rlrun.session.device import Where, moved
from rlrun.session.evaluation import EvalEnvState
from rlrun.session.task import SessionTask
from rlrun.spec import Spec

RECENT_EPISODES = 100
"""The episodes the display's means are over."""


@dataclass
class SessionProgress:
    """Where a session's training stands besides its agent, env, normaliser and generators: what
    the loop advances, and what a snapshot's meta keeps of it."""

    clock: Clock
    obs: np.ndarray
    """The env's own observation the next action is chosen from (normalised only as the agent sees it)."""
    episode_return: np.ndarray
    """Each env copy's unfinished episode's return so far."""
    episode_length: np.ndarray
    eval_env_state: EvalEnvState
    """The evaluation env's state after the newest evaluation recorded."""
    recent_returns: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_EPISODES))
    recent_lengths: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_EPISODES))
    last_losses: Mapping[str, float] = field(default_factory=dict)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    best: snapshot.Best | None = None

    def best_mean(self) -> float | None:
        """The best evaluation's mean so far (None before the first)."""
        return self.best.mean if self.best else None

    @classmethod
    def start(cls, obs: np.ndarray, num_envs: int, eval_env_state: EvalEnvState) -> SessionProgress:
        """A fresh session's: frame 0, each of `num_envs` env copies at the start of an episode."""
        return cls(
            Clock(),
            obs,
            np.zeros(num_envs, dtype=np.float64),
            np.zeros(num_envs, dtype=np.int64),
            eval_env_state,
        )


@dataclass(frozen=True)
class Origin:
    """Whose progress a snapshot holds: the session's task and spec, and where it learns."""

    task: SessionTask
    spec: Spec
    where: Where

    @cached_property
    def stack(self) -> dict[str, str]:
        """The software it learns with (`rlrun.session.stack`), read once per session."""
        return stack.software_stack(self.spec, device=self.where.device)


@dataclass
class Resumed:
    """What a restore says of itself."""

    approximate: str | None = None
    """Why the session cannot continue exactly (None when it can)."""
    env_restored: str | None = None
    """How the env was put back ("env: captured", "env: replayed 143 steps"); None when restarted."""


def capture(
    progress: SessionProgress, agent: Agent, env: Any, normalizer: Normalizer | None, *, origin: Origin, kind: str
) -> snapshot.Snapshot:
    python_state = random.getstate()
    try:
        env_state: Any = capture_vector_env(env)
        env_note = None
    except NotCapturable as error:
        env_state, env_note = None, f"{origin.spec.env.id} state cannot be captured ({error})"
    meta = snapshot.SnapshotMeta(
        kind=kind,
        run_id=origin.task.run_id,
        session_index=origin.task.index,
        seed=origin.task.seed,
        clock=replace(progress.clock),
        spec=origin.spec.to_json(),
        random=snapshot.RandomStates(
            python=[python_state[0], list(python_state[1]), python_state[2]],
            numpy=_jsonable(np.random.get_state(legacy=False)),
            eval_env=progress.eval_env_state.generator,
        ),
        env=env_state,
        env_note=env_note,
        obs=progress.obs.tolist(),
        obs_dtype=progress.obs.dtype.str,
        episode_return=progress.episode_return.tolist(),
        episode_length=progress.episode_length.tolist(),
        recent_returns=list(progress.recent_returns),
        recent_lengths=list(progress.recent_lengths),
        last_losses=dict(progress.last_losses),
        evaluations=progress.evaluations,
        best=progress.best,
        device=origin.where.device,
        gpu=origin.where.gpu,
        # the user's wrappers may keep state across evaluations, which the next evaluation sees
        eval_wrappers=progress.eval_env_state.wrappers,
        stack=origin.stack,
    )
    agent_state = agent.state_dict()
    logs = agent_state.pop("logs", {})  # the replay memory: segments, written without a copy, shared
    tensors = {"agent": agent_state, "torch_rng": torch.get_rng_state()}
    if normalizer is not None:
        tensors["normalize"] = normalizer.state_dict()
    return snapshot.Snapshot(meta=meta, tensors=tensors, logs=logs)


def restore(
    saved: snapshot.Snapshot,
    progress: SessionProgress,
    agent: Agent,
    env: Any,
    normalizer: Normalizer | None,
    *,
    origin: Origin,
) -> Resumed:
    """Continue from a snapshot: state first, every random generator last. The evaluation env's
    own state is `progress.eval_env_state`, for the caller's evaluator to take."""
    meta = saved.meta
    resumed = Resumed()
    agent.load_state_dict({**saved.tensors["agent"], "arrays": saved.arrays, "logs": saved.logs})
    memory = getattr(origin.spec.agent, "memory", None)
    if memory is not None and not memory.snapshot:
        resumed.approximate = "replay memory not in the snapshot (memory.snapshot is false); it refills"
    progress.clock = replace(meta.clock)
    progress.evaluations, progress.best = meta.evaluations, meta.best
    progress.last_losses = meta.last_losses
    progress.recent_returns.extend(meta.recent_returns)
    progress.recent_lengths.extend(meta.recent_lengths or ())
    if normalizer is not None:
        normalizer.load_state_dict(saved.tensors["normalize"])
    _restore_env(meta, progress, agent, env, normalizer, origin, resumed)
    state = meta.random.python
    random.setstate((state[0], tuple(state[1]), state[2]))
    numpy_state = meta.random.numpy
    numpy_state["state"]["key"] = np.array(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(numpy_state)
    torch.set_rng_state(saved.tensors["torch_rng"])
    progress.eval_env_state = EvalEnvState(meta.random.eval_env, meta.eval_wrappers)
    elsewhere = moved(Where(meta.device or "cpu", meta.gpu), origin.where)  # older snapshots: the CPU
    restacked = stack.stack_change(meta.stack, origin.stack)
    if elsewhere is not None or restacked is not None:
        resumed.approximate = "; ".join(filter(None, [resumed.approximate, elsewhere, restacked]))
    return resumed


def _restore_env(
    meta: snapshot.SnapshotMeta,
    progress: SessionProgress,
    agent: Agent,
    env: Any,
    normalizer: Normalizer | None,
    origin: Origin,
    resumed: Resumed,
) -> None:
    """Put the training env back mid-episode (captured or replayed), else restart its episodes."""
    if meta.env is None:
        _restart_episodes(progress, agent, env, normalizer, origin, resumed, meta.env_note or "")
        return
    try:
        resumed.env_restored = restore_vector_env(env, meta.env)
    except NotCapturable as error:
        note = f"{origin.spec.env.id} state could not be restored ({error})"
        _restart_episodes(progress, agent, env, normalizer, origin, resumed, note)
        return
    progress.obs = np.array(meta.obs, dtype=np.dtype(meta.obs_dtype))
    progress.episode_return = np.array(meta.episode_return, dtype=np.float64)
    progress.episode_length = np.array(meta.episode_length, dtype=np.int64)


def _restart_episodes(
    progress: SessionProgress,
    agent: Agent,
    env: Any,
    normalizer: Normalizer | None,
    origin: Origin,
    resumed: Resumed,
    note: str,
) -> None:
    """The env's state was not captured: start fresh episodes (seeded from the frame, so even
    this is repeatable) and drop the agent's unfinished ones."""
    progress.obs, _ = env.reset(seed=seeding.derive(origin.task.seed, seeding.ENV, progress.clock.frame))
    if normalizer is not None:
        normalizer.reset(progress.obs)
    restart = getattr(agent, "restart_episodes", None)
    if restart is not None:
        restart()
    # the restart is what the attempt is approximate for: it says so in place of any note before
    resumed.approximate = f"{note}; env: restarted, resumed at an episode boundary"


def _jsonable(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _jsonable(value) for key, value in state.items()}
    if isinstance(state, np.ndarray):
        return state.tolist()
    return state

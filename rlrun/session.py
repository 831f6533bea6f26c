"""One session: one seed, one agent, one (vector) env, trained to the frame budget.

The loop is the only place where the clock advances. Cadences (log, evaluation, checkpoint) fire
when the frame count crosses a multiple of their period, and everything they do is a function of
the clock and the session seed, never of wall time.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch

from rlrun import events, paths, seeding, snapshot
from rlrun.algorithms import agent_class
from rlrun.algorithms.base import Agent, Step
from rlrun.clock import Clock, crossed
from rlrun.envs import make_env, make_vector_env, true_next_obs
from rlrun.evaluation import evaluate
from rlrun.registry import Registry
from rlrun.spec import Spec, validate_spec

HEARTBEAT_SECONDS = 3.0
RECENT_EPISODES = 100

Emit = Callable[[events.Event], None]


class ProgressCounts(TypedDict):
    frame: int
    episode: int
    opt_step: int


@dataclass(frozen=True)
class SessionTask:
    """Everything a session process needs; plain data so it can be sent to a spawned process."""

    home: str
    db_url: str
    run_id: str
    session_id: int
    index: int
    seed: int
    spec: dict[str, Any]


def build_agent(spec: Spec, obs_space: Any, action_space: Any, seed: int) -> Agent:
    """The spec's agent, its weights initialised from the session seed."""
    torch.manual_seed(seeding.derive(seed, seeding.TORCH_INIT))
    agent: Agent = agent_class(spec.agent.algorithm)(
        spec.agent, obs_space, action_space,
        seed=seeding.derive(seed, seeding.AGENT), num_envs=spec.env.num_envs, max_frame=spec.meta.max_frame,
    )
    return agent


class Session:
    def __init__(self, task: SessionTask, registry: Registry, emit: Emit) -> None:
        self.task, self.registry, self.emit = task, registry, emit
        self.spec = validate_spec(task.spec)
        self.meta = self.spec.meta
        self.home = Path(task.home)
        torch.set_num_threads(self.meta.torch_threads)
        random.seed(seeding.derive(task.seed, seeding.PYTHON_NUMPY))
        np.random.seed(seeding.derive(task.seed, seeding.PYTHON_NUMPY))
        self.env = make_vector_env(self.spec.env)
        self.eval_env = make_env(self.spec.env)
        self.agent = build_agent(self.spec, self.env.single_observation_space, self.env.single_action_space, task.seed)
        self.clock = Clock()
        self.obs, _ = self.env.reset(seed=seeding.derive(task.seed, seeding.ENV))
        self.env.action_space.seed(seeding.derive(task.seed, seeding.ACTION_SPACE))
        n = self.spec.env.num_envs
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.recent_returns: deque[float] = deque(maxlen=RECENT_EPISODES)
        self.metrics: list[dict[str, Any]] = []
        self.evaluations: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.last_losses: dict[str, float] = {}

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        self.registry.start_session(self.task.session_id, host=socket.gethostname(), pid=os.getpid())
        self.emit(events.SessionStarted(self.task.index, self.task.seed, self.clock.frame, self.meta.max_frame))
        started = last_beat = time.monotonic()
        start_frame, start_wall = self.clock.frame, self.clock.wall_time
        while self.clock.frame < self.meta.max_frame:
            before = self.clock.frame
            self._step()
            now = time.monotonic()
            self.clock.wall_time = start_wall + now - started
            finished = self.clock.frame >= self.meta.max_frame
            if crossed(before, self.clock.frame, self.meta.log_frequency) or finished:
                self._log(fps=(self.clock.frame - start_frame) / max(now - started, 1e-9))
            kinds = self._evaluate_if_due(before, finished)
            if crossed(before, self.clock.frame, self.meta.checkpoint_frequency):
                kinds.append("periodic")
            if finished:
                kinds.append("final")
            if kinds:
                self._checkpoint(kinds)
            if now - last_beat >= HEARTBEAT_SECONDS:
                self._heartbeat()
                last_beat = now
        self.registry.finish_session(self.task.session_id, status="finished", **self._progress())
        best = self.best["mean"] if self.best else None
        self.emit(events.SessionEnded(self.task.index, "finished", self.clock.frame, best))

    def _step(self) -> None:
        action = self.agent.act(self.obs)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated | truncated
        self.agent.observe(Step(self.obs, action, reward, terminated, truncated, true_next_obs(next_obs, done, info)))
        self.obs = next_obs
        self.clock.frame += self.spec.env.num_envs
        self.episode_return += reward
        self.episode_length += 1
        for i in np.flatnonzero(done):
            self.recent_returns.append(float(self.episode_return[i]))
            self.episode_return[i], self.episode_length[i] = 0.0, 0
            self.clock.episode += 1
        self.last_losses = self.agent.update(self.clock) or self.last_losses

    # -- cadences -------------------------------------------------------------------------------

    def _log(self, fps: float) -> None:
        return_mean = float(np.mean(self.recent_returns)) if self.recent_returns else None
        self.metrics.append({**self.clock.to_json(), "return_mean": return_mean, **self.last_losses})
        self.emit(events.Progress(self.task.index, self.clock.frame, self.meta.max_frame, self.clock.episode,
                                  fps, return_mean))

    def _evaluate_if_due(self, before: int, finished: bool) -> list[str]:
        if not (crossed(before, self.clock.frame, self.meta.eval_frequency) or finished):
            return []
        result = evaluate(self.agent, self.eval_env, seed=self.task.seed, frame=self.clock.frame,
                          episodes=self.meta.num_eval_episodes, deterministic=self.meta.eval_deterministic)
        summary = result.summary()
        self.evaluations.append(result.to_json())
        self.registry.add_evaluation(self.task.session_id, **summary)
        is_best = self.best is None or result.mean > self.best["mean"]
        if is_best:
            self.best = {"frame": result.frame, "mean": result.mean}
        self.emit(events.Evaluated(self.task.index, result.frame, result.mean, result.std, is_best))
        return ["best"] if is_best else []

    def _checkpoint(self, kinds: list[str]) -> None:
        kind = "+".join(kinds)
        directory = paths.checkpoints_dir(self.home, self.task.run_id, self.task.index)
        written = snapshot.write(directory / snapshot.snapshot_name(self.clock.frame), self._snapshot(kind))
        self.registry.add_checkpoint(self.task.session_id, frame=self.clock.frame, kind=kind,
                                     path=str(written.path.relative_to(self.home)), sha256=written.sha256,
                                     size_bytes=written.size_bytes)
        self.emit(events.Checkpointed(self.task.index, self.clock.frame, kind, str(written.path)))
        self._retain()

    def _retain(self) -> None:
        """Keep the newest `keep_checkpoints` periodic snapshots, the best and the final. The row
        goes first, so the registry never points at a deleted folder."""
        records = self.registry.checkpoints(self.task.session_id)
        periodic = [c for c in records if "periodic" in c.kind.split("+")]
        best = [c for c in records if "best" in c.kind.split("+")]
        keep = {c.id for c in periodic[-self.meta.keep_checkpoints:]} | {c.id for c in best[-1:]}
        keep |= {c.id for c in records if "final" in c.kind.split("+")}
        for record in records:
            if record.id not in keep:
                self.registry.remove_checkpoint(record.id)
                shutil.rmtree(self.home / record.path, ignore_errors=True)

    def _heartbeat(self) -> None:
        self.registry.heartbeat(self.task.session_id, **self._progress())

    def _progress(self) -> ProgressCounts:
        return {"frame": self.clock.frame, "episode": self.clock.episode, "opt_step": self.clock.opt_step}

    # -- state ----------------------------------------------------------------------------------

    def _snapshot(self, kind: str) -> snapshot.Snapshot:
        python_state = random.getstate()
        numpy_state = np.random.get_state(legacy=False)
        meta = {
            "kind": kind,
            "run_id": self.task.run_id,
            "session_index": self.task.index,
            "seed": self.task.seed,
            "clock": self.clock.to_json(),
            "spec": self.spec.to_json(),
            "random": {
                "python": [python_state[0], list(python_state[1]), python_state[2]],
                "numpy": _jsonable_state(numpy_state),
                "env_action_space": _jsonable_state(self.env.action_space.np_random.bit_generator.state),
            },
            "episode_return": self.episode_return.tolist(),
            "episode_length": self.episode_length.tolist(),
            "recent_returns": list(self.recent_returns),
            "metrics": self.metrics,
            "evaluations": self.evaluations,
            "best": self.best,
        }
        tensors = {"agent": self.agent.state_dict(), "torch_rng": torch.get_rng_state()}
        return snapshot.Snapshot(meta=meta, tensors=tensors)


def _jsonable_state(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _jsonable_state(value) for key, value in state.items()}
    if isinstance(state, np.ndarray):
        return state.tolist()
    return state


def run_session(task: SessionTask, emit: Emit) -> None:
    """Train one session to its budget, recording it in the registry. A failure is recorded on the
    session (status failed, with the message) and re-raised."""
    registry = Registry.open(Path(task.home), task.db_url)
    session: Session | None = None
    try:
        session = Session(task, registry, emit)
        session.run()
    except BaseException as error:
        message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        progress = session._progress() if session else ProgressCounts(frame=0, episode=0, opt_step=0)
        registry.finish_session(task.session_id, status="failed", error=message, **progress)
        emit(events.SessionEnded(task.index, "failed", progress["frame"], None, message))
        if isinstance(error, Exception):
            raise SessionFailed(message, traceback.format_exc()) from error
        raise
    finally:
        registry.close()


class SessionFailed(Exception):
    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.details = details


def run_session_process(task: SessionTask, queue: Any) -> None:
    """Entry point of a spawned session process: events go to the parent through `queue`."""
    try:
        run_session(task, queue.put)
    except SessionFailed:
        raise SystemExit(1) from None

"""What a snapshot holds of a session, and how a session is put back from one.

`capture` takes the session's whole state at its clock's frame: the agent (its replay memory as
shared segments), the training env (captured, or noted as not capturable), the observation and the
unfinished episodes, the metrics the display keeps, the evaluations and the best, and every random
generator. `restore` puts it all back, the generators last, so the frames that follow are those the
snapshotted session would have trained; where it cannot be exact, it says why on the session
(`approximate`).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlrun import paths, seeding, snapshot
from rlrun.envs.state import NotCapturable, capture_vector_env, restore_vector_env
from rlrun.session import metrics_log
from rlrun.session.device import Where, moved
from rlrun.session.evaluation import EvalEnvState

if TYPE_CHECKING:
    from rlrun.session.loop import Session


def capture(session: Session, kind: str) -> snapshot.Snapshot:
    python_state = random.getstate()
    try:
        env_state: Any = capture_vector_env(session.env)
        env_note = None
    except NotCapturable as error:
        env_state, env_note = None, f"{session.spec.env.id} state cannot be captured ({error})"
    meta = snapshot.SnapshotMeta(
        kind=kind,
        run_id=session.task.run_id,
        session_index=session.task.index,
        seed=session.task.seed,
        clock=replace(session.clock),
        spec=session.spec.to_json(),
        random=snapshot.RandomStates(
            python=[python_state[0], list(python_state[1]), python_state[2]],
            numpy=_jsonable(np.random.get_state(legacy=False)),
            eval_env=session.eval_env_state.generator,
        ),
        env=env_state,
        env_note=env_note,
        obs=session.obs.tolist(),
        obs_dtype=session.obs.dtype.str,
        episode_return=session.episode_return.tolist(),
        episode_length=session.episode_length.tolist(),
        recent_returns=list(session.recent_returns),
        recent_lengths=list(session.recent_lengths),
        last_losses=dict(session.last_losses),
        evaluations=session.evaluations,
        best=session.best,
        device=session.where.device,
        gpu=session.where.gpu,
        # the user's wrappers may keep state across evaluations, which the next evaluation sees
        eval_wrappers=session.eval_env_state.wrappers,
    )
    agent_state = session.agent.state_dict()
    logs = agent_state.pop("logs", {})  # the replay memory: segments, written without a copy, shared
    tensors = {"agent": agent_state, "torch_rng": torch.get_rng_state()}
    if session.normalizer is not None:
        tensors["normalize"] = session.normalizer.state_dict()
    return snapshot.Snapshot(meta=meta, tensors=tensors, logs=logs)


def restore(session: Session, saved: snapshot.Snapshot) -> None:
    """Continue from a snapshot: state first, every random generator last."""
    meta = saved.meta
    session.agent.load_state_dict({**saved.tensors["agent"], "arrays": saved.arrays, "logs": saved.logs})
    memory = getattr(session.spec.agent, "memory", None)
    if memory is not None and not memory.snapshot:
        session.approximate = "replay memory not in the snapshot (memory.snapshot is false); it refills"
    session.clock = replace(meta.clock)
    session.evaluations, session.best = meta.evaluations, meta.best
    session.last_losses = meta.last_losses
    session.recent_returns.extend(meta.recent_returns)
    session.recent_lengths.extend(meta.recent_lengths or ())
    source = metrics_log.path(paths.session_dir(session.home, meta.run_id, meta.session_index))
    session.metrics_kept = metrics_log.rows_up_to(source, session.clock.frame) or list(meta.metrics or ())
    if session.normalizer is not None:
        session.normalizer.load_state_dict(saved.tensors["normalize"])
    _restore_env(session, meta)
    state = meta.random.python
    random.setstate((state[0], tuple(state[1]), state[2]))
    numpy_state = meta.random.numpy
    numpy_state["state"]["key"] = np.array(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(numpy_state)
    torch.set_rng_state(saved.tensors["torch_rng"])
    session.eval_env_state = EvalEnvState(meta.random.eval_env, meta.eval_wrappers)
    session.evaluator.restore_env(session.eval_env_state)
    elsewhere = moved(Where(meta.device or "cpu", meta.gpu), session.where)  # older snapshots: the CPU
    if elsewhere is not None:
        session.approximate = "; ".join(filter(None, [session.approximate, elsewhere]))


def _restore_env(session: Session, meta: snapshot.SnapshotMeta) -> None:
    """Put the training env back mid-episode (captured or replayed), else restart its episodes."""
    if meta.env is None:
        _restart_episodes(session, meta.env_note or "")
        return
    try:
        session.env_restored = restore_vector_env(session.env, meta.env)
    except NotCapturable as error:
        _restart_episodes(session, f"{session.spec.env.id} state could not be restored ({error})")
        return
    session.obs = np.array(meta.obs, dtype=np.dtype(meta.obs_dtype))
    session.episode_return = np.array(meta.episode_return, dtype=np.float64)
    session.episode_length = np.array(meta.episode_length, dtype=np.int64)


def _restart_episodes(session: Session, note: str) -> None:
    """The env's state was not captured: start fresh episodes (seeded from the frame, so even
    this is repeatable) and drop the agent's unfinished ones."""
    session.obs, _ = session.env.reset(seed=seeding.derive(session.task.seed, seeding.ENV, session.clock.frame))
    if session.normalizer is not None:
        session.normalizer.reset(session.obs)
    restart = getattr(session.agent, "restart_episodes", None)
    if restart is not None:
        restart()
    session.approximate = f"{note}; env: restarted, resumed at an episode boundary"


def _jsonable(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _jsonable(value) for key, value in state.items()}
    if isinstance(state, np.ndarray):
        return state.tolist()
    return state

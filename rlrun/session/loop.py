"""One session: one seed, one agent, one (vector) env, trained to the frame budget.

The loop is the only place where the clock advances. Cadences (log, evaluation, checkpoint) fire
when the frame count crosses a multiple of their period, and everything they do is a function of
the clock and the session seed, never of wall time. A session may start fresh or from a snapshot;
either way the frames that follow are the same, bit for bit.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch

from rlrun import paths, seeding, snapshot, testhooks
from rlrun.algorithms import build_agent
from rlrun.algorithms.base import Step
from rlrun.clock import Clock, crossed
from rlrun.envs import make_vector_env, seed_spaces, true_next_obs
from rlrun.envs.normalize import make_normalizer
from rlrun.envs.state import NotCapturable, capture_vector_env, restore_vector_env
from rlrun.registry import Registry
from rlrun.registry.database import LeaseLost
from rlrun.registry.liveness import HEARTBEAT_SECONDS
from rlrun.session import events, metrics_log, tensorboard_log
from rlrun.session.device import Where, moved, nondeterministic_ops, resolve_device, where
from rlrun.session.evaluation import EvalEnvState, Evaluation, Evaluator, Outcome
from rlrun.session.stopping import StopRequest
from rlrun.snapshot import retention
from rlrun.spec import recorded_spec
from rlrun.spec.cores import AUTO, torch_threads
from rlrun.trackers import Identity
from rlrun.trackers import status as tracker_status
from rlrun.trackers.delivery import open_relay

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
    attempt: str = "train"
    """Why this process works on the session: "train", "resume" or "fork"."""
    resume_from: str | None = None
    """Snapshot to continue from, relative to the home (None: start at frame 0)."""
    resume_sha256: str | None = None
    lease_base: int | None = None
    """The session's lease token when the task was handed to an executor that may run it more
    than once (a cluster's): an attempt that takes a later token than the next one knows an
    earlier attempt ran, and continues from the session's newest snapshot instead (None: the
    executor runs it once)."""
    node: str | None = None
    """The cluster node this attempt runs on, as recorded with the attempt (None: not on a cluster)."""


SUPERSEDED = "superseded"
"""How an attempt that lost the session's lease to a newer one ends: it writes nothing more, and
the registry keeps the newer attempt's account (not a stored status)."""


@dataclass
class _Upload:
    """A snapshot staged for upload and what its registry row will say."""

    prepared: snapshot.Prepared
    kind: str
    frame: int
    done: Future[None] = field(default_factory=Future)


class Session:
    def __init__(self, task: SessionTask, registry: Registry, emit: Emit, lease: int | None = None) -> None:
        self.task, self.registry, self.emit, self.lease = task, registry, emit, lease
        self.spec = recorded_spec(task.spec, check_env_id=True)
        self.meta = self.spec.meta
        self.home = paths.task_home(task.home)
        # "auto" divides the usable cores among the sessions running on this machine now
        sharing = self.meta.sessions if AUTO not in (self.spec.env.workers, self.meta.torch_threads) else \
            registry.sessions_sharing_this_host(self.meta.sessions, besides_run=task.run_id)
        threads = torch_threads(self.spec, sharing)  # the number the run recorded
        torch.set_num_threads(threads)
        random.seed(seeding.derive(task.seed, seeding.PYTHON_NUMPY))
        np.random.seed(seeding.derive(task.seed, seeding.PYTHON_NUMPY))
        self.env = make_vector_env(self.spec.env, sessions=sharing, threads=threads)
        self.device = resolve_device(self.meta.device)
        self.where = where(self.device)
        self.agent = build_agent(self.spec, self.env.single_observation_space, self.env.single_action_space, task.seed,
                                 str(self.device))
        self.evaluator = Evaluator(self.spec, self.env.single_observation_space, self.env.single_action_space,
                                   task.seed, str(self.device))
        self.eval_env_state = self.evaluator.env_state()
        """The evaluation env's state after the newest evaluation recorded (what a snapshot holds)."""
        self.held: list[Held] = []
        """Snapshots written while an evaluation at or before their frame was still running, oldest
        first: each is put in place (or dropped) once that evaluation is recorded."""
        self.clock = Clock()
        self.obs, _ = self.env.reset(seed=seeding.derive(task.seed, seeding.ENV))
        """The env's own observation the next action is chosen from (normalised only as the agent sees it)."""
        seed_spaces(self.env, task.seed)
        self.normalizer = make_normalizer(self.spec.env, self.env.single_observation_space)
        memory = getattr(self.agent, "memory", None)
        self.replays = memory is not None
        """A replay memory keeps the env's own observations and rewards and normalises each batch
        as it is sampled (as SB3's buffers do); a rollout keeps what the agent saw."""
        if self.normalizer is not None:
            self.normalizer.reset(self.obs)
            if memory is not None:
                memory.view = self.normalizer.batch
        n = self.spec.env.num_envs
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.recent_returns: deque[float] = deque(maxlen=RECENT_EPISODES)
        self.recent_lengths: deque[int] = deque(maxlen=RECENT_EPISODES)
        self.metrics_kept: list[metrics_log.Row] = []
        """The metrics rows a resume continues after (the snapshot's source log, cut back)."""
        self.evaluations: list[dict[str, Any]] = []
        self.best: snapshot.Best | None = None
        self.last_losses: Mapping[str, float] = {}
        self.last_snapshot_frame = -1
        self.approximate: str | None = None
        """Why this process could not continue exactly (None when it did)."""
        self.env_restored: str | None = None
        """How a resume put the env back ("env: captured", "env: replayed 143 steps")."""
        self.previous_snapshot: Path | None = None
        """The snapshot this process's state descends from (resumed from, then each one written):
        the next snapshot shares its replay memory's segments instead of writing them again."""
        self._upload_thread: ThreadPoolExecutor | None = None
        self.uploading: _Upload | None = None
        """A snapshot staged in the working copy whose upload to object storage runs in the
        background while training goes on (`_checkpoint`); recorded once it is complete."""
        if task.resume_from is not None:
            self.previous_snapshot = self.home / task.resume_from
            self._restore(snapshot.read(self.previous_snapshot, task.resume_sha256))

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: StopRequest) -> str:
        """Train to the budget or until a stop is requested; returns the session's final status.
        However training ends, the session and this attempt are closed: an exception closes both
        as failed, with its message, and goes on up."""
        self.attempt = self.registry.add_attempt(
            self.task.session_id, kind=self.task.attempt, host=socket.gethostname(), pid=os.getpid(),
            start_frame=self.clock.frame, approximate=self.approximate is not None,
            note="; ".join(filter(None, [self.approximate, self.env_restored, self._device_note()])) or None,
            node=self.task.node, lease=self.lease,
        )
        status, error, lost = "failed", None, False
        try:
            self.registry.start_session(self.task.session_id, host=socket.gethostname(), pid=os.getpid())
            self.emit(events.SessionStarted(self.task.index, self.task.seed, self.clock.frame, self.meta.max_frame))
            self._open_metrics()
            try:
                with self._watching_nondeterminism():
                    status = self._train(stop)
            finally:
                self.evaluator.close()
                for held in self.held:  # never put in place: a resume evaluates and writes them again
                    held.prepared.discard()
                if self._upload_thread is not None:  # idle unless an error cut a snapshot's upload short
                    self._upload_thread.shutdown(wait=False)
                self._close_metrics(status)
        except BaseException as raised:
            error, lost = describe(raised), isinstance(raised, LeaseLost)
            raise
        finally:
            if not lost:  # a stale attempt leaves the session to the one that took it over
                self.registry.finish_session(self.task.session_id, status=status, error=error, **self.progress())
        best = self.best.mean if self.best else None
        self.emit(events.SessionEnded(self.task.index, status, self.clock.frame, best))
        return status

    def _device_note(self) -> str | None:
        """Which GPU an attempt learned on (nothing for the CPU, where every attempt was before)."""
        return None if self.device.type == "cpu" else f"device: {self.where}"

    def _watching_nondeterminism(self) -> AbstractContextManager[None]:
        """On a GPU, an op without a deterministic kernel makes this attempt approximate, on record
        the first time each such op runs."""
        if self.device.type == "cpu":
            return nullcontext()
        return nondeterministic_ops(lambda op: self.registry.mark_attempt_approximate(
            self.attempt.id, reason=f"{op} has no deterministic kernel on {self.where}: a resume cannot be exact"))

    def _train(self, stop: StopRequest) -> str:
        started = last_beat = time.monotonic()
        start_frame, start_wall = self.clock.frame, self.clock.wall_time
        signal_at = testhooks.signal_at_frame()
        while self.clock.frame < self.meta.max_frame:
            if stop.signal:
                self._record_evaluations(wait=True)
                self._checkpoint(["preempt"])
                return "preempted"
            before = self.clock.frame
            self._step()
            if self.uploading is not None and self.uploading.done.done():
                self._record_upload()
            if before < signal_at <= self.clock.frame:
                os.kill(os.getpid(), signal.SIGTERM)
            testhooks.freeze_at_frame(before, self.clock.frame)
            now = time.monotonic()
            self.clock.wall_time = start_wall + now - started
            finished = self.clock.frame >= self.meta.max_frame
            if crossed(before, self.clock.frame, self.meta.log_frequency) or finished:
                self._report(fps=(self.clock.frame - start_frame) / max(now - started, 1e-9),
                             record=crossed(before, self.clock.frame, self.meta.log_frequency))
            evaluated = crossed(before, self.clock.frame, self.meta.eval_frequency) or finished
            if evaluated:
                self.evaluator.submit(self.clock.frame, self.agent, self.normalizer)
            self._record_evaluations(wait=finished)
            kinds = []
            if crossed(before, self.clock.frame, self.meta.checkpoint_frequency):
                kinds.append("periodic")
            if finished:
                kinds.append("final")
            if kinds or evaluated:
                self._checkpoint(kinds, evaluated=evaluated)
            if now - last_beat >= HEARTBEAT_SECONDS:
                asked = self.registry.heartbeat(self.task.session_id, **self.progress(), publish=self._flush_logs)
                if asked and not stop.signal:  # `rlrun stop`, from anywhere: as a SIGTERM here would
                    stop.request(signal.SIGTERM)
                last_beat = now
            if testhooks.hold_at_frame(before, self.clock.frame):
                self._hold()
        testhooks.crash_point("session-finishing")
        return "finished"

    def _hold(self) -> None:
        """A test's hold: the trackers get every row so far, as at a heartbeat, and the session
        waits (`rlrun.testhooks.hold`)."""
        self.registry.fenced(self._flush_logs)
        trackers = self.trackers
        testhooks.hold(lambda: {} if trackers is None else trackers.taken())

    def _step(self) -> None:
        seen = self._seen(self.obs)
        action = self.agent.act(seen)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated | truncated
        final = true_next_obs(next_obs, done, info)
        if self.normalizer is None:
            step = Step(self.obs, action, reward, terminated, truncated, final)
        else:
            learned = self.normalizer.step(next_obs, reward, done)
            step = (Step(self.obs, action, reward, terminated, truncated, final) if self.replays else
                    Step(seen, action, learned, terminated, truncated, self.normalizer.observation(final)))
        self.agent.observe(step)
        self.obs = next_obs
        self.clock.frame += self.spec.env.num_envs
        self.episode_return += reward
        self.episode_length += 1
        for i in np.flatnonzero(done):
            self.recent_returns.append(float(self.episode_return[i]))
            self.recent_lengths.append(int(self.episode_length[i]))
            self.episode_return[i], self.episode_length[i] = 0.0, 0
            self.clock.episode += 1
        self.last_losses = self.agent.update(self.clock) or self.last_losses

    def _seen(self, obs: np.ndarray) -> np.ndarray:
        """An observation as the agent sees it: normalised with the statistics as they stand."""
        return obs if self.normalizer is None else self.normalizer.observation(obs)

    # -- cadences -------------------------------------------------------------------------------

    def _open_metrics(self) -> None:
        """Start this process's metrics log (and its TensorBoard mirror) from the rows the
        snapshot had seen: a resume cuts the log back to the snapshot's frame, a fork copies its
        parent's up to there."""
        folder = paths.session_dir(self.home, self.task.run_id, self.task.index)
        names = metrics_log.columns(self.agent.METRICS)

        def create() -> None:
            self.metrics = metrics_log.MetricsLog.create(metrics_log.path(folder), names, self.metrics_kept)

        self.registry.fenced(create)  # under the lease: a stale attempt never cuts a newer one's log
        self.tensorboard = tensorboard_log.open_mirror(folder, self.clock.frame, self.metrics_kept)
        identity = Identity(self.task.run_id, self.task.index, self.task.seed, self.spec.to_json(),
                            group=self.registry.search_of(self.task.run_id) if self.meta.track else None)
        self.trackers = open_relay(self.meta.track, identity, folder, attempt=self.task.attempt,
                                   rows=self.metrics_kept,
                                   evaluations=[Evaluation(**e).summary() for e in self.evaluations])

    def _flush_logs(self, sync: bool = False) -> None:
        """Rows reach the log only here, inside a fenced registry transaction (see `Session.run`),
        and the trackers get what the log got."""
        self.metrics.flush(sync=sync)
        if self.tensorboard is not None:
            self.tensorboard.flush()
        if self.trackers is not None:
            self.trackers.release()

    def _close_metrics(self, status: str) -> None:
        def close_log() -> None:
            self.metrics.close()
            if self.trackers is not None:
                self.trackers.release()

        try:
            self.registry.fenced(close_log)
        except LeaseLost:
            self.metrics.discard()
            if self.trackers is not None:  # the newer attempt owns the tracker runs now
                self.trackers.abandon()
                self.trackers = None
            raise
        finally:
            if self.tensorboard is not None:
                self.tensorboard.close()
            if self.trackers is not None:
                self.trackers.close(status, self.best.mean if self.best else None)
                folder = paths.session_dir(self.home, self.task.run_id, self.task.index)
                with suppress(LeaseLost):  # taken over meanwhile: the newer attempt's report is the one
                    self.registry.fenced(lambda: tracker_status.publish(folder))

    def _report(self, fps: float, record: bool) -> None:
        """The metrics log grows only on the log cadence, so it does not depend on where a run
        happened to stop; the display hears about the last frame too."""
        return_mean = float(np.mean(self.recent_returns)) if self.recent_returns else None
        if record:
            length_mean = float(np.mean(self.recent_lengths)) if self.recent_lengths else None
            row = {**self.clock.to_json(), "fps": fps, "return_mean": return_mean, "length_mean": length_mean,
                   **self.last_losses}
            self.metrics.append(row)
            if self.tensorboard is not None:
                self.tensorboard.add(row)
            if self.trackers is not None:
                self.trackers.add(row)
        headline = self.agent.HEADLINE
        self.emit(events.Progress(self.task.index, self.clock.frame, self.meta.max_frame, self.clock.episode,
                                  fps, return_mean, headline, self.last_losses.get(headline)))

    def _record_evaluations(self, wait: bool = False) -> None:
        """Record the evaluations that ended (`wait`: every one submitted), in frame order, and put
        in place each held snapshot as soon as every evaluation up to its frame is recorded."""
        outcomes = self.evaluator.finished(wait)
        for i, outcome in enumerate(outcomes):
            self._record(outcome)
            unknown = [o.evaluation.frame for o in outcomes[i + 1:]]
            running = self.evaluator.pending_frame()
            unknown_from = min([*unknown, *([running] if running is not None else [])], default=None)
            while self.held and (unknown_from is None or self.held[0].frame < unknown_from):
                self._release(self.held.pop(0))

    def _record(self, outcome: Outcome) -> None:
        result = outcome.evaluation
        summary = result.summary()
        self.evaluations.append(result.to_json())
        self.eval_env_state = outcome.env_after
        self.registry.add_evaluation(self.task.session_id, **summary)
        if self.tensorboard is not None:
            self.tensorboard.add_evaluation(result.frame, result.mean)
        if self.trackers is not None:
            self.trackers.add_evaluation(result.frame, result.mean, result.std)
        is_best = self.best is None or result.mean > self.best.mean
        if is_best:
            self.best = snapshot.Best(frame=result.frame, mean=result.mean)
        self.emit(events.Evaluated(self.task.index, result.frame, result.mean, result.std, is_best))

    def _best_at(self, frame: int, evaluated: bool) -> list[str]:
        """["best"] when the evaluation at `frame` (recorded) is the best so far."""
        return ["best"] if evaluated and self.best is not None and self.best.frame == frame else []

    def _checkpoint(self, kinds: list[str], evaluated: bool = False) -> None:
        """Write a snapshot of this frame: at once when every evaluation up to it is recorded,
        else held until it is (its meta, which holds them and says whether it is the best, is
        then rewritten); one due only because of an evaluation that was not the best is dropped."""
        self._record_upload()  # one upload in flight at most: the next snapshot links this one's segments
        if self.clock.frame == self.last_snapshot_frame:
            return  # a stop right after a scheduled snapshot: that one already holds this state
        known = self.evaluator.pending_frame() is None
        if known:
            kinds = self._best_at(self.clock.frame, evaluated) + kinds
            if not kinds:
                return
        self.registry.fenced(lambda: self._flush_logs(sync=True))  # the log always reaches the newest snapshot
        if known:
            self._publish(self._prepare(self._snapshot("+".join(kinds))), self.clock.frame, "+".join(kinds))
            return
        state = self._snapshot("+".join(kinds) or "pending")
        self.held.append(Held(self.clock.frame, kinds, evaluated, self._prepare(state), state.meta))

    def _prepare(self, state: snapshot.Snapshot) -> snapshot.Prepared:
        directory = paths.checkpoints_dir(self.home, self.task.run_id, self.task.index)
        return snapshot.prepare(directory / snapshot.snapshot_name(self.clock.frame), state,
                                previous=self.previous_snapshot)

    def _release(self, held: Held) -> None:
        kinds = self._best_at(held.frame, held.evaluated) + held.kinds
        if not kinds:
            held.prepared.discard()
            return
        kind = "+".join(kinds)
        meta = replace(held.meta, kind=kind, evaluations=list(self.evaluations), best=self.best,
                       random=replace(held.meta.random, eval_env=self.eval_env_state.generator),
                       eval_wrappers=self.eval_env_state.wrappers)
        self._publish(held.prepared.with_meta(meta), held.frame, kind)

    def _publish(self, prepared: snapshot.Prepared, frame: int, kind: str) -> None:
        """Upload a complete snapshot (a home in object storage), then record it."""
        self._record_upload()
        upload = _Upload(prepared, kind, frame)
        if prepared.in_object_storage and not {"final", "preempt"} & set(kind.split("+")):
            # Staged (consistent, on local disk): training goes on while it uploads. The last
            # snapshot of a process (its end, a SIGTERM) is uploaded before the process ends.
            upload.done = self._uploader().submit(prepared.upload)
            self.uploading = upload
            return
        try:
            prepared.upload()
        except BaseException:
            prepared.discard()
            raise
        self._record_snapshot(upload)

    def _record_upload(self) -> None:
        """Wait for the snapshot uploading in the background, then record it."""
        upload, self.uploading = self.uploading, None
        if upload is None:
            return
        try:
            upload.done.result()
        except BaseException:
            upload.prepared.discard()
            raise
        self._record_snapshot(upload)

    def _record_snapshot(self, upload: _Upload) -> None:
        """Put a complete snapshot in place and record it: the registry row is the commit."""
        prepared = upload.prepared
        try:
            # The rename happens inside the fenced transaction that records it: a stale attempt
            # neither puts its folder in place nor records it.
            self.registry.add_checkpoint(self.task.session_id, frame=upload.frame, kind=upload.kind,
                                         path=str(prepared.destination.relative_to(self.home)),
                                         sha256=prepared.sha256, size_bytes=prepared.size_bytes,
                                         publish=prepared.publish)
        except BaseException:
            prepared.discard()
            raise
        self.previous_snapshot = prepared.destination
        self.last_snapshot_frame = upload.frame
        self.emit(events.Checkpointed(self.task.index, upload.frame, upload.kind, str(prepared.destination)))
        self._retain()

    def _uploader(self) -> ThreadPoolExecutor:
        if self._upload_thread is None:
            self._upload_thread = ThreadPoolExecutor(1, thread_name_prefix="rlrun-upload")
        return self._upload_thread

    def _retain(self) -> None:
        """Apply the retention rule (`rlrun.snapshot.retention`). The row goes first, so the registry never
        points at a deleted folder."""
        records = self.registry.checkpoints(self.task.session_id)
        keep = retention.to_keep(records, self.meta.keep_checkpoints)
        for record in records:
            if record.id not in keep:
                self.registry.remove_checkpoint(record.id)
                snapshot.remove(self.home / record.path)

    def progress(self) -> ProgressCounts:
        return {"frame": self.clock.frame, "episode": self.clock.episode, "opt_step": self.clock.opt_step}

    # -- state ----------------------------------------------------------------------------------

    def _snapshot(self, kind: str) -> snapshot.Snapshot:
        python_state = random.getstate()
        try:
            env_state: Any = capture_vector_env(self.env)
            env_note = None
        except NotCapturable as error:
            env_state, env_note = None, f"{self.spec.env.id} state cannot be captured ({error})"
        meta = snapshot.SnapshotMeta(
            kind=kind,
            run_id=self.task.run_id,
            session_index=self.task.index,
            seed=self.task.seed,
            clock=replace(self.clock),
            spec=self.spec.to_json(),
            random=snapshot.RandomStates(
                python=[python_state[0], list(python_state[1]), python_state[2]],
                numpy=_jsonable(np.random.get_state(legacy=False)),
                eval_env=self.eval_env_state.generator,
            ),
            env=env_state,
            env_note=env_note,
            obs=self.obs.tolist(),
            obs_dtype=self.obs.dtype.str,
            episode_return=self.episode_return.tolist(),
            episode_length=self.episode_length.tolist(),
            recent_returns=list(self.recent_returns),
            recent_lengths=list(self.recent_lengths),
            last_losses=dict(self.last_losses),
            evaluations=self.evaluations,
            best=self.best,
            device=self.where.device,
            gpu=self.where.gpu,
            # the user's wrappers may keep state across evaluations, which the next evaluation sees
            eval_wrappers=self.eval_env_state.wrappers,
        )
        agent_state = self.agent.state_dict()
        logs = agent_state.pop("logs", {})  # the replay memory: segments, written without a copy, shared
        tensors = {"agent": agent_state, "torch_rng": torch.get_rng_state()}
        if self.normalizer is not None:
            tensors["normalize"] = self.normalizer.state_dict()
        return snapshot.Snapshot(meta=meta, tensors=tensors, logs=logs)

    def _restore(self, saved: snapshot.Snapshot) -> None:
        """Continue from a snapshot: state first, every random generator last."""
        meta = saved.meta
        self.agent.load_state_dict({**saved.tensors["agent"], "arrays": saved.arrays, "logs": saved.logs})
        memory = getattr(self.spec.agent, "memory", None)
        if memory is not None and not memory.snapshot:
            self.approximate = "replay memory not in the snapshot (memory.snapshot is false); it refills"
        self.clock = replace(meta.clock)
        self.evaluations, self.best = meta.evaluations, meta.best
        self.last_losses = meta.last_losses
        self.recent_returns.extend(meta.recent_returns)
        self.recent_lengths.extend(meta.recent_lengths or ())
        source = metrics_log.path(paths.session_dir(self.home, meta.run_id, meta.session_index))
        self.metrics_kept = metrics_log.rows_up_to(source, self.clock.frame) or list(meta.metrics or ())
        self.last_snapshot_frame = self.clock.frame
        if self.normalizer is not None:
            self.normalizer.load_state_dict(saved.tensors["normalize"])
        self._restore_env(meta)
        state = meta.random.python
        random.setstate((state[0], tuple(state[1]), state[2]))
        numpy_state = meta.random.numpy
        numpy_state["state"]["key"] = np.array(numpy_state["state"]["key"], dtype=np.uint32)
        np.random.set_state(numpy_state)
        torch.set_rng_state(saved.tensors["torch_rng"])
        self.eval_env_state = EvalEnvState(meta.random.eval_env, meta.eval_wrappers)
        self.evaluator.restore_env(self.eval_env_state)
        elsewhere = moved(Where(meta.device or "cpu", meta.gpu), self.where)  # older snapshots: the CPU
        if elsewhere is not None:
            self.approximate = "; ".join(filter(None, [self.approximate, elsewhere]))

    def _restore_env(self, meta: snapshot.SnapshotMeta) -> None:
        """Put the training env back mid-episode (captured or replayed), else restart its episodes."""
        if meta.env is None:
            self._restart_episodes(meta.env_note or "")
            return
        try:
            self.env_restored = restore_vector_env(self.env, meta.env)
        except NotCapturable as error:
            self._restart_episodes(f"{self.spec.env.id} state could not be restored ({error})")
            return
        self.obs = np.array(meta.obs, dtype=np.dtype(meta.obs_dtype))
        self.episode_return = np.array(meta.episode_return, dtype=np.float64)
        self.episode_length = np.array(meta.episode_length, dtype=np.int64)

    def _restart_episodes(self, note: str) -> None:
        """The env's state was not captured: start fresh episodes (seeded from the frame, so even
        this is repeatable) and drop the agent's unfinished ones."""
        self.obs, _ = self.env.reset(seed=seeding.derive(self.task.seed, seeding.ENV, self.clock.frame))
        if self.normalizer is not None:
            self.normalizer.reset(self.obs)
        restart = getattr(self.agent, "restart_episodes", None)
        if restart is not None:
            restart()
        self.approximate = f"{note}; env: restarted, resumed at an episode boundary"


@dataclass(frozen=True)
class Held:
    """A snapshot written to its temporary folder, waiting for the evaluations up to its frame."""

    frame: int
    kinds: list[str]
    """Why it was due besides an evaluation: periodic, final."""
    evaluated: bool
    """An evaluation was due at its frame (it is a best snapshot if that one is the best)."""
    prepared: snapshot.Prepared
    meta: snapshot.SnapshotMeta


def _jsonable(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _jsonable(value) for key, value in state.items()}
    if isinstance(state, np.ndarray):
        return state.tolist()
    return state


class SessionFailed(Exception):
    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.details = details


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


OnLease = Callable[[Registry, SessionTask, int], SessionTask]


def run_session(task: SessionTask, emit: Emit, stop: StopRequest, on_lease: OnLease | None = None) -> str:
    """Train one session, recording it in the registry; returns its final status. A failure is
    recorded on the session (status failed, with the message) and raised as SessionFailed.

    The attempt first takes the session's lease, and every write it makes is fenced by it: once a
    newer attempt takes the lease, this one writes nothing more and ends SUPERSEDED. `on_lease`
    (a cluster executor's) may then change the task, given the token: a retried attempt continues
    from the newest snapshot."""
    registry = Registry.open(paths.task_home(task.home), task.db_url)
    session: Session | None = None
    try:
        lease = registry.acquire_lease(task.session_id)
        registry.fence(task.session_id, lease)
        if on_lease is not None:
            task = on_lease(registry, task, lease)
        session = Session(task, registry, emit, lease)
        return session.run(stop)  # records its own failures
    except LeaseLost as lost:
        # Said on stderr (a worker's log on a cluster): this attempt writes nothing anywhere else.
        sys.stderr.write(f"rlrun: session s{task.index} of run {task.run_id}: {lost}\n")
        frame = session.clock.frame if session is not None else 0
        emit(events.SessionEnded(task.index, SUPERSEDED, frame, None, str(lost)))
        return SUPERSEDED
    except Exception as error:
        message = describe(error)
        if session is not None:
            progress = session.progress()
        else:  # it never started: the session keeps the progress it has on record
            record = registry.get_session(task.run_id, task.index)
            progress = ProgressCounts(frame=record.frame, episode=record.episode, opt_step=record.opt_step)
            registry.finish_session(task.session_id, status="failed", error=message, **progress)
        emit(events.SessionEnded(task.index, "failed", progress["frame"], None, message))
        raise SessionFailed(message, traceback.format_exc()) from error
    finally:
        registry.close()


def run_session_process(task: SessionTask, queue: Any, shared_stop: Any) -> None:
    """Entry point of a spawned session process: events go to the parent through `queue`, and a
    stop requested in any process of the run reaches this one through `shared_stop`."""
    from rlrun.session.stopping import stop_on_signals

    stop = StopRequest(shared_stop)
    with stop_on_signals(stop):
        try:
            run_session(task, queue.put, stop)
        except SessionFailed:
            raise SystemExit(1) from None

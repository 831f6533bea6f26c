"""One session: one seed, one agent, one (vector) env, trained to the frame budget.

The loop is the only place where the clock advances. Cadences (log, evaluation, checkpoint) fire
when the frame count crosses a multiple of their period, and everything they do is a function of
the clock and the session seed, never of wall time. A session may start fresh or from a snapshot;
either way the frames that follow are the same, bit for bit. The loop's progress is data
(`rlrun.session.state.SessionProgress`), which a snapshot holds with the agent, the env, the
normaliser and the generators (`rlrun.session.state`); the snapshot cadence is
`rlrun.session.checkpoints`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import Any, Protocol, TypedDict, runtime_checkable

import numpy as np
import torch

from rlrun import data, paths, seeding, snapshot, storage, testhooks
from rlrun.algorithms import build_agent
from rlrun.algorithms.base import Step
from rlrun.clock import Clock, crossed
from rlrun.envs import make_vector_env, seed_spaces, true_next_obs
from rlrun.envs.normalize import make_normalizer
from rlrun.registry import Registry
from rlrun.registry.database import LeaseLost
from rlrun.registry.liveness import heartbeat_seconds
from rlrun.session import eval_video, events, metrics_log, state, tensorboard_log
from rlrun.session.checkpoints import Checkpoints, Job
from rlrun.session.device import nondeterministic_ops, resolve_device, where
from rlrun.session.evaluation import Evaluation, Evaluator, Outcome
from rlrun.session.state import SessionProgress
from rlrun.session.stopping import StopRequest
from rlrun.session.task import SessionTask  # `rlrun.session.loop.SessionTask`, its old home, still works
from rlrun.spec import DataSpec, recorded_spec
from rlrun.spec.cores import AUTO, env_processes, torch_threads
from rlrun.trackers import Identity
from rlrun.trackers import status as tracker_status
from rlrun.trackers.delivery import open_relay

Emit = Callable[[events.Event], None]


class ProgressCounts(TypedDict):
    frame: int
    episode: int
    opt_step: int


@runtime_checkable
class SampledMemory(Protocol):
    """A replay memory (`rlrun.algorithms.replay.ReplayMemory`): it keeps the env's own observations
    and rewards, and `view` is how each batch is normalised as it is sampled."""

    view: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None


@runtime_checkable
class LearnsFromData(Protocol):
    """An agent that learns from a dataset (`AgentConfig.TAKES_DATA`, docs/adding-an-algorithm.md):
    it is given the dataset's rows once, and takes one gradient step on them per offline frame."""

    def learn_from(self, rows: data.Transitions) -> None: ...

    def update_offline(self, clock: Clock) -> Mapping[str, float]: ...


SUPERSEDED = "superseded"
"""How an attempt that lost the session's lease to a newer one ends: it writes nothing more, and
the registry keeps the newer attempt's account (not a stored status)."""


class Session:
    """One session process's training: the loop, and the cadences of its metrics and evaluations.
    Where training stands is `self.progress`; its snapshots are a collaborator's (`self.checkpoints`:
    when they are taken, how they are staged, uploaded, recorded and retained); what one captures
    and how it is put back is `rlrun.session.state`'s."""

    def __init__(
        self, task: SessionTask, registry: Registry, emit: Emit, lease: int | None = None, heard: Heard = None
    ) -> None:
        self.task, self.registry, self.emit, self.lease = task, registry, emit, lease
        self.heard = heard
        """Waits until every event emitted so far was heard (None: `emit` delivers before it returns)."""
        self.spec = recorded_spec(task.spec, check_env_id=True)
        self.meta = self.spec.meta
        self.home = paths.task_home(task.home)
        # "auto" divides the usable cores among the sessions running on this machine now
        sharing = (
            self.meta.sessions
            if AUTO not in (env_processes(self.spec.env), self.meta.torch_threads)  # "auto" that matters
            else registry.sessions_sharing_this_host(self.meta.sessions, besides_run=task.run_id)
        )
        threads = torch_threads(self.spec, sharing)  # the number the run recorded
        torch.set_num_threads(threads)
        random.seed(seeding.derive(task.seed, seeding.PYTHON_NUMPY))
        np.random.seed(seeding.derive(task.seed, seeding.PYTHON_NUMPY))
        self.env = make_vector_env(self.spec.env, sessions=sharing, threads=threads)
        self.device = resolve_device(self.meta.device)
        self.where = where(self.device)
        self.origin = state.Origin(task, self.spec, self.where)
        self.agent = build_agent(
            self.spec, self.env.single_observation_space, self.env.single_action_space, task.seed, str(self.device)
        )
        self.evaluator = Evaluator(
            self.spec,
            self.env.single_observation_space,
            self.env.single_action_space,
            task.seed,
            str(self.device),
            videos=lambda frame: paths.eval_video(self.home, task.run_id, task.index, frame),
        )
        eval_env_state = self.evaluator.env_state()
        obs, _ = self.env.reset(seed=seeding.derive(task.seed, seeding.ENV))
        self.progress = SessionProgress.start(obs, self.spec.env.num_envs, eval_env_state)
        seed_spaces(self.env, task.seed)
        self.normalizer = make_normalizer(self.spec, self.env.single_observation_space)
        if self.spec.data is not None:
            self._learn_from(self.spec.data)
        memory = getattr(self.agent, "memory", None)
        self.replays = isinstance(memory, SampledMemory)
        """A replay memory keeps the env's own observations and rewards and normalises each batch
        as it is sampled (as SB3's buffers do); a rollout keeps what the agent saw."""
        if self.normalizer is not None:
            self.normalizer.reset(obs)
            if isinstance(memory, SampledMemory):
                memory.view = self.normalizer.batch
        self.metrics_kept: list[metrics_log.Row] = []
        """The metrics rows a resume continues after (the snapshot's source log, cut back)."""
        self.metrics: metrics_log.MetricsLog  # opened by `run` (`_open_metrics`)
        self.tensorboard: tensorboard_log.Mirror | None = None
        self.approximate: str | None = None
        """Why this process could not continue exactly (None when it did)."""
        self.env_restored: str | None = None
        """How a resume put the env back ("env: captured", "env: replayed 143 steps")."""
        resumed_from = None if task.resume_from is None else self.home / task.resume_from
        if resumed_from is not None:
            self._resume(snapshot.read(resumed_from, task.resume_sha256))
        self.checkpoints = Checkpoints(
            self,
            task=task,
            registry=registry,
            home=self.home,
            keep=self.meta.keep_checkpoints,
            emit=emit,
            previous=resumed_from,
        )

    def _resume(self, saved: snapshot.Snapshot) -> None:
        """Continue from `saved`: the session's state, its evaluation env's, and the metrics rows
        up to its frame (the source log's, cut back; an older snapshot carried them)."""
        resumed = state.restore(saved, self.progress, self.agent, self.env, self.normalizer, origin=self.origin)
        self.evaluator.restore_env(self.progress.eval_env_state)
        self.approximate, self.env_restored = resumed.approximate, resumed.env_restored
        source = metrics_log.path(paths.session_dir(self.home, saved.meta.run_id, saved.meta.session_index))
        self.metrics_kept = metrics_log.rows_up_to(source, self.progress.clock.frame) or list(saved.meta.metrics or ())

    # -- what its snapshots need of it (`rlrun.session.checkpoints.Source`) -----------------------

    def capture(self, kind: str) -> snapshot.Snapshot:
        return state.capture(self.progress, self.agent, self.env, self.normalizer, origin=self.origin, kind=kind)

    def evaluation_running(self) -> bool:
        return self.evaluator.pending_frame() is not None

    def log_uploads(self) -> list[tuple[str, Job | None]]:
        jobs: list[tuple[str, Job | None]] = [(self.metrics.path.name, metrics_log.upload_job(self.metrics.path))]
        if self.tensorboard is not None:
            jobs += self.tensorboard.upload_jobs()
        return jobs

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: StopRequest) -> str:
        """Train to the budget or until a stop is requested; returns the session's final status.
        However training ends, the session and this attempt are closed: an exception closes both
        as failed, with its message, and goes on up."""
        self.attempt = self.registry.add_attempt(
            self.task.session_id,
            kind=self.task.attempt,
            host=socket.gethostname(),
            pid=os.getpid(),
            start_frame=self.progress.clock.frame,
            approximate=self.approximate is not None,
            note="; ".join(filter(None, [self.approximate, self.env_restored, self._device_note()])) or None,
            node=self.task.node,
            lease=self.lease,
        )
        status, error, lost = "failed", None, False
        try:
            self.registry.start_session(self.task.session_id, host=socket.gethostname(), pid=os.getpid())
            self.emit(
                events.SessionStarted(self.task.index, self.task.seed, self.progress.clock.frame, self.meta.max_frame)
            )
            self._open_metrics()
            try:
                with self._watching_nondeterminism():
                    status = self._train(stop)
            finally:
                self.evaluator.close()
                try:
                    self._close_metrics(status)
                finally:
                    self.checkpoints.close()
        except BaseException as raised:
            error, lost = describe(raised), isinstance(raised, LeaseLost)
            raise
        finally:
            if not lost:  # a stale attempt leaves the session to the one that took it over
                self.registry.finish_session(self.task.session_id, status=status, error=error, **self.counts())
        best = self.progress.best_mean()
        self.emit(events.SessionEnded(self.task.index, status, self.progress.clock.frame, best))
        return status

    def _device_note(self) -> str | None:
        """Which GPU an attempt learned on (nothing for the CPU, where every attempt was before)."""
        return None if self.device.type == "cpu" else f"device: {self.where}"

    def _watching_nondeterminism(self) -> AbstractContextManager[None]:
        """On a GPU, an op without a deterministic kernel makes this attempt approximate, on record
        the first time each such op runs."""
        if self.device.type == "cpu":
            return nullcontext()
        return nondeterministic_ops(
            lambda op: self.registry.mark_attempt_approximate(
                self.attempt.id, reason=f"{op} has no deterministic kernel on {self.where}: a resume cannot be exact"
            )
        )

    def _train(self, stop: StopRequest) -> str:
        clock = self.progress.clock  # advanced in place by `_step`
        started = last_beat = time.monotonic()
        beat_every = heartbeat_seconds()
        start_frame, start_wall = clock.frame, clock.wall_time
        signal_at = testhooks.signal_at_frame()
        while not self.meta.reached(clock.frame, self.progress.best_mean()):
            if stop.signal:
                self._record_evaluations(wait=True)
                self.checkpoints.take(["preempt"])
                return "preempted"
            before = clock.frame
            self._step()
            self.checkpoints.poll()
            if before < signal_at <= clock.frame:
                os.kill(os.getpid(), signal.SIGTERM)
            testhooks.freeze_at_frame(before, clock.frame)
            now = time.monotonic()
            clock.wall_time = start_wall + now - started
            finished = clock.frame >= self.meta.max_frame
            if crossed(before, clock.frame, self.meta.log_frequency) or finished:
                self._report(
                    fps=(clock.frame - start_frame) / max(now - started, 1e-9),
                    record=crossed(before, clock.frame, self.meta.log_frequency),
                )
            evaluated = crossed(before, clock.frame, self.meta.eval_frequency) or finished
            if evaluated:
                # numbered over the session's evaluations, those its snapshot carries included
                self.evaluator.submit(
                    clock.frame,
                    self.agent,
                    self.normalizer,
                    number=len(self.progress.evaluations) + self.evaluator.unrecorded(),
                )
            # A return target is known reached at the evaluation's own frame, never a few steps later
            # when an overlapped evaluation happens to end: the same stop on every resume. So is a
            # callback's stop (`task.answer_evaluations`): it is heard before the next step.
            answered = self.meta.stop_at_return is not None or self.task.answer_evaluations
            self._record_evaluations(wait=finished or (evaluated and answered))
            finished = self.meta.reached(clock.frame, self.progress.best_mean())
            kinds = []
            if crossed(before, clock.frame, self.meta.checkpoint_frequency):
                kinds.append("periodic")
            if finished:
                kinds.append("final")
            if kinds or evaluated:
                self.checkpoints.take(kinds, evaluated=evaluated)
            if now - last_beat >= beat_every:
                asked = self.registry.heartbeat(self.task.session_id, **self.counts(), publish=self.flush_logs)
                if asked and not stop.signal:  # `rlrun stop`, from anywhere: as a SIGTERM here would
                    stop.request(signal.SIGTERM)
                last_beat = now
            if testhooks.hold_at_frame(before, clock.frame):
                self._hold()
        testhooks.crash_point("session-finishing")
        return "finished"

    def _hold(self) -> None:
        """A test's hold: every evaluation so far is recorded (an overlapped one awaited, so the
        snapshots held for it are put in place), the trackers get every row so far, as at a
        heartbeat, the store every snapshot (recorded) and file, and the session waits
        (`rlrun.testhooks.hold`)."""
        self._record_evaluations(wait=True)
        self.registry.fenced(self.flush_logs)
        self.checkpoints.settle()
        storage.settled()
        trackers = self.trackers
        testhooks.hold(lambda: {} if trackers is None else trackers.taken())

    def _step(self) -> None:
        if self.meta.offline(self.progress.clock.frame):
            self._learn_offline()
            return
        progress = self.progress
        seen = self._seen(progress.obs)
        action = self.agent.act(seen)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated | truncated
        final = true_next_obs(next_obs, done, info)
        if self.normalizer is None:
            step = Step(progress.obs, action, reward, terminated, truncated, final)
        else:
            learned = self.normalizer.step(next_obs, reward, done)
            step = (
                Step(progress.obs, action, reward, terminated, truncated, final)
                if self.replays
                else Step(seen, action, learned, terminated, truncated, self.normalizer.observation(final))
            )
        self.agent.observe(step)
        progress.obs = next_obs
        progress.clock.frame += self.spec.env.num_envs
        progress.episode_return += reward
        progress.episode_length += 1
        for i in np.flatnonzero(done):
            progress.recent_returns.append(float(progress.episode_return[i]))
            progress.recent_lengths.append(int(progress.episode_length[i]))
            progress.episode_return[i], progress.episode_length[i] = 0.0, 0
            progress.clock.episode += 1
        progress.last_losses = self.agent.update(progress.clock) or progress.last_losses

    def _learn_from(self, dataset: DataSpec) -> None:
        """Give the agent the rows it learns from, read (never copied) from the pinned files; with
        `data.normalize`, the normaliser's statistics are theirs (a resume loads the same ones from
        its snapshot) and the agent gets the rows as it sees every observation, normalised."""
        assert isinstance(self.agent, LearnsFromData)  # the spec takes data only for such an algorithm
        rows = data.load(dataset, self.env.single_observation_space, self.env.single_action_space)
        if self.normalizer is not None and self.normalizer.fixed:
            self.normalizer.fit(rows.obs)
            seen = self.normalizer.observation
            rows = dataclasses.replace(rows, obs=seen(rows.obs), next_obs=seen(rows.next_obs))
        self.agent.learn_from(rows)

    def _learn_offline(self) -> None:
        """One gradient step on the dataset, counted as one frame of the clock: the env waits, so
        the online phase starts from the env as a fresh session's would (`MetaSpec.offline_updates`)."""
        progress = self.progress
        assert isinstance(self.agent, LearnsFromData)  # offline_updates needs data, which needs such an agent
        progress.last_losses = self.agent.update_offline(progress.clock) or progress.last_losses
        progress.clock.frame += 1

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
        self.tensorboard = tensorboard_log.open_mirror(folder, self.progress.clock.frame, self.metrics_kept)
        identity = Identity(
            self.task.run_id,
            self.task.index,
            self.task.seed,
            self.spec.to_json(),
            group=self.registry.search_of(self.task.run_id) if self.meta.track else None,
        )
        self.trackers = open_relay(
            self.meta.track,
            identity,
            folder,
            attempt=self.task.attempt,
            rows=self.metrics_kept,
            evaluations=[Evaluation(**e).summary() for e in self.progress.evaluations],
        )

    def flush_logs(self, sync: bool = False) -> None:
        """Rows reach the log only here, inside a fenced registry transaction (see `Session.run`),
        and the trackers get what the log got. Local files only: the store's copies are put by the
        session's uploader (`Checkpoints.upload_logs`), never inside a registry transaction."""
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
                self.trackers.close(status, self.progress.best_mean())
                self._say_tracker_warnings()  # a tracker found out of reach after the last report
                folder = paths.session_dir(self.home, self.task.run_id, self.task.index)
                with suppress(LeaseLost):  # taken over meanwhile: the newer attempt's report is the one
                    self.registry.fenced(lambda: tracker_status.publish(folder))
        self.checkpoints.upload_logs()  # the log and event files as the session ends them
        if status == "failed":  # the error that failed it is the one to say
            self.checkpoints.settle_quietly()
        else:
            self.checkpoints.settle()

    def _report(self, fps: float, record: bool) -> None:
        """The metrics log grows only on the log cadence, so it does not depend on where a run
        happened to stop; the display hears about the last frame too."""
        return_mean = float(np.mean(self.progress.recent_returns)) if self.progress.recent_returns else None
        if record:
            length_mean = float(np.mean(self.progress.recent_lengths)) if self.progress.recent_lengths else None
            row = {
                **self.progress.clock.to_json(),
                "fps": fps,
                "return_mean": return_mean,
                "length_mean": length_mean,
                **self.progress.last_losses,
            }
            self.metrics.append(row)
            if self.tensorboard is not None:
                self.tensorboard.add(row)
            if self.trackers is not None:
                self.trackers.add(row)
        headline = self.agent.HEADLINE
        self.emit(
            events.Progress(
                self.task.index,
                self.progress.clock.frame,
                self.meta.max_frame,
                self.progress.clock.episode,
                fps,
                return_mean,
                headline,
                self.progress.last_losses.get(headline),
            )
        )
        self._say_tracker_warnings()

    def _say_tracker_warnings(self) -> None:
        """Each tracker found out of reach, said once (`Relay.warnings`)."""
        for line in self.trackers.warnings() if self.trackers is not None else ():
            self.emit(events.Warned(self.task.index, line))

    def _record_evaluations(self, wait: bool = False) -> None:
        """Record the evaluations that ended (`wait`: every one submitted), in frame order, and put
        in place each held snapshot as soon as every evaluation up to its frame is recorded."""
        outcomes = self.evaluator.finished(wait)
        for i, outcome in enumerate(outcomes):
            self._record(outcome)
            unknown = [o.evaluation.frame for o in outcomes[i + 1 :]]
            running = self.evaluator.pending_frame()
            unknown_from = min([*unknown, *([running] if running is not None else [])], default=None)
            self.checkpoints.release(unknown_from)

    def _record(self, outcome: Outcome) -> None:
        result = outcome.evaluation
        summary = result.summary()
        self.progress.evaluations.append(result.to_json())
        self.progress.eval_env_state = outcome.env_after
        self.registry.add_evaluation(self.task.session_id, **summary)
        if self.tensorboard is not None:
            self.tensorboard.add_evaluation(result.frame, result.mean)
        if self.trackers is not None:
            self.trackers.add_evaluation(result.frame, result.mean, result.std)
        is_best = self.progress.best is None or result.mean > self.progress.best.mean
        if is_best:
            self.progress.best = snapshot.Best(frame=result.frame, mean=result.mean)
        video = outcome.video.path if outcome.video is not None else None
        self.emit(
            events.Evaluated(
                self.task.index, result.frame, result.mean, result.std, is_best, None if video is None else str(video)
            )
        )
        if self.task.answer_evaluations and self.heard is not None:
            self.heard()  # a callback that stops the run has asked before the next step
        if outcome.video is not None:
            self._deliver_video(outcome.video)

    def _deliver_video(self, video: eval_video.Video) -> None:
        """An evaluation's video, to the home's store and the trackers (in the background, as the
        logs go); a video that could not be made, or is not the evaluated episode, said once."""
        if video.problem is not None:
            self.emit(events.Warned(self.task.index, video.problem))
        if video.path is None:
            return
        job = eval_video.upload_job(video.path)
        if job is not None and self.checkpoints.store is not None:
            self.checkpoints.store.submit(job)
        if self.trackers is not None:
            self.trackers.add_file(video.frame, video.path, eval_video.FOLDER)

    def counts(self) -> ProgressCounts:
        return {
            "frame": self.progress.clock.frame,
            "episode": self.progress.clock.episode,
            "opt_step": self.progress.clock.opt_step,
        }


class SessionFailed(Exception):
    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.details = details


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


OnLease = Callable[[Registry, SessionTask, int], SessionTask]
Heard = Callable[[], None] | None
"""Waits until the process that hears a session's events has heard every one sent so far."""


def run_session(
    task: SessionTask, emit: Emit, stop: StopRequest, on_lease: OnLease | None = None, heard: Heard = None
) -> str:
    """Train one session, recording it in the registry; returns its final status. A failure is
    recorded on the session (status failed, with the message) and raised as SessionFailed.

    The attempt first takes the session's lease, and every write it makes is fenced by it: once a
    newer attempt takes the lease, this one writes nothing more and ends SUPERSEDED. `on_lease`
    (a cluster executor's) may then change the task, given the token: a retried attempt continues
    from the newest snapshot."""
    registry = Registry.open(paths.task_home(task.home), task.db_url)
    session: Session | None = None
    try:
        # The registry's own files (run.json) go to a store from a background thread: no registry
        # transaction of this session waits for the network. Every one is put before this returns.
        with storage.publishing_in_background():
            lease = registry.acquire_lease(task.session_id)
            registry.fence(task.session_id, lease)
            if on_lease is not None:
                task = on_lease(registry, task, lease)
            session = Session(task, registry, emit, lease, heard)
            return session.run(stop)  # records its own failures
    except LeaseLost as lost:
        # Said on stderr (a worker's log on a cluster): this attempt writes nothing anywhere else.
        sys.stderr.write(f"rlrun: session s{task.index} of run {task.run_id}: {lost}\n")
        frame = session.progress.clock.frame if session is not None else 0
        emit(events.SessionEnded(task.index, SUPERSEDED, frame, None, str(lost)))
        return SUPERSEDED
    except Exception as error:
        message = describe(error)
        if session is not None:
            progress = session.counts()
        else:  # it never started: the session keeps the progress it has on record
            record = registry.get_session(task.run_id, task.index)
            progress = ProgressCounts(frame=record.frame, episode=record.episode, opt_step=record.opt_step)
            registry.finish_session(task.session_id, status="failed", error=message, **progress)
        emit(events.SessionEnded(task.index, "failed", progress["frame"], None, message))
        raise SessionFailed(message, traceback.format_exc()) from error
    finally:
        if session is not None:
            # Closed here, not left to garbage collection: a Session and its Checkpoints refer to
            # each other, and env workers ignore SIGTERM, so the interpreter's exit (which joins its
            # children) would wait on them forever; a caller's own process keeps no workers either.
            session.env.close()
        registry.close()


def run_session_process(task: SessionTask, queue: Any, shared_stop: Any) -> None:
    """Entry point of a spawned session process: events go to the parent through `queue`, and a
    stop requested in any process of the run reaches this one through `shared_stop`."""
    from rlrun.session.stopping import stop_on_signals

    stop = StopRequest(shared_stop)
    with stop_on_signals(stop):
        try:
            run_session(task, queue.put, stop, heard=getattr(queue, "wait_heard", None))
        except SessionFailed:
            raise SystemExit(1) from None

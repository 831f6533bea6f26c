"""A session's checkpoint cadence: when a snapshot is taken, and how it is staged, uploaded,
recorded and retained.

A snapshot is due on the checkpoint period, at the end of training, at a stop, and at an
evaluation that turns out the best. Evaluations run beside training, so a snapshot may be taken
before the evaluations up to its frame are recorded: it is then held, written to its temporary
folder, until they are (its meta, which holds them and says whether it is the best, is rewritten
then), and dropped if it was due only because of an evaluation that was not the best. A complete
snapshot is put in place and recorded in one fenced registry transaction. In object storage it is
staged on local disk and uploaded by the session's background uploader (`rlrun.session.uploads`)
while training goes on, up to `uploads.in_flight()` snapshots at once, each recorded once its upload
is complete, in order; training waits for the store only when that many are still uploading. The
metrics log and TensorBoard files go up the same way, as they stood at each snapshot, and so do
the deletions of the retention rule (`rlrun.snapshot.retention`), which runs after each snapshot is
recorded. A stop and the end of training wait for every upload: a session ends uploaded.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from rlrun import paths, snapshot, storage
from rlrun.registry import Registry
from rlrun.session import events, uploads
from rlrun.session.state import SessionProgress
from rlrun.session.task import SessionTask
from rlrun.snapshot import layout, remote, retention

Job = Callable[[], None]


class Source(Protocol):
    """What a session's snapshots need of it: its progress (the frame, the evaluations and the best),
    a capture of its whole state, and its logs as they stand."""

    @property
    def progress(self) -> SessionProgress: ...

    def capture(self, kind: str) -> snapshot.Snapshot:
        """The session's state now, as a snapshot of `kind` (`rlrun.session.state.capture`)."""
        ...

    def evaluation_running(self) -> bool:
        """Whether an evaluation submitted is not recorded yet."""
        ...

    def flush_logs(self, sync: bool = False) -> None: ...

    def log_uploads(self) -> list[tuple[str, Job | None]]:
        """A job per log file (named) that puts it, as it stands, in the home's store (None: nothing to put)."""
        ...


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


@dataclass
class _Upload:
    """A snapshot staged for upload and what its registry row will say."""

    prepared: snapshot.Prepared
    kind: str
    frame: int
    done: Future[object] = field(default_factory=Future)
    recorded: threading.Event = field(default_factory=threading.Event)
    """Set once it is recorded (or never will be): the next snapshot's upload starts only then, so
    at most one snapshot is ever complete in the store and not yet in the registry."""


class Checkpoints:
    """The snapshots of one session process: `source` is whose state they capture, `task` the
    session they are recorded for in `registry` (each event said through `emit`), in `home`,
    `keep` periodic ones kept."""

    def __init__(
        self,
        source: Source,
        *,
        task: SessionTask,
        registry: Registry,
        home: Path,
        keep: int,
        emit: Callable[[events.Event], None],
        previous: Path | None,
    ) -> None:
        self.source, self.task, self.registry, self.home, self.keep, self.emit = (
            source,
            task,
            registry,
            home,
            keep,
            emit,
        )
        self.previous = previous
        """The snapshot this process's state descends from (resumed from, then each one written):
        the next snapshot shares its replay memory's segments instead of writing them again."""
        self.last_frame = -1 if previous is None else source.progress.clock.frame
        """The frame of the newest snapshot this process's state is in (a resume's: its own), put
        in place or staged for upload."""
        self.held: list[Held] = []
        """Snapshots written while an evaluation at or before their frame was still running, oldest
        first: each is put in place (or dropped) once that evaluation is recorded."""
        self.uploading: deque[_Upload] = deque()
        """Snapshots staged in the working copy whose upload to object storage runs in the
        background while training goes on (`take`), oldest first; each recorded once complete."""
        self._newest: snapshot.Prepared | None = None
        """The newest snapshot staged: the next one links its replay segments, not `previous`'s."""
        self._closed = False
        self.store: uploads.Uploads | None = None
        """The session's calls to its object store (None in a local home, which has none)."""
        if storage.mirror_of(home) is not None:
            self.store = uploads.Uploads(lambda: registry.fenced(_nothing))

    def take(self, kinds: list[str], evaluated: bool = False) -> None:
        """Write a snapshot of this frame: at once when every evaluation up to it is recorded,
        else held until it is (its meta, which holds them and says whether it is the best, is
        then rewritten); one due only because of an evaluation that was not the best is dropped.
        The last snapshot of a process (its end, a stop) returns only once every snapshot is
        uploaded and recorded."""
        source = self.source
        frame = source.progress.clock.frame
        ending = bool({"final", "preempt"} & set(kinds))
        self.poll()
        if frame == self.last_frame:  # a stop right after a scheduled snapshot: that one already holds this state
            if ending:
                self.settle()
            return
        known = not source.evaluation_running()
        if known:
            kinds = self._best_at(frame, evaluated) + kinds
            if not kinds:
                return
        self.registry.fenced(lambda: source.flush_logs(sync=True))  # the log always reaches the newest snapshot
        self.upload_logs()  # ahead of the snapshot: the store's log too reaches it
        if known:
            self._publish(self._prepare(source.capture("+".join(kinds))), frame, "+".join(kinds))
        else:
            captured = source.capture("+".join(kinds) or "pending")
            self.held.append(Held(frame, kinds, evaluated, self._prepare(captured), captured.meta))
        if ending:
            self.settle()

    def release(self, unknown_from: int | None) -> None:
        """Put in place (or drop) each held snapshot older than `unknown_from`, the first frame
        whose evaluation is not recorded yet (None: every evaluation is)."""
        while self.held and (unknown_from is None or self.held[0].frame < unknown_from):
            self._release(self.held.pop(0))

    def poll(self) -> None:
        """Record the snapshots whose uploads are complete, oldest first, and raise the error of a
        store job that failed."""
        while self.uploading and self.uploading[0].done.done():
            self._record_oldest()
        if self.store is not None:
            self.store.check()

    def upload_logs(self) -> None:
        """Hand the metrics log and the TensorBoard files, as they stand now (flushed), to the
        uploader (a home in object storage)."""
        if self.store is None:
            return
        for name, job in self.source.log_uploads():
            if job is not None:
                self.store.submit_newest(name, job)

    def settle(self) -> None:
        """Wait for every upload, recording each snapshot once complete, oldest first."""
        while self.uploading:
            self._record_oldest()
        if self.store is not None:
            self.store.drain()

    def settle_quietly(self) -> None:
        """A failed session's end: upload no more snapshots, record none, wait for the other store
        jobs handed over (its log's last copy) and raise nothing (the session's own error is the
        one to say)."""
        self._stop_uploading()
        if self.store is not None:
            with suppress(Exception):
                self.store.drain()

    def close(self) -> None:
        for held in self.held:  # never put in place: a resume evaluates and writes them again
            held.prepared.discard()
        self._stop_uploading()
        if self.store is not None:  # idle unless an error cut the session short
            self.store.close()

    def _stop_uploading(self) -> None:
        """Start no snapshot's upload any more: those in flight are never recorded (a resume
        sweeps what reached the store), and no job waits for them to be."""
        self._closed = True
        for upload in self.uploading:
            upload.recorded.set()

    def _best_at(self, frame: int, evaluated: bool) -> list[str]:
        """["best"] when the evaluation at `frame` (recorded) is the best so far."""
        best = self.source.progress.best
        return ["best"] if evaluated and best is not None and best.frame == frame else []

    def _prepare(self, captured: snapshot.Snapshot) -> snapshot.Prepared:
        directory = paths.checkpoints_dir(self.home, self.task.run_id, self.task.index)
        newest = self._newest
        previous = (
            self.previous if newest is None else newest.temporary if newest.temporary.exists() else newest.destination
        )
        return snapshot.prepare(
            directory / snapshot.snapshot_name(self.source.progress.clock.frame), captured, previous=previous
        )

    def _release(self, held: Held) -> None:
        kinds = self._best_at(held.frame, held.evaluated) + held.kinds
        if not kinds:
            held.prepared.discard()
            return
        kind = "+".join(kinds)
        progress = self.source.progress
        meta = replace(
            held.meta,
            kind=kind,
            evaluations=list(progress.evaluations),
            best=progress.best,
            random=replace(held.meta.random, eval_env=progress.eval_env_state.generator),
            eval_wrappers=progress.eval_env_state.wrappers,
        )
        self._publish(held.prepared.with_meta(meta), held.frame, kind)

    def _publish(self, prepared: snapshot.Prepared, frame: int, kind: str) -> None:
        """Record a complete snapshot: at once in a local home; in object storage once uploaded,
        while training goes on. With `uploads.in_flight()` already in flight (a slow or hung
        store), a snapshot whose upload has not started and that a newer one supersedes (`_superseded`)
        is dropped, never recorded: the oldest such in flight, else this one. Training waits for the
        store only when neither can be (this one is the best so far, and every one waiting is
        needed), and at a stop or the end (`settle`)."""
        upload = _Upload(prepared, kind, frame)
        if self.store is None:
            self.last_frame = frame
            self._record_snapshot(upload)
            return
        while len(self.uploading) >= uploads.in_flight() and not self._drop_one(kind):
            if _superseded(kind, later=[]):
                prepared.discard()  # the snapshots in flight hold the run as well: training goes on
                return
            self._record_oldest()
        self.last_frame = frame
        earlier = [u.recorded for u in self.uploading]

        def upload_in_turn() -> None:
            for event in earlier:  # each one before recorded (or dropped): at most one is complete and unrecorded
                event.wait()
            if not self._closed:
                prepared.upload()

        upload.done = self.store.submit(upload_in_turn, watched=False)
        self.uploading.append(upload)
        self._newest = prepared

    def _drop_one(self, arriving: str) -> bool:
        """Drop the oldest snapshot in flight whose upload has not started and that a newer one
        (in flight, or `arriving`, of that kind) supersedes; False when there is none."""
        waiting = list(self.uploading)
        for i, upload in enumerate(waiting):
            if _superseded(upload.kind, later=[u.kind for u in waiting[i + 1 :]] + [arriving]) and upload.done.cancel():
                self.uploading.remove(upload)
                upload.prepared.discard()
                upload.recorded.set()
                return True
        return False

    def _record_oldest(self) -> None:
        """Wait for the oldest snapshot uploading, then record it."""
        upload = self.uploading.popleft()
        try:
            try:
                upload.done.result()
            except BaseException:
                upload.prepared.discard()
                raise
            self._record_snapshot(upload)
        finally:
            upload.recorded.set()

    def _record_snapshot(self, upload: _Upload) -> None:
        """Put a complete snapshot in place and record it: the registry row is the commit."""
        prepared = upload.prepared
        try:
            # The rename happens inside the fenced transaction that records it: a stale attempt
            # neither puts its folder in place nor records it.
            self.registry.add_checkpoint(
                self.task.session_id,
                frame=upload.frame,
                kind=upload.kind,
                path=str(prepared.destination.relative_to(self.home)),
                sha256=prepared.sha256,
                size_bytes=prepared.size_bytes,
                publish=prepared.publish,
            )
        except BaseException:
            prepared.discard()
            raise
        self.previous = prepared.destination
        self.emit(events.Checkpointed(self.task.index, upload.frame, upload.kind, str(prepared.destination)))
        self._retain()

    def _retain(self) -> None:
        """Apply the retention rule (`rlrun.snapshot.retention`). The row goes first, so the registry never
        points at a deleted folder; the store's objects go after the uploads handed over before."""
        records = self.registry.checkpoints(self.task.session_id)
        keep = retention.to_keep(records, self.keep)
        for record in records:
            if record.id not in keep:
                self.registry.remove_checkpoint(record.id)
                path = self.home / record.path
                layout.remove(path)
                if self.store is not None:
                    self.store.submit(lambda path=path: remote.remove(path))  # type: ignore[misc]


def _superseded(kind: str, later: list[str]) -> bool:
    """Whether a snapshot of `kind` may be dropped when snapshots of the `later` kinds follow it: the
    retention rule (`rlrun.snapshot.retention`) would keep it only as the newest, or as the best while
    no later one is. The last snapshot of a process (its end, a stop) is never dropped."""
    kinds = set(kind.split("+"))
    if kinds & {"final", "preempt"}:
        return False
    return "best" not in kinds or any("best" in k.split("+") for k in later)


def _nothing() -> None:
    """The write of a fenced transaction that only checks the lease."""

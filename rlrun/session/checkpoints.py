"""A session's checkpoint cadence: when a snapshot is taken, and how it is staged, uploaded,
recorded and retained.

A snapshot is due on the checkpoint period, at the end of training, at a stop, and at an
evaluation that turns out the best. Evaluations run beside training, so a snapshot may be taken
before the evaluations up to its frame are recorded: it is then held, written to its temporary
folder, until they are (its meta, which holds them and says whether it is the best, is rewritten
then), and dropped if it was due only because of an evaluation that was not the best. A complete
snapshot is put in place and recorded in one fenced registry transaction; in object storage it
uploads in the background while training goes on, one upload at a time. The retention rule
(`rlrun.snapshot.retention`) runs after each one.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rlrun import paths, snapshot
from rlrun.session import events, state
from rlrun.snapshot import retention

if TYPE_CHECKING:
    from rlrun.session.loop import Session


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
    done: Future[None] = field(default_factory=Future)


class Checkpoints:
    """The snapshots of one session process; `session` is whose state they capture and where they
    are recorded."""

    def __init__(self, session: Session, previous: Path | None) -> None:
        self.session = session
        self.previous = previous
        """The snapshot this process's state descends from (resumed from, then each one written):
        the next snapshot shares its replay memory's segments instead of writing them again."""
        self.last_frame = -1 if previous is None else session.clock.frame
        """The frame of the newest snapshot this process's state is in (a resume's: its own)."""
        self.held: list[Held] = []
        """Snapshots written while an evaluation at or before their frame was still running, oldest
        first: each is put in place (or dropped) once that evaluation is recorded."""
        self._upload_thread: ThreadPoolExecutor | None = None
        self.uploading: _Upload | None = None
        """A snapshot staged in the working copy whose upload to object storage runs in the
        background while training goes on (`take`); recorded once it is complete."""

    def take(self, kinds: list[str], evaluated: bool = False) -> None:
        """Write a snapshot of this frame: at once when every evaluation up to it is recorded,
        else held until it is (its meta, which holds them and says whether it is the best, is
        then rewritten); one due only because of an evaluation that was not the best is dropped."""
        session = self.session
        frame = session.clock.frame
        self.record_upload()  # one upload in flight at most: the next snapshot links this one's segments
        if frame == self.last_frame:
            return  # a stop right after a scheduled snapshot: that one already holds this state
        known = session.evaluator.pending_frame() is None
        if known:
            kinds = self._best_at(frame, evaluated) + kinds
            if not kinds:
                return
        session.registry.fenced(lambda: session.flush_logs(sync=True))  # the log always reaches the newest snapshot
        if known:
            self._publish(self._prepare(state.capture(session, "+".join(kinds))), frame, "+".join(kinds))
            return
        captured = state.capture(session, "+".join(kinds) or "pending")
        self.held.append(Held(frame, kinds, evaluated, self._prepare(captured), captured.meta))

    def release(self, unknown_from: int | None) -> None:
        """Put in place (or drop) each held snapshot older than `unknown_from`, the first frame
        whose evaluation is not recorded yet (None: every evaluation is)."""
        while self.held and (unknown_from is None or self.held[0].frame < unknown_from):
            self._release(self.held.pop(0))

    def poll(self) -> None:
        """Record the snapshot uploading in the background if its upload is complete."""
        if self.uploading is not None and self.uploading.done.done():
            self.record_upload()

    def close(self) -> None:
        for held in self.held:  # never put in place: a resume evaluates and writes them again
            held.prepared.discard()
        if self._upload_thread is not None:  # idle unless an error cut a snapshot's upload short
            self._upload_thread.shutdown(wait=False)

    def _best_at(self, frame: int, evaluated: bool) -> list[str]:
        """["best"] when the evaluation at `frame` (recorded) is the best so far."""
        best = self.session.best
        return ["best"] if evaluated and best is not None and best.frame == frame else []

    def _prepare(self, captured: snapshot.Snapshot) -> snapshot.Prepared:
        session = self.session
        directory = paths.checkpoints_dir(session.home, session.task.run_id, session.task.index)
        return snapshot.prepare(directory / snapshot.snapshot_name(session.clock.frame), captured,
                                previous=self.previous)

    def _release(self, held: Held) -> None:
        kinds = self._best_at(held.frame, held.evaluated) + held.kinds
        if not kinds:
            held.prepared.discard()
            return
        kind = "+".join(kinds)
        session = self.session
        meta = replace(held.meta, kind=kind, evaluations=list(session.evaluations), best=session.best,
                       random=replace(held.meta.random, eval_env=session.eval_env_state.generator),
                       eval_wrappers=session.eval_env_state.wrappers)
        self._publish(held.prepared.with_meta(meta), held.frame, kind)

    def _publish(self, prepared: snapshot.Prepared, frame: int, kind: str) -> None:
        """Upload a complete snapshot (a home in object storage), then record it."""
        self.record_upload()
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

    def record_upload(self) -> None:
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
        session, prepared = self.session, upload.prepared
        try:
            # The rename happens inside the fenced transaction that records it: a stale attempt
            # neither puts its folder in place nor records it.
            session.registry.add_checkpoint(session.task.session_id, frame=upload.frame, kind=upload.kind,
                                            path=str(prepared.destination.relative_to(session.home)),
                                            sha256=prepared.sha256, size_bytes=prepared.size_bytes,
                                            publish=prepared.publish)
        except BaseException:
            prepared.discard()
            raise
        self.previous = prepared.destination
        self.last_frame = upload.frame
        session.emit(events.Checkpointed(session.task.index, upload.frame, upload.kind, str(prepared.destination)))
        self._retain()

    def _uploader(self) -> ThreadPoolExecutor:
        if self._upload_thread is None:
            self._upload_thread = ThreadPoolExecutor(1, thread_name_prefix="rlrun-upload")
        return self._upload_thread

    def _retain(self) -> None:
        """Apply the retention rule (`rlrun.snapshot.retention`). The row goes first, so the registry never
        points at a deleted folder."""
        session = self.session
        records = session.registry.checkpoints(session.task.session_id)
        keep = retention.to_keep(records, session.meta.keep_checkpoints)
        for record in records:
            if record.id not in keep:
                session.registry.remove_checkpoint(record.id)
                snapshot.remove(session.home / record.path)

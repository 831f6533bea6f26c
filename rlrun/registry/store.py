"""Writes: every change to the registry's runs, each one short transaction that also rewrites the
run's manifest when the change is one the manifest holds (`rlrun.registry.manifest`). A search's
writes build on these (`rlrun.registry.search_store`).

Timestamps are the database's clock (`Transaction.now()`), never this host's: staleness is
judged by the same clock (`rlrun.registry.liveness`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlrun import paths, testhooks
from rlrun.errors import BadInput, RegistryError
from rlrun.ids import new_run_id
from rlrun.registry import manifest
from rlrun.registry.database import Conflict, Connected, Transaction
from rlrun.registry.liveness import run_status
from rlrun.registry.queries import STOP_ASKED_SQL, checkpoints_where
from rlrun.registry.records import (
    ATTEMPT_END_STATUSES,
    ATTEMPT_KINDS,
    CRASHED,
    ENDED,
    IN_LIMIT,
    RUN_COLUMNS,
    AttemptRecord,
    CheckpointRecord,
    EvaluationRecord,
    RestoredRun,
    RunRecord,
    SpecRevisionRecord,
    TrialLink,
    in_list,
    insert_sql,
)


def check_status(status: str, allowed: Sequence[str], what: str = "status") -> None:
    if status not in allowed:
        raise ValueError(f"{what} {status!r} is not one of {', '.join(allowed)}")


def owner(tx: Transaction, session_id: int) -> tuple[str, int]:
    """The run id and index of a session."""
    found = tx.rows("SELECT run_id, session_index FROM sessions WHERE id = :id", {"id": session_id})
    if not found:
        raise RegistryError(f"no session with id {session_id} in the registry")
    return found[0][0], found[0][1]


def lock_run(tx: Transaction, run_id: str) -> None:
    """Serialise writers of one run on a server (SQLite's BEGIN IMMEDIATE already has).

    Taken first, before the transaction writes anything of the run's: inserting a row that refers
    to the run (an attempt) holds a key-share lock on the run's row, and two transactions that
    both hold one and then ask for this lock wait for each other (PostgreSQL's "deadlock detected").
    """
    if tx.dialect != "sqlite":
        tx.rows("SELECT id FROM runs WHERE id = :id FOR UPDATE", {"id": run_id})


def lock_owner(tx: Transaction, session_id: int) -> tuple[str, int]:
    """The run id and index of a session, with its run locked (`lock_run`)."""
    run_id, index = owner(tx, session_id)
    lock_run(tx, run_id)
    return run_id, index


def lock_attempt_run(tx: Transaction, attempt_id: int) -> str:
    """The run of an attempt, locked (`lock_run`)."""
    found = tx.rows("SELECT run_id FROM attempts WHERE id = :id", {"id": attempt_id})
    if not found:
        raise RegistryError(f"no attempt with id {attempt_id} in the registry")
    lock_run(tx, found[0][0])
    return str(found[0][0])


def close_open_attempts(tx: Transaction, session_id: int, status: str) -> int:
    """End the session's attempts that are still open; how many there were."""
    return tx.execute(
        "UPDATE attempts SET ended_at = :now, end_status = :status WHERE session_id = :session_id AND ended_at IS NULL",
        {"now": tx.now(), "status": status, "session_id": session_id},
    )


class Writes(Connected):
    """The registry's writes (mixed into `Registry`).

    The writes a training session makes once it holds its lease and attempt (marked running,
    heartbeats, log flushes, evaluations, checkpoints and their retention, its end, the run's end)
    go through `Connected._write`, which rides out a short registry outage; each is safe to run
    twice (see there). The others fail at once: a command's own start (new runs, leases, attempts,
    rewinds) fails before any training is at stake, and the user or scheduler runs it again."""

    if TYPE_CHECKING:  # a search's writes (`search_store.SearchWrites`, which builds on these) give them

        def _trains_trial(self, tx: Transaction, link: TrialLink, run_id: str) -> None: ...

        def _sync_search_manifest(self, tx: Transaction, search_id: str) -> None: ...

    def create_run(
        self,
        *,
        run_id: str | None = None,
        name: str | None,
        spec_name: str,
        algorithm: str,
        env_id: str,
        max_frame: int,
        seed: int,
        num_sessions: int,
        spec_json: str,
        host: str | None,
        pid: int | None,
        parent_id: str | None = None,
        trial: TrialLink | None = None,
    ) -> RunRecord:
        """Insert a running run, its pending sessions (seed + i) and spec revision 0.

        `parent_id` links a fork (`rlrun resume --fork`) to the run it started from. `trial` names
        the search trial the run trains: its row is written (or given this run) in the same
        transaction, so a kill between the two cannot leave a search's run unlinked. Without a
        `run_id`, a fresh one no run holds is drawn in the same transaction (`_unused_run_id`).
        """
        if num_sessions < 1:
            raise BadInput(f"a run needs at least one session, not {num_sessions}")
        try:
            with self._transaction(write=True) as tx:
                now = tx.now()
                run_id = run_id or _unused_run_id(tx)
                self._check_new_run(tx, run_id, name, parent_id)
                run = RunRecord(
                    id=run_id,
                    name=name,
                    spec_name=spec_name,
                    algorithm=algorithm,
                    env_id=env_id,
                    status="running",
                    max_frame=max_frame,
                    num_sessions=num_sessions,
                    seed=seed,
                    parent_id=parent_id,
                    host=host,
                    pid=pid,
                    error=None,
                    created_at=now,
                    finished_at=None,
                    home=paths.home_address(self.home),
                )
                tx.execute(insert_sql("runs", RUN_COLUMNS), run._asdict())
                for i in range(num_sessions):
                    tx.insert(
                        "INSERT INTO sessions (run_id, session_index, seed, status, frame, episode, opt_step)"
                        " VALUES (:run_id, :index, :seed, 'pending', 0, 0, 0)",
                        {"run_id": run_id, "index": i, "seed": seed + i},
                    )
                tx.insert(
                    insert_sql("spec_revisions", ("run_id", "revision", "frame", "spec_json", "created_at")),
                    {"run_id": run_id, "revision": 0, "frame": 0, "spec_json": spec_json, "created_at": now},
                )
                if trial is not None:
                    self._trains_trial(tx, trial, run_id)
                self._sync_manifest(tx, run_id)
        except Conflict as error:
            # Only reachable when another writer won a race the check above could not see
            # (servers, which have no BEGIN IMMEDIATE), so the culprit is not known here.
            raise BadInput(f"run id {run_id!r} or name {name!r} is already taken") from error
        testhooks.crash_point("run-recorded")
        return run

    @staticmethod
    def _check_new_run(tx: Transaction, run_id: str, name: str | None, parent_id: str | None) -> None:
        if tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": run_id}):
            raise RegistryError(f"a run with id {run_id} already exists")
        if parent_id is not None and not tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": parent_id}):
            raise RegistryError(f"parent run {parent_id} is not in the registry")
        if name is None:
            return
        holder = tx.rows("SELECT id FROM runs WHERE name = :name", {"name": name})
        if holder:
            raise BadInput(f"a run named {name!r} already exists (id {holder[0][0]}); choose another --name")

    def _update_session(self, tx: Transaction, session_id: int, assignments: str, values: dict[str, Any]) -> None:
        """`:now` in the assignments is the database's clock."""
        count = tx.execute(
            f"UPDATE sessions SET {assignments} WHERE id = :session_id",
            {**values, "now": tx.now(), "session_id": session_id},
        )
        if count == 0:
            raise RegistryError(f"no session with id {session_id} in the registry")

    def start_session(self, session_id: int, *, host: str | None, pid: int | None) -> None:
        """Mark a session running; started_at keeps the first start across resumes."""

        def record(tx: Transaction) -> None:  # the same end state however often it runs
            run_id, _ = lock_owner(tx, session_id)
            self._update_session(
                tx,
                session_id,
                "status = 'running', host = :host, pid = :pid, heartbeat_at = :now,"
                " started_at = COALESCE(started_at, :now), finished_at = NULL, error = NULL",
                {"host": host, "pid": pid},
            )
            self._sync_manifest(tx, run_id)

        self._write(record)

    def heartbeat(
        self, session_id: int, *, frame: int, episode: int, opt_step: int, publish: Callable[[], None] | None = None
    ) -> bool:
        """Record progress: one UPDATE by primary key (the manifest is left alone: the newest
        snapshot says as much, and the work since would be redone on resume). `publish` (the
        session's log flush) runs inside the same transaction, under the lease (see `fenced`).
        True when the session's run was asked to stop (`request_stop`): the session's cue."""

        def record(tx: Transaction) -> bool:  # an UPDATE by key; a flush writes its rows once
            self._update_session(
                tx,
                session_id,
                "frame = :frame, episode = :episode, opt_step = :opt_step, heartbeat_at = :now",
                {"frame": frame, "episode": episode, "opt_step": opt_step},
            )
            if publish is not None:
                publish()
            return bool(tx.rows(STOP_ASKED_SQL, {"session_id": session_id}))

        asked = self._write(record)
        testhooks.crash_point("heartbeat-recorded")
        return asked

    def acquire_lease(self, session_id: int) -> int:
        """Take the session's lease for a new attempt: its next fencing token. Every older
        attempt's fenced writes fail from this commit on (`Connected.fence`). Taking it is a sign
        of life: the heartbeat is stamped, so the attempt is not presumed lost while it starts."""
        with self._transaction(write=True) as tx:
            self._update_session(tx, session_id, "lease = lease + 1, heartbeat_at = :now", {})
            (lease,) = tx.rows("SELECT lease FROM sessions WHERE id = :id", {"id": session_id})[0]
        return int(lease)

    def fenced(self, write: Callable[[], None]) -> None:
        """Run a file write (a log flush) inside a write transaction, so that under a fence
        (`Connected.fence`) it happens only while this attempt still holds the session's lease.
        Retried (`Connected._write`): `write` must be idempotent, as the session's log writes are
        (a flush writes its pending rows once, a close closes once, a create rewrites the same file)."""
        self._write(lambda _tx: write())

    def finish_session(
        self,
        session_id: int,
        *,
        status: str,
        frame: int,
        episode: int,
        opt_step: int,
        error: str | None = None,
    ) -> None:
        """Record a session's end. In the same transaction its open attempts end with it, and a
        run whose sessions have now all ended is closed with the status they give it (the
        launcher records it again with the error; a launcher killed before that leaves nothing
        behind to call crashed)."""
        check_status(status, ENDED)

        def record(tx: Transaction) -> None:  # run again, it finds the attempts closed, the run settled
            # The run first: the last two sessions to end take turns, so the second sees the first
            # ended and settles the run.
            run_id, _ = lock_owner(tx, session_id)
            self._update_session(
                tx,
                session_id,
                "status = :status, frame = :frame, episode = :episode, opt_step = :opt_step, error = :error,"
                " heartbeat_at = :now, finished_at = :now",
                {"status": status, "frame": frame, "episode": episode, "opt_step": opt_step, "error": error},
            )
            close_open_attempts(tx, session_id, status)
            self._settle_run(tx, run_id)
            self._sync_manifest(tx, run_id)

        self._write(record)
        testhooks.crash_point("session-finished")

    @staticmethod
    def _settle_run(tx: Transaction, run_id: str) -> None:
        """Close a stored-running run whose sessions have all ended."""
        statuses = [s for (s,) in tx.rows("SELECT status FROM sessions WHERE run_id = :id", {"id": run_id})]
        if not statuses or not all(s in ENDED for s in statuses):
            return
        tx.execute(
            "UPDATE runs SET status = :status, finished_at = :now WHERE id = :id AND status = 'running'",
            {"status": run_status(statuses), "now": tx.now(), "id": run_id},
        )

    def supervise_run(
        self, run_id: str, *, supervisor: str, host: str | None, pid: int | None, again_as: str | None = None
    ) -> bool:
        """Record who supervises a detached run (a cluster actor, named as `rlrun show` says it)
        and make its process the run's launcher, the one liveness checks; returns whether it did.

        `again_as`: the supervisor was restarted (Ray starts a detached actor again, on another node
        when its own died), and `again_as` is how its record begins whatever its node. It takes the
        run back only while the run is still running under it: when `rlrun resume` (which forgets
        the supervisor) or a newer supervisor took the run over meanwhile, or the run ended, it must
        not compete with them, and False says so. Checked and written in one transaction."""

        def record(tx: Transaction) -> bool:
            lock_run(tx, run_id)
            if again_as is not None:
                found = tx.rows("SELECT status, supervisor FROM runs WHERE id = :id", {"id": run_id})
                if not found or found[0][0] != "running" or not (found[0][1] or "").startswith(again_as):
                    return False
            values = {"supervisor": supervisor, "host": host, "pid": pid, "run_id": run_id}
            if (
                tx.execute(
                    "UPDATE runs SET supervisor = :supervisor, host = :host, pid = :pid WHERE id = :run_id", values
                )
                == 0
            ):
                raise RegistryError(f"no run with id {run_id} in the registry")
            self._sync_manifest(tx, run_id)
            return True

        return self._write(record)

    def run_again(self, run_id: str) -> None:
        """A retried attempt continues its session, and so the run: running again if the lost
        attempt had closed it (a worker stopped by SIGTERM records its session preempted, which may
        settle the run), as after `rlrun resume`, but with the same launcher, supervisor and stop
        request. Under the retry's lease, so the lost attempt cannot close it again after this."""

        def record(tx: Transaction) -> None:  # run again, it finds the run running
            lock_run(tx, run_id)
            reopened = tx.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL, error = NULL"
                " WHERE id = :id AND status <> 'running'",
                {"id": run_id},
            )
            if reopened:
                self._sync_manifest(tx, run_id)

        self._write(record)

    def record_slurm_jobs(self, run_id: str, jobs: list[str], *, supervisor: str) -> None:
        """Record the SLURM jobs that run the run's sessions (in session order) and the scheduler as
        its supervisor: the command that submitted them is no launcher to check (it returns), so
        host and pid are cleared, as a detached run's are (`supervise_run`)."""
        self._update_run(run_id, slurm_jobs=",".join(jobs), supervisor=supervisor, host=None, pid=None)

    def request_stop(self, run_id: str) -> float | None:
        """Ask a run to stop: its sessions stop at their next heartbeat with a snapshot, wherever
        they run. Safe to repeat: the first request's time stands, and is returned (None: this
        call made the request)."""

        def record(tx: Transaction) -> float | None:  # run again, it finds its own request
            lock_run(tx, run_id)
            (asked,) = tx.rows("SELECT stop_requested_at FROM runs WHERE id = :id", {"id": run_id})[0]
            if asked is None:
                tx.execute("UPDATE runs SET stop_requested_at = :now WHERE id = :id", {"now": tx.now(), "id": run_id})
                self._sync_manifest(tx, run_id)
            return float(asked) if asked is not None else None

        return self._write(record)

    def finish_run(self, run_id: str, *, status: str, error: str | None = None) -> None:
        """End a run: finished, failed, or preempted (stopped by a signal after saving)."""
        check_status(status, ENDED)
        self._update_run(run_id, ended=True, status=status, error=error)
        testhooks.crash_point("run-finished")

    def reopen_run(self, run_id: str, *, host: str | None, pid: int | None, max_frame: int | None = None) -> None:
        """Mark a run running again for `rlrun resume`, optionally with a new frame budget.

        host/pid become those of the resuming process (the launcher that liveness checks).
        """
        # A new start: no stop asked of it yet, and its launcher supervises it until a detached
        # supervisor says otherwise (`supervise_run`).
        values: dict[str, Any] = {
            "status": "running",
            "host": host,
            "pid": pid,
            "supervisor": None,
            "stop_requested_at": None,
            "slurm_jobs": None,
        }
        if max_frame is not None:
            values["max_frame"] = max_frame
        self._update_run(run_id, error=None, finished_at=None, **values)

    def _update_run(self, run_id: str, *, ended: bool = False, **values: Any) -> None:
        """Set run columns; `ended` stamps finished_at with the database's clock. Retried: an
        UPDATE by key."""

        def record(tx: Transaction) -> None:
            lock_run(tx, run_id)
            stamped = {**values, "finished_at": tx.now()} if ended else values
            assignments = ", ".join(f"{column} = :{column}" for column in stamped)
            if tx.execute(f"UPDATE runs SET {assignments} WHERE id = :run_id", {**stamped, "run_id": run_id}) == 0:
                raise RegistryError(f"no run with id {run_id} in the registry")
            self._sync_manifest(tx, run_id)

        self._write(record)

    def delete_run(self, run_id: str) -> None:
        """Delete a run and, by cascade, its sessions, checkpoints, evaluations and revisions.
        Its forks stay, unlinked (their manifests are rewritten to say so). Files are the
        caller's: see `rlrun.home.maintenance.remove_runs`."""
        with self._transaction(write=True) as tx:
            forks = [fork for (fork,) in tx.rows("SELECT id FROM runs WHERE parent_id = :id", {"id": run_id})]
            searches = [
                s for (s,) in tx.rows("SELECT DISTINCT search_id FROM trials WHERE run_id = :id", {"id": run_id})
            ]
            if tx.execute("DELETE FROM runs WHERE id = :id", {"id": run_id}) == 0:
                raise RegistryError(f"no run with id {run_id} in the registry")
            for fork in forks:
                self._sync_manifest(tx, fork)
            for search_id in searches:  # their trials are unlinked, not lost
                self._sync_search_manifest(tx, search_id)

    def add_spec_revision(
        self, run_id: str, *, frame: int, spec_json: str, diff_json: str | None
    ) -> SpecRevisionRecord:
        """Record a spec edited at resume time; the revision number is the next free one."""
        with self._transaction(write=True) as tx:
            lock_run(tx, run_id)
            (last,) = tx.rows("SELECT MAX(revision) FROM spec_revisions WHERE run_id = :id", {"id": run_id})[0]
            if last is None:
                raise RegistryError(f"no run with id {run_id} in the registry")
            values: dict[str, Any] = {
                "run_id": run_id,
                "revision": last + 1,
                "frame": frame,
                "spec_json": spec_json,
                "diff_json": diff_json,
                "created_at": tx.now(),
            }
            row_id = tx.insert(insert_sql("spec_revisions", values), values)
            self._sync_manifest(tx, run_id)
        return SpecRevisionRecord(id=row_id, **values)

    def rewind_session(self, session_id: int, *, frame: int, episode: int, opt_step: int) -> list[CheckpointRecord]:
        """Continue a session from its snapshot at `frame`: forget what it recorded after it.

        Deletes the session's "train" evaluations and its checkpoints with a frame above `frame`
        (they will be recomputed), sets its clock, recomputes best_eval / last_eval from the
        evaluations that remain, and clears error and finished_at; the status is left to
        `start_session`. Returns the deleted checkpoints so the caller can remove their files
        once this has committed.
        """
        later = {"session_id": session_id, "frame": frame}
        with self._transaction(write=True) as tx:
            run_id, _ = lock_owner(tx, session_id)
            doomed = checkpoints_where(tx, "c.session_id = :session_id AND c.frame > :frame", later)
            tx.execute("DELETE FROM checkpoints WHERE session_id = :session_id AND frame > :frame", later)
            train = "session_id = :session_id AND kind = 'train'"
            tx.execute(f"DELETE FROM evaluations WHERE {train} AND frame > :frame", later)
            (best,) = tx.rows(f"SELECT MAX(mean) FROM evaluations WHERE {train}", later)[0]
            last = tx.rows(f"SELECT mean FROM evaluations WHERE {train} ORDER BY frame DESC, id DESC LIMIT 1", later)
            tx.execute(
                "UPDATE sessions SET frame = :frame, episode = :episode, opt_step = :opt_step, best_eval = :best,"
                " last_eval = :last, error = NULL, finished_at = NULL WHERE id = :session_id",
                {**later, "episode": episode, "opt_step": opt_step, "best": best, "last": last[0][0] if last else None},
            )
            self._sync_manifest(tx, run_id)
        return doomed

    def add_attempt(
        self,
        session_id: int,
        *,
        kind: str,
        host: str | None,
        pid: int | None,
        start_frame: int,
        approximate: bool = False,
        note: str | None = None,
        node: str | None = None,
        lease: int | None = None,
    ) -> AttemptRecord:
        """Record a process starting work on a session at `start_frame`.

        kind: "train" (the first process), "resume", "fork" (the first process of a forked run),
        or "retry" (started by a cluster executor after an attempt was lost). `approximate` with a
        `note` says why a resume could not be exact; `node` is the cluster node it runs on and
        `lease` the session's lease token it holds.
        """
        check_status(kind, ATTEMPT_KINDS, what="attempt kind")
        with self._transaction(write=True) as tx:
            run_id, index = lock_owner(tx, session_id)
            close_open_attempts(tx, session_id, CRASHED)  # their process died without a word
            values: dict[str, Any] = dict(
                run_id=run_id,
                session_id=session_id,
                kind=kind,
                host=host,
                pid=pid,
                start_frame=start_frame,
                started_at=tx.now(),
                ended_at=None,
                end_status=None,
                approximate=approximate,
                note=note,
                node=node,
                lease=lease,
            )
            row_id = tx.insert(insert_sql("attempts", values), values)
            self._sync_manifest(tx, run_id)
        testhooks.crash_point("attempt-recorded")
        return AttemptRecord(id=row_id, session_index=index, **values)

    def end_attempt(self, attempt_id: int, *, status: str) -> None:
        """Close an attempt: finished, failed, preempted, or crashed (found open by a later one)."""
        check_status(status, ATTEMPT_END_STATUSES)

        def record(tx: Transaction) -> None:  # an UPDATE by key
            run_id = lock_attempt_run(tx, attempt_id)
            tx.execute(
                "UPDATE attempts SET ended_at = :now, end_status = :status WHERE id = :id",
                {"now": tx.now(), "status": status, "id": attempt_id},
            )
            self._sync_manifest(tx, run_id)

        self._write(record)

    def mark_attempt_approximate(self, attempt_id: int, *, reason: str) -> None:
        """Record that an attempt found, while running, that its continuation cannot be exact (a
        GPU op without a deterministic kernel): it becomes approximate, `reason` joins its note."""
        with self._transaction(write=True) as tx:
            run_id = lock_attempt_run(tx, attempt_id)
            tx.execute(
                "UPDATE attempts SET approximate = :yes, note = CASE WHEN note IS NULL THEN :reason"
                " ELSE note || '; ' || :reason END WHERE id = :id",
                {"yes": True, "reason": reason, "id": attempt_id},
            )
            self._sync_manifest(tx, run_id)

    def add_checkpoint(
        self,
        session_id: int,
        *,
        frame: int,
        kind: str,
        path: str,
        sha256: str,
        size_bytes: int,
        publish: Callable[[], object] | None = None,
    ) -> CheckpointRecord:
        """Record a complete snapshot. `publish` (the rename that puts its folder in place) runs
        inside the same transaction, under the lease: a stale attempt neither renames nor records.
        Retried: a snapshot's path is recorded once (an earlier try that committed is found), and
        `publish` must find its folder already in place as done (`snapshot.Prepared.publish`)."""

        def record(tx: Transaction) -> CheckpointRecord:
            run_id, index = owner(tx, session_id)
            if publish is not None:
                publish()
            values: dict[str, Any] = dict(
                session_id=session_id,
                frame=frame,
                kind=kind,
                path=path,
                sha256=sha256,
                size_bytes=size_bytes,
                created_at=tx.now(),
            )
            found = tx.rows(
                "SELECT id, created_at FROM checkpoints WHERE session_id = :session_id AND path = :path"
                " AND sha256 = :sha256",
                values,
            )
            if found:
                values["created_at"] = found[0][1]
            row_id = found[0][0] if found else tx.insert(insert_sql("checkpoints", values), values)
            return CheckpointRecord(id=row_id, run_id=run_id, session_index=index, **values)

        recorded = self._write(record)
        testhooks.crash_point("checkpoint-recorded")
        return recorded

    def remove_checkpoint(self, checkpoint_id: int) -> None:
        """Delete a checkpoint's row (a session's retention rule). Retried: a later try that finds
        the row gone takes it as its earlier try's work (a commit whose answer was lost)."""
        tries = 0

        def delete(tx: Transaction) -> None:
            nonlocal tries
            tries += 1
            if tx.execute("DELETE FROM checkpoints WHERE id = :id", {"id": checkpoint_id}) == 0 and tries == 1:
                raise RegistryError(f"no checkpoint with id {checkpoint_id} in the registry")

        self._write(delete)

    def remove_checkpoints(self, checkpoint_ids: Sequence[int]) -> int:
        """Delete many checkpoint rows at once (`rlrun gc`); returns how many were there."""
        removed = 0
        with self._transaction(write=True) as tx:
            for start in range(0, len(checkpoint_ids), IN_LIMIT):
                listed, params = in_list("c", list(checkpoint_ids[start : start + IN_LIMIT]))
                removed += tx.execute(f"DELETE FROM checkpoints WHERE id IN ({listed})", params)
        return removed

    def add_evaluation(
        self,
        session_id: int,
        *,
        frame: int,
        mean: float,
        std: float,
        min: float,
        max: float,
        episodes: int,
        kind: str = "train",
    ) -> EvaluationRecord:
        """Record an evaluation; a "train" one also updates the session's last and best score.
        Other kinds (`rlrun enjoy`) go into the run's manifest too: no snapshot holds them."""
        if not all(math.isfinite(v) for v in (mean, std, min, max)):
            # SQLite stores NaN as NULL, which would silently lose the row's meaning.
            raise ValueError(f"evaluation scores must be finite: {mean=} {std=} {min=} {max=}")
        scores = dict(frame=frame, mean=mean, std=std, min=min, max=max, episodes=episodes)
        if kind != "train":  # `rlrun enjoy`: the same scores may be recorded twice on purpose; not retried
            with self._transaction(write=True) as tx:
                recorded = self._record_evaluation(tx, session_id, kind, scores)
        else:
            recorded = self._write(lambda tx: self._record_evaluation(tx, session_id, kind, scores))
        testhooks.crash_point("evaluation-recorded")
        return recorded

    def _record_evaluation(
        self, tx: Transaction, session_id: int, kind: str, scores: dict[str, Any]
    ) -> EvaluationRecord:
        # A "train" evaluation leaves the manifest, so the run, alone: no lock on it.
        run_id, index = owner(tx, session_id) if kind == "train" else lock_owner(tx, session_id)
        values: dict[str, Any] = dict(session_id=session_id, kind=kind, **scores, created_at=tx.now())
        if kind == "train":
            # A session evaluates once per frame (a rewind deletes those after its frame), so one
            # found at this frame is this evaluation, recorded by a retried try that committed.
            found = tx.rows(
                "SELECT id, created_at FROM evaluations WHERE session_id = :session_id"
                " AND kind = 'train' AND frame = :frame",
                values,
            )
            if found:
                return EvaluationRecord(
                    id=found[0][0], run_id=run_id, session_index=index, **{**values, "created_at": found[0][1]}
                )
        row_id = tx.insert(insert_sql("evaluations", values), values)
        if kind == "train":
            tx.execute(
                "UPDATE sessions SET last_eval = :mean,"
                " best_eval = CASE WHEN best_eval IS NULL OR best_eval < :mean THEN :mean ELSE best_eval END"
                " WHERE id = :session_id",
                values,
            )
        else:
            self._sync_manifest(tx, run_id)
        return EvaluationRecord(id=row_id, run_id=run_id, session_index=index, **values)

    # ---- rebuilding from folders -------------------------------------------------------------

    def restore_run(self, restored: RestoredRun, *, fresh_id: bool = False) -> str:
        """Insert a run read back from its folder (`rlrun db rebuild`) with all its rows, in one
        transaction, and return its id. A parent that is not in the registry is dropped from the
        record. `fresh_id` (a foreign run imported, whose id is rlrun's own to give): its id is
        drawn again in the transaction if another run holds it."""
        # Its folder was read in this home (rebuilt, imported): the run lives here (a manifest never
        # names its home: a folder copied or moved would carry a stale one).
        run = restored.run._replace(home=paths.home_address(self.home))
        with self._transaction(write=True) as tx:
            if fresh_id and tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": run.id}):
                run = run._replace(id=_unused_run_id(tx, run.created_at))
            if run.parent_id is not None and not tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": run.parent_id}):
                run = run._replace(parent_id=None)
            tx.execute(insert_sql("runs", RUN_COLUMNS), run._asdict())
            ids: dict[int, int] = {}
            for session in restored.sessions:
                values = {"run_id": run.id, **session}
                ids[session["session_index"]] = tx.insert(insert_sql("sessions", values), values)
            for revision in restored.spec_revisions:
                values = {"run_id": run.id, **revision}
                tx.insert(insert_sql("spec_revisions", values), values)
            for table, rows in (
                ("attempts", restored.attempts),
                ("checkpoints", restored.checkpoints),
                ("evaluations", restored.evaluations),
            ):
                for row in rows:
                    values = {k: v for k, v in row.items() if k != "session_index"}
                    values["session_id"] = ids[row["session_index"]]
                    if table == "attempts":
                        values["run_id"] = run.id
                    tx.insert(insert_sql(table, values), values)
            self._sync_manifest(tx, run.id)
        return run.id

    # ---- the run folder's manifest -----------------------------------------------------------

    def write_manifest(self, run_id: str) -> None:
        """Write the run's `run.json` from its rows (the registry also does after every change)."""
        with self._transaction(write=True) as tx:
            self._sync_manifest(tx, run_id)

    def _sync_manifest(self, tx: Transaction, run_id: str) -> None:
        """Rewrite the run's manifest. Writes that change the run's rows lock it first (`lock_run`);
        locking here again costs nothing then, and covers a caller that wrote nothing before."""
        lock_run(tx, run_id)
        manifest.write_from_rows(tx, self.home, run_id)


def _unused_run_id(tx: Transaction, created_at: float | None = None) -> str:
    """A new run id no run in the registry holds. An id's random part is 3 characters a second, so
    runs created in the same second (a search's trials, an import of many folders) can draw the
    same one; this draws again, in the transaction that inserts the run."""
    while True:
        run_id = new_run_id(created_at)
        if not tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": run_id}):
            return run_id

"""Statuses as they are, not only as stored: the one place that says what a run's and a session's
status is.

A process that is killed (SIGKILL, OOM, a lost node) records nothing, so "crashed" is computed on
read, never written: a stored "running" session whose heartbeat is older than
`stale_after_seconds()`, or that ran on this host under a pid that no longer exists, is crashed; so is
a "pending" session whose launcher (runs.host/pid) is gone from this host, or that has shown no
sign of life (its heartbeat, else the run's creation) for as long. Reads need no lock and no write.

Work that is done stays done, whatever happens to the process after: a "running" session whose
final snapshot (at or past the run's max_frame) is registered is finished (its process is
recording its end, or died before it could; the row's frame, from the last heartbeat, may lag:
the snapshot is the proof, not the frame), and a stored "running" run whose sessions have all
ended takes the status its sessions give it (its launcher died before closing the row, or is
closing it now). Only a run with a session that is neither alive nor done is crashed.

A search's driver follows the same rule as a session (`Liveness.alive`): it heartbeats into its
row, and a stored-running search whose heartbeat is stale, or whose driver's pid is gone from this
host, is crashed, whichever host it ran on.

Time is the database's clock (`Transaction.now()`), never this host's: heartbeats are stamped and
judged by the same clock, so hosts with skewed clocks cannot make each other's sessions look dead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rlrun import testhooks
from rlrun.registry.records import CRASHED, ENDED, RunRecord, SearchRecord, SessionRecord


def heartbeat_seconds() -> float:
    """How often sessions and search drivers heartbeat (seconds) ... (read when asked, not when
    this module is imported: a test hook set later, in a process that imported rlrun long before,
    still counts)."""
    return testhooks.heartbeat_seconds(3.0)


def stale_after_seconds() -> float:
    """... and after how long without one a session or driver is reported crashed."""
    return testhooks.stale_after_seconds(30.0)


# A session's final snapshot: the snapshot kinds are joined with "+" and "final" comes last.
FINAL_KIND_SQL = "(c.kind = 'final' OR c.kind LIKE '%+final')"
# Whether session `s` of run `r` registered its final snapshot at or past the run's target.
FINAL_REACHED_SQL = (
    f"EXISTS (SELECT 1 FROM checkpoints c WHERE c.session_id = s.id AND c.frame >= r.max_frame AND {FINAL_KIND_SQL})"
)


# Which ended session status decides a run's first: one failure fails the run, else one stop.
_PRECEDENCE = ("failed", "preempted")


def run_status(session_statuses: Iterable[str]) -> str:
    """What a run's sessions make of it: failed when one failed, else preempted when one was
    stopped, finished when all finished, else running (work remains, or a session crashed and
    the run waits for `rlrun resume`)."""
    statuses = set(session_statuses)
    for status in _PRECEDENCE:
        if status in statuses:
            return status
    return "finished" if statuses == {"finished"} else "running"


# A session of run `r` that is done: ended, or running with its final snapshot registered.
_SESSION_DONE_SQL = (
    f"(s.status IN ('finished', 'failed', 'preempted') OR (s.status = 'running' AND {FINAL_REACHED_SQL}))"
)


def _any_session(condition: str) -> str:
    return f"EXISTS (SELECT 1 FROM sessions s WHERE s.run_id = r.id AND {condition})"


# The status a stored-running run `r` is settled at when every session is done (run_status
# rendered in SQL, same precedence; a test holds the two together), else NULL.
SETTLED_SQL = (
    "CASE WHEN r.status <> 'running' THEN NULL"  # a branch of its own: CASE is lazy, OR need not be
    f" WHEN {_any_session(f'NOT {_SESSION_DONE_SQL}')} THEN NULL"
    + "".join(f" WHEN {_any_session(f's.status = {status!r}')} THEN '{status}'" for status in _PRECEDENCE)
    + " ELSE 'finished' END"
)


def maybe_alive_sql(cutoff: str) -> str:
    """Sessions of `s JOIN runs r` that pass the time test (the pid test needs Python): a
    pre-filter in SQL, `cutoff` an SQL expression."""
    return (
        f"((s.status = 'running' AND s.heartbeat_at >= {cutoff} AND NOT {FINAL_REACHED_SQL})"
        f" OR (s.status = 'pending' AND COALESCE(s.heartbeat_at, r.created_at) >= {cutoff}))"
    )


def page_status(stored: str, settled: str | None, alive: bool) -> str:
    """A run's status as reported, from SETTLED_SQL and whether a session of it is alive: the
    shape of reported_run_status that listings use."""
    if stored != "running":
        return stored
    return settled or ("running" if alive else CRASHED)


def reported_run_status(stored: str, session_statuses: Iterable[str]) -> str:
    """A run's status as reported, from its stored status and its sessions' reported statuses.

    A stored end stands. A stored-running run is running while a session runs or waits, takes
    its sessions' verdict when every one has ended (closed by its sessions; the launcher died
    before recording it, or is recording it now), and is crashed otherwise.
    """
    if stored != "running":
        return stored
    statuses = list(session_statuses)
    if any(s in ("running", "pending") for s in statuses):
        return "running"
    if statuses and all(s in ENDED for s in statuses):
        return run_status(statuses)
    return CRASHED


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as dead)."""
    if pid <= 0:
        return True  # not a process id (0 and -1 would signal groups): cannot tell, so not dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OverflowError:
        return False  # beyond any pid
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed child that its parent has not reaped yet still answers kill(pid, 0) (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, so split after the last ")".
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] == "Z"


class Liveness:
    """One reading of the database's clock and of the host name, shared by every status computed
    in one call."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.cutoff = now - stale_after_seconds()
        self._here: str | None = None
        self._alive: dict[int, bool] = {}

    def fresh(self, timestamp: float | None) -> bool:
        return timestamp is not None and timestamp >= self.cutoff

    @property
    def here(self) -> str:
        if self._here is None:
            # The host name socket.gethostname() records (both read the kernel's node name),
            # without importing socket for it.
            self._here = os.uname().nodename
        return self._here

    def alive(self, since: float | None, host: str | None, pid: int | None) -> bool:
        """The rule of life, for sessions and search drivers alike: a sign of life (a heartbeat)
        within the limit on the database's clock, from a process not known dead on this host."""
        return self.fresh(since) and not self.dead_here(host, pid)

    def dead_here(self, host: str | None, pid: int | None) -> bool:
        """Known dead: it ran on this host and its pid is gone. Other hosts cannot be checked."""
        if pid is None or host != self.here:
            return False
        if pid not in self._alive:
            self._alive[pid] = pid_alive(pid)
        return not self._alive[pid]

    def session_status(
        self,
        status: str,
        host: str | None,
        pid: int | None,
        heartbeat_at: float | None,
        run_host: str | None,
        run_pid: int | None,
        run_created_at: float,
        final: bool = False,
    ) -> str:
        """`final`: the session registered its final snapshot (FINAL_REACHED_SQL), so its work is
        done and durable whatever became of its process: only the row's end is missing."""
        if status == "running":
            if final:
                return "finished"
            return status if self.alive(heartbeat_at, host, pid) else CRASHED
        if status == "pending":
            since = heartbeat_at if heartbeat_at is not None else run_created_at
            return status if self.alive(since, run_host, run_pid) else CRASHED
        return status

    def search_of(self, search: SearchRecord) -> SearchRecord:
        """A search as it is: a stored-running one whose driver stopped heartbeating (killed, its
        host lost, frozen), or ran on this host under a pid that is gone, is crashed. A search
        stored before searches heartbeat counts from its creation."""
        if search.status != "running":
            return search
        since = search.heartbeat_at if search.heartbeat_at is not None else search.created_at
        return search if self.alive(since, search.host, search.pid) else search._replace(status=CRASHED)

    def session_of(self, session: SessionRecord, run: RunRecord, final: bool = False) -> str:
        return self.session_status(
            session.status,
            session.host,
            session.pid,
            session.heartbeat_at,
            run.host,
            run.pid,
            run.created_at,
            final,
        )

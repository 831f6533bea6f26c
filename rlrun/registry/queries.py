"""Reads: listings with their filters and sort orders, a run with everything recorded about it,
sessions, checkpoints and spec revisions. Read-only: nothing here writes, locks or changes a
file. Statuses are reported as they are (`rlrun.registry.liveness`), not only as stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlrun import paths
from rlrun.errors import RunReferenceError
from rlrun.refs import RunFilter, like_pattern
from rlrun.registry import records
from rlrun.registry.database import Connected, Transaction, clock_sql
from rlrun.registry.liveness import (
    FINAL_REACHED_SQL,
    SETTLED_SQL,
    Liveness,
    maybe_alive_sql,
    page_status,
    reported_run_status,
    stale_after_seconds,
)
from rlrun.registry.records import (
    ATTEMPT_SELECT,
    CHECKPOINT_SELECT,
    CRASHED,
    EVALUATION_SELECT,
    LINEAGE_SELECT,
    LISTED_RUN_STATUSES,
    NEWEST_FIRST,
    REVISION_SELECT,
    RUN_COLUMNS,
    RUN_SELECT,
    SEARCH_COLUMNS,
    SEARCH_SELECT,
    SESSION_SELECT,
    TRIAL_SELECT,
    AttemptRecord,
    CheckpointRecord,
    EvaluationRecord,
    LineageRecord,
    RunDetail,
    RunRecord,
    RunSummary,
    SearchDetail,
    SearchRecord,
    SessionRecord,
    SpecRevisionRecord,
    TrialRecord,
    attempt_record,
    in_list,
)

# A page row: the run, its frames done over all sessions, its best score, its settled status.
PageRow = tuple[RunRecord, int, float | None, str | None, int, float | None]

# A run's training time: the session whose attempts add up to the most time (sessions train side by
# side), each attempt from its start to its end, or to now while it is open.
# The database's clock, as attempts are stamped with it.
_TRAINING_SECONDS_SQL = (
    "(SELECT MAX(t.busy) FROM (SELECT SUM(COALESCE(a.ended_at, {now}) - a.started_at) AS busy"
    " FROM attempts a WHERE a.run_id = r.id GROUP BY a.session_id) t)"
)

# A session's progress as `ls` counts it: the further of its last heartbeat's frame and its newest
# complete snapshot's. Heartbeats come every few seconds, snapshots on their own cadence, so after a
# kill -9 the newest snapshot often stands beyond the last heartbeat, and that work is not lost: a
# resume continues from it. (CASE, not MAX(a, b) or GREATEST: both databases read it alike.)
_NEWEST_SNAPSHOT_SQL = "(SELECT MAX(c.frame) FROM checkpoints c WHERE c.session_id = s.id)"
_PROGRESS_SQL = f"CASE WHEN {_NEWEST_SNAPSHOT_SQL} > s.frame THEN {_NEWEST_SNAPSHOT_SQL} ELSE s.frame END"

# Sessions with whether each registered its final snapshot (see liveness.FINAL_REACHED_SQL).
_SESSIONS_OF_RUN = (
    f"SELECT {SESSION_SELECT}, (s.status = 'running' AND {FINAL_REACHED_SQL}) AS final"
    " FROM sessions s JOIN runs r ON r.id = s.run_id WHERE s.run_id = :run_id"
)


# Whether the run of session :session_id was asked to stop (`Writes.request_stop`).
STOP_ASKED_SQL = (
    "SELECT 1 FROM sessions s JOIN runs r ON r.id = s.run_id"
    " WHERE s.id = :session_id AND r.stop_requested_at IS NOT NULL"
)


def run_by_id(tx: Transaction, run_id: str) -> RunRecord:
    found = tx.rows(f"SELECT {RUN_SELECT} FROM runs r WHERE r.id = :id", {"id": run_id})
    if not found:
        raise RunReferenceError(f"no run with id {run_id!r}; see `rlrun ls`")
    return RunRecord(*found[0])


def sessions_with_final(
    tx: Transaction, run_id: str, condition: str = "1 = 1", params: dict[str, Any] | None = None
) -> list[tuple[SessionRecord, bool]]:
    rows = tx.rows(f"{_SESSIONS_OF_RUN} AND {condition} ORDER BY s.session_index", {"run_id": run_id, **(params or {})})
    return [(SessionRecord(*row[:-1]), bool(row[-1])) for row in rows]


def checkpoints_where(tx: Transaction, condition: str, params: dict[str, Any]) -> list[CheckpointRecord]:
    query = (
        f"SELECT {CHECKPOINT_SELECT} FROM checkpoints c JOIN sessions s ON c.session_id = s.id"
        f" WHERE {condition} ORDER BY s.run_id, s.session_index, c.frame, c.id"
    )
    return [CheckpointRecord(*row) for row in tx.rows(query, params)]


def evaluations_where(tx: Transaction, condition: str, params: dict[str, Any]) -> list[EvaluationRecord]:
    query = (
        f"SELECT {EVALUATION_SELECT} FROM evaluations e JOIN sessions s ON e.session_id = s.id"
        f" WHERE {condition} ORDER BY s.session_index, e.frame, e.id"
    )
    return [EvaluationRecord(*row) for row in tx.rows(query, params)]


def revisions_of(tx: Transaction, run_id: str) -> list[SpecRevisionRecord]:
    query = f"SELECT {REVISION_SELECT} FROM spec_revisions v WHERE v.run_id = :id ORDER BY v.revision"
    return [SpecRevisionRecord(*row) for row in tx.rows(query, {"id": run_id})]


def attempts_of(tx: Transaction, run_id: str) -> list[AttemptRecord]:
    query = (
        f"SELECT {ATTEMPT_SELECT} FROM attempts a JOIN sessions s ON a.session_id = s.id"
        " WHERE a.run_id = :id ORDER BY a.started_at, a.id"
    )
    return [attempt_record(row) for row in tx.rows(query, {"id": run_id})]


# SQL integers are 64-bit; a page bound past any registry's size (`latest~99999999999999999999`,
# `ls -n 1e20`) means what this one does.
_LARGEST_BOUND = 2**62


def _window(dialect: str, limit: int | None, offset: int) -> tuple[str, dict[str, Any]]:
    """LIMIT / OFFSET clauses (SQLite needs a LIMIT before an OFFSET, PostgreSQL takes none)."""
    if limit is None and not offset:
        return "", {}
    offset = min(offset, _LARGEST_BOUND)
    limit = None if limit is None else min(limit, _LARGEST_BOUND)
    if limit is None:
        return (" LIMIT -1 OFFSET :offset" if dialect == "sqlite" else " OFFSET :offset"), {"offset": offset}
    return " LIMIT :limit OFFSET :offset", {"limit": limit, "offset": offset}


def as_filter(value: RunFilter | str | None) -> RunFilter:
    """A filter from a filter, a status (the older calling convention) or nothing."""
    if isinstance(value, RunFilter):
        return value
    if value is not None and value not in LISTED_RUN_STATUSES:
        raise ValueError(f"status {value!r} is not one of {', '.join(LISTED_RUN_STATUSES)}")
    return RunFilter(status=value)


class Reads(Connected):
    """The registry's reads (mixed into `Registry`)."""

    def name_exists(self, name: str) -> str | None:
        """The id of the run holding `name`, or None."""
        with self._transaction(write=False) as tx:
            found = tx.rows("SELECT id FROM runs WHERE name = :name", {"name": name})
        return found[0][0] if found else None

    def trial_runs(self, run_ids: Sequence[str]) -> set[str]:
        """Which of these runs train a search's trial (or a population member's segment)."""
        found: set[str] = set()
        with self._transaction(write=False) as tx:
            for start in range(0, len(run_ids), records.IN_LIMIT):
                listed, params = in_list("r", list(run_ids[start : start + records.IN_LIMIT]))
                found |= {row[0] for row in tx.rows(f"SELECT run_id FROM trials WHERE run_id IN ({listed})", params)}
        return found

    def count_runs(self, filters: RunFilter | str | None = None) -> int:
        """How many runs `list_runs(filters=filters, limit=None)` would list (a string is a status)."""
        chosen = as_filter(filters)
        with self._transaction(write=False) as tx:
            where, params = self._where(tx, chosen)
            return int(tx.rows(f"SELECT COUNT(*) FROM runs r WHERE {where}", params)[0][0])

    def list_runs(
        self, *, status: str | None = None, limit: int | None = 20, offset: int = 0, filters: RunFilter | None = None
    ) -> list[RunSummary]:
        """Runs newest first (or as `filters.sort` says) with session aggregates, in one query,
        plus one small liveness query when the page holds stored-running runs whose sessions
        have not all ended (see rlrun.registry.liveness).

        Sorted by start, the newest runs come straight off the (created_at, id) index and only
        they are aggregated, so the cost follows the page size, not the size of the registry. A
        status filter applies to the status as reported: "running" and "crashed" are told apart
        by first finding which stored-running runs are still alive.
        """
        chosen = as_filter(filters or status)
        with self._transaction(write=False) as tx:
            rows = self._page(tx, chosen, limit, offset)
            alive = self._alive_on_page(tx, chosen, rows)
        home = paths.home_address(self.home)  # of the runs recorded before rlrun kept each run's
        return [
            RunSummary(
                row=offset + i + 1,
                id=run.id,
                name=run.name,
                spec_name=run.spec_name,
                algorithm=run.algorithm,
                env_id=run.env_id,
                status=chosen.status or page_status(run.status, settled, run.id in alive),
                num_sessions=run.num_sessions,
                frames_done=frames,
                frames_target=run.max_frame * run.num_sessions,
                best_eval=best,
                created_at=run.created_at,
                finished_at=run.finished_at,
                session_frame=slowest,
                training_seconds=busy,
                home=run.home or home,
                slurm_jobs=run.slurm_jobs,
                origin=run.origin,
            )
            for i, (run, frames, best, settled, slowest, busy) in enumerate(rows)
        ]

    def _page(self, tx: Transaction, filters: RunFilter, limit: int | None, offset: int) -> list[PageRow]:
        where, params = self._where(tx, filters)
        window, bounds = _window(tx.dialect, limit, offset)
        params.update(bounds)
        # Correlated sub-selects use the sessions' (run_id, session_index) index run by run, so the
        # cost follows the page when sorted by start, and stays linear for a whole listing.
        aggregates = (
            f"(SELECT COALESCE(SUM({_PROGRESS_SQL}), 0) FROM sessions s WHERE s.run_id = r.id) AS frames,"
            " (SELECT MAX(s.best_eval) FROM sessions s WHERE s.run_id = r.id) AS best,"
            f" {SETTLED_SQL} AS settled,"
            f" (SELECT COALESCE(MIN({_PROGRESS_SQL}), 0) FROM sessions s WHERE s.run_id = r.id) AS slowest,"
            f" {_TRAINING_SECONDS_SQL.format(now=clock_sql(tx.dialect))} AS busy"
        )
        if filters.sort == "started":
            query = f"SELECT {RUN_SELECT}, {aggregates} FROM runs r WHERE {where} ORDER BY {NEWEST_FIRST}{window}"
        else:
            # Sorting on aggregates needs them for every run that passes the filters.
            order = "(p.best IS NULL), p.best DESC" if filters.sort == "best" else "p.frames DESC"
            query = (
                f"SELECT * FROM (SELECT {RUN_SELECT}, {aggregates} FROM runs r WHERE {where}) p"
                f" ORDER BY {order}, p.created_at DESC, p.id DESC{window}"
            )
        n = len(RUN_COLUMNS)
        return [
            (RunRecord(*row[:n]), int(row[n]), row[n + 1], row[n + 2], int(row[n + 3]), row[n + 4])
            for row in tx.rows(query, params)
        ]

    def _alive_on_page(self, tx: Transaction, filters: RunFilter, rows: Sequence[PageRow]) -> set[str]:
        if filters.status is not None:
            return set()  # every row has the status asked for
        undecided = [run.id for run, _, _, settled, _, _ in rows if run.status == "running" and settled is None]
        if not undecided:
            return set()
        # A long IN list would hit SQLite's variable limit; all running runs are few.
        return self._live_runs(tx, undecided if len(undecided) <= records.IN_LIMIT else None)

    def _where(self, tx: Transaction, filters: RunFilter) -> tuple[str, dict[str, Any]]:
        """The filters as a condition on `runs r` and its parameters."""
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if filters.status in ("running", CRASHED):
            alive = sorted(self._live_runs(tx))
            clauses.append(f"r.status = 'running' AND {SETTLED_SQL} IS NULL")
            if alive:
                listed, ids = in_list("alive", alive)
                clauses.append(f"r.id {'IN' if filters.status == 'running' else 'NOT IN'} ({listed})")
                params.update(ids)
            elif filters.status == "running":
                clauses.append("1 = 0")
        elif filters.status is not None:
            clauses.append(f"(r.status = :status OR (r.status = 'running' AND {SETTLED_SQL} = :status))")
            params["status"] = filters.status
        for column, value in (("algorithm", filters.algorithm), ("env_id", filters.env), ("spec_name", filters.spec)):
            if value is not None:
                clauses.append(f"LOWER(r.{column}) = LOWER(:{column})")
                params[column] = value
        if filters.name is not None:
            operator = "LIKE" if tx.dialect == "sqlite" else "ILIKE"  # both ignore case
            clauses.append(f"r.name {operator} :name ESCAPE '\\'")
            params["name"] = like_pattern(filters.name)
        if filters.since is not None:
            clauses.append("r.created_at >= :since")
            params["since"] = filters.since
        return " AND ".join(clauses) or "1 = 1", params

    def _live_runs(self, tx: Transaction, among: Sequence[str] | None = None) -> set[str]:
        """The ids of the stored-running runs (of `among`) with a session running or pending.

        SQL keeps only the sessions that pass the time test, by the database's clock (read in
        the same query); Python checks their pids.
        """
        clock = clock_sql(tx.dialect)
        query = (
            f"SELECT s.run_id, s.status, s.host, s.pid, s.heartbeat_at, r.host, r.pid, r.created_at, {clock}"
            " FROM sessions s JOIN runs r ON s.run_id = r.id WHERE r.status = 'running'"
            f" AND {maybe_alive_sql(f'({clock} - {stale_after_seconds()})')}"
        )
        params: dict[str, Any] = {}
        if among is not None:
            listed, ids = in_list("among", among)
            query += f" AND r.id IN ({listed})"
            params.update(ids)
        rows = tx.rows(query, params)
        if not rows:
            return set()
        live = Liveness(float(rows[0][-1]))
        alive: set[str] = set()
        for run_id, status, host, pid, beat, run_host, run_pid, created, _ in rows:
            if (
                run_id not in alive
                and live.session_status(status, host, pid, beat, run_host, run_pid, created) != CRASHED
            ):
                alive.add(run_id)
        return alive

    def sessions_sharing_this_host(self, sessions: int, besides_run: str | None = None) -> int:
        """The sessions that share this machine's cores: a run's own `sessions` and every other
        run's session running on this host now (a heartbeat within the limit by the database's
        clock, its pid alive), those of `besides_run` left out (the run's own, counted already).
        What `env.workers: "auto"` and `meta.torch_threads: "auto"` divide the cores by."""
        with self._transaction(write=False) as tx:
            clock = clock_sql(tx.dialect)
            rows = tx.rows(
                f"SELECT s.status, s.host, s.pid, s.heartbeat_at, r.host, r.pid, r.created_at, {clock}"
                " FROM sessions s JOIN runs r ON s.run_id = r.id WHERE s.status = 'running'"
                f" AND s.run_id <> :besides AND {maybe_alive_sql(f'({clock} - {stale_after_seconds()})')}",
                {"besides": besides_run or ""},
            )
        if not rows:
            return sessions
        live = Liveness(float(rows[0][-1]))
        return sessions + sum(row[1] == live.here and live.session_status(*row[:-1]) != CRASHED for row in rows)

    def live_run_ids(self) -> set[str]:
        """The runs that are running now (a live session): maintenance leaves their files alone."""
        with self._transaction(write=False) as tx:
            return self._live_runs(tx)

    def get_run(self, run_id: str) -> RunDetail:
        """A run with everything recorded about it; statuses as reported (see rlrun.registry.liveness).
        Retried (a launcher reads it when its sessions end)."""
        where = {"run_id": run_id}

        def read(tx: Transaction) -> RunDetail:
            live = Liveness(tx.now())
            run = run_by_id(tx, run_id)
            sessions = sessions_with_final(tx, run_id)
            statuses = [live.session_of(s, run, final) for s, final in sessions]
            return RunDetail(
                run=run._replace(status=reported_run_status(run.status, statuses)),
                sessions=[s._replace(status=status) for (s, _), status in zip(sessions, statuses, strict=True)],
                checkpoints=checkpoints_where(tx, "s.run_id = :run_id", where),
                evaluations=evaluations_where(tx, "s.run_id = :run_id", where),
                spec_revisions=revisions_of(tx, run_id),
                attempts=attempts_of(tx, run_id),
                forks=[
                    fork
                    for (fork,) in tx.rows(
                        "SELECT id FROM runs WHERE parent_id = :run_id ORDER BY created_at, id", where
                    )
                ],
            )

        return self._read(read)

    def evaluations_of(self, run_id: str, kind: str) -> list[EvaluationRecord]:
        """The run's evaluations of one kind (`train`: the session's own), in each session's frame
        order: what a waiting launcher polls, without reading the whole run each time."""
        where = {"run_id": run_id, "kind": kind}
        return self._read(lambda tx: evaluations_where(tx, "s.run_id = :run_id AND e.kind = :kind", where))

    def latest_spec(self, run_id: str) -> SpecRevisionRecord:
        """The run's newest spec revision (the one training continues under)."""
        with self._transaction(write=False) as tx:
            found = tx.rows(
                f"SELECT {REVISION_SELECT} FROM spec_revisions v WHERE v.run_id = :id ORDER BY v.revision DESC LIMIT 1",
                {"id": run_id},
            )
        if not found:
            raise RunReferenceError(f"no run with id {run_id!r}; see `rlrun ls`")
        return SpecRevisionRecord(*found[0])

    def latest_specs(self, run_ids: Sequence[str] | None = None) -> dict[str, str]:
        """Every run's newest spec (JSON text) by run id, or those of `run_ids`, in one query
        (`rlrun gc`; `ls`, for the phase of the runs that learn from a dataset)."""
        where, params = "", dict[str, Any]()
        if run_ids is not None and len(run_ids) <= records.IN_LIMIT:
            listed, params = in_list("run", list(run_ids))
            where = f" WHERE v.run_id IN ({listed})"
        with self._transaction(write=False) as tx:
            rows = tx.rows(
                "SELECT v.run_id, v.spec_json FROM spec_revisions v JOIN (SELECT run_id, MAX(revision) AS revision"
                " FROM spec_revisions GROUP BY run_id) m ON m.run_id = v.run_id AND m.revision = v.revision" + where,
                params,
            )
        wanted = None if run_ids is None else set(run_ids)
        return {run_id: spec for run_id, spec in rows if wanted is None or run_id in wanted}

    def get_session(self, run_id: str, index: int) -> SessionRecord:
        """One session; its status as reported (see rlrun.registry.liveness)."""
        with self._transaction(write=False) as tx:
            found = sessions_with_final(tx, run_id, "s.session_index = :index", {"index": index})
            if not found:
                raise RunReferenceError(f"run {run_id} has no session s{index}; see `rlrun show`")
            (session, final), run = found[0], run_by_id(tx, run_id)
            return session._replace(status=Liveness(tx.now()).session_of(session, run, final))

    def silence(self, session_id: int) -> tuple[int, float | None]:
        """The session's lease token, and how long (seconds, by the database's clock) since its
        running attempt last heartbeat (None when it is not running): a cluster executor presumes
        an attempt lost when it stays silent past `stale_after_seconds()` (see `liveness`)."""

        def look(tx: Transaction) -> tuple[list[Any], float]:
            query = "SELECT lease, status, heartbeat_at FROM sessions WHERE id = :id"
            return tx.rows(query, {"id": session_id}), tx.now()

        found, now = self._read(look)  # the driver polls this: a registry blip must not end the run
        if not found:
            return 0, None
        lease, status, beat = found[0]
        return int(lease), (now - beat if status == "running" and beat is not None else None)

    def stop_requested(self, run_id: str) -> bool:
        """Whether `rlrun stop` asked the run to stop since it last started (a supervisor polls
        this, riding out a registry blip as `silence` does)."""
        found = self._read(lambda tx: tx.rows("SELECT stop_requested_at FROM runs WHERE id = :id", {"id": run_id}))
        return bool(found) and found[0][0] is not None

    def search_stop_requested(self, search_id: str) -> bool:
        """Whether `rlrun stop search:` asked the search to stop since it last started (its
        driver's heartbeat polls this)."""
        found = self._read(
            lambda tx: tx.rows("SELECT stop_requested_at FROM searches WHERE id = :id", {"id": search_id})
        )
        return bool(found) and found[0][0] is not None

    def supervisor_of(self, run_id: str) -> str | None:
        """Who supervises the run on a cluster (None: its launcher, or nobody); a detached
        supervisor polls this to learn that a resume took the run over."""
        found = self._read(lambda tx: tx.rows("SELECT supervisor FROM runs WHERE id = :id", {"id": run_id}))
        return found[0][0] if found else None

    def live_session(self, run_id: str) -> SessionRecord | None:
        """A session of the run whose process is still at work (fresh heartbeat and, on this host,
        a live pid), or None. `rlrun resume` refuses a run that has one."""
        with self._transaction(write=False) as tx:
            live = Liveness(tx.now())
            run = run_by_id(tx, run_id)
            rows = tx.rows(
                f"SELECT {SESSION_SELECT} FROM sessions s WHERE s.run_id = :run_id AND s.status = 'running'"
                " ORDER BY s.session_index",
                {"run_id": run_id},
            )
        for row in rows:
            session = SessionRecord(*row)
            if live.session_of(session, run) == "running":  # one finishing counts: its process is at work
                return session
        return None

    def checkpoints(self, session_id: int) -> list[CheckpointRecord]:
        """The checkpoints of one session, oldest frame first. Retried (a session reads it as it
        trains, for its retention rule)."""
        return self._read(lambda tx: checkpoints_where(tx, "s.id = :session_id", {"session_id": session_id}))

    def all_checkpoints(self) -> list[CheckpointRecord]:
        """Every checkpoint, by run, session and frame (`rlrun gc`)."""
        with self._transaction(write=False) as tx:
            return checkpoints_where(tx, "1 = 1", {})

    def run_ids(self) -> set[str]:
        """The id of every run (`rlrun db rebuild`)."""
        with self._transaction(write=False) as tx:
            return {run_id for (run_id,) in tx.rows("SELECT id FROM runs")}

    def distinct(self, column: str) -> list[str]:
        """The values of a run column (algorithm, env_id or spec_name), to suggest filters."""
        if column not in ("algorithm", "env_id", "spec_name"):
            raise ValueError(f"not a filterable column: {column}")
        with self._transaction(write=False) as tx:
            return [value for (value,) in tx.rows(f"SELECT DISTINCT {column} FROM runs ORDER BY {column}")]

    # -- searches --------------------------------------------------------------------------------

    def get_search(self, search_id: str) -> SearchDetail:
        """A search with its trials by number; its status as reported (`Liveness.search_of`)."""
        with self._transaction(write=False) as tx:
            live = Liveness(tx.now())
            found = tx.rows(f"SELECT {SEARCH_SELECT} FROM searches q WHERE q.id = :id", {"id": search_id})
            if not found:
                raise RunReferenceError(f"no search with id {search_id!r}; see `rlrun ls --searches`")
            trials = tx.rows(
                f"SELECT {TRIAL_SELECT} FROM trials t WHERE t.search_id = :id ORDER BY t.number", {"id": search_id}
            )
        return SearchDetail(live.search_of(SearchRecord(*found[0])), [TrialRecord(*row) for row in trials])

    def trial_of(self, search_id: str, number: int) -> TrialRecord:
        """Trial `number` of a search."""
        with self._transaction(write=False) as tx:
            found = tx.rows(
                f"SELECT {TRIAL_SELECT} FROM trials t WHERE t.search_id = :id AND t.number = :number",
                {"id": search_id, "number": number},
            )
        if not found:
            raise RunReferenceError(f"search {search_id} has no trial {number}")
        return TrialRecord(*found[0])

    def search_ids(self) -> set[str]:
        with self._transaction(write=False) as tx:
            return {search_id for (search_id,) in tx.rows("SELECT id FROM searches")}

    def get_lineage(self, search_id: str) -> list[LineageRecord]:
        """A population-based training search's segments, by generation and member (none for
        another search)."""
        with self._transaction(write=False) as tx:
            rows = tx.rows(
                f"SELECT {LINEAGE_SELECT} FROM lineage l WHERE l.search_id = :id ORDER BY l.generation, l.member",
                {"id": search_id},
            )
        return [LineageRecord(*row) for row in rows]

    def search_of(self, run_id: str) -> str | None:
        """The search whose trial the run is (None: a run of its own)."""
        with self._transaction(write=False) as tx:
            found = tx.rows("SELECT search_id FROM trials WHERE run_id = :run_id", {"run_id": run_id})
        return str(found[0][0]) if found else None

    def list_searches(self, limit: int | None = 20) -> list[tuple[SearchRecord, int, float | None]]:
        """Searches newest first, each with its count of ended trials and its best value."""
        window, bounds = _window("sqlite", limit, 0) if limit is not None else ("", {})
        with self._transaction(write=False) as tx:
            live = Liveness(tx.now())
            rows = tx.rows(
                f"SELECT {SEARCH_SELECT}, (SELECT COUNT(*) FROM trials t WHERE t.search_id = q.id"
                " AND t.state <> 'running'), (SELECT MAX(t.value) FROM trials t WHERE t.search_id = q.id"
                f" AND t.state = 'complete') FROM searches q ORDER BY q.created_at DESC, q.id DESC{window}",
                bounds,
            )
        n = len(SEARCH_COLUMNS)
        return [(live.search_of(SearchRecord(*row[:n])), int(row[n]), row[n + 1]) for row in rows]

"""A search's writes (`rlrun search`): the search, its trials and a PBT search's lineage, each one
short transaction that also rewrites the search's manifest (`searches/<id>.json`) when the change
is one the manifest holds, and the trial's run's when a trial's link changed.

Built on the run writes (`rlrun.registry.store.Writes`), which it extends: a trial is a run, and a
search stops its trials through their runs (`request_stop`). Two run writes touch a search in
turn, and call in here: a new run records its trial (`create_run(trial=...)`, `_trains_trial`) and
a deleted run's trials are unlinked (`delete_run`, `_sync_search_manifest`).
"""

from __future__ import annotations

import math
from typing import Any

from rlrun.errors import BadInput, RegistryError
from rlrun.registry import manifest
from rlrun.registry.database import Conflict, Transaction
from rlrun.registry.records import (
    LINEAGE_COLUMNS,
    SEARCH_COLUMNS,
    SEARCH_STATUSES,
    TRIAL_COLUMNS,
    TRIAL_STATES,
    LineageRecord,
    SearchRecord,
    TrialLink,
    TrialRecord,
    insert_sql,
)
from rlrun.registry.store import Writes, check_status, lock_run


def lock_search(tx: Transaction, search_id: str) -> None:
    """Serialise writers of one search on a server, as `lock_run` does a run's: its manifest is
    rewritten (and uploaded) from its rows in each, and the last to commit must write last. Taken
    before the transaction inserts a trial, for `lock_run`'s reason."""
    if tx.dialect != "sqlite":
        tx.rows("SELECT id FROM searches WHERE id = :id FOR UPDATE", {"id": search_id})


class SearchWrites(Writes):
    """The registry's writes of searches and trials (mixed into `Registry`, over the run writes).

    Every write that changes what a search's manifest holds rewrites it in the same transaction
    (`_sync_search_manifest`), as run writes do the run's; heartbeats do not (they say only that
    the driver lives, which a rebuilt registry could not use)."""

    def create_search(
        self,
        *,
        search_id: str,
        name: str | None,
        spec_name: str,
        spec_json: str,
        space_json: str,
        settings_json: str,
        host: str | None,
        pid: int | None,
    ) -> SearchRecord:
        """Insert a running search (no trials yet)."""
        try:
            with self._transaction(write=True) as tx:
                if name is not None and (
                    holder := tx.rows("SELECT id FROM searches WHERE name = :name", {"name": name})
                ):
                    raise BadInput(
                        f"a search named {name!r} already exists (id {holder[0][0]}); choose another"
                        f" --name, or continue it with `rlrun resume search:{name}`"
                    )
                search = SearchRecord(
                    id=search_id,
                    name=name,
                    spec_name=spec_name,
                    spec_json=spec_json,
                    space_json=space_json,
                    settings_json=settings_json,
                    status="running",
                    host=host,
                    pid=pid,
                    error=None,
                    importance_json=None,
                    created_at=tx.now(),
                    finished_at=None,
                    heartbeat_at=tx.now(),
                )
                tx.execute(insert_sql("searches", SEARCH_COLUMNS), search._asdict())
                self._sync_search_manifest(tx, search_id)
        except Conflict as error:
            raise BadInput(f"search id {search_id!r} or name {name!r} is already taken") from error
        return search

    def reopen_search(self, search_id: str, *, host: str | None, pid: int | None, driver: str | None = None) -> None:
        """Mark a search running again (`rlrun resume search:...`), driven by this process, with no
        stop asked of it. `driver`: this process is a detached driver, the cluster actor so named
        (None: a command drives it, whatever drove it before)."""
        with self._transaction(write=True) as tx:
            count = tx.execute(
                "UPDATE searches SET status = 'running', host = :host, pid = :pid, error = NULL,"
                " finished_at = NULL, heartbeat_at = :now, stop_requested_at = NULL, driver = :driver"
                " WHERE id = :id",
                {"host": host, "pid": pid, "now": tx.now(), "id": search_id, "driver": driver},
            )
            if count == 0:
                raise RegistryError(f"no search with id {search_id} in the registry")
            self._sync_search_manifest(tx, search_id)

    def request_search_stop(self, search_id: str) -> float | None:
        """Ask a search to stop: its driver starts no more trials, and its trials' runs that are
        running are asked to stop (`request_stop`: their sessions stop at their next heartbeat with
        a snapshot). Safe to repeat: the first request's time stands, and is returned (None: this
        call made the request); each call asks again of the trials running then, so the driver,
        calling it at each beat once it has seen the request, stops a trial it started meanwhile."""

        def record(tx: Transaction) -> float | None:  # run again, it finds its own request
            lock_search(tx, search_id)
            found = tx.rows("SELECT stop_requested_at FROM searches WHERE id = :id", {"id": search_id})
            if not found:
                raise RegistryError(f"no search with id {search_id} in the registry")
            (asked,) = found[0]
            # a search that has ended since the caller looked has nothing to stop: nothing written
            if asked is None and tx.execute(
                "UPDATE searches SET stop_requested_at = :now WHERE id = :id AND status = 'running'",
                {"now": tx.now(), "id": search_id},
            ):
                self._sync_search_manifest(tx, search_id)
            return float(asked) if asked is not None else None

        earlier = self._write(record)
        running = self._read(
            lambda tx: tx.rows(
                "SELECT r.id FROM trials t JOIN runs r ON r.id = t.run_id"
                " WHERE t.search_id = :id AND t.state = 'running'"
                " AND r.status = 'running' AND r.stop_requested_at IS NULL",
                {"id": search_id},
            )
        )
        for (run_id,) in running:  # each its own short transaction: a run's lock is never held with the search's
            self.request_stop(run_id)
        return earlier

    def heartbeat_search(self, search_id: str, *, host: str | None, pid: int | None) -> bool:
        """The driver's sign of life, stamped with the database's clock; False when the search is no
        longer this driver's (ended, or resumed by another driver since it was presumed dead).
        Retried: an UPDATE by key."""

        def record(tx: Transaction) -> bool:
            return (
                tx.execute(
                    "UPDATE searches SET heartbeat_at = :now WHERE id = :id AND status = 'running' AND host = :host"
                    " AND pid = :pid",
                    {"now": tx.now(), "id": search_id, "host": host, "pid": pid},
                )
                > 0
            )

        return bool(self._write(record))

    def finish_search(
        self, search_id: str, *, status: str, error: str | None = None, importance_json: str | None = None
    ) -> None:
        """End a search: finished, failed, preempted (stopped by a signal) or interrupted (its
        cluster was lost); with each parameter's importance when it was computed."""
        check_status(status, SEARCH_STATUSES[1:])
        with self._transaction(write=True) as tx:
            count = tx.execute(
                "UPDATE searches SET status = :status, error = :error, finished_at = :now,"
                " importance_json = :importance WHERE id = :id",
                {"status": status, "error": error, "now": tx.now(), "importance": importance_json, "id": search_id},
            )
            if count == 0:
                raise RegistryError(f"no search with id {search_id} in the registry")
            self._sync_search_manifest(tx, search_id)

    def add_trial(self, search_id: str, *, number: int, run_id: str | None, params_json: str) -> TrialRecord:
        """Record a running trial and the run that trains it (a new run records its trial itself:
        `create_run(trial=...)`; this is for a trial refused before it had a run)."""
        with self._transaction(write=True) as tx:
            if run_id is not None:
                lock_run(tx, run_id)
            lock_search(tx, search_id)
            trial = _insert_running_trial(tx, search_id, number, run_id, params_json)
            self._sync_trial_manifests(tx, search_id, run_id)
        return trial

    def _trains_trial(self, tx: Transaction, link: TrialLink, run_id: str) -> None:
        """Give trial `link` the run `run_id`: a new trial row, or the existing one (its run was
        deleted, or never got to train it) relinked. Inside the run's creation."""
        lock_search(tx, link.search_id)
        found = tx.rows(
            "SELECT id FROM trials WHERE search_id = :search_id AND number = :number",
            {"search_id": link.search_id, "number": link.number},
        )
        if found:
            tx.execute("UPDATE trials SET run_id = :run_id WHERE id = :id", {"run_id": run_id, "id": found[0][0]})
        else:
            _insert_running_trial(tx, link.search_id, link.number, run_id, link.params_json)
        self._sync_search_manifest(tx, link.search_id)

    def add_segment(
        self,
        search_id: str,
        *,
        number: int,
        params_json: str,
        member: int,
        generation: int,
        parent_member: int | None,
        parent_run_id: str | None,
        frame: int,
        mutated_json: str,
    ) -> TrialRecord:
        """Record a population-based training segment before its run exists: a running trial (no
        run yet; `link_trial` gives it one) and its lineage, in one transaction, so a decision is
        never half recorded."""
        with self._transaction(write=True) as tx:
            lock_search(tx, search_id)
            trial = _insert_running_trial(tx, search_id, number, None, params_json)
            lineage = LineageRecord(
                trial_id=trial.id,
                search_id=search_id,
                member=member,
                generation=generation,
                parent_member=parent_member,
                parent_run_id=parent_run_id,
                frame=frame,
                mutated_json=mutated_json,
            )
            tx.execute(insert_sql("lineage", LINEAGE_COLUMNS), lineage._asdict())
            self._sync_search_manifest(tx, search_id)
        return trial

    def link_trial(self, trial_id: int, run_id: str) -> None:
        """Give a trial whose run is being (re)created its new run."""
        with self._transaction(write=True) as tx:
            lock_run(tx, run_id)
            if tx.execute("UPDATE trials SET run_id = :run_id WHERE id = :id", {"run_id": run_id, "id": trial_id}) == 0:
                raise RegistryError(f"no trial with id {trial_id} in the registry")
            (search_id,) = tx.rows("SELECT search_id FROM trials WHERE id = :id", {"id": trial_id})[0]
            self._sync_trial_manifests(tx, search_id, run_id)

    def record_trial(
        self,
        trial_id: int,
        *,
        intermediate_json: str,
        system_attrs_json: str,
        state: str = "running",
        value: float | None = None,
        note: str | None = None,
    ) -> None:
        """What the search made of a trial so far: its scores at each evaluation and the pruner's
        notes; with an ending state (complete, pruned, failed), its value and why."""
        check_status(state, TRIAL_STATES, what="trial state")
        with self._transaction(write=True) as tx:
            count = tx.execute(
                "UPDATE trials SET intermediate_json = :intermediate, system_attrs_json = :attrs, state = :state,"
                " value = :value, note = :note, finished_at = :finished WHERE id = :id",
                {
                    "intermediate": intermediate_json,
                    "attrs": system_attrs_json,
                    "state": state,
                    "value": None if value is None or math.isnan(value) else value,
                    "note": note,
                    "finished": None if state == "running" else tx.now(),
                    "id": trial_id,
                },
            )
            if count == 0:
                raise RegistryError(f"no trial with id {trial_id} in the registry")
            (search_id,) = tx.rows("SELECT search_id FROM trials WHERE id = :id", {"id": trial_id})[0]
            self._sync_search_manifest(tx, search_id)

    def restore_search(
        self, search: SearchRecord, trials: list[dict[str, Any]], lineage: dict[int, dict[str, Any]] | None = None
    ) -> None:
        """Insert a search read back from its manifest (`rlrun db rebuild`) with its trials (and a
        PBT search's lineage, by trial number), in one transaction. A trial whose run is not in the
        registry keeps its record, unlinked."""
        with self._transaction(write=True) as tx:
            tx.execute(insert_sql("searches", SEARCH_COLUMNS), search._asdict())
            for trial in trials:
                values = {**trial, "search_id": search.id}
                if values["run_id"] is not None and not tx.rows(
                    "SELECT 1 FROM runs WHERE id = :id", {"id": values["run_id"]}
                ):
                    values["run_id"] = None
                trial_id = tx.insert(insert_sql("trials", values), values)
                if lineage and values["number"] in lineage:
                    line = {**lineage[values["number"]], "trial_id": trial_id, "search_id": search.id}
                    tx.execute(insert_sql("lineage", LINEAGE_COLUMNS), line)
                if values["run_id"] is not None:
                    self._sync_manifest(tx, values["run_id"])
            self._sync_search_manifest(tx, search.id)

    def _sync_trial_manifests(self, tx: Transaction, search_id: str, run_id: str | None) -> None:
        """A trial's link changed: the search's manifest and its run's both say it."""
        self._sync_search_manifest(tx, search_id)
        if run_id is not None:
            self._sync_manifest(tx, run_id)

    def _sync_search_manifest(self, tx: Transaction, search_id: str) -> None:
        """Rewrite the search's manifest (`searches/<id>.json` in the home). Writes that insert a
        trial lock the search first (`lock_search`); locking here again costs nothing then."""
        lock_search(tx, search_id)
        manifest.write_search_from_rows(tx, self.home, search_id)


def _insert_running_trial(
    tx: Transaction, search_id: str, number: int, run_id: str | None, params_json: str
) -> TrialRecord:
    """A new trial row, in the state every trial starts in (running, no scores yet)."""
    trial = TrialRecord(
        id=0,
        search_id=search_id,
        number=number,
        run_id=run_id,
        params_json=params_json,
        state="running",
        value=None,
        intermediate_json="[]",
        system_attrs_json="{}",
        note=None,
        created_at=tx.now(),
        finished_at=None,
    )
    values = {k: v for k, v in trial._asdict().items() if k != "id"}
    return trial._replace(id=tx.insert(insert_sql("trials", TRIAL_COLUMNS[1:]), values))

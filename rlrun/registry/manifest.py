"""The manifests, written and read here only: the run folder's (`run.json`) and a search's
(`searches/<id>.json` in the home).

A run's holds the run's row, its sessions, spec revisions, attempts and non-training evaluations,
and, for a search's trial, which search and trial number it trains. A search's holds the search's
row and its trials' (parameters, scores at each evaluation, the pruner's notes, end, run). The
registry rewrites each inside every write transaction that changes what it holds
(`write_from_rows`, `write_search_from_rows`), so it never lags the registry, and `rlrun db rebuild`
restores the registry from them (`read_manifest`, `read_search_manifest`; checkpoints and training
evaluations come from the snapshots, but for a foreign run's, which has none: its run.json holds them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from rlrun import paths, storage
from rlrun.registry.database import Transaction
from rlrun.registry.queries import attempts_of, evaluations_where, revisions_of
from rlrun.registry.records import (
    LINEAGE_COLUMNS,
    LINEAGE_SELECT,
    RUN_SELECT,
    SEARCH_SELECT,
    SESSION_SELECT,
    TRIAL_COLUMNS,
    TRIAL_SELECT,
    LineageRecord,
    RunRecord,
    SearchRecord,
    SessionRecord,
    TrialRecord,
)

MANIFEST = paths.RUN_MANIFEST
MANIFEST_FORMAT = 2
SEARCH_MANIFEST_FORMAT = 1


def _drop(document: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in keys}


def document_from_rows(tx: Transaction, run_id: str) -> dict[str, Any] | None:
    """The manifest of a run as its rows say, None when the run is not there."""
    found = tx.rows(f"SELECT {RUN_SELECT} FROM runs r WHERE r.id = :id", {"id": run_id})
    if not found:
        return None
    where = {"run_id": run_id}
    run = RunRecord(*found[0])
    # A foreign run (`rlrun import sb3`) has no snapshots to rebuild its training evaluations from.
    kinds = "" if run.origin is not None else " AND e.kind <> 'train'"
    return {
        "format": MANIFEST_FORMAT,
        # Not the run's home: a folder's home is wherever the folder is (one copied, moved or
        # imported would carry a stale one); `restore_run` records the home it is read in.
        "run": _drop(run.to_json(), "home"),
        "sessions": [
            _drop(SessionRecord(*row).to_json(), "id", "run_id")
            for row in tx.rows(
                f"SELECT {SESSION_SELECT} FROM sessions s WHERE s.run_id = :run_id ORDER BY s.session_index", where
            )
        ],
        "spec_revisions": [_drop(r.to_json(), "id", "run_id") for r in revisions_of(tx, run_id)],
        "attempts": [_drop(a.to_json(), "id", "run_id", "session_id") for a in attempts_of(tx, run_id)],
        "evaluations": [
            _drop(e.to_json(), "id", "run_id", "session_id")
            for e in evaluations_where(tx, f"s.run_id = :run_id{kinds}", where)
        ],
        "trial": _trial_link(tx, run_id),
    }


def _trial_link(tx: Transaction, run_id: str) -> dict[str, Any] | None:
    """The search trial this run trains, if any: enough to link it again on rebuild."""
    found = tx.rows("SELECT search_id, number, params_json FROM trials WHERE run_id = :id ORDER BY id", {"id": run_id})
    if not found:
        return None
    search_id, number, params_json = found[0]
    return {"search_id": search_id, "number": number, "params": json.loads(params_json)}


def write_from_rows(tx: Transaction, home: Path, run_id: str) -> None:
    """Rewrite the run's manifest from its rows, inside the caller's write transaction (writers of
    one run take turns, so the file always ends as the newest state)."""
    document = document_from_rows(tx, run_id)
    if document is None:
        return
    from rlrun.fsutil import atomic_write  # writes only: reads need not load hashlib and uuid

    file = paths.run_dir(home, run_id) / MANIFEST
    atomic_write(file, json.dumps(document, indent=1).encode())
    storage.publish(file)  # a home in object storage keeps its copy there, in this same turn


class Manifest(NamedTuple):
    """A run folder's manifest, read back: rows as column values, children by session_index."""

    format: int
    run: RunRecord  # its stored status
    sessions: list[dict[str, Any]]  # as written: "index" and the session's fields (none before format 2)
    spec_revisions: list[dict[str, Any]]  # spec_revisions rows (spec_json, diff_json as the registry held)
    attempts: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]  # the non-training ones
    trial: dict[str, Any] | None = None  # {"search_id", "number", "params"} of the trial it trains


def read_manifest(folder: Path) -> Manifest:
    """The manifest in a run folder (`rlrun db rebuild`)."""
    document = json.loads((folder / MANIFEST).read_text())
    return Manifest(
        format=int(document.get("format", 1)),
        run=RunRecord(**{k: document["run"][k] for k in RunRecord._fields if k in document["run"]}),
        sessions=list(document.get("sessions") or []),
        spec_revisions=[_revision_row(r) for r in document["spec_revisions"]],
        attempts=[dict(a) for a in document.get("attempts", [])],
        evaluations=[dict(e) for e in document.get("evaluations", [])],
        trial=document.get("trial"),
    )


def _revision_row(revision: dict[str, Any]) -> dict[str, Any]:
    # The registry stored json.dumps of the spec and diff; loading and dumping again gives the
    # same text.
    diff = revision.get("diff")
    return {
        "revision": revision["revision"],
        "frame": revision["frame"],
        "spec_json": json.dumps(revision["spec"]),
        "diff_json": None if diff is None else json.dumps(diff),
        "created_at": revision["created_at"],
    }


# ---------------------------------------------------------------------------------------------
# A search's manifest


def search_document_from_rows(tx: Transaction, search_id: str) -> dict[str, Any] | None:
    """The manifest of a search as its rows say (stored status), None when it is not there."""
    found = tx.rows(f"SELECT {SEARCH_SELECT} FROM searches q WHERE q.id = :id", {"id": search_id})
    if not found:
        return None
    trials = [
        TrialRecord(*row)
        for row in tx.rows(
            f"SELECT {TRIAL_SELECT} FROM trials t WHERE t.search_id = :id ORDER BY t.number", {"id": search_id}
        )
    ]
    # A population-based training search's segments also say where each stands in the population.
    lineage = {
        row[0]: LineageRecord(*row)
        for row in tx.rows(f"SELECT {LINEAGE_SELECT} FROM lineage l WHERE l.search_id = :id", {"id": search_id})
    }
    documents = []
    for trial in trials:
        document = _drop(trial.to_json(), "id", "search_id")
        if trial.id in lineage:
            document["lineage"] = _drop(lineage[trial.id].to_json(), "trial_id", "search_id")
        documents.append(document)
    return {"format": SEARCH_MANIFEST_FORMAT, "search": SearchRecord(*found[0]).to_json(), "trials": documents}


def write_search_from_rows(tx: Transaction, home: Path, search_id: str) -> None:
    """Rewrite the search's manifest from its rows, inside the caller's write transaction, which
    holds the search locked (`search_store.lock_search`): writers take turns, so the file, and the
    store's copy of it in a home in object storage, always ends as the newest state."""
    document = search_document_from_rows(tx, search_id)
    if document is None:
        return
    from rlrun.fsutil import atomic_write

    target = paths.search_manifest(home, search_id)
    atomic_write(target, json.dumps(document, indent=1).encode())
    storage.publish(target)


class SearchManifest(NamedTuple):
    """A search's manifest, read back: its record (stored status) and its trials' rows as column
    values (no ids: the registry gives new ones)."""

    search: SearchRecord
    trials: list[dict[str, Any]]
    lineage: dict[int, dict[str, Any]]  # by trial number: a PBT segment's lineage columns (no ids)


def read_search_manifest(path: Path) -> SearchManifest:
    """A search's manifest file (`rlrun db rebuild`). Its JSON columns are dumped again as the
    registry stored them (json.dumps of what it loaded gives the same text)."""
    document = json.loads(path.read_text())
    search = dict(document["search"])
    for key in ("spec", "space", "settings", "importance"):
        value = search.pop(key)
        search[f"{key}_json"] = None if value is None else json.dumps(value)
    trials, lineage = [], {}
    for trial in document["trials"]:
        row = dict(trial)
        for key in ("params", "intermediate", "system_attrs"):
            row[f"{key}_json"] = json.dumps(row.pop(key))
        trials.append({column: row[column] for column in TRIAL_COLUMNS if column not in ("id", "search_id")})
        if "lineage" in row:
            line = dict(row["lineage"])
            line["mutated_json"] = json.dumps(line.pop("mutated"))
            lineage[row["number"]] = {c: line[c] for c in LINEAGE_COLUMNS if c not in ("trial_id", "search_id")}
    fields: dict[str, Any] = {k: search.get(k) for k in SearchRecord._fields}  # heartbeat_at: newer than some
    return SearchManifest(SearchRecord(**fields), trials, lineage)

"""The run folder's manifest (`run.json`), written and read here only.

It holds the run's row, its sessions, spec revisions, attempts and non-training evaluations. The
registry rewrites it inside every write transaction that changes one of those (`write_from_rows`),
so it never lags the registry, and `rlrun db rebuild` restores the registry from it
(`read_manifest`; checkpoints and training evaluations come from the snapshots).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from rlrun import paths, storage
from rlrun.registry.database import Transaction
from rlrun.registry.queries import attempts_of, evaluations_where, revisions_of
from rlrun.registry.records import RUN_SELECT, SESSION_SELECT, RunRecord, SessionRecord

MANIFEST = paths.RUN_MANIFEST
MANIFEST_FORMAT = 2


def _drop(document: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in keys}


def document_from_rows(tx: Transaction, run_id: str) -> dict[str, Any] | None:
    """The manifest of a run as its rows say, None when the run is not there."""
    found = tx.rows(f"SELECT {RUN_SELECT} FROM runs r WHERE r.id = :id", {"id": run_id})
    if not found:
        return None
    where = {"run_id": run_id}
    return {
        "format": MANIFEST_FORMAT,
        "run": RunRecord(*found[0]).to_json(),
        "sessions": [_drop(SessionRecord(*row).to_json(), "id", "run_id") for row in tx.rows(
            f"SELECT {SESSION_SELECT} FROM sessions s WHERE s.run_id = :run_id ORDER BY s.session_index", where)],
        "spec_revisions": [_drop(r.to_json(), "id", "run_id") for r in revisions_of(tx, run_id)],
        "attempts": [_drop(a.to_json(), "id", "run_id", "session_id") for a in attempts_of(tx, run_id)],
        "evaluations": [_drop(e.to_json(), "id", "run_id", "session_id") for e in evaluations_where(
            tx, "s.run_id = :run_id AND e.kind <> 'train'", where)],
    }  # fmt: skip


def write_from_rows(tx: Transaction, home: Path, run_id: str) -> None:
    """Rewrite the run's manifest from its rows, inside the caller's write transaction (writers of
    one run take turns, so the file always ends as the newest state)."""
    document = document_from_rows(tx, run_id)
    if document is None:
        return
    from rlrun.fsutil import atomic_write  # writes only: reads need not load hashlib and uuid

    file = paths.run_dir(home, run_id) / MANIFEST
    atomic_write(file, json.dumps(document, indent=1).encode())
    if (mirror := storage.mirror_of(file)) is not None:  # a home in object storage keeps its copy there
        mirror.put(file)


class Manifest(NamedTuple):
    """A run folder's manifest, read back: rows as column values, children by session_index."""

    format: int
    run: RunRecord  # its stored status
    sessions: list[dict[str, Any]]  # as written: "index" and the session's fields (none before format 2)
    spec_revisions: list[dict[str, Any]]  # spec_revisions rows (spec_json, diff_json as the registry held)
    attempts: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]  # the non-training ones


def read_manifest(folder: Path) -> Manifest:
    """The manifest in a run folder (`rlrun db rebuild`)."""
    document = json.loads((folder / MANIFEST).read_text())
    return Manifest(
        format=int(document.get("format", 1)),
        run=RunRecord(**{k: document["run"][k] for k in RunRecord._fields}),
        sessions=list(document.get("sessions") or []),
        spec_revisions=[_revision_row(r) for r in document["spec_revisions"]],
        attempts=[dict(a) for a in document.get("attempts", [])],
        evaluations=[dict(e) for e in document.get("evaluations", [])],
    )


def _revision_row(revision: dict[str, Any]) -> dict[str, Any]:
    # The registry stored json.dumps of the spec and diff; loading and dumping again gives the
    # same text.
    diff = revision.get("diff")
    return {"revision": revision["revision"], "frame": revision["frame"], "spec_json": json.dumps(revision["spec"]),
            "diff_json": None if diff is None else json.dumps(diff), "created_at": revision["created_at"]}

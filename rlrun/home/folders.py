"""Run folders read as plain files: the one reader of a run folder (`read_run_folder`: its `run.json`,
then what its snapshots add), which `rlrun db rebuild` uses for every folder of a home, and runs read
straight from a folder outside any home (a run copied from a cluster or a colleague) that `rlrun enjoy`
and `rlrun show` (and `plot`) use where it is: after every snapshot file is checked against its
snapshot's MANIFEST.json, into a registry in memory that never writes a file (the folder is not
touched and no registry is). `rlrun import` is what adds such a run to a home.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun import paths, storage
from rlrun.errors import BadInput
from rlrun.refs import RunRef
from rlrun.registry import Manifest, Registry, RestoredRun, RunRecord, read_manifest, run_status
from rlrun.registry.resolve import is_inside

if TYPE_CHECKING:
    from rlrun.snapshot.meta import SnapshotMeta


class _Detached(Registry):
    """A registry in memory for one run read from its folder: its rows are never written back."""

    def _sync_manifest(self, tx: Any, run_id: str) -> None:
        """The folder is someone else's copy: leave its run.json as it is."""

    def _sync_search_manifest(self, tx: Any, search_id: str) -> None:
        """Nor write a search's manifest anywhere."""


def outside_folder(ref: RunRef, home: Path | str | None) -> Path | None:
    """The run folder a path reference names when it is outside the runs home, else None."""
    if ref.kind != "path":
        return None
    folder = Path(ref.path)
    return None if is_inside(folder, paths.resolve_home(home)) else folder


def open_registry(ref: RunRef, home: Path | str | None) -> Registry:
    """Where `ref` is to be resolved: the run folder itself when the reference is a path outside
    the home, else the home's registry (never created here)."""
    folder = outside_folder(ref, home)
    return open_folder(folder) if folder is not None else Registry.open(paths.resolve_home(home), create=False)


def open_folder(folder: Path) -> Registry:
    """A registry in memory holding the run of `folder`, every snapshot verified first (a file
    that does not match its snapshot's MANIFEST.json is refused: SnapshotError, exit 2)."""
    registry = _Detached.open(folder.parent, "sqlite://")
    registry.restore_run(read_copied_run(folder))
    return registry


def read_copied_run(folder: Path) -> RestoredRun:
    """The run of a folder from elsewhere, as `rlrun db rebuild` reads one, after every snapshot
    is verified; a folder whose run.json cannot be read, or is another run's, is bad input."""
    verify_snapshots(folder)
    try:
        restored = read_run_folder(folder, folder.parent)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise BadInput(f"{folder}: its run.json cannot be read ({type(error).__name__}: {error})") from None
    if restored.run.id != folder.name:
        raise BadInput(f"{folder}: its run.json is run {restored.run.id}'s; a run folder is named by its run's id")
    return restored


def verify_snapshots(folder: Path) -> None:
    """Check every complete snapshot in a run folder, every file against its MANIFEST.json."""
    from rlrun.snapshot import layout  # only when a folder is read: `rlrun show latest` never needs it

    for snapshot in layout.snapshot_folders(folder):
        if layout.is_complete(snapshot):
            layout.verify(snapshot, deep=True)


# ---------------------------------------------------------------------------------------------
# Reading a run folder: its run.json, then what its snapshots add


@dataclass
class _Snapshot:
    path: str  # relative to the home
    frame: int
    kind: str
    sha256: str
    size_bytes: int
    created_at: float
    meta: SnapshotMeta


def read_run_folder(folder: Path, home: Path) -> RestoredRun:
    """A run's rows from its folder: the manifest for the run, its sessions, spec revisions,
    attempts and non-training evaluations; the snapshots for checkpoints and, from each session's
    newest snapshot, its training evaluations and where its clock stood."""
    manifest = read_manifest(folder)
    run = manifest.run
    snapshots = _read_snapshots(folder, home)
    listed = manifest.sessions or _sessions_from_snapshots(run, snapshots)
    sessions, evaluations = [], []
    start = _first_frames(manifest, run)
    for session in listed:
        index = session["index"]
        own = snapshots.get(index, [])
        trained = _training_evaluations(own[-1], index, own, after=start.get(index, 0)) if own else []
        sessions.append(_session_row(session, own[-1] if own else None, trained))
        evaluations += trained
    if manifest.format < 2:
        run = _status_from_snapshots(run, sessions, snapshots)
    evaluations += manifest.evaluations
    return RestoredRun(
        run=run,
        sessions=sessions,
        spec_revisions=manifest.spec_revisions,
        attempts=manifest.attempts,
        checkpoints=[
            {
                "session_index": index,
                "frame": s.frame,
                "kind": s.kind,
                "path": s.path,
                "sha256": s.sha256,
                "size_bytes": s.size_bytes,
                "created_at": s.created_at,
            }
            for index, own in snapshots.items()
            for s in own
        ],
        evaluations=evaluations,
        trial=manifest.trial,
    )


def _read_snapshots(folder: Path, home: Path) -> dict[int, list[_Snapshot]]:
    """Complete snapshots (those with a MANIFEST.json) by session index, oldest frame first; in a
    home in object storage, those of the store (`remote.stored_snapshots`)."""
    from rlrun.snapshot import layout, remote
    from rlrun.snapshot.meta import SnapshotMeta

    found: dict[int, list[_Snapshot]] = {}
    if storage.mirror_of(folder) is not None:
        for stored in remote.stored_snapshots(folder):
            meta = SnapshotMeta.from_json(stored.meta)
            found.setdefault(layout.session_index(stored.path), []).append(
                _Snapshot(
                    path=str(stored.path.relative_to(home)),
                    frame=meta.clock.frame,
                    kind=meta.kind,
                    sha256=stored.sha256,
                    size_bytes=stored.size_bytes,
                    created_at=stored.created_at,
                    meta=meta,
                )
            )
        return _oldest_first(found)
    for path in layout.snapshot_folders(folder):
        if not layout.is_complete(path):
            continue  # never finished writing: not a checkpoint
        meta = layout.read_meta(path)
        found.setdefault(layout.session_index(path), []).append(
            _Snapshot(
                path=str(path.relative_to(home)),
                frame=meta.clock.frame,
                kind=meta.kind,
                sha256=layout.sha256(path),
                size_bytes=layout.size_bytes(path),
                created_at=(path / layout.MANIFEST).stat().st_mtime,
                meta=meta,
            )
        )
    return _oldest_first(found)


def _oldest_first(found: dict[int, list[_Snapshot]]) -> dict[int, list[_Snapshot]]:
    for own in found.values():
        own.sort(key=lambda s: s.frame)
    return found


def _first_frames(manifest: Manifest, run: RunRecord) -> dict[int, int]:
    """Where each session's own history starts: a fork's snapshots carry its parent's evaluations
    up to the frame it branched at, which the registry lists under the parent only."""
    starts: dict[int, int] = {}
    for attempt in manifest.attempts:
        index = attempt["session_index"]
        starts[index] = min(starts.get(index, attempt["start_frame"]), attempt["start_frame"])
    if not starts and run.parent_id is not None:  # a format-1 manifest: the fork's first revision
        branched = min((r["frame"] for r in manifest.spec_revisions if r["revision"] > 0), default=0)
        starts = dict.fromkeys(range(run.num_sessions), branched)
    return starts


def _training_evaluations(newest: _Snapshot, index: int, own: list[_Snapshot], *, after: int) -> list[dict[str, Any]]:
    """The session's training evaluations as the registry recorded them: the newest snapshot
    holds every one up to its frame, with the episode returns they were summarised from (those
    at or before `after` belong to the run this one was forked from)."""
    rows = []
    for evaluation in newest.meta.evaluations:
        frame = int(evaluation["frame"])
        if after and frame <= after:
            continue
        # No snapshot keeps when an evaluation ran; the first snapshot at or after it is close.
        when = next((s.created_at for s in own if s.frame >= frame), newest.created_at)
        rows.append(
            {"session_index": index, "frame": frame, "kind": "train", **_summary(evaluation), "created_at": when}
        )
    return rows


def _summary(evaluation: dict[str, Any]) -> dict[str, Any]:
    """Mean, std, min, max and count, computed exactly as the training loop did (numpy), so the
    scores read back are the very floats the registry held."""
    if "mean" in evaluation:
        return {k: evaluation[k] for k in ("mean", "std", "min", "max", "episodes")}
    import numpy as np

    returns = evaluation["returns"]
    return {
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "min": float(np.min(returns)),
        "max": float(np.max(returns)),
        "episodes": len(returns),
    }


_SESSION_FIELDS = (
    "seed",
    "status",
    "frame",
    "episode",
    "opt_step",
    "best_eval",
    "last_eval",
    "host",
    "pid",
    "heartbeat_at",
    "started_at",
    "finished_at",
    "error",
)


def _session_row(session: dict[str, Any], newest: _Snapshot | None, trained: list[dict[str, Any]]) -> dict[str, Any]:
    """The session's row: as the manifest recorded it, moved on to its newest snapshot when that
    is further along (the manifest is not rewritten on every heartbeat)."""
    row = {"session_index": session["index"], **{k: session.get(k) for k in _SESSION_FIELDS}}
    row["lease"] = session.get("lease") or 0  # the fencing token goes on from where it was (0: an older manifest)
    if newest is not None and newest.frame > (row["frame"] or 0):
        clock = newest.meta.clock
        row.update(frame=clock.frame, episode=clock.episode, opt_step=clock.opt_step)
    if trained:
        means = [e["mean"] for e in sorted(trained, key=lambda e: e["frame"])]
        row.update(best_eval=max(means), last_eval=means[-1])
    return row


def _sessions_from_snapshots(run: RunRecord, snapshots: dict[int, list[_Snapshot]]) -> list[dict[str, Any]]:
    """Sessions of a manifest from before format 2 (which listed none): seeds follow the run's,
    progress and status follow the newest snapshot."""
    sessions = []
    for index in range(run.num_sessions):
        own = snapshots.get(index, [])
        kinds = own[-1].kind.split("+") if own else []
        status = "finished" if "final" in kinds else "preempted" if "preempt" in kinds else "running"
        sessions.append(
            {"index": index, "seed": run.seed + index, "status": status, "frame": 0, "episode": 0, "opt_step": 0}
        )
    return sessions


def _status_from_snapshots(
    run: RunRecord, sessions: list[dict[str, Any]], snapshots: dict[int, list[_Snapshot]]
) -> RunRecord:
    """A format-1 manifest was written when the run started; its end shows in the snapshots."""
    status = run_status(s["status"] for s in sessions)
    newest = max((s.created_at for own in snapshots.values() for s in own), default=None)
    return run._replace(status=status, finished_at=newest if status != "running" else None)

"""Keeping a runs home tidy and whole: `rlrun rm`, `rlrun gc`, `rlrun db rebuild` and `rlrun import`.

All three read run folders as plain files (JSON and file sizes) and talk to the registry through
its API; none imports torch or gymnasium. Rows always go before files: the registry never points
at a folder that is gone, and a folder left behind by an interruption is garbage `rlrun gc` sweeps.

Snapshot folders are found, named, sized and read through `rlrun.snapshot.layout` (torch-free),
the module that says how `rlrun.snapshot` writes them; this module only reads their JSON and
removes whole folders.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlrun import paths, retention
from rlrun.errors import BadInput, SpecError
from rlrun.fsutil import bytes_freed_by_removing
from rlrun.registry import (
    MANIFEST,
    CheckpointRecord,
    Manifest,
    Registry,
    RestoredRun,
    RunRecord,
    read_manifest,
    run_status,
)
from rlrun.snapshot import layout
from rlrun.snapshot.meta import SnapshotMeta
from rlrun.spec import validate_spec

# ---------------------------------------------------------------------------------------------
# rm


def remove_runs(registry: Registry, runs: list[RunRecord]) -> int:
    """Delete each run's rows, then its folder; returns the bytes freed. The caller has checked
    that none is running."""
    freed = 0
    for run in runs:
        folder = paths.run_dir(registry.home, run.id)
        size = bytes_freed_by_removing([folder])  # a fork's snapshots may share its segments
        registry.delete_run(run.id)
        shutil.rmtree(folder, ignore_errors=True)
        freed += size
    return freed


# ---------------------------------------------------------------------------------------------
# gc


@dataclass
class GarbageReport:
    """What `rlrun gc` found (and, unless it was a dry run, removed)."""

    orphans: list[str] = field(default_factory=list)  # snapshot folders the registry does not list
    temporaries: list[str] = field(default_factory=list)  # snapshots whose writing was cut short
    retired: list[str] = field(default_factory=list)  # snapshots the retention rule no longer keeps
    missing: list[str] = field(default_factory=list)  # checkpoint rows whose folder is gone
    unregistered: list[str] = field(default_factory=list)  # run folders the registry does not know
    skipped_running: list[str] = field(default_factory=list)  # runs left alone because they run
    freed_bytes: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def collect_garbage(registry: Registry, *, dry_run: bool = False) -> GarbageReport:
    """Sweep the runs home: snapshot folders no row points at, temporary folders of snapshots
    that were never finished, and the snapshots the retention rule (`rlrun.retention`, with each
    run's current `meta.keep_checkpoints`) no longer keeps. Runs that are running are left alone
    (their newest snapshot may be on disk a moment before its row), and so are folders of runs the
    registry does not know: they are what `rlrun db rebuild` restores."""
    home = registry.home
    report = GarbageReport(dry_run=dry_run)
    live = registry.live_run_ids()
    known = registry.run_ids()
    checkpoints = [c for c in registry.all_checkpoints() if c.run_id not in live]
    report.skipped_running = sorted(live)
    gone = sorted(c.path for c in checkpoints if not (home / c.path).is_dir())
    _retire(registry, checkpoints, report)
    report.missing = [path for path in gone if path not in set(report.retired)]
    listed = {c.path for c in checkpoints}
    for folder in sorted(p for p in home.iterdir() if p.is_dir()) if home.is_dir() else []:
        if folder.name not in known:
            if (folder / MANIFEST).is_file():
                report.unregistered.append(folder.name)
            continue
        if folder.name in live:
            continue
        for snapshot in layout.snapshot_folders(folder, include_temporary=True):
            relative = str(snapshot.relative_to(home))
            if layout.is_temporary(snapshot):
                report.temporaries.append(relative)
            elif relative not in listed:
                report.orphans.append(relative)
    report.freed_bytes += layout.freed_bytes([home / relative for relative in (*report.orphans, *report.temporaries)])
    for relative in (*report.orphans, *report.temporaries) if not dry_run else ():
        layout.remove(home / relative)
    return report


def _retire(registry: Registry, checkpoints: list[CheckpointRecord], report: GarbageReport) -> None:
    """Apply the retention rule again (a spec edit may have lowered keep_checkpoints, or a run
    may have been stopped between a snapshot and its clean-up): rows first, then folders. A run
    whose stored spec no longer validates keeps every snapshot: its rule cannot be known."""
    specs = registry.latest_specs()
    by_session: dict[tuple[str, int], list[CheckpointRecord]] = {}
    for checkpoint in checkpoints:
        by_session.setdefault((checkpoint.run_id, checkpoint.session_index), []).append(checkpoint)
    keep_by_run = {run_id: _keep_checkpoints(specs.get(run_id)) for run_id, _ in by_session}
    doomed: list[CheckpointRecord] = []
    for (run_id, _), records in by_session.items():
        if (keep_checkpoints := keep_by_run[run_id]) is not None:
            keep = retention.to_keep(records, keep_checkpoints)
            doomed += [c for c in records if c.id not in keep]
    report.retired = [c.path for c in doomed]
    report.freed_bytes += layout.freed_bytes([registry.home / c.path for c in doomed])  # shared segments once
    if report.dry_run or not doomed:
        return
    registry.remove_checkpoints([c.id for c in doomed])
    for checkpoint in doomed:
        layout.remove(registry.home / checkpoint.path)


def _keep_checkpoints(spec_json: str | None) -> int | None:
    """The run's `meta.keep_checkpoints` (its default when the spec does not say), or None when
    there is no stored spec that validates. The env id is not looked up: that would import
    Gymnasium, and the spec was checked when it was stored."""
    try:
        return validate_spec(json.loads(spec_json), check_env_id=False).meta.keep_checkpoints if spec_json else None
    except (SpecError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# rebuild


@dataclass
class RebuildReport:
    """What `rlrun db rebuild` restored from the run folders."""

    restored: list[str] = field(default_factory=list)
    already_known: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # folders that could not be read, and why
    sessions: int = 0
    checkpoints: int = 0
    evaluations: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rebuild(registry: Registry) -> RebuildReport:
    """Add to the registry every run whose folder holds a manifest and which it does not list yet
    (all of them, after the registry file was lost). Parents go before their forks."""
    report = RebuildReport()
    known = registry.run_ids()
    found: list[RestoredRun] = []
    home = registry.home
    for manifest in sorted(home.glob(f"*/{MANIFEST}")) if home.is_dir() else []:
        folder = manifest.parent
        if folder.name in known:
            report.already_known.append(folder.name)
            continue
        try:
            found.append(read_run_folder(folder, home))
        except (OSError, ValueError, KeyError, TypeError) as error:
            report.problems.append(f"{folder.name}: {type(error).__name__}: {error}")
    for restored in sorted(found, key=lambda r: (r.run.created_at, r.run.id)):
        registry.restore_run(restored)
        report.restored.append(restored.run.id)
        report.sessions += len(restored.sessions)
        report.checkpoints += len(restored.checkpoints)
        report.evaluations += len(restored.evaluations)
    return report


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
        run=run, sessions=sessions, spec_revisions=manifest.spec_revisions, attempts=manifest.attempts,
        checkpoints=[{"session_index": index, "frame": s.frame, "kind": s.kind, "path": s.path, "sha256": s.sha256,
                      "size_bytes": s.size_bytes, "created_at": s.created_at}
                     for index, own in snapshots.items() for s in own],
        evaluations=evaluations,
    )  # fmt: skip


def _read_snapshots(folder: Path, home: Path) -> dict[int, list[_Snapshot]]:
    """Complete snapshots (those with a MANIFEST.json) by session index, oldest frame first."""
    found: dict[int, list[_Snapshot]] = {}
    for path in layout.snapshot_folders(folder):
        if not layout.is_complete(path):
            continue  # never finished writing: not a checkpoint
        meta = layout.read_meta(path)
        found.setdefault(layout.session_index(path), []).append(_Snapshot(
            path=str(path.relative_to(home)), frame=meta.clock.frame, kind=meta.kind, sha256=layout.sha256(path),
            size_bytes=layout.size_bytes(path), created_at=(path / layout.MANIFEST).stat().st_mtime, meta=meta,
        ))  # fmt: skip
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
        rows.append({"session_index": index, "frame": frame, "kind": "train", **_summary(evaluation),
                     "created_at": when})  # fmt: skip
    return rows


def _summary(evaluation: dict[str, Any]) -> dict[str, Any]:
    """Mean, std, min, max and count, computed exactly as the training loop did (numpy), so the
    scores read back are the very floats the registry held."""
    if "mean" in evaluation:
        return {k: evaluation[k] for k in ("mean", "std", "min", "max", "episodes")}
    import numpy as np

    returns = evaluation["returns"]
    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "min": float(np.min(returns)),
            "max": float(np.max(returns)), "episodes": len(returns)}  # fmt: skip


_SESSION_FIELDS = ("seed", "status", "frame", "episode", "opt_step", "best_eval", "last_eval", "host", "pid",
                   "heartbeat_at", "started_at", "finished_at", "error")  # fmt: skip


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
        sessions.append({"index": index, "seed": run.seed + index, "status": status, "frame": 0, "episode": 0,
                         "opt_step": 0})  # fmt: skip
    return sessions


def _status_from_snapshots(run: RunRecord, sessions: list[dict[str, Any]],
                           snapshots: dict[int, list[_Snapshot]]) -> RunRecord:  # fmt: skip
    """A format-1 manifest was written when the run started; its end shows in the snapshots."""
    status = run_status(s["status"] for s in sessions)
    newest = max((s.created_at for own in snapshots.values() for s in own), default=None)
    return run._replace(status=status, finished_at=newest if status != "running" else None)


# ---------------------------------------------------------------------------------------------
# import


def check_imports(registry: Registry, folders: list[Path]) -> list[tuple[Path, RestoredRun]]:
    """Each folder's run, read and verified as `rlrun enjoy` reads a run folder from elsewhere:
    BadInput (nothing written) when a folder is not a run folder, a snapshot does not match its
    manifest, or its id or name is taken in this home (or twice among the folders)."""
    from rlrun.folder_runs import read_copied_run
    from rlrun.refs import parse_ref

    checked: list[tuple[Path, RestoredRun]] = []
    for given in folders:
        runs = [r for _, r in checked]
        ref = parse_ref(str(given) if given.is_absolute() else f"./{given}")
        if ref.session is not None or ref.checkpoint is not None:
            raise BadInput(f"{given} is inside run folder {ref.path}; import the whole run folder")
        folder = Path(ref.path)
        restored = read_copied_run(folder)
        run = restored.run
        if run.id in registry.run_ids() or paths.run_dir(registry.home, run.id).exists() or \
                run.id in [r.run.id for r in runs]:  # fmt: skip
            raise BadInput(f"run {run.id} is already in {registry.home}; nothing imported (`rlrun show {run.id}`)")
        holder = registry.name_exists(run.name) if run.name else None
        if holder is not None or (run.name and run.name in [r.run.name for r in runs]):
            raise BadInput(f"run {run.id} is named {run.name!r}, a name run {holder} already has in"
                           f" {registry.home}; nothing imported")
        checked.append((folder, restored))
    return checked


def import_runs(registry: Registry, checked: list[tuple[Path, RestoredRun]], *, move: bool) -> list[RunRecord]:
    """Copy (or move) each checked run folder into the home, then register it; parents before
    their forks. Files go first: a run's rows never point at a folder that is not there."""
    imported = []
    registry.home.mkdir(parents=True, exist_ok=True)
    for folder, restored in sorted(checked, key=lambda pair: (pair[1].run.created_at, pair[1].run.id)):
        destination = paths.run_dir(registry.home, restored.run.id)
        if move:
            shutil.move(folder, destination)
        else:
            shutil.copytree(folder, destination)
        try:
            registry.restore_run(restored)
        except BaseException:
            if not move:
                shutil.rmtree(destination, ignore_errors=True)
            raise
        imported.append(registry.resolve(restored.run.id))
    return imported

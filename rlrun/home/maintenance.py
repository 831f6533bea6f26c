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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rlrun import paths, snapshot, storage
from rlrun.errors import BadInput, SpecError, StoreUnreachable, Unavailable
from rlrun.fsutil import bytes_freed_by_removing
from rlrun.home.folders import read_copied_run, read_run_folder
from rlrun.refs import RunFilter, whole_run
from rlrun.registry import (
    MANIFEST,
    CheckpointRecord,
    Registry,
    RestoredRun,
    RunRecord,
)
from rlrun.registry.manifest import read_search_manifest
from rlrun.registry.resolve import run_address
from rlrun.snapshot import layout, remote, retention
from rlrun.spec import recorded_spec

# ---------------------------------------------------------------------------------------------
# rm


class RemovalPlan(NamedTuple):
    """What `rlrun rm` would delete, before anything is: the runs (each once), the bytes their
    folders free, and the runs that refuse it (a running run's folder is in use). Each run is
    deleted in the home it lives in (`Registry.home_of`), which need not be the one the command was
    given: a registry in $RLRUN_DB lists runs of several homes."""

    home: Path  # the registry's home (the command's)
    named: list[tuple[str, RunRecord]]  # each run once, with the first reference that named it
    bytes_freed: int  # a file hard-linked from a run that stays is not counted; in a store, its objects
    refused: list[RunRecord]  # running: nothing is deleted while one of these is named
    homes: dict[str, Path] | None = None  # run id -> the home its folder is in (None: all in `home`)
    copy_bytes: int = 0  # what the working copies of runs in object storage hold on this machine

    @property
    def runs(self) -> list[RunRecord]:
        return [run for _, run in self.named]

    def home_of(self, run: RunRecord) -> Path:
        return (self.homes or {}).get(run.id, self.home)

    def where(self, run: RunRecord) -> str | None:
        """The run's folder as messages name it (under its home's URL), when it is not a local
        folder of the command's home: in object storage, or in another home. None otherwise."""
        home = self.home_of(run)
        if home == self.home and storage.mirror_of(home) is None:
            return None
        return run_address(paths.home_address(home), run.id)

    def check(self) -> None:
        """Refuse the whole plan when a run in it is running (BadInput, exit 2)."""
        if self.refused:
            running = ", ".join(run.id for run in self.refused)
            raise BadInput(f"run {running} is still running; stop it (SIGTERM) before deleting it")


def plan_removal(
    references: Iterable[str], filters: RunFilter | None = None, *, home: Path | str | None = None
) -> RemovalPlan:
    """The runs `references` name (whole runs: `latest@1k` is refused, not read as `latest`) and
    what deleting them would free, each in the home it lives in, its store contacted first (one that
    cannot be reached is refused naming the run's home, nothing deleted). Read-only: `remove(plan)`
    deletes.

    Args:
        references: The runs to delete, as `rlrun rm` takes them.
        filters: Which runs the reference counts among (`RunFilter.of(status="finished")`); None: every run.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        The runs, the bytes deleting them frees (`bytes_freed`) and the runs that refuse it
        (`refused`: a running run's folder is in use).
    """
    root = paths.resolve_home(home)
    chosen: dict[str, tuple[str, RunRecord]] = {}
    with Registry.open(root, create=False) as registry:
        for reference in references:
            run = registry.resolve(whole_run(reference, "rm"), filters, anywhere=True)
            chosen.setdefault(run.id, (reference, run))
        homes = {run_id: registry.home_of(run) for run_id, (_, run) in chosen.items()}
    for run_id, run_home in homes.items():
        _reach(run_home, run_id)
    named = list(chosen.values())
    size = sum(_bytes_of_run(homes[run_id], run_id) for run_id in chosen)
    copies = sum(
        bytes_freed_by_removing([paths.run_dir(homes[run_id], run_id)])
        for run_id in chosen
        if storage.mirror_of(homes[run_id]) is not None
    )
    return RemovalPlan(root, named, size, [run for _, run in named if run.status == "running"], homes, copies)


def _reach(home: Path, run_id: str) -> None:
    """Contact the store of the home a run to delete lives in (nothing for a local home): one that
    cannot be reached is refused naming the run's folder, nothing deleted (exit 2, or 3: no answer)."""
    try:
        storage.reach(home)
    except (BadInput, Unavailable) as error:
        kind = StoreUnreachable if isinstance(error, Unavailable) else BadInput
        raise kind(
            f"run {run_id} lives in {run_address(paths.home_address(home), run_id)}, which this"
            f" command cannot reach: {error}; nothing deleted"
        ) from None


def remove(plan: RemovalPlan) -> int:
    """Delete the plan's runs, rows then folders (and their objects, in object storage); returns the
    bytes freed. Statuses are read again first: a person may take minutes to confirm, and a run
    resumed meanwhile keeps its folder.

    Args:
        plan: What `plan_removal` decided.

    Returns:
        The bytes freed.
    """
    with Registry.open(plan.home, create=False) as registry:
        now = [registry.resolve(run.id, anywhere=True) for run in plan.runs]
        plan._replace(refused=[run for run in now if run.status == "running"]).check()
        return remove_runs(registry, now, homes=plan.homes)


def remove_runs(registry: Registry, runs: list[RunRecord], *, homes: dict[str, Path] | None = None) -> int:
    """Delete each run's rows, then its folder, in the home it lives in (`homes`, else
    `Registry.home_of`): its working copy on this machine and, in object storage, every object of
    the run; returns the bytes freed. The caller has checked that none is running."""
    freed = 0
    for run in runs:
        home = (homes or {}).get(run.id) or registry.home_of(run)
        folder = paths.run_dir(home, run.id)
        size = _bytes_of_run(home, run.id)
        registry.delete_run(run.id)
        shutil.rmtree(folder, ignore_errors=True)
        if (mirror := storage.mirror_of(folder)) is not None:
            mirror.delete_tree(folder)  # every object of the run: snapshots, segments, logs, run.json
        freed += size
    return freed


def _bytes_of_run(home: Path, run_id: str) -> int:
    """What deleting a run's folder frees: on disk a fork's snapshots may share its segments (hard
    links: counted once); in object storage, its objects (segments are never shared across runs)."""
    folder = paths.run_dir(home, run_id)
    if (mirror := storage.mirror_of(folder)) is not None:
        return sum(mirror.sizes(mirror.key(folder)).values())
    return bytes_freed_by_removing([folder])


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
    other_homes: list[str] = field(default_factory=list)  # runs of the registry that live in another home
    freed_bytes: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def collect_garbage(registry: Registry, *, dry_run: bool = False) -> GarbageReport:
    """Sweep the runs home: snapshot folders no row points at, temporary folders of snapshots
    that were never finished, and the snapshots the retention rule (`rlrun.snapshot.retention`, with each
    run's current `meta.keep_checkpoints`) no longer keeps. Runs that are running are left alone
    (their newest snapshot may be on disk a moment before its row), and so are folders of runs the
    registry does not know: they are what `rlrun db rebuild` restores. A registry in $RLRUN_DB may
    list runs of other homes: they are left to `rlrun gc` in their own (`other_homes`)."""
    home = registry.home
    report = GarbageReport(dry_run=dry_run)
    elsewhere = registry.runs_elsewhere()
    live = registry.live_run_ids() - set(elsewhere)
    known = registry.run_ids() - set(elsewhere)
    checkpoints = [c for c in registry.all_checkpoints() if c.run_id in known and c.run_id not in live]
    report.skipped_running = sorted(live)
    report.other_homes = sorted(elsewhere)
    mirror = storage.mirror_of(home)
    if mirror is None:
        gone = sorted(c.path for c in checkpoints if not (home / c.path).is_dir())
    else:  # the store holds the home; the working copy may hold none of it
        stored = {
            path
            for run_id in {c.run_id for c in checkpoints}
            for path, complete in remote.run_snapshots(paths.run_dir(home, run_id)).items()
            if complete
        }
        gone = sorted(c.path for c in checkpoints if home / c.path not in stored)
        before = sum(mirror.sizes(mirror.root).values())
    _retire(registry, checkpoints, report)
    report.missing = [path for path in gone if path not in set(report.retired)]
    listed = {c.path for c in checkpoints}
    for folder in sorted(p for p in home.iterdir() if p.is_dir()) if home.is_dir() else []:
        if folder.name not in known:
            if (folder / MANIFEST).is_file() and folder.name not in elsewhere:
                report.unregistered.append(folder.name)
            continue
        if folder.name in live:
            continue
        for found in layout.snapshot_folders(folder, include_temporary=True):
            relative = str(found.relative_to(home))
            if layout.is_temporary(found):
                report.temporaries.append(relative)
            elif relative not in listed:
                report.orphans.append(relative)
    if mirror is not None:
        _collect_in_store(mirror, registry, sorted(known - live), listed, report)
        if not dry_run:
            report.freed_bytes = before - sum(mirror.sizes(mirror.root).values())
        return report
    report.freed_bytes += layout.freed_bytes([home / relative for relative in (*report.orphans, *report.temporaries)])
    for relative in (*report.orphans, *report.temporaries) if not dry_run else ():
        layout.remove(home / relative)
    return report


def _collect_in_store(
    mirror: storage.Mirror, registry: Registry, runs: list[str], listed: set[str], report: GarbageReport
) -> None:
    """`collect_garbage`'s sweep for a home in object storage, where the store, not the working
    copy, holds every run: snapshots without a manifest (a kill mid-upload) or without a row, then
    the segments no complete snapshot lists any more."""
    home = registry.home
    report.temporaries, report.orphans = [], []
    for run_id in runs:
        for path, complete in remote.run_snapshots(paths.run_dir(home, run_id)).items():
            relative = str(path.relative_to(home))
            if not complete:
                report.temporaries.append(relative)
            elif relative not in listed:
                report.orphans.append(relative)
    if report.dry_run:
        return
    for relative in (*report.orphans, *report.temporaries):
        snapshot.remove(home / relative)
    for run_id in runs:
        for checkpoints in remote.run_checkpoint_folders(paths.run_dir(home, run_id)):
            remote.collect_segments(mirror, checkpoints)


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
        snapshot.remove(registry.home / checkpoint.path)


def _keep_checkpoints(spec_json: str | None) -> int | None:
    """The run's `meta.keep_checkpoints` (its default when the spec does not say), or None when
    there is no stored spec that validates. The env id is not looked up: that would import
    Gymnasium, and the spec was checked when it was stored."""
    try:
        return recorded_spec(json.loads(spec_json)).meta.keep_checkpoints if spec_json else None
    except (SpecError, ValueError):
        return None


def _upload_run(folder: Path) -> None:
    """A run folder copied into a home in object storage goes to the store before the registry
    hears of it: each complete snapshot as a snapshot is uploaded (segments by reference), then
    every other file (its metrics log, run.json). Nothing in a local home."""
    mirror = storage.mirror_of(folder)
    if mirror is None:
        return
    snapshots = [path for path in layout.snapshot_folders(folder) if layout.is_complete(path)]
    for path in snapshots:
        remote.upload(path, path)
    rest = [file for file in sorted(folder.rglob("*")) if file.is_file() and "checkpoints" not in file.parts]
    mirror.put_many([(file, mirror.key(file)) for file in rest])


# ---------------------------------------------------------------------------------------------
# rebuild


@dataclass
class RebuildReport:
    """What `rlrun db rebuild` restored from the run folders and the searches' manifests."""

    restored: list[str] = field(default_factory=list)
    already_known: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)  # searches restored, with their trials
    problems: list[str] = field(default_factory=list)  # folders that could not be read, and why
    sessions: int = 0
    checkpoints: int = 0
    evaluations: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rebuild(registry: Registry) -> RebuildReport:
    """Add to the registry every run whose folder holds a manifest and which it does not list yet
    (all of them, after the registry file was lost). Parents go before their forks. In a home in
    object storage the store is read, not the working copy (which may hold none of the home, or
    runs deleted since): every run.json and search manifest comes down to the working copy first,
    and each snapshot is read from the store without its large files (`remote.stored_snapshots`)."""
    home = registry.home
    report = RebuildReport()
    known = registry.run_ids()
    found: list[RestoredRun] = []
    for manifest in _stored_manifests(home, f"*/{MANIFEST}"):
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
    _rebuild_searches(registry, report, found)
    return report


def _rebuild_searches(registry: Registry, report: RebuildReport, runs: list[RestoredRun]) -> None:
    """Add every search whose manifest (`searches/<id>.json`) the registry does not list, with its
    trials, after the runs (trials link to them). A run whose manifest names a trial the search's
    manifest does not link (the two files are written one after the other) is linked to it."""
    links = {(r.trial["search_id"], r.trial["number"]): (r.run.id, r.trial["params"]) for r in runs if r.trial}
    known = registry.search_ids()
    for path in _stored_manifests(registry.home, f"{paths.SEARCHES_DIR}/*.json"):
        try:
            found = read_search_manifest(path)
        except (OSError, ValueError, KeyError, TypeError) as error:
            report.problems.append(f"{paths.SEARCHES_DIR}/{path.name}: {type(error).__name__}: {error}")
            continue
        if found.search.id in known:
            continue
        trials = {t["number"]: t for t in found.trials}
        for (search_id, number), (run_id, params) in links.items():
            if search_id != found.search.id:
                continue
            if number not in trials:
                trials[number] = {
                    "number": number,
                    "run_id": run_id,
                    "params_json": json.dumps(params),
                    "state": "running",
                    "value": None,
                    "intermediate_json": "[]",
                    "system_attrs_json": "{}",
                    "note": None,
                    "created_at": found.search.created_at,
                    "finished_at": None,
                }
            elif trials[number]["run_id"] is None:
                trials[number] = {**trials[number], "run_id": run_id}
        registry.restore_search(found.search, [trials[n] for n in sorted(trials)], found.lineage)
        report.searches.append(found.search.id)


def _stored_manifests(home: Path, pattern: str) -> list[Path]:
    """The home's manifests matching `pattern` (a glob under the home), as files in the working
    copy: in a home in object storage, the store's, each brought down whole first."""
    mirror = storage.mirror_of(home)
    if mirror is None:
        return sorted(home.glob(pattern)) if home.is_dir() else []
    found = [mirror.path(key) for key in mirror.matching(pattern)]
    return [path for path in found if storage.pull(path)]


# ---------------------------------------------------------------------------------------------
# import


def check_imports(registry: Registry, folders: list[Path]) -> list[tuple[Path, RestoredRun]]:
    """Each folder's run, read and verified as `rlrun enjoy` reads a run folder from elsewhere:
    BadInput (nothing written) when a folder is not a run folder, a snapshot does not match its
    manifest, or its id or name is taken in this home (or twice among the folders)."""
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
        if (
            run.id in registry.run_ids()
            or paths.run_dir(registry.home, run.id).exists()
            or run.id in [r.run.id for r in runs]
        ):
            raise BadInput(
                f"run {run.id} is already in {paths.home_address(registry.home)}; nothing imported"
                f" (`rlrun show {run.id}`)"
            )
        holder = registry.name_exists(run.name) if run.name else None
        if holder is not None or (run.name and run.name in [r.run.name for r in runs]):
            raise BadInput(
                f"run {run.id} is named {run.name!r}, a name run {holder} already has in"
                f" {paths.home_address(registry.home)}; nothing imported"
            )
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
            _upload_run(destination)
            registry.restore_run(restored)
        except BaseException:
            if not move:
                shutil.rmtree(destination, ignore_errors=True)
            raise
        imported.append(registry.resolve(restored.run.id))
    return imported

"""Runs read straight from their folder: a run copied from a cluster or a colleague, outside any
runs home, that `rlrun enjoy` and `rlrun show` (and `plot`) use where it is.

The folder is read as `rlrun db rebuild` reads one (`rlrun.maintenance.read_run_folder`: its
`run.json` and its snapshots), after every snapshot file is checked against its snapshot's
MANIFEST.json, into a registry in memory that never writes a file: the folder is not touched and no
registry is. `rlrun import` is what adds such a run to a home.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlrun import paths
from rlrun.errors import BadInput
from rlrun.refs import RunRef
from rlrun.registry import Registry, RestoredRun
from rlrun.registry.resolve import is_inside


class _Detached(Registry):
    """A registry in memory for one run read from its folder: its rows are never written back."""

    def _sync_manifest(self, tx: Any, run_id: str) -> None:
        """The folder is someone else's copy: leave its run.json as it is."""


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
    from rlrun.maintenance import read_run_folder

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

"""What each tracker got of a session, in `<session folder>/trackers.json`: the tracker's run, the
frame it has points up to, the points not delivered and the last error. Written when a session
closes its trackers (and by `rlrun track`), read by `rlrun show` (through `rlrun.catalog`);
standard library only.

In a home in object storage the store's copy is the one read (another machine may have written
it). A session writes its copy into the working copy as it closes its trackers (which may take
seconds) and `publish`es it under its lease afterwards, so a superseded attempt's report never
lands over a newer one's."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlrun import storage
from rlrun.fsutil import atomic_write

FILE_NAME = "trackers.json"


@dataclass(frozen=True)
class Delivered:
    tracker: str
    run: str | None
    """The tracker's id of the run (None: never reached)."""
    undelivered: int
    """Points the tracker did not get (`rlrun track` re-sends the history)."""
    error: str | None = None
    """The tracker's last error while points were still to deliver (None: all arrived)."""
    last_frame: int | None = None
    """The frame of the newest point the tracker took (None: none; a file older than this field)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def path(session_dir: Path) -> Path:
    return session_dir / FILE_NAME


def read(session_dir: Path) -> dict[str, Delivered]:
    raw = storage.published(path(session_dir))
    if raw is None:
        return {}
    try:
        document = json.loads(raw)
        return {name: Delivered(**entry) for name, entry in document.items()}
    except (ValueError, TypeError):
        return {}


def write(session_dir: Path, reports: list[Delivered], *, publish: bool = True) -> None:
    """Record these trackers' reports, keeping the others'; in the store too unless `publish` is
    False (a session publishes under its lease: `publish`)."""
    document = {name: entry.to_json() for name, entry in read(session_dir).items()}
    document.update({report.tracker: report.to_json() for report in reports})
    atomic_write(path(session_dir), json.dumps(document, indent=2, sort_keys=True).encode())
    if publish:
        storage.publish(path(session_dir))


def publish(session_dir: Path) -> None:
    """Copy the session's report to its home's store (nothing in a local home)."""
    if path(session_dir).is_file():
        storage.publish(path(session_dir))

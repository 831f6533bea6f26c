"""Whether two runs are the same run, bit for bit: the question a regression gate asks before any
statistics (DESIGN.md, "Comparisons").

A session's fingerprint covers what "bit for bit" means for an exact resume (tests/same_run.py):
its metrics log without the columns that measure the machine (`metrics_log.WALL_CLOCK`: wall time
and frames per second differ between identical trainings), and its final snapshot, the newest the
registry records. The snapshot is taken as its MANIFEST.json lists it (the sha256 of every file;
the registry's own sha256 is the manifest's, checked first) with one exception: meta.json names the
run it belongs to (`run_id`) and the session clock's wall time, so a twin run's differs there and
nowhere else; it enters the fingerprint as its JSON without those two. Read-only; standard library
only.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from rlrun import paths
from rlrun.catalog.targets import FoundRun
from rlrun.session import metrics_log
from rlrun.snapshot import verify
from rlrun.snapshot.layout import META, json_bytes

IDENTITY_KEYS = ("run_id",)
"""meta.json's keys that say which run a snapshot belongs to, not what it holds."""
MACHINE_CLOCK = ("wall_time",)
"""The clock's fields in meta.json that measure the machine (as the log's `WALL_CLOCK` columns do)."""


def fingerprints(runs: Sequence[FoundRun]) -> list[str | None]:
    """Each session's fingerprint, run by run in the order given, session by session; None for
    a session with no snapshot or no metrics log (nothing to be identical by)."""
    return [
        session_fingerprint(found, session.index)
        for found in runs
        for session in sorted(found.detail.sessions, key=lambda s: s.index)
    ]


def identical(new: Sequence[FoundRun], old: Sequence[FoundRun]) -> bool:
    """Whether the runs `new` trained exactly what the runs `old` did, session for session."""
    mine, theirs = fingerprints(new), fingerprints(old)
    return len(mine) == len(theirs) and None not in mine and mine == theirs


def session_fingerprint(found: FoundRun, index: int) -> str | None:
    detail = found.detail
    checkpoints = [c for c in detail.checkpoints if c.session_index == index]
    log = metrics_log.path(paths.session_dir(found.home, detail.run.id, index))
    metrics_log.download(log)
    if not checkpoints or not log.is_file():
        return None
    newest = max(checkpoints, key=lambda c: c.frame)
    folder = found.home / newest.path
    # The registry's hash covers the manifest, the manifest every file's hash: the files themselves
    # need not be read (a home in object storage brings the snapshot into its working copy first).
    manifest = verify(folder, newest.sha256, deep=False)
    files = dict(manifest["files"])
    meta = json.loads((folder / META).read_text(encoding="utf-8"))
    files[META] = hashlib.sha256(json_bytes(_trained(meta))).hexdigest()
    digest = hashlib.sha256(json_bytes({"frame": newest.frame, "files": files, "logs": manifest.get("logs", {})}))
    digest.update(_training_cells(log))
    return digest.hexdigest()


def _trained(meta: dict[str, object]) -> dict[str, object]:
    """meta.json without what names the run or measures the machine."""
    kept = {key: value for key, value in meta.items() if key not in IDENTITY_KEYS}
    if isinstance(clock := kept.get("clock"), dict):
        kept["clock"] = {key: value for key, value in clock.items() if key not in MACHINE_CLOCK}
    return kept


def _training_cells(log: Path) -> bytes:
    """The metrics log as written, without the columns that measure the machine."""
    with open(log, newline="", encoding="utf-8") as file:
        lines = list(csv.reader(file))
    if not lines:
        return b""
    keep = [i for i, name in enumerate(lines[0]) if name not in metrics_log.WALL_CLOCK]
    return "\n".join(",".join(line[i] for i in keep) for line in lines if len(line) == len(lines[0])).encode()

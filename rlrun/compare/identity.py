"""Whether two runs are the same run, bit for bit: the question a regression gate asks before any
statistics (DESIGN.md, "Comparisons").

A session's fingerprint covers what "bit for bit" means for an exact resume (tests/same_run.py):
its metrics log without the columns that measure the machine (`metrics_log.WALL_CLOCK`: wall time
and frames per second differ between identical trainings), and its final snapshot, the newest the
registry records. The snapshot is taken as its MANIFEST.json lists it (the sha256 of every file;
the registry's own sha256 is the manifest's, checked first) with one exception: meta.json names the
run it belongs to (`run_id`) and the session clock's wall time, so a twin run's differs there and
nowhere else; it enters the fingerprint as its JSON without those two and without the software the
session ran on (`stack`), which is judged apart: runs are identical only on the same software, and
when their bits are equal and their software is not, the verdict says so (`judge`). Read-only;
standard library only.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlrun import paths
from rlrun.catalog.targets import FoundRun
from rlrun.session import metrics_log
from rlrun.session.stack import stack_change
from rlrun.snapshot import verify
from rlrun.snapshot.layout import META, json_bytes

IDENTITY_KEYS = ("run_id",)
"""meta.json's keys that say which run a snapshot belongs to, not what it holds."""
MACHINE_CLOCK = ("wall_time",)
"""The clock's fields in meta.json that measure the machine (as the log's `WALL_CLOCK` columns do)."""
STACK = "stack"
"""meta.json's key for the software the session ran on (`rlrun.session.stack`): judged apart from the bits,
so a verdict can say that two runs' bits are equal and their software is not."""


@dataclass(frozen=True)
class Session:
    """What a session is identical by: its fingerprint, and the software it ran on (None: not recorded)."""

    fingerprint: str
    stack: dict[str, str] | None


def sessions(runs: Sequence[FoundRun]) -> list[Session | None]:
    """Each session's record, run by run in the order given, session by session; None for a
    session with no snapshot or no metrics log (nothing to be identical by)."""
    return [
        session_record(found, session.index)
        for found in runs
        for session in sorted(found.detail.sessions, key=lambda s: s.index)
    ]


def fingerprints(runs: Sequence[FoundRun]) -> list[str | None]:
    """Each session's fingerprint (`sessions`)."""
    return [None if record is None else record.fingerprint for record in sessions(runs)]


def identical(new: Sequence[FoundRun], old: Sequence[FoundRun]) -> bool:
    """Whether the runs `new` trained exactly what the runs `old` did, session for session, on
    the same software."""
    return judge(new, old)[0]


def judge(new: Sequence[FoundRun], old: Sequence[FoundRun]) -> tuple[bool, str | None]:
    """Whether `new` and `old` are identical and, when their bits are equal but the software they
    ran on is not (a run moved to a new stack), why not: the first session's change
    ("software changed: torch 2.13.0 → 2.14.0")."""
    mine, theirs = sessions(new), sessions(old)
    if len(mine) != len(theirs) or None in mine or None in theirs:
        return False, None
    pairs = [(a, b) for a, b in zip(mine, theirs, strict=True) if a is not None and b is not None]
    if any(a.fingerprint != b.fingerprint for a, b in pairs):
        return False, None
    for a, b in pairs:
        change = stack_change(b.stack, a.stack or {})
        if change is not None:
            return False, f"not identical: their bits are equal, but {change} (baseline → new)"
    return True, None


def session_fingerprint(found: FoundRun, index: int) -> str | None:
    record = session_record(found, index)
    return None if record is None else record.fingerprint


def session_record(found: FoundRun, index: int) -> Session | None:
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
    return Session(digest.hexdigest(), meta.get(STACK))


def _trained(meta: dict[str, object]) -> dict[str, object]:
    """meta.json without what names the run, measures the machine or names its software."""
    kept = {key: value for key, value in meta.items() if key not in (*IDENTITY_KEYS, STACK)}
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

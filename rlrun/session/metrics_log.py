"""The training metrics log: one CSV file per session, `<home>/<run>/s<N>/metrics.csv`. This module
is the only one that knows its path, its columns, how it is written, read and cut back.

CSV because pandas, polars and any spreadsheet read it without extra dependencies, and because it
grows by appending a line per log event (`meta.log_frequency`), so a snapshot never rewrites the
history. The columns:

    frame, episode, opt_step, wall_time   the session clock at the log event
    fps                                   frames per second of the process that wrote the row
    return_mean, length_mean              over the latest finished training episodes
    <the algorithm's scalars>             `Agent.METRICS`, in that order

The header is written once, when the session's log is created, so a file's columns never change.
A scalar the algorithm reports that is not a column is left out; a column it did not report (no
update yet, say) is an empty cell. Numbers are written as Python writes them (`repr`), which reads
back to the same value, so a log cut back and rewritten is byte for byte what it was.

`wall_time` and `fps` measure the machine, not the training: two runs that trained identically
differ there and nowhere else (`TRAINING_COLUMNS` leaves them out).

A resume cuts the log back to the snapshot's frame (`create` with the rows `rows_up_to` kept)
before training continues, so an interrupted-and-resumed session's log equals the uninterrupted
one's. Rows are flushed and fsync'd before each snapshot is written, so the log always reaches at
least as far as the newest snapshot; a row torn by a kill (no line end yet) is never read. In a
home in object storage, the store's copy is put by the session's uploader (`upload_job`).

Standard library only: `rlrun show --metrics` and `rlrun export` read it without torch.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rlrun import paths, storage
from rlrun.fsutil import atomic_write

if TYPE_CHECKING:
    from rlrun.registry import RunDetail

FILE_NAME = "metrics.csv"
CLOCK = ("frame", "episode", "opt_step", "wall_time")
COMMON = ("fps", "return_mean", "length_mean")
"""Columns every algorithm's log has after the clock."""
WALL_CLOCK = frozenset({"wall_time", "fps"})
"""Columns that measure the machine: they differ between otherwise identical runs."""
_INTEGERS = frozenset({"frame", "episode", "opt_step"})

Value = int | float | None
Row = dict[str, Value]


def path(session_dir: Path) -> Path:
    return session_dir / FILE_NAME


def columns(scalars: Sequence[str]) -> tuple[str, ...]:
    """A session's columns: the clock, the common ones, then the algorithm's scalars."""
    fixed = CLOCK + COMMON
    return fixed + tuple(name for name in dict.fromkeys(scalars) if name not in fixed)


def training_columns(names: Sequence[str]) -> list[str]:
    """The columns that must be equal between an interrupted-and-resumed run and a straight one."""
    return [name for name in names if name not in WALL_CLOCK]


# ---------------------------------------------------------------------------------------------
# Cells


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool | int):
        return str(int(value))
    return repr(float(value))


def parse_value(column: str, text: str) -> Value:
    if text == "":
        return None
    return int(text) if column in _INTEGERS else float(text)


# ---------------------------------------------------------------------------------------------
# Reading


def read_rows(file: Path) -> tuple[list[str], list[Row]]:
    """The header and every complete row (a last line without its line end was torn by a kill
    mid-write, and is not a row)."""
    text = file.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    if not lines:
        return [], []
    reader = csv.reader(lines)
    header = next(reader)
    rows = [{name: parse_value(name, cell) for name, cell in zip(header, cells, strict=True)} for cells in reader]
    return header, rows


def read(file: Path) -> dict[str, list[Value]]:
    """The log as columns (`pandas.DataFrame(read(path))` makes a data frame of it)."""
    header, rows = read_rows(file)
    return {name: [row[name] for row in rows] for name in header}


def rows_up_to(file: Path, frame: int) -> list[Row]:
    """The rows a snapshot at `frame` has seen: those logged at or before it."""
    download(file)
    if not file.exists():
        return []
    return [row for row in read_rows(file)[1] if int(row["frame"] or 0) <= frame]


def latest(values: Sequence[Value]) -> float | None:
    """The last non-empty, finite value of a column."""
    for value in reversed(values):
        if value is not None and math.isfinite(value):
            return float(value)
    return None


# ---------------------------------------------------------------------------------------------
# In object storage
#
# A home in object storage (`rlrun.storage`) keeps the log where a local home does, in the working
# copy, and the store holds a copy put with every snapshot (`upload_job`, handed to the session's
# background uploader just before the snapshot's objects, `rlrun.session.uploads`) and when the
# session ends. So the store's log always reaches at least as far as the newest snapshot, which is
# all a resume needs: it cuts the log back to its snapshot's frame (`rows_up_to`) wherever it runs.
# Appending to an object is not possible; a whole upload of a few hundred kilobytes per snapshot is
# cheap beside the snapshot itself.


def upload_job(file: Path) -> Callable[[], None] | None:
    """A job that puts the log, as it is now (flushed), in the store: for the session's uploader
    (the file keeps growing meanwhile). None in a local home."""
    mirror = storage.mirror_of(file)
    if mirror is None or not file.exists():
        return None
    data, key = file.read_bytes(), mirror.key(file)
    return lambda: mirror.put_bytes(key, data)


def download(file: Path) -> None:
    """Replace the working copy's log with the store's, when the home is in object storage: the
    store's is the one the snapshots went with (a log left here by an earlier attempt is not)."""
    mirror = storage.mirror_of(file)
    if mirror is not None and (data := mirror.get_bytes(mirror.key(file))) is not None:
        atomic_write(file, data)


# ---------------------------------------------------------------------------------------------
# Writing


def _line(cells: Sequence[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue()


def _row_line(names: Sequence[str], row: Mapping[str, Any]) -> str:
    return _line([format_value(row.get(name)) for name in names])


class MetricsLog:
    """A session's log, open for appending. Rows reach the file only on `flush` (each snapshot,
    each heartbeat), never on their own: a session on a cluster flushes under its lease, so an
    attempt that lost it adds no row (`discard` drops what it still holds)."""

    def __init__(self, file: Path, names: Sequence[str]) -> None:
        self.path, self.columns = file, tuple(names)
        self._pending: list[str] = []
        self._file = open(file, "a", encoding="utf-8", newline="")  # noqa: SIM115  # closed by close()

    @classmethod
    def create(cls, file: Path, names: Sequence[str], rows: Iterable[Mapping[str, Any]] = ()) -> MetricsLog:
        """Start the log afresh with `rows` (what a resume keeps), replacing any file there
        atomically: a temporary file, fsync'd, renamed over it."""
        atomic_write(file, "".join([_line(names), *(_row_line(names, row) for row in rows)]).encode())
        return cls(file, names)

    def append(self, row: Mapping[str, Any]) -> None:
        self._pending.append(_row_line(self.columns, row))

    def flush(self, *, sync: bool = False) -> None:
        """Hand the rows to the OS; with `sync`, also to the disk (before a snapshot is written)."""
        self._file.write("".join(self._pending))
        self._pending.clear()
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())

    def discard(self) -> None:
        """Close without writing the rows not yet flushed."""
        self._pending.clear()
        self._file.close()

    def close(self) -> None:
        if not self._file.closed:
            self.flush(sync=True)
            self._file.close()


# ---------------------------------------------------------------------------------------------
# Several sessions


class SessionLog(NamedTuple):
    run_id: str
    session: int
    path: Path


def session_logs(home: Path, detail: RunDetail) -> list[SessionLog]:
    """Where each session of a run keeps its log (some may not have one yet)."""
    return [
        SessionLog(detail.run.id, s.index, path(paths.session_dir(home, detail.run.id, s.index)))
        for s in detail.sessions
    ]


def gather(logs: Iterable[SessionLog]) -> dict[str, list[Any]]:
    """Several sessions' logs as one table of columns: `run` and `session` first, then every
    column any of them has, in first-seen order (empty where a log lacks it)."""
    names: dict[str, None] = {}
    parts: list[tuple[SessionLog, list[Row]]] = []
    for log in logs:
        download(log.path)
        if log.path.exists():
            header, rows = read_rows(log.path)
            names.update(dict.fromkeys(header))
            parts.append((log, rows))
    table: dict[str, list[Any]] = {"run": [], "session": [], **{name: [] for name in names}}
    for log, rows in parts:
        table["run"] += [log.run_id] * len(rows)
        table["session"] += [log.session] * len(rows)
        for name in names:
            table[name] += [row.get(name) for row in rows]
    return table


def to_csv(table: Mapping[str, Sequence[Any]]) -> str:
    """A gathered table as CSV text, numbers written as in the logs."""
    names = list(table)
    count = len(table[names[0]]) if names else 0
    cell = {name: (str if name == "run" else format_value) for name in names}
    return "".join([_line(names), *(_line([cell[n](table[n][i]) for n in names]) for i in range(count))])


def metrics(reference: str = "latest", *, home: Path | str | None = None) -> dict[str, list[Any]]:
    """The Python API: a run's training metrics, every session, as columns (`run`, `session`,
    then the log's), ready for `pandas.DataFrame(...)` or `polars.DataFrame(...)`.

    Args:
        reference: The run: latest, latest~N, a row, an id, prefix or name, or a run folder.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        Columns by name, each a list with one value per logged step.
    """
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        detail = registry.get_run(registry.resolve(reference).id)
    return gather(session_logs(root, detail))


def unknown_metric(name: str, available: Iterable[str]) -> str | None:
    """Why `name` cannot be drawn (not a logged scalar), with the closest one; None if it can."""
    import difflib

    scalars = [n for n in dict.fromkeys(available) if n not in ("run", "session", "frame")]
    if name in scalars:
        return None
    close = difflib.get_close_matches(name, scalars, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    logged = f" (logged: {', '.join(scalars)})" if scalars else " (no metrics logged yet)"
    return f"no metric {name!r} in the metrics logs{hint}{logged}"

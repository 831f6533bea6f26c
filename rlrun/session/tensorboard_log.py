"""TensorBoard event files beside each session's metrics log, in `<home>/<run>/s<N>/tb/`, so that
`tensorboard --logdir runs/` shows every session's curves (as `<run id>/s<N>/tb`).

Only with the optional extra (`pip install 'rlrun[tensorboard]'`); without it, or with
RLRUN_TENSORBOARD=0, nothing here runs and nothing is imported. The metrics log stays the record
(`rlrun.session.metrics_log`); these files mirror it, with each row's step its frame.

In a home in object storage the event files follow the home: each snapshot and the session's end
hand the files that grew to the session's uploader (`Mirror.upload_jobs`, `rlrun.session.uploads`),
which puts them in the store beside the metrics log.

After a resume, the events past the snapshot's frame (written by the process that was stopped)
are purged, through SummaryWriter's `purge_step`: curves continue without duplicated or
out-of-order points. A session folder without event files yet (a fork, a run from before the extra
was installed) first gets the rows the log already holds.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rlrun import storage
from rlrun.session.metrics_log import CLOCK
from rlrun.trackers import metric_name as tag

DIR_NAME = "tb"
ENABLE_ENV = "RLRUN_TENSORBOARD"
"""Set to 0 to write no event files even with tensorboard installed."""


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0" and importlib.util.find_spec("tensorboard") is not None


class Mirror:
    """Writes metrics rows and evaluations as TensorBoard scalars, stepped by frame."""

    def __init__(self, writer: Any, folder: Path) -> None:
        self.writer, self.folder = writer, folder
        self._put: dict[str, int] = {}  # event file -> its size when last handed to the uploader

    def add(self, row: Mapping[str, Any]) -> None:
        frame = row["frame"]
        for column, value in row.items():
            if column not in CLOCK and value is not None:
                self.writer.add_scalar(tag(column), value, global_step=frame)

    def add_evaluation(self, frame: int, mean: float) -> None:
        self.writer.add_scalar("eval/return_mean", mean, global_step=frame)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def upload_jobs(self) -> list[tuple[str, Callable[[], None]]]:
        """Jobs that put each event file that grew since the last call, as it is now (flushed), in
        the store of a home in object storage (none in a local home), each with its file's name."""
        mirror = storage.mirror_of(self.folder)
        if mirror is None:
            return []
        jobs: list[tuple[str, Callable[[], None]]] = []
        for file in sorted(self.folder.glob("events.out.tfevents.*")):
            size = file.stat().st_size
            if self._put.get(file.name) == size:
                continue
            data, key = file.read_bytes(), mirror.key(file)
            self._put[file.name] = len(data)
            jobs.append((f"{DIR_NAME}/{file.name}", lambda data=data, key=key: mirror.put_bytes(key, data)))  # type: ignore[misc]
        return jobs


def open_mirror(session_dir: Path, frame: int, kept: Iterable[Mapping[str, Any]]) -> Mirror | None:
    """The session's event writer, continuing after `frame` (None without tensorboard)."""
    if not enabled():
        return None
    from torch.utils.tensorboard import SummaryWriter

    folder = session_dir / DIR_NAME
    started = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
    mirror = Mirror(SummaryWriter(str(folder), purge_step=frame + 1 if started else None), folder)
    if not started:
        for row in kept:
            mirror.add(row)
    return mirror

"""Delivery in the background: a tracker that is down or slow never stops training.

Each tracker gets a thread and a bounded queue. The training loop only puts points on the queue (a
full queue drops the point and counts it); the thread starts the tracker run, sends the history a
resume re-sends, then the live points in batches, retrying each failed call with backoff. Closing
waits a bounded time for the queue to drain, then writes what was not delivered beside the session
(`rlrun.trackers.status`) and leaves the thread behind (a daemon: it dies with the process).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlrun.trackers import import_package, make_tracker, status
from rlrun.trackers.base import Tracker
from rlrun.trackers.points import Attachment, Identity, Point, evaluation_point, history, row_point

CAPACITY = 10_000
"""Points queued per tracker at most; more are dropped (and counted) while it is unreachable."""
BATCH = 200
RETRY_FIRST, RETRY_MOST = 0.5, 30.0
CLOSE_SECONDS_ENV = "RLRUN_TRACKER_CLOSE_SECONDS"
"""How long a closing session waits for a tracker to take what is queued (default 30 s)."""
_FINISH = object()


def describe(error: BaseException, at_most: int = 200) -> str:
    """An error in one line of at most `at_most` characters (a tracker's can be a page)."""
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= at_most else text[: at_most - 1] + "…"


def close_seconds() -> float:
    return float(os.environ.get(CLOSE_SECONDS_ENV, "30"))


class _GaveUp(Exception):
    """The session closed and the wait for this tracker is over."""


class Delivery:
    """One tracker's thread, queue and account of what it was given and what arrived."""

    def __init__(self, tracker: Tracker, identity: Identity, rewind: bool, backlog: Sequence[Point]) -> None:
        self.tracker, self.identity, self.rewind = tracker, identity, rewind
        self.backlog = list(backlog)
        self.queue: queue.Queue[Any] = queue.Queue(CAPACITY)
        self.given, self.arrived, self.dropped = len(self.backlog), 0, 0
        self.last_frame: int | None = None  # of the newest point the tracker took
        self.run: str | None = None
        self.error: str | None = None
        self.deadline: float | None = None
        self.abandoned = False
        self.warning: str | None = None
        """The line that says the tracker cannot be reached, once, until the session takes it."""
        self._warned = False
        self.thread = threading.Thread(target=self._work, name=f"rlrun-{tracker.name}", daemon=True)
        self.thread.start()

    def put(self, item: Point | Attachment) -> None:
        """Queue a point (counted: what `rlrun track` can re-send) or a file (not: it is no point)."""
        point = not isinstance(item, Attachment)
        self.given += point
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += point

    def abandon(self) -> None:
        """Send nothing more (what is queued is dropped): the session's lease went to a newer attempt."""
        self.abandoned = True
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait((_FINISH, "", None))  # wakes the thread, which then ends

    def close(self, outcome: str, best: float | None, deadline: float) -> status.Delivered:
        self.deadline = deadline
        with contextlib.suppress(queue.Full):  # the thread is stuck with a full queue: it is given up on
            self.queue.put((_FINISH, outcome, best), timeout=max(0.0, deadline - time.monotonic()))
        self.thread.join(max(0.0, deadline - time.monotonic()))
        undelivered = self.given - self.arrived
        if self.thread.is_alive() and self.error is None:  # a call that never came back (a server that hangs)
            self.error = f"no answer within {close_seconds():g} s"
        error = self.error if undelivered or self.thread.is_alive() else None
        return status.Delivered(self.tracker.name, self.run, undelivered, error, self.last_frame)

    # -- the thread -----------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            self.run = self._retrying(self.tracker.start, self.identity, self.rewind)
            while self.backlog:
                chunk = self.backlog[:BATCH]
                self._send(chunk)
                del self.backlog[:BATCH]
            while True:
                batch, finish = self._next_batch()
                if batch:
                    self._send(batch)
                if finish is not None:
                    self._retrying(self.tracker.finish, *finish)
                    return
        except _GaveUp:
            return

    def _send(self, items: Sequence[Point | Attachment]) -> None:
        """Points, in one call; an attachment (the batch's last item, `_next_batch`) after them."""
        points = [item for item in items if isinstance(item, Point)]
        if points:
            self._send_points(points)
        for item in items:
            if isinstance(item, Attachment):
                self._retrying(self.tracker.send_file, item.path, item.folder)

    def _send_points(self, points: list[Point]) -> None:
        self._retrying(self.tracker.send, points)
        self.arrived += len(points)
        newest = max(point.frame for point in points)
        self.last_frame = newest if self.last_frame is None else max(self.last_frame, newest)

    def _next_batch(self) -> tuple[list[Point | Attachment], tuple[str, float | None] | None]:
        batch: list[Point | Attachment] = []
        item = self.queue.get()
        while True:
            if isinstance(item, tuple) and item[0] is _FINISH:
                return batch, (item[1], item[2])
            batch.append(item)
            if len(batch) >= BATCH or isinstance(item, Attachment):  # a file ends a batch: sent in its order
                return batch, None
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return batch, None

    def _retrying(self, action: Callable[..., Any], *args: Any) -> Any:
        delay = RETRY_FIRST
        while True:
            if self.abandoned:
                raise _GaveUp
            try:
                result = action(*args)
                self.error = None
                return result
            except Exception as error:  # any failure of the tracker: retried, never raised into training
                self.error = describe(error)
                if not self._warned:
                    self._warned = True
                    self.warning = (
                        f"tracker {self.tracker.name} cannot be reached ({self.error}); training goes"
                        " on, and what it misses is kept: `rlrun track` sends it later"
                    )
            if self.deadline is not None and time.monotonic() + delay > self.deadline:
                raise _GaveUp
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MOST)


class Relay:
    """A session's trackers, as the training loop sees them: `add` a metrics row, `add_evaluation`,
    `add_file` (a video, beside the history), `release` what was added once the metrics log has it
    (the loop's fenced flush: an attempt that lost its lease sends nothing the log did not get),
    `abandon` (lease lost) or `close` (bounded wait, then the account written in the session folder)."""

    def __init__(
        self,
        names: Sequence[str],
        identity: Identity,
        session_dir: Path,
        *,
        rewind: bool,
        backlog: Sequence[Point],
        wall_time: float,
        make: Callable[[str], Any] = make_tracker,
    ) -> None:
        self.session_dir = session_dir
        self.wall_time = wall_time
        """The wall time of the latest metrics row, which the next evaluation takes as its own."""
        self.deliveries = [Delivery(make(name), identity, rewind, backlog) for name in names]
        self.pending: list[Point | Attachment] = []

    def add(self, row: dict[str, Any]) -> None:
        point = row_point(row)
        self.wall_time = point.wall_time
        self.pending.append(point)

    def add_evaluation(self, frame: int, mean: float, std: float) -> None:
        self.pending.append(evaluation_point(frame, mean, std, self.wall_time))

    def add_file(self, frame: int, path: Path, folder: str) -> None:
        """A file for each tracker run, beside its history (an evaluation's video)."""
        self.pending.append(Attachment(frame, path, folder))

    def release(self) -> None:
        for point in self.pending:
            for delivery in self.deliveries:
                delivery.put(point)
        self.pending.clear()

    def warnings(self) -> list[str]:
        """The lines not yet said that a tracker cannot be reached (each tracker's once)."""
        said = []
        for delivery in self.deliveries:
            line, delivery.warning = delivery.warning, None
            if line:
                said.append(line)
        return said

    def taken(self) -> dict[str, int | None] | None:
        """The frame of the newest point each tracker took, once each took all it was given (None
        before: still delivering)."""
        if any(delivery.arrived < delivery.given for delivery in self.deliveries):
            return None
        return {delivery.tracker.name: delivery.last_frame for delivery in self.deliveries}

    def abandon(self) -> None:
        self.pending.clear()
        for delivery in self.deliveries:
            delivery.abandon()

    def close(self, outcome: str, best: float | None) -> list[status.Delivered]:
        self.release()
        deadline = time.monotonic() + close_seconds()
        reports = [delivery.close(outcome, best, deadline) for delivery in self.deliveries]
        status.write(self.session_dir, reports, publish=False)  # the session publishes it under its lease
        return reports


def open_relay(
    names: Sequence[str],
    identity: Identity,
    session_dir: Path,
    *,
    attempt: str,
    rows: Sequence[dict[str, Any]],
    evaluations: Sequence[dict[str, Any]],
) -> Relay | None:
    """The session's trackers (None when it has none), continuing after the `rows` and `evaluations`
    its snapshot kept: an attempt that continues a tracker run ("resume", "retry") rewinds it, and
    every attempt sends the kept history first (a fork's new tracker run gets its parent's)."""
    if not names:
        return None
    for name in names:  # here, before training: imported on the thread, it would hold the loop up mid-run
        import_package(name)
    return Relay(
        names,
        identity,
        session_dir,
        rewind=attempt not in ("train", "fork"),
        backlog=history(rows, evaluations),
        wall_time=float(rows[-1].get("wall_time") or 0.0) if rows else 0.0,
    )

"""A session's calls to its object store, made off the training thread.

Every call a session makes to the store of a home in object storage (a snapshot's objects, the
metrics log and TensorBoard files as they stood at a snapshot, a retired snapshot's deletion) is a
*job* for one background thread, run in the order handed over: a deletion of retired segments runs
after the uploads handed over before it, so it never takes a segment a snapshot in flight needs,
and the log's copy reaches the store before the snapshot that follows it. The training thread waits
for the store only when `in_flight()` snapshots are staged and still uploading
(`rlrun.session.checkpoints`), and at the end of a session, which ends uploaded.

No registry transaction is held across a call to the store. Each job first checks the session's
lease in a short transaction of its own (`Registry.fenced`): once a newer attempt has taken the
session over, this attempt's jobs raise LeaseLost and put nothing more in the store. A store that
does not answer is tried again (`storage.patiently`) while training goes on.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from rlrun import storage

IN_FLIGHT_ENV = "RLRUN_SNAPSHOTS_IN_FLIGHT"
DEFAULT_IN_FLIGHT = 4
"""Snapshots a session may have staged on local disk and uploading at once: the next one waits for
the oldest to be uploaded. Each costs a snapshot's size on disk (shared replay segments once)."""

Job = Callable[[], object]


def in_flight() -> int:
    """How many snapshots may be uploading at once (`IN_FLIGHT_ENV`, at least 1)."""
    return max(1, int(os.environ.get(IN_FLIGHT_ENV) or DEFAULT_IN_FLIGHT))


class Uploads:
    """The store jobs of one session, run one at a time, in order, by a background thread;
    `fence` checks the session's lease (a short registry transaction) before each. The thread is a
    daemon: a process that ends without waiting for it (a failed session) is not held by a store
    that does not answer."""

    def __init__(self, fence: Callable[[], None]) -> None:
        self._fence = fence
        self._queue: queue.SimpleQueue[tuple[Job, Future[object]] | None] = queue.SimpleQueue()
        self._jobs: deque[Future[object]] = deque()
        self._closed = False
        self._newest: dict[str, Job] = {}
        self._thread = threading.Thread(target=self._work, name="rlrun-upload", daemon=True)
        self._thread.start()

    def submit(self, job: Job, *, watched: bool = True) -> Future[object]:
        """Run `job` after every job handed over before it; its future says how it went. A job
        not `watched` is the caller's to wait for (`check` and `drain` leave it alone)."""
        done: Future[object] = Future()
        self._queue.put((job, done))
        if watched:
            self._jobs.append(done)
        return done

    def submit_newest(self, name: str, job: Job) -> None:
        """Hand over `job`, the newest copy of the file `name` (a log as it stands now): run in
        its turn, it puts the newest copy handed over by then, and a copy already superseded is
        never put (a store that does not answer holds one copy of each file here, not one per
        snapshot)."""
        self._newest[name] = job
        taken: list[Job] = []  # kept across the tries of a store that does not answer

        def put_newest() -> object:
            if not taken:
                newest = self._newest.pop(name, None)
                if newest is None:
                    return None
                taken.append(newest)
            return taken[0]()

        self.submit(put_newest)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            job, done = item
            if self._closed or not done.set_running_or_notify_cancel():
                done.cancel()
                continue
            try:
                self._fence()
                done.set_result(storage.patiently(job))
            except BaseException as error:  # raised in the training thread (`check`, `drain`)
                done.set_exception(error)

    def check(self) -> None:
        """Raise the error of a job that ended in one (the oldest first); forget those that ended."""
        while self._jobs and self._jobs[0].done():
            self._jobs.popleft().result()

    def drain(self) -> None:
        """Wait for every job handed over; raise the first error."""
        while self._jobs:
            self._jobs.popleft().result()

    def close(self) -> None:
        """Drop the jobs not started (a session that failed: nothing waits for them); one running
        ends on its own."""
        self._closed = True
        self._jobs.clear()
        self._queue.put(None)

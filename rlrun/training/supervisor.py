"""The supervisor of local worker processes: the sessions of a local run, the trials of a search
that trains several at once. It starts them (forked from a zygote that imported torch but ran
nothing, or spawned; never forked from this process, whose torch threads and SQLite connections
do not survive a fork: `rlrun.training.zygote`), at most K at a time from a queue of pending work,
relays their messages, passes stops on to them, and reaps them; `run` returns only when every
process it started has ended and been reaped.

Messages: each worker has a pipe of its own, written synchronously (no feeder thread, no lock
shared with other workers), so a worker killed at any moment, even mid-message, costs only its own
channel: the others' words still come, and the supervisor waits on every pipe and every process at
once (`multiprocessing.connection.wait`). A dead worker's pipe is read to its end before its death
is judged silent, so every word it sent before it died is heard first.

Stops: each worker polls a stop request of its own, one integer shared with it. A signal (a
positive number) stops the whole group, whoever took it: the supervisor (the first SIGINT/SIGTERM;
a second one kills every worker and exits with 128 + the signal), the caller, or a worker itself.
Any other request the caller makes for one worker (a search's prune) stops only that worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.training import zygote

LAST_WORDS_SECONDS = 2.0
"""How long a dead worker's pipe may still stay open (a child of its own holding it) before its
death is judged without the rest of its words."""
POLL_SECONDS = 0.5
"""How often a quiet supervisor looks for dead workers and passes stops on."""
TRACKER_EXIT_SECONDS = 5.0
"""How long the resource tracker the run started is waited for as the run ends (`stop_resource_tracker`)."""

OnMessage = Callable[[int, Any], bool]
"""Called with a worker's key and each message it sends, in the order sent; True when the message
was the worker's last word (how it ended): the worker is then awaited and its place given to the
next pending work."""
OnSilentDeath = Callable[[int, "int | None"], None]
"""Called with a worker's key and exit code when it ended without its last word (killed, crashed)."""


@dataclass(frozen=True)
class Work:
    """What one worker process does: `target(*args, outbox, shared_stop)` in the worker process,
    where `outbox.put(message)` sends a message and `StopRequest(shared_stop)` is the worker's stop."""

    key: int
    """How the callbacks name this worker."""
    target: Callable[..., None]
    """A top-level function: it is pickled by name."""
    args: tuple[Any, ...] = ()
    stop: StopRequest = field(default_factory=StopRequest)
    """The caller's stop for this worker: a request made here, at any time, is passed on to it."""
    name: str = "rlrun-worker"
    """The process's name, as `ps` shows it."""


class Outbox:
    """A worker's side of its pipe. Sends are whole messages, one thread at a time."""

    def __init__(self, connection: Any, heard: Any = None) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self._sent = 0
        self._heard = heard
        """How many of this worker's messages the supervisor has delivered (a shared integer)."""

    def put(self, message: Any) -> None:
        with self._lock:
            self._connection.send(message)
            self._sent += 1

    def wait_heard(self) -> None:
        """Wait until the supervisor has delivered every message sent so far, and passed on any
        stop its callbacks asked for meanwhile (a callback's answer to an evaluation). Returns at
        once when the supervisor has gone: the worker is then an orphan, and ends on its own."""
        if self._heard is None:
            return
        while self._heard.value < self._sent and not zygote.supervisor_gone():
            time.sleep(0.001)


def _worker_main(
    env: dict[str, str],
    target: Callable[..., None],
    args: tuple[Any, ...],
    connection: Any,
    shared_stop: Any,
    heard: Any = None,
) -> None:
    with zygote.worker(env):
        try:
            target(*args, Outbox(connection, heard), shared_stop)
        finally:
            connection.close()  # the supervisor reads to the pipe's end, then judges the exit


@dataclass
class _Worker:
    work: Work
    process: Any
    stop: StopRequest
    """Shared with the process."""
    inbox: Any
    """The supervisor's end of the worker's pipe; None once read to its end."""
    heard: Any = None
    """How many of its messages were delivered (shared with the process: `Outbox.wait_heard`)."""

    def close_inbox(self) -> None:
        if self.inbox is not None:
            self.inbox.close()
            self.inbox = None


class Supervisor:
    def __init__(
        self,
        on_message: OnMessage,
        on_silent_death: OnSilentDeath,
        *,
        at_most: int,
        stop: StopRequest | None = None,
        handle_signals: bool = True,
    ) -> None:
        self.on_message, self.on_silent_death = on_message, on_silent_death
        self.at_most = at_most
        self.stop = stop or StopRequest()
        """The whole group's stop: SIGINT/SIGTERM request it, and so may the caller at any time."""
        self.handle_signals = handle_signals
        """False: leave signal handling to the caller (outside the main thread it is left anyway)."""
        self._running: dict[int, _Worker] = {}

    def run(self, pending: Iterable[Work | None]) -> int:
        """Run the work `pending` yields, at most `at_most` at once, until it is exhausted and every
        worker has ended; the signal that stopped the group, or 0. A None it yields means nothing
        may start yet: it is asked again at the next look (a worker's message, or `POLL_SECONDS`),
        and the run ends if no worker is left to change that. Work pulled after a stop still
        starts, and is asked to stop at once: a caller that should start nothing more stops yielding."""
        context = multiprocessing.get_context("spawn")  # its values and pipes serve forked workers too
        tracker_was_running = _tracker_running()
        try:
            with self._signals(), zygote.workers(os.environ) as make_process:
                self._supervise(iter(pending), context, make_process)
        finally:
            for worker in self._running.values():  # only after an error: a normal end leaves none
                worker.close_inbox()
        if not tracker_was_running:  # the caller's own is left as it was found
            stop_resource_tracker()
        return self.stop.signal

    def _signals(self) -> contextlib.AbstractContextManager[Any]:
        return stop_on_signals(self.stop, self._kill_all) if self.handle_signals else contextlib.nullcontext()

    def _kill_all(self) -> None:
        for worker in self._running.values():
            if worker.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGKILL)

    def _supervise(self, pending: Iterator[Work | None], context: Any, make_process: Callable[..., Any]) -> None:
        while True:
            self._start_while_room(pending, context, make_process)
            if not self._running:
                return
            self._pass_on_stops()
            inboxes = {worker.inbox: key for key, worker in self._running.items() if worker.inbox is not None}
            sentinels = [worker.process.sentinel for worker in self._running.values()]
            for ready in wait([*inboxes, *sentinels], timeout=POLL_SECONDS):
                if ready in inboxes and inboxes[ready] in self._running:
                    self._read(inboxes[ready])
            self._reap_silent_deaths()

    def _start_while_room(self, pending: Iterator[Work | None], context: Any, make_process: Callable[..., Any]) -> None:
        while len(self._running) < self.at_most and (work := next(pending, None)) is not None:
            stop = StopRequest(context.Value("i", 0))
            heard = context.Value("q", 0, lock=False)  # written here only
            inbox, outbox = context.Pipe(duplex=False)
            process = make_process(
                target=_worker_main,
                name=work.name,
                args=(dict(os.environ), work.target, work.args, outbox, stop.shareable(), heard),
            )
            self._running[work.key] = _Worker(work, process, stop, inbox, heard)
            self._pass_on_stops()  # before it starts: a worker started after a stop stops at once
            try:
                process.start()
            finally:
                outbox.close()  # the worker's copy alone keeps it open: its death ends the pipe

    def _pass_on_stops(self) -> None:
        for worker in self._running.values():
            self._adopt_signal(worker)
        for worker in self._running.values():
            wanted = self.stop.signal or worker.work.stop.signal
            if wanted and worker.stop.signal <= 0 and worker.stop.signal != wanted:  # a signal overrides a prune
                worker.stop.request(wanted)

    def _adopt_signal(self, worker: _Worker) -> None:
        """A signal one worker took is everyone's (as when a run's sessions shared one stop value)."""
        if worker.stop.signal > 0 and self.stop.signal <= 0:
            self.stop.request(worker.stop.signal)

    def _reap(self, key: int) -> Any:
        """The ended worker's process, awaited; a signal it took before it ended still counts."""
        worker = self._running.pop(key)
        worker.close_inbox()
        worker.process.join()
        self._adopt_signal(worker)
        return worker.process

    def _read(self, key: int) -> None:
        """One message from the worker's pipe, delivered; at the pipe's end (the worker closed it,
        or died, perhaps mid-message) the pipe is closed and the worker's exit is awaited."""
        worker = self._running[key]
        try:
            message = worker.inbox.recv()
        except (EOFError, OSError):
            worker.close_inbox()
            return
        last = self.on_message(key, message)
        self._pass_on_stops()  # one its delivery asked for reaches the worker before it hears back
        worker.heard.value += 1
        if last and key in self._running:
            self._reap(key)

    def _reap_silent_deaths(self) -> None:
        for key in [key for key, worker in self._running.items() if not worker.process.is_alive()]:
            self._hear_last_words(key)
            if key in self._running:
                self.on_silent_death(key, self._reap(key).exitcode)

    def _hear_last_words(self, key: int) -> None:
        """Every message still in a dead worker's pipe, up to its end."""
        deadline = time.monotonic() + LAST_WORDS_SECONDS
        while key in self._running and (inbox := self._running[key].inbox) is not None:
            if not inbox.poll(max(0.0, deadline - time.monotonic())):
                return
            self._read(key)


def _tracker_running() -> bool:
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_fd", None) is not None  # private; absent: unknown


def stop_resource_tracker() -> None:
    """Spawn starts multiprocessing's resource tracker, a helper process that otherwise lives until
    the interpreter exits, so a caller waiting for this command's children would find one still
    alive. Stopped here, once the semaphores it tracks are released (the stop requests':
    collected now, so the tracker finds none to clean up and says nothing).

    Never waited for long: the tracker ends only once every process holding its pipe has ended, and
    any multiprocessing child of this process holds it (a caller's own pool; a process an earlier
    command in a notebook left running). multiprocessing's own `_stop` waits for it without limit,
    so `Supervisor.run` in such a process never returned (stop 60's CI hung on it). The tracker is
    forgotten here at once, as `_stop` would leave it (a later spawn starts a new one), and waited
    for `TRACKER_EXIT_SECONDS` at most; one still held ends by itself when its last holder does."""
    import gc
    from multiprocessing import resource_tracker

    gc.collect()
    tracker = resource_tracker._resource_tracker
    try:
        with tracker._lock:  # type: ignore[attr-defined]  # private, as `_stop` is
            if tracker._fd is None:  # type: ignore[attr-defined]
                return
            os.close(tracker._fd)  # type: ignore[attr-defined]  # closing its end stops the tracker's loop
            pid, tracker._fd, tracker._pid = tracker._pid, None, None  # type: ignore[attr-defined]
    except AttributeError:  # another Python's tracker: it ends at exit
        return
    deadline = time.monotonic() + TRACKER_EXIT_SECONDS
    while pid is not None:
        with contextlib.suppress(ChildProcessError):  # not this process's child: nothing to reap
            if os.waitpid(pid, os.WNOHANG)[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
                continue
        return

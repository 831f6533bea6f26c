"""Events and stop requests between the driver and its sessions: the driver's post box, an actor
on the driver's node (`Mailbox`), and each session's side of it (`Relay`). Sessions poll it a few
times a second (`POLL_SECONDS`), never per step."""

from __future__ import annotations

import threading
from typing import Any

from rlrun.session import events
from rlrun.session.stopping import StopRequest
from rlrun.training.executor import OnEvent

POLL_SECONDS = 0.25
"""How often a session passes its events to the driver and hears of a stop request."""


class Mailbox:
    """The driver's post box, an actor on the driver's node: sessions leave their events and read
    the driver's stop request; the driver takes the events and posts the request."""

    def __init__(self) -> None:
        self.events: list[events.Event] = []
        self.stop = 0

    def post(self, batch: list[events.Event]) -> int:
        self.events.extend(batch)
        return self.stop

    def take(self) -> list[events.Event]:
        taken, self.events = self.events, []
        return taken

    def request_stop(self, signum: int) -> None:
        self.stop = signum


def relay_events(ray: Any, mailbox: Any, on_event: OnEvent) -> None:
    """The driver's side: the events the sessions left, passed on."""
    for event in ray.get(mailbox.take.remote()):
        on_event(event)


class Relay:
    """A session's side of the mailbox: a thread that posts the session's events a few times a
    second and hands the driver's stop request to the session. A mailbox gone (its driver died;
    Ray then usually ends the driver's tasks too) costs only the events: whatever still runs
    records itself in the registry, as always."""

    def __init__(self, mailbox: Any, stop: StopRequest) -> None:
        self.mailbox, self.stop = mailbox, stop
        self.stopped_by_driver = False
        self._events: list[events.Event] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlrun-relay", daemon=True)

    def emit(self, event: events.Event) -> None:
        if isinstance(event, events.SessionEnded):
            return  # the task's result says how it ended, once, after any retry
        with self._lock:
            self._events.append(event)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()
        self._post()

    def _loop(self) -> None:
        while not self._done.wait(POLL_SECONDS):
            self._post()

    def _post(self) -> None:
        import ray

        with self._lock:
            batch, self._events = self._events, []
        try:
            signum = ray.get(self.mailbox.post.remote(batch), timeout=10)
        except Exception:  # the driver is gone or slow: training goes on, its events are dropped
            return
        if signum and not self.stop.signal:
            self.stopped_by_driver = True
            self.stop.request(signum)

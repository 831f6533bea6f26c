"""Graceful stops: the first SIGINT/SIGTERM asks sessions to stop at the next step boundary (they
write a snapshot and record themselves preempted); a second one ends the process at once.

The request is a shared integer (the signal number, 0 while none), so spawned session processes
poll the same value as the process that received the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.sharedctypes import Synchronized
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    def __init__(self, shared: Synchronized[int] | None = None) -> None:
        self._shared = shared
        self._local = 0

    @property
    def signal(self) -> int:
        """The signal that asked for the stop, or 0."""
        return self._shared.value if self._shared is not None else self._local

    def request(self, signum: int) -> None:
        if self._shared is not None:
            self._shared.value = signum
        else:
            self._local = signum

    def shareable(self) -> Synchronized[int] | None:
        return self._shared


@contextlib.contextmanager
def stop_on_signals(stop: StopRequest, on_abort: Callable[[], None] = lambda: None) -> Iterator[StopRequest]:
    """While inside, SIGINT/SIGTERM request a stop; a second signal calls `on_abort` and exits with
    128 + the signal number. Outside the main thread (where Python cannot take signals) it does
    nothing, and the caller keeps whatever handling it had."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: Any) -> None:
        if stop.signal:
            on_abort()
            os._exit(128 + signum)
        stop.request(signum)

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

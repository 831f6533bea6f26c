"""Graceful stops: the first SIGINT/SIGTERM asks sessions to stop at the next step boundary (they
write a snapshot and record themselves preempted); a second one ends the process at once.

The request is a shared integer (the signal number, 0 while none), so spawned session processes
poll the same value as the process that received the signal.

A command that trains calls `defer_signals` first thing, before its heavy imports: a signal that
arrives while it starts up is then held (`pending`) instead of killing it mid-way, and is honoured
at the first point that can honour it: `raise_if_stopped` before anything is written, or the first
`stop_on_signals`, which stops the sessions at once with a snapshot. A signal that arrives after the
sessions have ended is held and ignored: the work is done. Once the command has its outcome,
`close_to_signals` ignores both for the rest of the process: the interpreter's own shutdown puts
back the default action of a signal a Python function handles before it frees the modules, and a
SIGTERM in that last window would otherwise kill a command that has finished (status -15 in place
of its own).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # this module loads first thing in a training command: keep it light
    from multiprocessing.sharedctypes import Synchronized

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_pending = 0
"""A signal held by `defer_signals` that no stop request has taken yet (0 while none)."""


def defer_signals() -> None:
    """Hold the first SIGINT/SIGTERM (see the module's note); a second one ends the process with
    128 + the signal, as a second signal does during training."""
    if threading.current_thread() is not threading.main_thread():
        return

    def hold(signum: int, frame: Any) -> None:
        global _pending
        if _pending:
            raise SystemExit(128 + signum)
        _pending = signum

    for sig in SIGNALS:
        signal.signal(sig, hold)


TRAINING_COMMANDS = ("train", "resume", "search")


def defer_signals_for(argv: list[str]) -> None:
    """`defer_signals` when `argv` (the arguments after the program) starts a training command:
    only those write state that a signal during start-up could leave half-made; and such a command
    outlives its terminal (`outlive_the_terminal`)."""
    if argv[:1] and argv[0] in TRAINING_COMMANDS:
        defer_signals()
        outlive_the_terminal()


def outlive_the_terminal() -> None:
    """A training command goes on when its terminal hangs up, as under `nohup`: SIGHUP is ignored,
    by this process and, inherited, by the session and env processes it spawns. A dropped ssh
    connection or a closed terminal window then costs the run nothing: its output goes nowhere
    (`rlrun.cli.output.Outlived`), and `rlrun ls`, `rlrun stop` and `rlrun resume` find it as ever."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


def close_to_signals() -> None:
    """Ignore SIGINT/SIGTERM for the rest of the process (the command's outcome is decided), so it
    ends with its own status. Ignored, not blocked: a process's signal goes to any thread that does
    not block it (torch's and Ray's threads too), while the ignore is the whole process's, and the
    interpreter's shutdown keeps it (it restores only the signals a Python function handles)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def pending() -> int:
    return _pending


def raise_if_stopped(when: str) -> None:
    """Raise `Stopped` if a held signal is waiting: the caller has written nothing yet."""
    if _pending:
        from rlrun.errors import Stopped

        raise Stopped(_pending, when)


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

    global _pending
    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    if _pending:  # held while starting up: the sessions stop at once, with a snapshot
        stop.request(_pending)
    _pending = 0
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

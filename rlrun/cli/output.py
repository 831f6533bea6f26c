"""How commands speak: tables and listings on stdout (`rlrun ls | grep ppo` works, as with `ls`,
`git log`, `docker ps`), or JSON alone there with `--json`; progress, warnings and hints for the
person at the terminal on stderr, Rich's console for training (loaded on use).

Whoever reads a command's output may go away while it runs: `rlrun train ... | head -2`, a pager
closed, a `tee` killed, a terminal lost. From then on its output goes nowhere, and the command goes
on: a write to a closed pipe or a hung-up terminal is never the end of a training (`outlived`).
"""

import contextlib
import errno
import json
import os
import sys
from typing import Any, TextIO

GONE = {errno.EPIPE, errno.EIO}
"""How a write says its reader is gone: a pipe closed at the other end; a terminal hung up."""


def make_console(*, stdout: bool = False) -> Any:
    """Rich's console on stderr (progress, warnings, hints), or with `stdout` for a table that is the
    command's answer."""
    from rlrun.cli.display import stderr_console, stdout_console

    return stdout_console() if stdout else stderr_console()


def say(text: str) -> None:
    """A line for the person at the terminal: progress, a warning, a hint (stderr), each command it
    suggests with the context this one was given (`rlrun.cli.hints`)."""
    from rlrun.cli.hints import in_context

    sys.stderr.write(in_context(text) + "\n")


def answer(text: str) -> None:
    """A table or listing, the command's answer (stdout: for `grep`, a pager, a file)."""
    from rlrun.cli.hints import in_context

    sys.stdout.write(in_context(text) + "\n")


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


class Outlived:
    """A standard stream whose reader may go away. The first write (or flush) that finds it gone
    points its file descriptor at /dev/null, so that this write, every later one and Python's own
    last flush at exit succeed with nothing shown, rather than raising mid-training (Rich, for one,
    ends the program on a broken pipe)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            self._gone(error)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            self._gone(error)

    def _gone(self, error: OSError) -> None:
        if error.errno not in GONE:
            raise error
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        with contextlib.suppress(OSError):
            self._stream.flush()  # what the closed reader did not take, now to /dev/null

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def outlived() -> None:
    """Make this process's stdout and stderr `Outlived` (the `rlrun` command does, first thing)."""
    if not isinstance(sys.stdout, Outlived):
        sys.stdout = Outlived(sys.stdout)
    if not isinstance(sys.stderr, Outlived):
        sys.stderr = Outlived(sys.stderr)

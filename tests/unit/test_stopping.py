"""The last window of a training command: after its outcome is decided, the interpreter's shutdown
puts back the default SIGTERM action before it frees the modules; a SIGTERM there must not turn a
finished command's status into -15 (CI saw it once: a run finished and recorded, status -15)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# `rlrun ARGV` through the `rlrun` script's entry point, with an object whose finaliser sends the
# process SIGTERM while the interpreter frees the modules: the latest moment a signal can come.
LATE_SIGTERM = textwrap.dedent("""
    import os, signal, sys
    from rlrun.cli import main

    class SigtermAtShutdown:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)

    sys.modules["__main__"].late = SigtermAtShutdown()
    sys.argv = ["rlrun", *sys.argv[1:]]
    main()
""")


@pytest.mark.parametrize("command", ["train", "resume", "search"])
def test_a_training_command_ends_with_its_own_status_whatever_signal_comes_at_shutdown(command: str) -> None:
    ended = subprocess.run([sys.executable, "-c", LATE_SIGTERM, command, "--help"], capture_output=True, text=True)
    assert ended.returncode == 0, ended.stderr[-2000:]


def test_the_late_signal_does_kill_a_process_that_never_closed_to_signals() -> None:
    """The probe itself: without `close_to_signals` (a registry-only command), the signal kills."""
    ended = subprocess.run([sys.executable, "-c", LATE_SIGTERM, "ls", "--help"], capture_output=True, text=True)
    assert ended.returncode == -signal.SIGTERM

"""A command's output whose reader is gone (`rlrun.cli.output.Outlived`): writes and flushes to a
closed pipe succeed with nothing shown, and the stream's descriptor then points at /dev/null."""

from __future__ import annotations

import io
import os

import pytest

from rlrun.cli.output import Outlived


def test_writes_to_a_closed_pipe_go_nowhere_and_never_raise() -> None:
    read, write = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(write, "w"), line_buffering=True)
    os.close(read)  # the reader is gone: `| head` has exited
    outlived = Outlived(stream)
    assert outlived.write("a progress line\n") == len("a progress line\n")
    outlived.flush()
    assert outlived.write("and the next\n") == len("and the next\n")
    assert os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull))
    stream.close()


def test_any_other_error_is_raised() -> None:
    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        Outlived(Full()).write("a line\n")


def test_it_is_the_stream_it_wraps_otherwise() -> None:
    stream = io.StringIO()
    outlived = Outlived(stream)
    outlived.write("shown\n")
    assert outlived.getvalue() == "shown\n" and not outlived.isatty()

"""A training outlives whoever reads its output (issue 43): its stdout and stderr closed mid-run
(`rlrun train ... | head -2`, a pager quit, a `tee` killed) or its terminal hung up (SIGHUP to
the whole process group, as a dropped ssh connection sends it), it goes on to its end: exit 0,
finished, bit for bit the run whose output was read to the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_env, fast
from same_run import CADENCE, assert_same_run, final_state, reference_state

from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # real trainings in processes of their own

SPEC = "reinforce_cartpole"
FRAMES = ["--frames", "3000"]  # the Ray tests' reference too: one training serves both


def _started(home: Path, *args: str) -> subprocess.Popen[str]:
    """`rlrun train SPEC` as the reference was trained, in a process group of its own, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlrun", "train", SPEC, *CADENCE, *fast(SPEC), *args],
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _status(home: Path) -> str:
    with Registry.open(home, create=False) as registry:
        return registry.get_run(registry.resolve("latest").id).run.status


def test_a_training_whose_output_is_closed_mid_run_ends_as_if_it_were_read(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path / "runs"
    process = _started(home, *FRAMES)
    assert process.stderr is not None and process.stdout is not None
    assert process.stderr.readline().startswith("run ")  # it announced the run: it trains now
    process.stderr.close()  # every progress line from now on is written to a pipe nobody reads
    process.stdout.close()
    assert process.wait(timeout=300) == 0
    assert _status(home) == "finished"
    assert_same_run(reference_state(tmp_path_factory, SPEC, *FRAMES), final_state(home))


def test_a_hung_up_terminal_leaves_every_session_training(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two sessions, each in a spawned process of its own (with the command, the whole group the
    terminal's SIGHUP reaches): the hang-up stops none of them."""
    home = tmp_path / "runs"
    process = _started(home, *FRAMES, "--sessions", "2")
    assert process.stderr is not None
    while " frame " not in (line := process.stderr.readline()):  # a session reported progress: mid-run
        assert line, "the command ended before any session reported progress"
    os.killpg(process.pid, signal.SIGHUP)
    process.stderr.close()  # and the terminal is gone
    assert process.wait(timeout=300) == 0
    assert _status(home) == "finished"
    assert_same_run(reference_state(tmp_path_factory, SPEC, *FRAMES, "--sessions", "2"), final_state(home))

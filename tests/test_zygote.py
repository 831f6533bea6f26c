"""The session zygote (rlrun/training/zygote.py): the supervisor's worker processes are forked from
a server that imported torch once, and are otherwise what spawned ones were. One supervisor run of
two real worker processes: the first forked (its parent the zygote, torch already imported), the
second spawned because a variable an interpreter reads as it starts changed after the zygote
started; both see the supervisor's environment as it is when they start, its working directory,
its `sys.path` and its process group, with no signal held back. Trainings, signals, kill -9 and
orphans go through the same code in tests/test_resume.py, test_pbt.py and test_search.py. A
process's later runs fork from the zygote its first run started.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers import invoke

from rlrun.training.supervisor import Supervisor, Work
from rlrun.training.zygote import START_METHOD, supervisor_gone


def report(outbox: Any, shared_stop: Any) -> None:
    """A worker: what it was started with, as its first and last word."""
    outbox.put(
        {
            "parent": os.getppid(),
            "torch before the work": "torch" in sys.modules,
            "probe": os.environ.get("RLRUN_TEST_PROBE"),
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "cwd": os.getcwd(),
            "path": list(sys.path),
            "group": os.getpgid(0),
            "held back": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, set())),
            "orphan": supervisor_gone(),
        }
    )


def reports(pending: Iterator[Work], at_most: int) -> dict[int, Any]:
    """One supervisor run of `pending`'s workers, each reporting (`report`): what each said, by key."""
    heard: dict[int, Any] = {}

    def deliver(key: int, message: Any) -> bool:
        heard[key] = message
        return True

    silent: list[Any] = []
    assert Supervisor(deliver, lambda *death: silent.append(death), at_most=at_most).run(pending) == 0
    assert not silent
    return heard


def test_workers_forked_from_the_zygote_are_what_spawned_ones_were(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLRUN_TEST_PROBE", "before the run")
    monkeypatch.delenv(START_METHOD, raising=False)

    def pending() -> Any:
        os.environ["RLRUN_TEST_PROBE"] = "as the first starts"  # after the zygote started
        yield Work(0, report)
        monkeypatch.setenv("OMP_NUM_THREADS", str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1))
        yield Work(1, report)

    heard = reports(pending(), at_most=2)
    forked, spawned = heard[0], heard[1]
    assert forked["parent"] != os.getpid() and forked["torch before the work"]
    assert spawned["parent"] == os.getpid()
    assert forked["probe"] == spawned["probe"] == "as the first starts"
    assert spawned["threads"] == os.environ["OMP_NUM_THREADS"] != forked["threads"]
    for worker in (forked, spawned):
        assert worker["cwd"] == str(tmp_path)
        assert worker["path"] == sys.path
        assert worker["group"] == os.getpgid(0)
        assert worker["held back"] == sorted(signal.pthread_sigmask(signal.SIG_BLOCK, set()))
        assert not worker["orphan"]


def test_later_runs_of_a_process_fork_from_the_zygote_its_first_run_started(monkeypatch: Any) -> None:
    """The zygote is the process's: a second run forks from the first run's (no second 2.4 CPU-s
    of imports); a run whose startup variables changed since replaces it, and forks from the new one."""
    monkeypatch.delenv(START_METHOD, raising=False)

    def zygote_of_a_run() -> int:
        heard = reports(iter([Work(0, report)]), at_most=1)[0]
        assert heard["torch before the work"], "spawned, not forked"
        return int(heard["parent"])

    first = zygote_of_a_run()
    assert zygote_of_a_run() == first != os.getpid()
    os.kill(first, 0)  # kept between runs
    monkeypatch.setenv("OMP_NUM_THREADS", str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1))
    replaced = zygote_of_a_run()
    assert replaced not in (first, os.getpid())
    try:
        os.kill(first, 0)
    except ProcessLookupError:
        return  # the first, stopped
    raise AssertionError(f"the replaced zygote {first} still runs")


def test_an_unknown_start_method_is_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = invoke(home, "train", "reinforce_cartpole", "--sessions", "2", env={START_METHOD: "fork"})
    assert result.code == 2, result.stderr
    assert result.stderr.count("error:") == 1 and START_METHOD in result.stderr and "spawn" in result.stderr
    assert not home.exists()  # nothing written

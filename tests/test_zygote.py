"""The session zygote (rlrun/training/zygote.py): the supervisor's worker processes are forked from
a server that imported torch once, and are otherwise what spawned ones were. One supervisor run of
two real worker processes: the first forked (its parent the zygote, torch already imported), the
second spawned because a variable an interpreter reads as it starts changed after the zygote
started; both see the supervisor's environment as it is when they start, its working directory,
its `sys.path` and its process group, with no signal held back. Trainings, signals, kill -9 and
orphans go through the same code in tests/test_resume.py, test_pbt.py and test_search.py.
"""

from __future__ import annotations

import os
import signal
import sys
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


def test_workers_forked_from_the_zygote_are_what_spawned_ones_were(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLRUN_TEST_PROBE", "before the run")
    monkeypatch.delenv(START_METHOD, raising=False)
    heard: dict[int, Any] = {}

    def pending() -> Any:
        os.environ["RLRUN_TEST_PROBE"] = "as the first starts"  # after the zygote started
        yield Work(0, report)
        monkeypatch.setenv("OMP_NUM_THREADS", str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1))
        yield Work(1, report)

    def deliver(key: int, message: Any) -> bool:
        heard[key] = message
        return True

    silent: list[Any] = []
    assert Supervisor(deliver, lambda *death: silent.append(death), at_most=2).run(pending()) == 0
    assert not silent
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


def test_an_unknown_start_method_is_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = invoke(home, "train", "reinforce_cartpole", "--sessions", "2", env={START_METHOD: "fork"})
    assert result.code == 2, result.stderr
    assert result.stderr.count("error:") == 1 and START_METHOD in result.stderr and "spawn" in result.stderr
    assert not home.exists()  # nothing written

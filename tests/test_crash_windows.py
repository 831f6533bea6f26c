"""Every crash window, deterministically (issue 16): a training, and a resume, SIGKILL themselves at
each named crash point (`rlrun.testhooks.STEPS`), and the run must still come out right.

After each kill: `rlrun ls` answers and calls the run crashed, finished or preempted (never running:
its process is gone, and liveness knows it by the dead pid on this host); `rlrun resume latest`
finishes the run or says there is nothing to do, and a second resume says nothing to do (both exit
0, so a scheduler may requeue it); the final snapshot equals the uninterrupted run's bit for bit;
every checkpoint the registry lists verifies, and none is a temporary (torn) snapshot folder.

Run with `-s` to print the crash-window table (step, path → status after the crash, what the first
resume did, bit-exact).
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TINY, invoke, run_cli
from same_run import assert_same_run, assert_snapshots_sound, final_state, reference_state

from rlrun.registry import Registry
from rlrun.registry.database import LeaseLost
from rlrun.testhooks import CRASH_ENV, HEARTBEAT_ENV, SIGNAL_AT_ENV, STEPS

pytestmark = pytest.mark.slow  # real trainings in subprocesses

SPEC = "reinforce_cartpole"
CADENCE = TINY[2:]  # TINY without its frame budget: evaluations, snapshots and logs every 1k
BUDGET = 3000
# The resume path starts from a run stopped by SIGTERM at PREEMPT_AT (mid-episode) of a
# PREEMPT_BUDGET budget, and resumes it with `--more` to BUDGET.
PREEMPT_BUDGET, PREEMPT_AT = 2000, 1500
# A heartbeat several times a second, so a training of a few seconds reaches one.
HEARTBEAT = {HEARTBEAT_ENV: "0.05"}

ONLY_AT_TRAIN = ("run-recorded", "manifest-written")
ONLY_AT_RESUME = ("resume-rewound",)
WITH_REPLAY_MEMORY = ("segment-half-written",)  # SPEC has none: tests/test_replay_snapshots.py crashes there
IN_OBJECT_STORAGE = ("snapshot-half-uploaded",)  # reached only where the home is in object storage
# The first time each step is reached, and the last snapshot's steps again (`STEP#N`): a final
# snapshot on disk or in the registry is what decides "finished" and "nothing to do".
FINAL_SNAPSHOT = ("snapshot-half-written", "snapshot-half-uploaded", "snapshot-renamed", "checkpoint-recorded")
TRAIN_STEPS = [s for s in STEPS if s not in (*ONLY_AT_RESUME, *WITH_REPLAY_MEMORY)] + [
    f"{s}#{BUDGET // 1000}" for s in FINAL_SNAPSHOT
]
RESUME_STEPS = [s for s in STEPS if s not in (*ONLY_AT_TRAIN, *WITH_REPLAY_MEMORY, *IN_OBJECT_STORAGE)]

TABLE: list[list[str]] = []


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run, trained once per test run."""
    return reference_state(tmp_path_factory, SPEC, "--frames", str(BUDGET), *CADENCE)


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose run was stopped by SIGTERM mid-episode, with a snapshot, before its budget."""
    home = tmp_path_factory.mktemp("preempted") / "runs"
    stopped = run_cli(
        home, "train", SPEC, "--frames", str(PREEMPT_BUDGET), *CADENCE, env={SIGNAL_AT_ENV: str(PREEMPT_AT)}
    )
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    return home


@pytest.fixture(scope="module", autouse=True)
def _print_table() -> Iterator[None]:
    yield
    if TABLE:
        rows = [["step", "path", "status after the kill", "first resume", "bit-exact"], *TABLE]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        print("\n\ncrash windows (reinforce_cartpole, 3k frames, 1 session)")
        for row in rows:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


@pytest.mark.any_home
@pytest.mark.parametrize("step", TRAIN_STEPS)
def test_a_crash_while_training_is_recovered(step: str, reference: dict[str, Any], home: Path, home_kind: str) -> None:
    if step.partition("#")[0] in IN_OBJECT_STORAGE and home_kind == "local":
        pytest.skip("a step of homes in object storage only")
    crashed = run_cli(home, "train", SPEC, "--frames", str(BUDGET), *CADENCE, env={CRASH_ENV: step, **HEARTBEAT})
    assert crashed.code == -signal.SIGKILL, f"{step} was not reached: {crashed.stderr}"
    check_recovered(home, reference, step, "train")


@pytest.mark.parametrize("step", RESUME_STEPS)
def test_a_crash_while_resuming_is_recovered(step: str, reference: dict[str, Any], preempted: Path, home: Path) -> None:
    shutil.copytree(preempted, home)
    crashed = run_cli(
        home, "resume", "latest", "--more", str(BUDGET - PREEMPT_BUDGET), env={CRASH_ENV: step, **HEARTBEAT}
    )
    assert crashed.code == -signal.SIGKILL, f"{step} was not reached: {crashed.stderr}"
    check_recovered(home, reference, step, "resume")


def test_a_resume_fences_the_older_attempts_before_it_rewinds(preempted: Path, home: Path) -> None:
    """An older attempt still alive somewhere (frozen, cut off from the registry) holds the lease it
    trained under. Once a resume has rewound the session, that attempt may write nothing more —
    already in the window before the resumed session takes its own lease (killed right there)."""
    shutil.copytree(preempted, home)
    with Registry.open(home, None, create=False) as older:
        session = older.get_run(older.resolve("latest").id).sessions[0]
        older.fence(session.id, session.lease)
        progress = {"frame": session.frame, "episode": session.episode, "opt_step": session.opt_step}
        older.heartbeat(session.id, **progress)  # its lease still holds before the resume
        crashed = run_cli(
            home, "resume", "latest", "--more", str(BUDGET - PREEMPT_BUDGET), env={CRASH_ENV: "resume-rewound"}
        )
        assert crashed.code == -signal.SIGKILL, crashed.stderr
        with pytest.raises(LeaseLost):
            older.heartbeat(session.id, **progress)


def check_recovered(home: Path, reference: dict[str, Any], step: str, path: str) -> None:
    """The recovery runs in this process (the command line's own handler): the kill is what is under test."""
    listed = invoke(home, "ls", "--json")
    assert listed.code == 0, listed.stderr
    status = listed.json()[0]["status"]
    assert status in ("crashed", "finished", "preempted"), status
    first = invoke(home, "resume", "latest")
    assert first.code == 0, first.stderr
    did = "nothing to do" if "nothing to do" in first.stderr else "resumed to the end"
    again = invoke(home, "resume", "latest")
    assert again.code == 0 and "nothing to do" in again.stderr, again.stderr
    row = [step, path, status, did, "no"]
    TABLE.append(row)
    assert_same_run(reference, final_state(home))
    row[-1] = "yes"
    assert_snapshots_sound(home)

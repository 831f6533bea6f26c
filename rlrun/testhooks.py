"""Test hooks: the few places where a test makes a real process misbehave on purpose (kill itself,
hang, signal itself), to prove that every moment of training and resuming can be recovered from.
Each is driven by one environment variable; unset (always, outside tests) a hook costs one lookup.

- `RLRUN_TEST_CRASH_AT=STEP` SIGKILLs the process the first time it reaches the crash point STEP;
  `STEP#N` the N-th time. The steps are listed here, once, so a test can walk through all of them
  and a misspelt step is an error, not a test that silently never crashes.
- `RLRUN_TEST_HANG_IN_SNAPSHOT=NAME` hangs half-way through writing the snapshot NAME, so a test
  can kill the process mid-write at a moment of its choosing. `NAME@FILE`: only the first process
  to get there hangs (it creates FILE, holding the snapshot's temporary folder, which the test can
  wait for); a retry passes.
- `RLRUN_TEST_SIGNAL_AT_FRAME=F` makes a session send itself SIGTERM at the step that reaches
  frame F, so a test can preempt it at an exact (mid-episode) step through the real signal path.
- `RLRUN_TEST_HEARTBEAT_SECONDS=S` makes sessions heartbeat every S seconds, so a tiny training
  reaches its heartbeat (and a crash point there) in a test's time.
- `RLRUN_TEST_STALE_AFTER_SECONDS=S` makes a session silent for S seconds count as crashed (and,
  on a cluster, as lost), so a test need not wait the default half-minute.
- `RLRUN_TEST_FREEZE_AT_FRAME=F@FILE` makes the first session process to reach frame F write its
  pid into FILE and SIGSTOP itself: a frozen worker, for a test to wake (SIGCONT) when it likes.
- `RLRUN_TEST_HOLD_AT_FRAME=F@FILE` makes the first session process to reach frame F (after that
  step's log row, evaluation and snapshot; `F#N@FILE`: the N-th session of a process to pass it)
  hand its trackers every row so far and wait until they have taken them (and a home in object
  storage every file handed to the store), then write the frame each tracker took last (JSON)
  into FILE and hold, its threads still running, until FILE is removed: the process cannot end
  before a test that waits for the trackers' delivery kills it, and a kill then loses nothing
  that was on its way.
- `RLRUN_TEST_SLOW_EVALUATION_SECONDS=S` makes every evaluation take S seconds longer (a sleep
  before its episodes, which change nothing), so a background evaluation is still running when
  training reaches its next snapshot or stops.
- `RLRUN_TEST_USABLE_CORES=N` makes the process see N usable cores (not its CPU affinity's), so
  a test on a small machine creates and starts runs as a machine of N cores resolves "auto".
- `RLRUN_TEST_FAKE_VERSIONS=NAME=VERSION,...` makes the software stack a session records
  (`rlrun.session.stack.software_stack`) name these versions, so a test can resume a run "under another
  torch" without installing one.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

CRASH_ENV = "RLRUN_TEST_CRASH_AT"
HANG_ENV = "RLRUN_TEST_HANG_IN_SNAPSHOT"
SIGNAL_AT_ENV = "RLRUN_TEST_SIGNAL_AT_FRAME"
HEARTBEAT_ENV = "RLRUN_TEST_HEARTBEAT_SECONDS"
STALE_ENV = "RLRUN_TEST_STALE_AFTER_SECONDS"
FREEZE_ENV = "RLRUN_TEST_FREEZE_AT_FRAME"
HOLD_ENV = "RLRUN_TEST_HOLD_AT_FRAME"
SLOW_EVALUATION_ENV = "RLRUN_TEST_SLOW_EVALUATION_SECONDS"
CORES_ENV = "RLRUN_TEST_USABLE_CORES"
FAKE_VERSIONS_ENV = "RLRUN_TEST_FAKE_VERSIONS"

STEPS = (
    "run-recorded",  # the run, its sessions and first spec revision are committed
    "manifest-written",  # run.json is in the run folder
    "attempt-recorded",  # a session's attempt row is committed
    "snapshot-half-written",  # a snapshot's temporary folder holds some of its files
    "segment-half-written",  # a log segment (replay memory) is partly written in a snapshot's temporary folder
    "snapshot-half-uploaded",  # a snapshot's objects are in the object store, its manifest is not
    "snapshot-renamed",  # the snapshot folder is complete, the registry has not heard of it
    "checkpoint-recorded",  # the registry row of a complete snapshot is committed
    "evaluation-recorded",  # an evaluation row is committed
    "heartbeat-recorded",  # a heartbeat is committed
    "session-finishing",  # the session reached its target; its row still says running
    "session-finished",  # the session row and its attempt are closed (the run's too, if it was the last)
    "run-finished",  # the launcher recorded the run's end
    "resume-rewound",  # a resume cut the session back to its snapshot, before training again
)

_reached: Counter[str] = Counter()


def _crash_target() -> tuple[str, int] | None:
    value = os.environ.get(CRASH_ENV)
    if not value:
        return None
    step, _, count = value.partition("#")
    if step not in STEPS:
        raise ValueError(f"{CRASH_ENV}={value}: unknown step; one of {', '.join(STEPS)}")
    return step, int(count or 1)


def crash_point(step: str) -> None:
    """Mark `step` reached; kill this process (SIGKILL: no handler, no cleanup) if the test asked
    for a crash here."""
    if step not in STEPS:
        raise ValueError(f"unknown crash point {step!r}")
    target = _crash_target()
    if target is None or target[0] != step:
        return
    _reached[step] += 1
    if _reached[step] == target[1]:
        os.kill(os.getpid(), signal.SIGKILL)


def hang_in_snapshot(name: str, folder: Path) -> None:
    """Hang for an hour if the test asked to while the snapshot `name` is half written in `folder`
    (its temporary folder, which the once-file names: other sessions' snapshots of the same frame
    pass through folders of the same pattern, so a test finds the hung one there)."""
    target, _, once = os.environ.get(HANG_ENV, "").partition("@")
    if target != name:
        return
    if once and not _claim(Path(once), str(folder).encode()):
        return  # another process hung here already
    time.sleep(3600)


def _claim(flag: Path, content: bytes) -> bool:
    """Write `content` into `flag` whole, unless another process did first (then False): a test
    waiting for the file never reads it half written, and only the first process's stands."""
    descriptor, staged = tempfile.mkstemp(dir=flag.parent, prefix=f".{flag.name}.")
    os.write(descriptor, content)
    os.close(descriptor)
    try:
        os.link(staged, flag)
    except FileExistsError:
        return False
    finally:
        os.unlink(staged)
    return True


def signal_at_frame() -> int:
    """The frame at which a session SIGTERMs itself (-1: never)."""
    return int(os.environ.get(SIGNAL_AT_ENV, "-1"))


def stale_after_seconds(default: float) -> float:
    """How long a silent session is still counted alive: `default`, unless a test asked for another."""
    return float(os.environ.get(STALE_ENV) or default)


def freeze_at_frame(before: int, after: int) -> None:
    """SIGSTOP this process if a test asked for it at a frame in (before, after], once over all
    processes (the first to create the file named after the frame)."""
    frame, _, flag = os.environ.get(FREEZE_ENV, "").partition("@")
    if not frame or not before < int(frame) <= after:
        return
    try:
        descriptor = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    os.kill(os.getpid(), signal.SIGSTOP)


def hold_at_frame(before: int, after: int) -> bool:
    """Whether a test asked for a hold at a frame in (before, after] (`hold`, then); with `F#N`,
    at the N-th time a session of this process passes frame F (a search's trials, one by one)."""
    target, _, _ = os.environ.get(HOLD_ENV, "").partition("@")
    frame, _, count = target.partition("#")
    if not frame or not before < int(frame) <= after:
        return False
    _reached["hold"] += 1
    return _reached["hold"] == int(count or 1)


def hold(delivered: Callable[[], dict[str, int | None] | None]) -> None:
    """Wait until `delivered()` says what each tracker took last (None: still delivering), write it
    into the hold's file (unless another process did: then go on) and sleep until that file is gone."""
    flag = Path(os.environ[HOLD_ENV].partition("@")[2])
    while (taken := delivered()) is None:
        time.sleep(0.02)
    if not _claim(flag, json.dumps(taken).encode()):
        return
    while flag.exists():
        time.sleep(0.05)


def heartbeat_seconds(default: float) -> float:
    """How often sessions heartbeat: `default`, unless a test asked for another period."""
    return float(os.environ.get(HEARTBEAT_ENV) or default)


def slow_evaluation() -> None:
    delay = os.environ.get(SLOW_EVALUATION_ENV)
    if delay:
        time.sleep(float(delay))


def usable_cores() -> int | None:
    """The cores a test makes this process see (None: its own)."""
    return int(os.environ.get(CORES_ENV) or 0) or None


def faked_versions() -> dict[str, str]:
    """The versions a test makes the software stack name ({}: the installed ones)."""
    value = os.environ.get(FAKE_VERSIONS_ENV, "")
    pairs = [item.partition("=") for item in value.split(",") if item]
    return {name: version for name, _, version in pairs}

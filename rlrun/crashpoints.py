"""Named crash points: where a test makes the process kill itself (SIGKILL), to prove that every
moment of training and resuming can be recovered from.

`RLRUN_TEST_CRASH_AT=STEP` kills the process the first time it reaches STEP; `STEP#N` the N-th
time. Unset (always, outside tests) a crash point costs one dictionary lookup. The steps are listed
here, once, so a test can walk through all of them and a misspelt step is an error, not a test that
silently never crashes.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

CRASH_ENV = "RLRUN_TEST_CRASH_AT"

STEPS = (
    "run-recorded",  # the run, its sessions and first spec revision are committed
    "manifest-written",  # run.json is in the run folder
    "attempt-recorded",  # a session's attempt row is committed
    "snapshot-half-written",  # a snapshot's temporary folder holds some of its files
    "snapshot-renamed",  # the snapshot folder is complete, the registry has not heard of it
    "checkpoint-recorded",  # the registry row of a complete snapshot is committed
    "evaluation-recorded",  # an evaluation row is committed
    "heartbeat-recorded",  # a heartbeat is committed
    "session-finishing",  # the session reached its target; its row still says running
    "session-finished",  # the session row says finished; the attempt is still open
    "attempt-ended",  # the attempt row is closed; the run row may still say running
    "run-finished",  # the run row is closed
    "resume-rewound",  # a resume cut the session back to its snapshot, before training again
)

_reached: Counter[str] = Counter()


def _target() -> tuple[str, int] | None:
    value = os.environ.get(CRASH_ENV)
    if not value:
        return None
    step, _, count = value.partition("#")
    if step not in STEPS:
        raise ValueError(f"{CRASH_ENV}={value}: unknown step; one of {', '.join(STEPS)}")
    return step, int(count or 1)


def reached(step: str) -> None:
    """Mark `step` reached; kill this process if the test asked for a crash here."""
    if step not in STEPS:
        raise ValueError(f"unknown crash point {step!r}")
    target = _target()
    if target is None or target[0] != step:
        return
    _reached[step] += 1
    if _reached[step] == target[1]:
        os.kill(os.getpid(), signal.SIGKILL)

"""One session: one seed, one agent, one (vector) env, trained to the frame budget.

`loop` is the training loop, and `task` the unit of work an executor runs (plain data); beside
them, the parts a session is made of: `checkpoints` (when snapshots are taken, and how they are
staged, uploaded, recorded and retained), `state` (the session's progress as data, what a snapshot
captures of a session, and how it is restored), `evaluation` (its own env and random stream),
`device` and `stack` (where it learns, and on which software: what a resume must find again to be
exact), `events` (what it reports), `stopping` (signals become a snapshot and a clean stop),
`metrics_log` (the training log in its folder, and the `metrics` reader) and `tensorboard_log`
(that log's optional mirror). Only
`loop`, `checkpoints`, `state` and `evaluation` import torch; this package's own import costs
nothing, so `rlrun ls` may use its torch-free parts.
"""

from __future__ import annotations

from typing import Any

_LOOP = ("SUPERSEDED", "SessionFailed", "run_session", "run_session_process")


def __getattr__(name: str) -> Any:
    # The loop's names, as `rlrun.session` had them when it was one module; imported (with torch) on use.
    if name in _LOOP:
        from rlrun.session import loop

        return getattr(loop, name)
    if name == "SessionTask":  # plain data: no torch
        from rlrun.session.task import SessionTask

        return SessionTask
    raise AttributeError(f"module 'rlrun.session' has no attribute {name!r}")

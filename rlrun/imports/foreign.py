"""Foreign runs: the rule, said once, that a run another library trained (`runs.origin`) holds its
evaluations and nothing else, so a command that needs its snapshots or metrics refuses it in one line."""

from __future__ import annotations

from rlrun.errors import BadInput
from rlrun.registry import RunRecord

ORIGINS = {"sb3": "Stable-Baselines3 / RL Zoo"}
"""`runs.origin` values, and the library each names in messages."""


def refuse_foreign(run: RunRecord, command: str) -> None:
    """BadInput (exit 2) when `run` is a foreign run: `command` (resume, enjoy, export, push) needs
    what only rlrun's runs have (snapshots, a metrics log, a policy rlrun can load)."""
    if run.origin is None:
        return
    library = ORIGINS.get(run.origin, run.origin)
    raise BadInput(
        f"run {run.name or run.id} was imported from a {library} log folder (`rlrun import {run.origin}`): it holds"
        f" evaluations only, no snapshot or metrics log for `rlrun {command}` to use; compare or plot it instead"
    )

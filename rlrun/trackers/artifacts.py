"""A file sent afterwards to a session's tracker run (an `enjoy` video): beside its history, never in it.

The session's tracker run is found as training finds it (MLflow: its `rlrun.run`/`rlrun.session`
tags; W&B: its id `<run>-s<N>`, resumed without a rewind) and gets the file as an artifact, with no
metric and no step, so its history stays exactly the run's. Like delivery, this never fails the
caller: each tracker is tried on a background thread for at most `RLRUN_TRACKER_CLOSE_SECONDS`,
and what did not arrive comes back as one line each.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlrun.trackers.delivery import CLOSE_SECONDS_ENV, close_seconds, describe
from rlrun.trackers.points import Identity

ARTIFACT_FOLDER = "enjoy"
"""Where the file goes in an MLflow run's artifacts; a W&B artifact's type."""


def send_file(names: Sequence[str], identity: Identity, path: Path) -> list[str]:
    """Send `path` to the session's run in each tracker of `names`; returns one line per tracker that
    did not get it (empty: every one did)."""
    missed: list[str] = []
    deadline = time.monotonic() + close_seconds()
    for name in names:
        if importlib.util.find_spec(name) is None:
            missed.append(f"{path.name} not sent to {name}: its package is not installed")
            continue
        outcome: list[str] = []
        worker = threading.Thread(
            target=_attempt, args=(name, identity, path, outcome), daemon=True, name=f"rlrun-{name}-artifact"
        )
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():  # a tracker that hangs is left behind (a daemon: it dies with the process)
            outcome.append(f"no answer in {close_seconds():g} s ({CLOSE_SECONDS_ENV})")
        if outcome:
            missed.append(f"{path.name} not sent to {name} run {identity.name}: {outcome[0]}")
    return missed


def _attempt(name: str, identity: Identity, path: Path, outcome: list[str]) -> None:
    try:
        (_to_mlflow if name == "mlflow" else _to_wandb)(identity, path)
    except Exception as error:  # whatever the tracker raises: said in one line, never raised
        outcome.append(describe(error))


def _to_mlflow(identity: Identity, path: Path) -> None:
    from rlrun.trackers.mlflow import experiment_id, find_run, set_defaults

    set_defaults()
    from mlflow import MlflowClient

    client = MlflowClient()
    found = find_run(client, experiment_id(client), identity)
    if found is None:
        raise LookupError("the session has no MLflow run (send its history first with `rlrun track`)")
    client.log_artifact(found.info.run_id, str(path), artifact_path=ARTIFACT_FOLDER)


def _to_wandb(identity: Identity, path: Path) -> None:
    import wandb

    from rlrun.trackers.wandb import PROJECT_DEFAULT, log_video, run_id

    # resumed, not rewound: the run's history stays as it is; an artifact has no step
    run: Any = wandb.init(
        project=os.environ.get("WANDB_PROJECT") or PROJECT_DEFAULT,
        id=run_id(identity),
        resume="allow",
        name=identity.name,
        group=identity.group or identity.run_id,
        job_type="train",
        reinit="create_new",
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
    )
    try:
        log_video(run, identity, path, ARTIFACT_FOLDER)
    finally:
        run.finish()

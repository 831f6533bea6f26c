"""Experiment trackers: each session's metrics and evaluations, also in MLflow or Weights & Biases.

`meta.track` (`--track mlflow|wandb` on `train` and `search`) names the trackers; the spec carries
them, so `rlrun resume` continues the same tracker runs without being told. One session is one tracker
run, found again by rlrun's run id and session index (MLflow: its tags; W&B: its run id, `<run>-s<N>`).
Destinations are the tools' own: MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME; WANDB_PROJECT,
WANDB_MODE, WANDB_DIR, ...

Exact history across a resume: a session that continues a tracker run (any attempt but the first)
first rewinds it to frame 0, forgetting whatever an interrupted attempt sent, then re-sends the
history its snapshot kept (the metrics log cut back to the snapshot's frame, and its evaluations),
then goes on live. So after kill -9 and resume, the tracker holds exactly the uninterrupted run's
points, none twice. MLflow forgets through its SQL store; W&B through its rewind (`resume_from`).

A tracker gets the points the metrics log got, as the log gets them (the loop's fenced flush), so an
attempt that lost the session's lease sends nothing more. Delivery never stops training
(`delivery`): each tracker has a background thread, a bounded queue and
retries; what did not arrive is written in the session folder (`status`), `rlrun show` says so and
`rlrun track` re-sends a run's history. The tools are optional extras, imported only by the thread
that talks to them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from rlrun.errors import BadInput, install_hint
from rlrun.trackers import status
from rlrun.trackers.points import Identity, Point, flatten, history, metric_name

KNOWN = ("mlflow", "wandb")
"""The trackers, each also the name of its package (and of rlrun's extra that installs it)."""

__all__ = [
    "KNOWN",
    "Identity",
    "Point",
    "check_installed",
    "flatten",
    "history",
    "import_package",
    "make_tracker",
    "metric_name",
    "status",
]


def check_installed(names: Sequence[str]) -> None:
    """BadInput naming the extra to install when a tracker's package is missing."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise BadInput(
                f"tracking with {name} needs the {name} package, which is not installed;"
                f" install it with `{install_hint(name)}` or track without {name}"
            )


def import_package(name: str) -> None:
    """Import a tracker's package, rlrun's settings for it in place first (MLflow reads its own when
    imported)."""
    if name == "mlflow":
        from rlrun.trackers.mlflow import set_defaults

        set_defaults()
    importlib.import_module(name)


def make_tracker(name: str) -> object:
    """A tracker of that name (`rlrun.trackers.base.Tracker`); its package is imported when it starts."""
    if name == "mlflow":
        from rlrun.trackers.mlflow import MlflowTracker

        return MlflowTracker()
    if name == "wandb":
        from rlrun.trackers.wandb import WandbTracker

        return WandbTracker()
    raise ValueError(f"no tracker {name!r}; known: {', '.join(KNOWN)}")

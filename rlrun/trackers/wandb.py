"""Weights & Biases: one W&B run per session, id `<run>-s<N>`, in WANDB_PROJECT (default "rlrun"),
grouped by run (or by search, for its trials); WANDB_MODE=offline writes it under WANDB_DIR for
`wandb sync` later.

Each point is logged at step = its frame. Rewinding (a resume re-sends the history) is W&B's own
rewind, `resume_from="<id>?_step=0"`: the run keeps its id and its history restarts empty. Offline,
the rewind is recorded in the new run file and applied when it is synced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlrun.trackers.points import BEST_EVAL, Identity, Point, flatten

PROJECT_DEFAULT = "rlrun"


def run_id(identity: Identity) -> str:
    return f"{identity.run_id}-s{identity.index}"


class WandbTracker:
    name = "wandb"

    def __init__(self) -> None:
        self.run: Any = None
        self.identity: Identity | None = None

    def start(self, identity: Identity, rewind: bool) -> str:
        import wandb

        self.identity = identity
        where: dict[str, Any] = (
            {"resume_from": f"{run_id(identity)}?_step=0"} if rewind else {"id": run_id(identity), "resume": "allow"}
        )
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or PROJECT_DEFAULT,
            name=identity.name,
            group=identity.group or identity.run_id,
            job_type="train",
            tags=[f"{key}={value}" for key, value in identity.tags.items()][:20],
            config=flatten(identity.spec),
            reinit="create_new",
            # the session's stdout and stderr stay its own; no signal handlers from another thread
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
            **where,
        )
        spec_file = Path(self.run.dir) / "spec.json"
        spec_file.write_text(json.dumps(identity.spec, indent=2), encoding="utf-8")
        self.run.save(str(spec_file), base_path=self.run.dir, policy="now")
        return str(self.run.id)

    def send(self, points: Sequence[Point]) -> None:
        for point in points:
            self.run.log(point.values, step=point.frame)

    def send_file(self, path: Path, folder: str) -> None:
        assert self.identity is not None, "started first"
        log_video(self.run, self.identity, path, folder)

    def finish(self, status: str, best: float | None) -> None:
        if best is not None:
            self.run.summary[BEST_EVAL] = best
        self.run.summary["rlrun/status"] = status
        self.run.finish(exit_code=0 if status in ("finished", "preempted") else 1)


def log_video(run: Any, identity: Identity, path: Path, folder: str) -> None:
    """A video for the session's W&B run, beside its history (an artifact has no step): a version of
    the run's artifact `<folder>-<run>-s<N>`, the same file sent twice being the same version."""
    import wandb

    artifact = wandb.Artifact(f"{folder}-{run_id(identity)}", type="video")
    artifact.add_file(str(path))
    run.log_artifact(artifact)

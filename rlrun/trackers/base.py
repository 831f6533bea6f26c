"""The small interface each tracker implements; its methods run on the delivery thread only, and
raise on any failure (the thread retries)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from rlrun.trackers.points import Identity, Point


class Tracker(Protocol):
    name: str

    def start(self, identity: Identity, rewind: bool) -> str:
        """Open the session's tracker run, creating it the first time (named, tagged, the spec as
        parameters and as an artifact); with `rewind`, forget every point it holds (an earlier
        attempt's: the history is re-sent). A tracker that can see whether the run exists (MLflow)
        rewinds one it finds whatever `rewind` says; one that cannot (W&B offline) relies on it.
        Returns how to find the run (its id)."""
        ...

    def send(self, points: Sequence[Point]) -> None:
        """Log these points, in order."""
        ...

    def send_file(self, path: Path, folder: str) -> None:
        """Attach the file to the run under `folder` (`rlrun.trackers.points.Attachment`)."""
        ...

    def finish(self, status: str, best: float | None) -> None:
        """Close the run with the session's status ("finished", "preempted", "failed") and best score."""
        ...

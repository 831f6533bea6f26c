"""What trackers are sent, as plain data: who a session is (`Identity`), its spec as flat parameters,
its points (`Point`: the values logged at one frame), built the same way live and when a history
is re-sent, so a re-sent history is the live one, and files beside the history (`Attachment`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLOCK = ("frame", "episode", "opt_step", "wall_time")
"""The metrics log's clock columns: a point's step and time, not values of their own."""
_GROUPS = {"return_mean": "rollout", "length_mean": "rollout", "fps": "time"}


def metric_name(column: str) -> str:
    """Where a metrics column appears in a tracker (and TensorBoard): rollout/, time/, or train/ for
    the algorithm's scalars."""
    return f"{_GROUPS.get(column, 'train')}/{column}"


EVAL_MEAN, EVAL_STD, BEST_EVAL = "eval/return_mean", "eval/return_std", "eval/best_return_mean"


@dataclass(frozen=True)
class Identity:
    """Which session a tracker run belongs to: its name and tags, and where it comes from."""

    run_id: str
    index: int
    seed: int
    spec: dict[str, Any] = field(repr=False)
    group: str | None = None
    """The search the run is a trial of (a parent run / a W&B group); None: the run groups its sessions."""

    @property
    def name(self) -> str:
        return f"{self.run_id}/s{self.index}"

    @property
    def tags(self) -> dict[str, str]:
        tags = {
            "rlrun.run": self.run_id,
            "rlrun.session": str(self.index),
            "rlrun.seed": str(self.seed),
            "rlrun.spec": str(self.spec.get("name")),
            "rlrun.algorithm": str(self.spec["agent"]["algorithm"]),
            "rlrun.env": str(self.spec["env"]["id"]),
        }
        return tags | ({"rlrun.search": self.group} if self.group else {})


@dataclass(frozen=True)
class Point:
    """The values logged at one frame, and the session's wall time then (seconds since it began)."""

    frame: int
    values: dict[str, float]
    wall_time: float


@dataclass(frozen=True)
class Attachment:
    """A file for the session's tracker run (an evaluation's video), beside its history, never in
    it: no metric and no step, so a rewound history stays the run's, and sending it twice puts the
    same file twice."""

    frame: int
    path: Path
    folder: str
    """Where it goes: an MLflow artifact folder; the name of a W&B artifact (with the run's id)."""


def flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested spec as dotted keys (`agent.optimizer.lr`); lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in document.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def row_point(row: Mapping[str, Any]) -> Point:
    """A metrics log row as a point: every column but the clock that has a value."""
    values = {
        metric_name(column): float(value) for column, value in row.items() if column not in CLOCK and value is not None
    }
    return Point(int(row["frame"]), values, float(row.get("wall_time") or 0.0))


def evaluation_point(frame: int, mean: float, std: float, wall_time: float) -> Point:
    """An evaluation as a point. Its time is that of the latest metrics row at or before it, which a
    re-sent history knows too (an evaluation keeps no wall time of its own)."""
    return Point(frame, {EVAL_MEAN: float(mean), EVAL_STD: float(std)}, wall_time)


def history(rows: Iterable[Mapping[str, Any]], evaluations: Iterable[Mapping[str, Any]]) -> list[Point]:
    """A session's points in the order it logged them: at one frame, the metrics row first."""
    points: list[tuple[int, int, Point]] = []
    wall_at: list[tuple[int, float]] = []
    for row in rows:
        point = row_point(row)
        points.append((point.frame, 0, point))
        wall_at.append((point.frame, point.wall_time))
    for evaluation in evaluations:
        frame = int(evaluation["frame"])
        wall = max((w for f, w in wall_at if f <= frame), default=0.0)
        points.append((frame, 1, evaluation_point(frame, evaluation["mean"], evaluation["std"], wall)))
    return [point for _, _, point in sorted(points, key=lambda p: (p[0], p[1]))]

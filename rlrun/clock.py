"""The session clock: every cadence and every schedule is a function of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Clock:
    frame: int = 0
    """Env transitions so far, summed over vector envs."""
    episode: int = 0
    """Episodes finished so far, over all vector envs."""
    opt_step: int = 0
    """Optimiser steps taken."""
    wall_time: float = 0.0
    """Seconds spent training, summed over every process that worked on the session."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Clock:
        return cls(**data)


def crossed(before: int, after: int, every: int) -> bool:
    """True when a multiple of `every` lies in (before, after]: a cadence fires once per period
    however many frames one step adds."""
    return before // every < after // every

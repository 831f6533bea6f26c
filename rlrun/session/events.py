"""What a training session reports while it runs. Plain data: it crosses process boundaries and
reaches the display without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SessionStarted:
    index: int
    seed: int
    frame: int
    max_frame: int


@dataclass(frozen=True)
class Progress:
    index: int
    frame: int
    max_frame: int
    episode: int
    frames_per_second: float
    return_mean: float | None
    """Mean training return over the last 100 finished episodes."""
    headline: str | None = None
    """The algorithm's main diagnostic (`Agent.HEADLINE`), e.g. PPO's approx_kl."""
    headline_value: float | None = None
    """Its value at the latest update (None before the first)."""


@dataclass(frozen=True)
class Evaluated:
    index: int
    frame: int
    mean: float
    std: float
    is_best: bool
    video: str | None = None
    """The evaluation's video file, when one was recorded (`meta.eval_video`)."""


@dataclass(frozen=True)
class Checkpointed:
    index: int
    frame: int
    kind: str
    path: str


@dataclass(frozen=True)
class SessionEnded:
    index: int
    status: str
    frame: int
    best_eval: float | None
    error: str | None = None


@dataclass(frozen=True)
class Warned:
    """Something a person should know that does not stop training (a tracker that cannot be
    reached), said once."""

    index: int
    text: str


Event = SessionStarted | Progress | Evaluated | Checkpointed | SessionEnded | Warned

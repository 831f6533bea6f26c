"""Callbacks: the user's own code told what a run does while it trains, able to stop it.

    class StopAtKL:
        def on_log(self, info):                 # after each logged step
            return info.headline_value is None or info.headline_value < 0.05   # False: stop

    rlrun.train(spec, callbacks=[StopAtKL()])

A callback is any object with some of `on_start`, `on_log`, `on_evaluation`, `on_snapshot` and
`on_end`, each given a read-only view (the frozen dataclasses below). They hear what every session
reports (in this process, wherever the sessions run: here, in worker processes or on a cluster),
as SB3's `BaseCallback`, PFRL's hooks or RLlib's callbacks do, with rlrun's guarantees:

- A hook never changes training's bits. It runs beside training, on views; whatever it draws from
  Python's, NumPy's or torch's global random generators is given back before training goes on.
- A hook that returns `False` asks the run to stop as `rlrun stop` does: every session stops with a
  snapshot, the run ends `preempted`, and `rlrun resume` continues it bit for bit. An
  `on_evaluation` that returns `False` stops its session at that evaluation's frame (the sessions,
  here or in local worker processes, wait for each evaluation to be heard, as under
  `meta.stop_at_return`; the others stop at their next step); any other hook's, and on a cluster
  (Ray), at the next heartbeat. `TrainResult.stopped_by` says which hook asked.
- A hook that raises is reported once (a warning, and the `Warned` event a display shows) and
  stops the run the same way; the exception's line is in `TrainResult.stopped_by`. Training's own
  outcome is never lost to a hook's error.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rlrun.session import events
from rlrun.training.executor import OnEvent

log = logging.getLogger("rlrun")


@dataclass(frozen=True)
class StartInfo:
    """A session started (or resumed) at `frame`."""

    run_id: str
    session: int
    seed: int
    frame: int
    max_frame: int


@dataclass(frozen=True)
class LogInfo:
    """A session logged a step (every `meta.log_frequency` frames): the clock and its headline."""

    run_id: str
    session: int
    frame: int
    max_frame: int
    episode: int
    frames_per_second: float
    return_mean: float | None
    """Mean training return over the last 100 finished episodes (None before the first)."""
    headline: str | None
    """The algorithm's main diagnostic's name (PPO's approx_kl, DQN's loss …)."""
    headline_value: float | None


@dataclass(frozen=True)
class EvaluationInfo:
    """An evaluation finished: the mean and spread of its episodes' returns at `frame`."""

    run_id: str
    session: int
    frame: int
    mean: float
    std: float
    is_best: bool
    video: str | None = None
    """The evaluation's video file (`meta.eval_video`), when one was recorded; else None."""


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot is complete and recorded (`kind`: periodic, eval, best, preempt, final, joined
    with "+"), at `path` in the run's home."""

    run_id: str
    session: int
    frame: int
    kind: str
    path: str


@dataclass(frozen=True)
class EndInfo:
    """A session ended: finished, preempted, failed (with `error`)."""

    run_id: str
    session: int
    status: str
    frame: int
    best_eval: float | None
    error: str | None


def _view(run_id: str, event: events.Event) -> tuple[str, Any] | None:
    """The hook that hears `event`, and what it is given (None: no hook hears it)."""
    match event:
        case events.SessionStarted(index, seed, frame, max_frame):
            return "on_start", StartInfo(run_id, index, seed, frame, max_frame)
        case events.Progress(index, frame, max_frame, episode, fps, mean, headline, value):
            return "on_log", LogInfo(run_id, index, frame, max_frame, episode, fps, mean, headline, value)
        case events.Evaluated(index, frame, mean, std, is_best, video):
            return "on_evaluation", EvaluationInfo(run_id, index, frame, mean, std, is_best, video)
        case events.Checkpointed(index, frame, kind, path):
            return "on_snapshot", SnapshotInfo(run_id, index, frame, kind, path)
        case events.SessionEnded(index, status, frame, best_eval, error):
            return "on_end", EndInfo(run_id, index, status, frame, best_eval, error)
    return None


HOOKS = ("on_start", "on_log", "on_evaluation", "on_snapshot", "on_end")


def check(callbacks: Sequence[object]) -> None:
    """Before anything is written: each callback has at least one hook, each hook is callable."""
    from rlrun.errors import BadInput

    for callback in callbacks:
        hooks = [name for name in HOOKS if hasattr(callback, name)]
        if not hooks:
            raise BadInput(f"callback {callback!r} has none of {', '.join(HOOKS)}; define at least one")
        for name in hooks:
            if not callable(getattr(callback, name)):
                raise BadInput(f"callback {callback!r}: {name} is not callable")


@contextmanager
def _global_generators_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's global generators as they were: a session in this process
    draws from them, a hook must not move them."""
    import numpy as np
    import torch

    python, numpy, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(torch_state)


class Delivery:
    """The events of one run, to its callbacks and then to `on_event` (the display's)."""

    def __init__(
        self,
        run_id: str,
        callbacks: Sequence[object],
        on_event: OnEvent,
        request_stop: Callable[[], object],
        stop_now: Callable[[], object] | None = None,
    ) -> None:
        self.run_id, self.callbacks, self.on_event = run_id, list(callbacks), on_event
        self._request_stop = request_stop
        self._stop_now = stop_now
        """What stops the sessions at their next step, at once (None: the request, at a heartbeat)."""
        self._stopping: threading.Thread | None = None
        self.stopped_by: str | None = None

    def __call__(self, event: events.Event) -> None:
        view = _view(self.run_id, event)
        if view is not None and self.callbacks:
            name, info = view
            for callback in self.callbacks:
                hook = getattr(callback, name, None)
                if hook is not None:
                    self._call(callback, name, hook, info, getattr(event, "index", 0))
        self.on_event(event)

    def _call(self, callback: object, name: str, hook: Callable[[Any], Any], info: Any, index: int) -> None:
        who = f"{type(callback).__name__}.{name}"
        try:
            with _global_generators_kept():
                answer = hook(info)
        except Exception as error:  # the user's code: reported, never training's end
            line = f"{who} raised {type(error).__name__}: {error}".splitlines()[0]
            log.warning("callback %s; the run stops with snapshots", line)
            self.on_event(events.Warned(index, f"callback {line}; the run stops with snapshots"))
            self._stop(line)
            return
        if answer is False:
            self._stop(f"{who} returned False")

    def _stop(self, reason: str) -> None:
        """Ask once, off this thread: a session in this process may be inside a registry write
        while it reports (a snapshot's), and the request is a registry write of its own."""
        if self._stopping is not None:
            return
        self.stopped_by = reason
        if self._stop_now is not None:  # before the session that reported takes another step
            self._stop_now()
        self._stopping = threading.Thread(target=self._request_stop, name="rlrun-callback-stop", daemon=True)
        self._stopping.start()

    def close(self) -> None:
        """Wait for the stop request, if one was made (the run has ended: it is quick)."""
        if self._stopping is not None:
            self._stopping.join()

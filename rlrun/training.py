"""`train`: the library call behind `rlrun train`, usable as is from a notebook.

It checks everything that can be checked before anything is written (the spec, the run name, that
the env and the algorithm fit together), then records the run, writes its folder and trains its
sessions: in this process for one session, in one spawned process each for several.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue as queue_module
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlrun import events, paths
from rlrun.errors import BadInput
from rlrun.fsutil import atomic_write
from rlrun.ids import new_run_id
from rlrun.refs import check_run_name
from rlrun.registry import Registry, RunRecord
from rlrun.spec import Spec

MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class SessionOutcome:
    index: int
    seed: int
    status: str
    frame: int
    best_eval: float | None
    error: str | None


@dataclass(frozen=True)
class TrainResult:
    run_id: str
    name: str | None
    home: str
    status: str
    sessions: list[SessionOutcome]

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.sessions if s.error), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def train(spec: Spec, *, home: Path | str | None = None, name: str | None = None,
          on_event: Callable[[events.Event], None] | None = None,
          on_start: Callable[[RunRecord], None] | None = None) -> TrainResult:
    """Train a run of `spec.meta.sessions` sessions; returns when every session has ended."""
    root = paths.resolve_home(home)
    url = paths.database_url(root)
    if name is not None:
        check_run_name(name)
        _check_name_free(root, url, name)
    check_compatible(spec)
    with Registry.open(root, url) as registry:
        run = registry.create_run(
            run_id=new_run_id(), name=name, spec_name=spec.name, algorithm=spec.agent.algorithm,
            env_id=spec.env.id, max_frame=spec.meta.max_frame, seed=spec.meta.seed,
            num_sessions=spec.meta.sessions, spec_json=json.dumps(spec.to_json()),
            host=socket.gethostname(), pid=os.getpid(),
        )
        _write_manifest(root, run, spec)
        if on_start is not None:
            on_start(run)
        sessions = registry.get_run(run.id).sessions
        from rlrun.session import SessionTask

        tasks = [SessionTask(home=str(root), db_url=url, run_id=run.id, session_id=s.id, index=s.index,
                             seed=s.seed, spec=spec.to_json()) for s in sessions]
        ended = _run_sessions(tasks, on_event or (lambda event: None), registry)
        status = "finished" if all(e.status == "finished" for e in ended) else "failed"
        error = next((e.error for e in ended if e.error), None)
        registry.finish_run(run.id, status=status, error=error)
    outcomes = [SessionOutcome(e.index, t.seed, e.status, e.frame, e.best_eval, e.error)
                for t, e in zip(tasks, ended, strict=True)]
    return TrainResult(run.id, run.name, str(root), status, outcomes)


def _check_name_free(root: Path, url: str, name: str) -> None:
    with Registry.open(root, url, create=False) as registry:
        holder = registry.name_exists(name)
    if holder is not None:
        raise BadInput(f"a run named {name!r} already exists (id {holder}); choose another --name")


def check_compatible(spec: Spec) -> None:
    """Build the env and the agent once, so a mismatch (say, a continuous-action env for a
    discrete-action algorithm) is bad input reported before the run is recorded."""
    from rlrun.envs import make_env
    from rlrun.session import build_agent

    env = make_env(spec.env)
    try:
        build_agent(spec, env.observation_space, env.action_space, spec.meta.seed)
    except (ValueError, TypeError) as error:
        raise BadInput(
            f"{spec.agent.algorithm} cannot train on {spec.env.id}: {error}; pick another algorithm or env"
        ) from None
    finally:
        env.close()


def _write_manifest(root: Path, run: RunRecord, spec: Spec) -> None:
    """Each run folder describes itself, so the registry can be rebuilt from the folders."""
    manifest = {"format": MANIFEST_FORMAT, "run": run.to_json(), "spec": spec.to_json()}
    atomic_write(paths.run_dir(root, run.id) / "run.json", json.dumps(manifest, indent=1).encode())


# ---------------------------------------------------------------------------------------------
# Running sessions


def _run_sessions(tasks: list[Any], on_event: Callable[[events.Event], None],
                  registry: Registry) -> list[events.SessionEnded]:
    if len(tasks) == 1:
        return [_run_here(tasks[0], on_event)]
    return _run_spawned(tasks, on_event, registry)


def _run_here(task: Any, on_event: Callable[[events.Event], None]) -> events.SessionEnded:
    from rlrun.session import SessionFailed, run_session

    ended: list[events.SessionEnded] = []

    def forward(event: events.Event) -> None:
        if isinstance(event, events.SessionEnded):
            ended.append(event)
        on_event(event)

    with contextlib.suppress(SessionFailed):  # already recorded, and reported through `forward`
        run_session(task, forward)
    return ended[-1]


def _run_spawned(tasks: list[Any], on_event: Callable[[events.Event], None],
                 registry: Registry) -> list[events.SessionEnded]:
    """One spawned process per session (spawn, not fork: torch and SQLite connections do not
    survive a fork). Events come back through a queue; a process that dies without saying so is
    recorded as failed."""
    from rlrun.session import run_session_process

    context = multiprocessing.get_context("spawn")
    channel = context.Queue()
    processes = {t.index: context.Process(target=run_session_process, args=(t, channel), name=f"rlrun-s{t.index}")
                 for t in tasks}
    for process in processes.values():
        process.start()
    ended: dict[int, events.SessionEnded] = {}
    while len(ended) < len(tasks):
        try:
            event = channel.get(timeout=0.5)
        except queue_module.Empty:
            _reap_silent_deaths(tasks, processes, ended, channel, on_event, registry)
            continue
        _deliver(event, ended, on_event)
    for process in processes.values():
        process.join()
    return [ended[t.index] for t in tasks]


def _deliver(event: events.Event, ended: dict[int, events.SessionEnded],
             on_event: Callable[[events.Event], None]) -> None:
    if isinstance(event, events.SessionEnded):
        ended[event.index] = event
    on_event(event)


def _reap_silent_deaths(tasks: list[Any], processes: dict[int, Any], ended: dict[int, events.SessionEnded],
                        channel: Any, on_event: Callable[[events.Event], None], registry: Registry) -> None:
    dead = [t for t in tasks if t.index not in ended and not processes[t.index].is_alive()]
    if not dead:
        return
    deadline = time.monotonic() + 2.0  # a process's last events may still be in the pipe
    while time.monotonic() < deadline:
        try:
            _deliver(channel.get(timeout=0.1), ended, on_event)
        except queue_module.Empty:
            break
    for task in dead:
        if task.index in ended:
            continue
        message = f"session process exited with code {processes[task.index].exitcode} without reporting"
        session = registry.get_session(task.run_id, task.index)
        registry.finish_session(session.id, status="failed", frame=session.frame, episode=session.episode,
                                opt_step=session.opt_step, error=message)
        _deliver(events.SessionEnded(task.index, "failed", session.frame, session.best_eval, message), ended, on_event)

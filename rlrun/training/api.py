"""`train` and `resume`: the library calls behind `rlrun train` and `rlrun resume`, usable as they
are from a notebook.

Both check everything that can be checked before anything is written (the spec, the run name, that
the env and the algorithm fit, that an edit is consistent), then record what they do in the registry
and hand the sessions to an executor (`rlrun.training.executor`; by default the local one: this
process for one session, one worker process each for several). SIGINT/SIGTERM stop every session at
its next step with a snapshot; a second signal ends at once. A signal that arrives before anything is
written (see `rlrun.session.stopping.defer_signals`) stops the call with nothing written.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rlrun import data, paths, snapshot, storage, testhooks
from rlrun.clock import Clock
from rlrun.errors import BadInput
from rlrun.imports.foreign import refuse_foreign
from rlrun.refs import RunFilter, RunRef, check_run_name, parse_ref
from rlrun.registry import CheckpointRecord, Registry, RunRecord, SessionRecord, run_status
from rlrun.registry.records import TrialLink
from rlrun.session.device import check_device, torch_state_kept
from rlrun.session.stopping import raise_if_stopped
from rlrun.session.task import SessionTask
from rlrun.spec import (
    MetaSpec,
    Spec,
    algorithm_switch_at_resume,
    apply_overrides,
    read_document,
    recorded_spec,
    user_code,
    validate_spec,
)
from rlrun.spec.consistency import Change, EditRefused, check_edit, diff_json, fork_conflicts
from rlrun.spec.cores import AUTO, torch_threads
from rlrun.trackers import check_installed
from rlrun.training import control
from rlrun.training.callbacks import Delivery
from rlrun.training.callbacks import check as check_callbacks
from rlrun.training.datasets import provision
from rlrun.training.executor import Execution, Executor, OnEvent


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
    """What `train` or `resume` did.

    Attributes:
        run_id: The run's id (a fork's: the new run's).
        name: The run's name, if it has one.
        home: The runs home the run lives in.
        status: The whole run's status, as `rlrun ls` reports it.
        sessions: Each session's outcome: index, seed, status, frame, best evaluation, error.
    """

    run_id: str
    name: str | None
    home: str
    status: str
    sessions: list[SessionOutcome]
    signal: int = 0
    """The signal that stopped the run (0 when none did)."""
    nothing_to_do: bool = False
    """`resume` found every session already at its target and wrote nothing."""
    max_frame: int = 0
    """Each session's frame target."""
    detached: str | None = None
    """Who supervises the run on the cluster (`--detach`: an actor, as `rlrun show` names it); the
    call returned once it took over, so `sessions` is empty and `status` is "running"."""
    stopped_by: str | None = None
    """The callback that stopped the run (it returned False, or raised: its line), if one did."""

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.sessions if s.error), None)

    @property
    def outcome(self) -> str:
        """What the sessions this call ran make of it, by the run-status rule: failed, preempted,
        finished (or running, when it ran none). `status` is the whole run's."""
        return run_status(s.status for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# train


def check_outputs_installed(spec: Spec) -> None:
    """The extras the spec's outputs need (its trackers, `meta.eval_video`'s encoders), before
    anything is written: a missing one is one line naming the install, exit 2."""
    check_installed(spec.meta.track)
    if spec.meta.eval_video is not None:
        from rlrun.session.video import check_encoders

        check_encoders("meta.eval_video")


def train(
    spec: Spec,
    *,
    home: Path | str | None = None,
    name: str | None = None,
    on_event: OnEvent | None = None,
    on_start: Callable[[RunRecord], None] | None = None,
    handle_signals: bool = True,
    executor: Executor | None = None,
    trial: TrialLink | None = None,
    callbacks: Sequence[object] = (),
) -> TrainResult:
    """Train a run of `spec.meta.sessions` sessions; returns when every session has ended, or,
    with a detaching executor, once a supervisor on the cluster has taken them over.

    Args:
        spec: The validated spec to train (`load_spec`), as `rlrun train SPEC --set ...` reads it.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        name: A name for the run, unique in the home, that references accept in place of its id.
        on_event: Hears every event the sessions report (progress, evaluations, snapshots, ends),
            as the command line's display does.
        on_start: Hears of the run once it is recorded, before it trains.
        handle_signals: Whether SIGINT/SIGTERM stop every session at its next step with a snapshot
            (a second signal ends at once); False leaves the process's signal handlers alone.
        executor: Where the sessions run (`rlrun.training.executor`); None: the local one (this
            process for one session, one worker process each for several).
        trial: The search trial the run trains, recorded with the run in one transaction (searches
            set it; left None otherwise).
        callbacks: Objects with any of `on_start`, `on_log`, `on_evaluation`, `on_snapshot` and
            `on_end`; a hook that returns False stops the run (`rlrun.training.callbacks`).

    Returns:
        The run's id, status and each session's outcome.

    Raises:
        BadInput: Something asked for cannot be done (a name taken, an env the algorithm cannot
            train, a missing extra); nothing is written.
        Unavailable: The registry's database, the object store or the cluster does not answer.
    """
    check_callbacks(callbacks)
    root = paths.resolve_home(home)
    storage.reach(root)
    url = paths.database_url(root)
    spec = as_recorded(spec, sharing=_sessions_sharing(root, url, spec))
    if name is not None:
        check_run_name(name)
        _check_name_free(root, url, name)
    # torch, NumPy and Python as the caller left them, whatever happens; the run's files reach a store
    # home from a background thread, so no registry transaction here waits on the network.
    with torch_state_kept(), storage.publishing_in_background():
        check_compatible(spec)
        check_outputs_installed(spec)
        runner = _executor(executor, handle_signals)
        runner.prepare(root, url, modules=user_code(spec))
        if handle_signals:
            raise_if_stopped("before the run was recorded; nothing was written")
        with Registry.open(root, url) as registry:
            run = _create_run(registry, spec, name=name, trial=trial)
            _write_manifest(root, registry, run.id)
            testhooks.crash_point("manifest-written")
            if on_start is not None:
                on_start(run)
            tasks = [_task(root, url, run.id, s, spec, "train", None) for s in registry.get_run(run.id).sessions]
            return _launch(registry, root, run, tasks, on_event, runner, callbacks)


def _create_run(
    registry: Registry,
    spec: Spec,
    *,
    name: str | None,
    fork_of: ResumePlan | None = None,
    trial: TrialLink | None = None,
) -> RunRecord:
    """A new run. A fork's history starts as its parent's: revision 0 is the spec that trained
    frames [0, F], revision 1 the edited spec from F on."""
    first = fork_of.previous if fork_of else spec
    run = registry.create_run(
        name=name,
        spec_name=spec.name,
        algorithm=spec.agent.algorithm,
        env_id=spec.env.id,
        max_frame=spec.meta.max_frame,
        seed=spec.meta.seed,
        num_sessions=spec.meta.sessions,
        spec_json=json.dumps(first.to_json()),
        host=socket.gethostname(),
        pid=os.getpid(),
        parent_id=fork_of.run.id if fork_of else None,
        trial=trial,
    )
    if fork_of is not None:
        registry.add_spec_revision(
            run.id,
            frame=fork_of.frame,
            spec_json=json.dumps(spec.to_json()),
            diff_json=diff_json(fork_of.previous, spec),
        )
    return run


def as_recorded(spec: Spec, previous: Spec | None = None, *, sharing: int | None = None) -> Spec:
    """The spec as a run records it: `meta.torch_threads: "auto"` becomes a number, once, when
    the run is created (its share of the usable cores, the cores over the sessions sharing them:
    `sharing`, else the run's own; less what the env workers take: `rlrun.spec.cores.split_cores`,
    which the sessions read back to resolve `env.workers: "auto"`). Threads can change how torch
    splits a sum, so the number is structural: every session and every later resume, on any
    machine, uses the recorded one, and "auto" in a resume's edit (or a fork's) means the number
    the run recorded. Likewise an edit that does not name `meta.arithmetic` keeps the run's."""
    if previous is not None and "arithmetic" not in spec.meta.model_fields_set:
        spec = spec.model_copy(update={"meta": spec.meta.model_copy(update={"arithmetic": previous.meta.arithmetic})})
    provision(spec, train, previous)  # a dataset the spec names, recorded from its recipe if it is not there yet
    spec = data.pin(spec, previous)  # the dataset's digest, checked against the one the run pinned
    if spec.meta.torch_threads != AUTO:
        return spec
    recorded = previous.meta.torch_threads if previous is not None else AUTO
    threads = recorded if isinstance(recorded, int) else torch_threads(spec, sharing or spec.meta.sessions)
    return spec.model_copy(update={"meta": spec.meta.model_copy(update={"torch_threads": threads})})


def _sessions_sharing(root: Path, url: str, spec: Spec) -> int | None:
    """The sessions a new run's would share this machine with, its own included, where its
    `meta.torch_threads` is "auto" (None: not needed)."""
    if spec.meta.torch_threads != AUTO:
        return None
    with Registry.open(root, url, create=False) as registry:
        return registry.sessions_sharing_this_host(spec.meta.sessions)


def _check_name_free(root: Path, url: str, name: str) -> None:
    with Registry.open(root, url, create=False) as registry:
        holder = registry.name_exists(name)
    if holder is not None:
        raise BadInput(f"a run named {name!r} already exists (id {holder}); choose another --name")


def check_compatible(spec: Spec) -> None:
    """Build the env and the agent once, so a mismatch (say, a continuous-action env for a
    discrete-action algorithm, or a GPU this machine lacks) is bad input reported before the run
    is recorded."""
    from rlrun.algorithms import build_agent
    from rlrun.envs import make_env
    from rlrun.envs.normalize import make_normalizer

    check_device(spec.meta.device)
    env = make_env(spec.env)
    try:
        if spec.data is not None:  # a dataset whose rows the env could not have given
            data.check_spaces(spec.data, env.observation_space, env.action_space)
        make_normalizer(spec, env.observation_space)
        build_agent(spec, env.observation_space, env.action_space, spec.meta.seed)
    except (ValueError, TypeError) as error:
        raise BadInput(
            f"{spec.agent.algorithm} cannot train on {spec.env.id}: {error}; pick another algorithm or env"
        ) from None
    finally:
        env.close()


def _write_manifest(root: Path, registry: Registry, run_id: str) -> None:
    """Each run folder describes itself (`run.json`: its record, sessions, spec revisions and
    attempts), so the registry can be rebuilt from the folders. The registry writes it, and
    rewrites it with every change to those rows from then on."""
    registry.write_manifest(run_id)


def _task(
    root: Path, url: str, run_id: str, session: SessionRecord, spec: Spec, attempt: str, start: CheckpointRecord | None
) -> SessionTask:
    return SessionTask(
        home=paths.home_address(root),
        db_url=url,
        run_id=run_id,
        session_id=session.id,
        index=session.index,
        seed=session.seed,
        spec=spec.to_json(),
        attempt=attempt,
        resume_from=start.path if start else None,
        resume_sha256=start.sha256 if start else None,
    )


# ---------------------------------------------------------------------------------------------
# resume


@dataclass(frozen=True)
class ResumePlan:
    """What `resume` will do, decided before anything is written."""

    run: RunRecord
    spec: Spec
    previous: Spec
    frame: int
    """The newest snapshot frame over the sessions that continue: edits are checked up to it."""
    starts: list[tuple[SessionRecord, CheckpointRecord | None]]
    """Each session to continue and the snapshot it continues from (None: from frame 0). Empty
    when every session has reached its target: nothing to do."""
    changes: list[Change]
    fork: bool
    skipped: list[str] = field(default_factory=list)
    """Warnings: snapshots passed over because they are missing or damaged, each naming the one
    used instead."""


def plan_resume(
    registry: Registry,
    root: Path,
    ref: RunRef | str = "latest",
    filters: RunFilter | None = None,
    *,
    frames: int | None = None,
    more: int | None = None,
    spec: str | Path | None = None,
    overrides: list[str] | None = None,
    fork: bool = False,
) -> ResumePlan:
    """What `resume` would do, decided from the registry and the snapshots alone: raises BadInput
    (or EditRefused) when it cannot, and says `nothing_to_do` when every session is at its target."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    run = registry.resolve(parsed, filters)
    refuse_foreign(run, "resume")
    if fork and parsed.session is not None:
        raise BadInput(f"--fork branches a whole run; drop /s{parsed.session} from '{parsed.base}/s{parsed.session}'")
    if not fork and (live := registry.live_session(run.id)) is not None:
        raise BadInput(
            f"run {run.id} is still running (session s{live.index}, pid {live.pid} on {live.host});"
            " stop it with SIGTERM or wait for it to end"
        )
    previous = recorded_spec(json.loads(registry.latest_spec(run.id).spec_json), check_env_id=True)
    edited = _edited_spec(previous, run.id, frames=frames, more=more, spec=spec, overrides=overrides or [])
    detail = registry.get_run(run.id)
    skipped: list[str] = []
    starts = [
        (s, newest_intact(root, run.id, s, [c for c in detail.checkpoints if c.session_index == s.index], skipped))
        for s in detail.sessions
        if parsed.session is None or s.index == parsed.session
    ]
    frame = max((c.frame for _, c in starts if c is not None), default=0)
    changes = check_edit(previous, edited, frame)
    refused = fork_conflicts(previous, edited) if fork else [c for c in changes if not c.allowed]
    if refused:
        raise EditRefused(run.id, frame, refused, fork=fork)
    if not fork:
        starts = [(s, c) for s, c in starts if not _at_target(root, s, c, edited.meta)]
    if starts:
        check_device(edited.meta.device)
    return ResumePlan(run, edited, previous, frame, starts, changes, fork, skipped)


def _at_target(root: Path, session: SessionRecord, start: CheckpointRecord | None, meta: MetaSpec) -> bool:
    """Whether a session has nothing left to train: it finished at its targets (`meta.reached`: the
    frame budget, or a return), or its snapshot is there already. (A finished session whose newest
    snapshot is damaged still counts as done.)"""
    if session.status == "finished" and meta.reached(session.frame, session.best_eval):
        return True
    if start is None:
        return False
    best = snapshot.read_meta(root / start.path).best if meta.stop_at_return is not None else None
    return meta.reached(start.frame, best.mean if best else None)


def _edited_spec(
    previous: Spec, run_id: str, *, frames: int | None, more: int | None, spec: str | Path | None, overrides: list[str]
) -> Spec:
    if frames is not None and more is not None:
        raise BadInput("give --frames (the new target) or --more (added to it), not both")
    document = apply_overrides(read_document(spec) if spec is not None else previous.to_json(), overrides)
    if frames is not None or more is not None:
        target = frames if frames is not None else previous.meta.max_frame + (more or 0)
        document = apply_overrides(document, [f"meta.max_frame={target}"])
    switched = algorithm_switch_at_resume(previous, document, run_id)
    if switched is not None:
        raise BadInput(switched)
    return as_recorded(validate_spec(document), previous)


def newest_intact(
    root: Path, run_id: str, session: SessionRecord, checkpoints: list[CheckpointRecord], skipped: list[str]
) -> CheckpointRecord | None:
    """The session's newest snapshot that passes the deep check (every file against its manifest,
    the manifest against the registry's sha256), so a damaged one is found before anything is
    written. Each one passed over is a warning in `skipped`, naming the snapshot used instead. A
    session whose every snapshot is damaged cannot continue: BadInput, nothing written."""
    problems: list[str] = []
    for checkpoint in sorted(checkpoints, key=lambda c: c.frame, reverse=True):
        try:
            snapshot.verify(root / checkpoint.path, checkpoint.sha256, deep=True)
        except snapshot.SnapshotError as error:
            problems.append(str(error).removesuffix("; use another checkpoint"))
            continue
        skipped.extend(
            f"{problem}; s{session.index} continues from the snapshot at frame {checkpoint.frame:,}"
            f" ({checkpoint.path}) instead"
            for problem in problems
        )
        return checkpoint
    if problems:
        raise BadInput(
            f"run {run_id} session s{session.index} has no intact snapshot to continue from"
            f" ({len(problems)} damaged; newest: {problems[0]}); nothing was changed"
        )
    return None


def resume(
    ref: RunRef | str = "latest",
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    frames: int | None = None,
    more: int | None = None,
    spec: str | Path | None = None,
    overrides: list[str] | None = None,
    fork: bool = False,
    on_event: OnEvent | None = None,
    on_plan: Callable[[ResumePlan], None] | None = None,
    handle_signals: bool = True,
    executor: Executor | None = None,
    on_start: Callable[[RunRecord], None] | None = None,
    trial: TrialLink | None = None,
    callbacks: Sequence[object] = (),
) -> TrainResult:
    """Continue a run (or, with `fork`, branch a new one) from each session's newest intact
    snapshot, optionally with a spec edit that must be consistent with what was already trained.
    When every session has already reached its target, nothing is written and the result says
    `nothing_to_do` (safe to requeue).

    Args:
        ref: The run: latest, latest~N, a row, an id, prefix or name, or a run folder; `/sK` for
            one session.
        filters: Which runs `ref` counts among (`RunFilter.of(algorithm="ppo")`); None: every run.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        frames: A new frame target per session (`--frames`).
        more: Frames to add to each session's target (`--more`).
        spec: An edited spec file (`--spec`), consistent with what was already trained.
        overrides: Spec edits as `key=value` (`--set meta.eval_frequency=5k`).
        fork: Branch a new run from the snapshot instead of continuing this one.
        on_event: Hears every event the sessions report, as for `train`.
        on_plan: Hears what the resume will do (which sessions start, from which snapshot) before
            anything is written.
        handle_signals: As for `train`.
        executor: As for `train`.
        on_start: Hears of the run (a fork: the new one) once it is recorded, before it trains.
        trial: The search trial the run trains (searches set it; left None otherwise).
        callbacks: As for `train`.

    Returns:
        The run's id, status and each session's outcome; `nothing_to_do` when none had frames left.

    Raises:
        BadInput: An unknown reference, or an edit that would change what was trained
            (`EditRefused`, naming each change); nothing is written.
        Unavailable: As for `train`.
    """
    check_callbacks(callbacks)
    root = paths.resolve_home(home)
    storage.reach(root)
    url = paths.database_url(root)
    with Registry.open(root, url, create=False) as registry:
        plan = plan_resume(
            registry, root, ref, filters, frames=frames, more=more, spec=spec, overrides=overrides, fork=fork
        )
        if on_plan is not None:
            on_plan(plan)
        if not plan.starts:
            return _nothing_to_do(registry, root, plan)
    with torch_state_kept(), storage.publishing_in_background():
        check_outputs_installed(plan.spec)
        runner = _executor(executor, handle_signals)
        runner.prepare(root, url, modules=user_code(plan.spec))
        if handle_signals:
            raise_if_stopped(f"before run {plan.run.id} was reopened; nothing was written")
        with Registry.open(root, url) as registry:
            run, tasks = _start_fork(registry, root, url, plan, trial) if fork else _reopen(registry, root, url, plan)
            if on_start is not None:
                on_start(run)
            return _launch(registry, root, run, tasks, on_event, runner, callbacks)


def _nothing_to_do(registry: Registry, root: Path, plan: ResumePlan) -> TrainResult:
    sessions = [
        SessionOutcome(s.index, s.seed, s.status, s.frame, s.best_eval, s.error)
        for s in registry.get_run(plan.run.id).sessions
    ]
    return TrainResult(
        plan.run.id,
        plan.run.name,
        str(root),
        plan.run.status,
        sessions,
        nothing_to_do=True,
        max_frame=plan.spec.meta.max_frame,
    )


def _reopen(registry: Registry, root: Path, url: str, plan: ResumePlan) -> tuple[RunRecord, list[SessionTask]]:
    run = plan.run
    registry.add_spec_revision(
        run.id,
        frame=plan.frame,
        spec_json=json.dumps(plan.spec.to_json()),
        diff_json=diff_json(plan.previous, plan.spec),
    )
    registry.reopen_run(run.id, host=socket.gethostname(), pid=os.getpid(), max_frame=plan.spec.meta.max_frame)
    for session, start in plan.starts:
        # The lease first: an older attempt still alive somewhere (frozen, cut off, riding out a
        # registry outage) writes nothing from here on, not even into what the rewind forgets.
        registry.acquire_lease(session.id)
        rewind(registry, root, run.id, session, start.path if start else None)
        # Claimed at once, so the run never looks dead (and open to a second resume) while its
        # session processes start up.
        registry.start_session(session.id, host=socket.gethostname(), pid=os.getpid())
    _write_manifest(root, registry, run.id)
    testhooks.crash_point("resume-rewound")
    tasks = [_task(root, url, run.id, s, plan.spec, "resume", c) for s, c in plan.starts]
    return registry.resolve(run.id), tasks


def rewind(registry: Registry, root: Path, run_id: str, session: SessionRecord, start: str | None) -> None:
    """What the session recorded after its snapshot `start` (a path in the home; None: frame 0)
    will be trained again: forget it (rows first, then folders), and sweep away snapshots that
    never finished writing or never reached the registry: the session writes them again."""
    clock = (snapshot.read_meta(root / start).clock if start else Clock()).to_json()
    removed = registry.rewind_session(
        session.id, frame=clock["frame"], episode=clock["episode"], opt_step=clock["opt_step"]
    )
    for checkpoint in removed:
        snapshot.remove(root / checkpoint.path)
    snapshot.sweep_after(paths.checkpoints_dir(root, run_id, session.index), clock["frame"])


def _start_fork(
    registry: Registry, root: Path, url: str, plan: ResumePlan, trial: TrialLink | None = None
) -> tuple[RunRecord, list[SessionTask]]:
    run = _create_run(registry, plan.spec, name=None, fork_of=plan, trial=trial)
    _write_manifest(root, registry, run.id)
    sessions = {s.index: s for s in registry.get_run(run.id).sessions}
    tasks = [_task(root, url, run.id, sessions[s.index], plan.spec, "fork", c) for s, c in plan.starts]
    return run, tasks


# ---------------------------------------------------------------------------------------------
# Running the sessions


def _executor(executor: Executor | None, handle_signals: bool) -> Executor:
    if executor is not None:
        return executor
    from rlrun.training.local import LocalExecutor

    return LocalExecutor(handle_signals=handle_signals)


def _launch(
    registry: Registry,
    root: Path,
    run: RunRecord,
    tasks: list[SessionTask],
    on_event: OnEvent | None,
    executor: Executor,
    callbacks: Sequence[object] = (),
) -> TrainResult:
    stop_now = _answering_evaluations(executor, callbacks)
    if stop_now is not None:
        tasks = [replace(task, answer_evaluations=True) for task in tasks]
    delivery = Delivery(
        run.id,
        callbacks,
        on_event or (lambda event: None),
        request_stop=lambda: control.stop(run.id, home=root),
        stop_now=stop_now,
    )
    try:
        execution = executor.run(tasks, delivery)
    finally:
        delivery.close()
        if stop_now is not None:  # the stop was this run's: an executor used again starts unstopped
            executor.stop = None  # type: ignore[attr-defined]  # a LocalExecutor's
    if execution.supervisor is not None:
        return TrainResult(
            run.id,
            run.name,
            str(root),
            "running",
            [],
            max_frame=run.max_frame,
            detached=execution.supervisor,
            stopped_by=delivery.stopped_by,
        )
    status = settle_run(registry, run.id, execution)
    outcomes = [
        SessionOutcome(e.index, t.seed, e.status, e.frame, e.best_eval, e.error)
        for t, e in zip(tasks, execution.ended, strict=True)
    ]
    return TrainResult(
        run.id,
        run.name,
        str(root),
        status,
        outcomes,
        execution.signal,
        max_frame=run.max_frame,
        stopped_by=delivery.stopped_by,
    )


def _answering_evaluations(executor: Executor, callbacks: Sequence[object]) -> Callable[[], None] | None:
    """When a callback hears evaluations and the sessions run here or in local worker processes:
    what stops every session at its next step, as a signal would (the sessions then wait for each
    evaluation to be heard, so a callback's False stops the run at that evaluation's frame). None
    elsewhere (a cluster's sessions stop at their next heartbeat), and where the caller gave the
    executor a stop of its own (a search's): a callback's stop is not theirs to take."""
    from rlrun.session.stopping import StopRequest
    from rlrun.training.local import LocalExecutor

    if not isinstance(executor, LocalExecutor) or executor.stop is not None:
        return None
    if not any(hasattr(c, "on_evaluation") for c in callbacks):
        return None
    stop = executor.stop = StopRequest()
    return lambda: stop.request(signal.SIGTERM) if not stop.signal else None


def settle_run(registry: Registry, run_id: str, execution: Execution) -> str:
    """Record the run's end once its supervisor (this process, or a detached run's on a cluster)
    is done with its sessions, and return its status from its sessions'. Sessions it did not run
    may still be crashed: the run then stays "running" in the registry, which reports it crashed."""
    status = run_status(s.status for s in registry.get_run(run_id).sessions)
    if status != "running":
        registry.finish_run(run_id, status=status, error=next((e.error for e in execution.ended if e.error), None))
    return status

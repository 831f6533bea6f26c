"""The SLURM executor as `train` and `resume` use it (`rlrun.training.executor`): check before
anything is written, submit one job per session through submitit's `AutoExecutor`, record the
jobs with the run, and return (the jobs supervise themselves) or, with `wait`, wait for them."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlrun import paths
from rlrun.errors import BadInput, TrainingFailed
from rlrun.registry import Registry, RunRecord
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.session.task import SessionTask
from rlrun.spec.sections import SlurmSpec
from rlrun.training.executor import Execution, OnEvent
from rlrun.training.slurm import queue
from rlrun.training.slurm.options import described, submitit_parameters

POLL_SECONDS = 1.0
"""How often `--wait` asks SLURM and the registry how the jobs stand."""


def import_submitit() -> Any:
    """submitit, or one line saying which extra to install (exit 2)."""
    try:
        import submitit
    except ImportError:
        raise BadInput("--slurm submits through submitit; install the extra: pip install 'rlrun[slurm]'") from None
    return submitit


class SlurmExecutor:
    def __init__(self, *, wait: bool = False, stop: StopRequest | None = None, handle_signals: bool = True) -> None:
        self.wait = wait
        """Wait for the jobs to end (requeues included) instead of returning once they are submitted."""
        self.stop = stop or StopRequest()
        """While waiting: asked (by a signal, or by a search's pruner) to stop the run (`rlrun stop`)."""
        self.handle_signals = handle_signals
        """While waiting: whether SIGINT/SIGTERM here ask the stop (not in a parallel trial's worker
        process, whose driver takes the signals and passes the stop on)."""
        self.slurm: SlurmSpec | None = None
        """The spec's `meta.slurm`, when the caller knows it before `prepare` (`use`), for the check."""
        self.earlier: RunRecord | None = None
        """The run a resume continues, whose earlier jobs must have left the queue (`use`)."""

    def use(self, slurm: SlurmSpec | None, earlier: RunRecord | None = None) -> None:
        """The options the jobs will be submitted with (the spec's `meta.slurm`), so `prepare` can
        have SLURM check them before anything is written; and for a resume, the run it continues."""
        self.slurm, self.earlier = slurm, earlier

    def prepare(self, home: Path, db_url: str, *, modules: Sequence[str] = ()) -> None:
        """submitit installed, the home a folder the nodes can share (not an object store), the
        controller answering, and SLURM accepting the options: else one line, nothing written."""
        import_submitit()
        if paths.home_address(home) != str(home.resolve()):
            raise BadInput(f"--slurm needs a home folder that the cluster's nodes share, not {home}; use a folder")
        queue.check_controller()
        queue.check_script(self._script(home, "rlrun-check"), described(self.slurm))
        if self.earlier is not None:
            _check_left_the_queue(self.earlier)

    def close(self) -> None:
        """Nothing taken."""

    def run(self, tasks: Sequence[SessionTask], on_event: OnEvent) -> Execution:
        first = tasks[0]
        home = paths.task_home(first.home)
        with Registry.open(home, first.db_url) as registry:
            handed_out = [replace(t, lease_base=registry.get_session(t.run_id, t.index).lease) for t in tasks]
            jobs: list[str] = []
            try:
                jobs += [self._submit(home, task) for task in handed_out]
            finally:  # the jobs submitted, even when a later submission failed
                label = f"SLURM job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)}"
                if jobs:
                    registry.record_slurm_jobs(first.run_id, jobs, supervisor=label)
        if not self.wait:
            return Execution([], supervisor=label)
        return _waited(tasks, jobs, on_event, self.stop, self.handle_signals)

    def submit(self, folder: Path, name: str, slurm: SlurmSpec | None, job: Any) -> str:
        """Submit the callable `job` (a session's, a search driver's) as the SLURM job `name` with
        the options `slurm`, submitit's files (the job pickled, its log) in `folder`; its id."""
        # submitit's protocol: it pickles `job` (rlrun's plain task data) here, and its job process
        # unpickles it. The one file rlrun lets anything unpickle, so the folder is the owner's alone:
        # whoever else could write in it could run code in the job.
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
        executor = _submitit_executor(folder)
        executor.update_parameters(**submitit_parameters(slurm, name))
        return str(executor.submit(job).job_id)

    def _script(self, home: Path, name: str) -> str:
        """The batch script submitit would submit with these options (for `sbatch --test-only`)."""
        executor = _submitit_executor(home / "slurm-check")
        executor.update_parameters(**submitit_parameters(self.slurm, name))
        return str(executor._executor._make_submission_file_text("true", "check"))

    def _submit(self, home: Path, task: SessionTask) -> str:
        """Submit a session's job: TrainingFailed in one line when SLURM refuses it now (the run is
        recorded; its sessions without a job are continued by `rlrun resume RUN --slurm`)."""
        from rlrun.spec import validate_spec
        from rlrun.training.slurm.job import SessionJob

        slurm = validate_spec(task.spec).meta.slurm
        folder = paths.run_dir(home, task.run_id) / "slurm"
        try:
            return self.submit(folder, f"rlrun-{task.run_id}-s{task.index}", slurm, SessionJob(task))
        except Exception as error:  # submitit's: a failed sbatch (CalledProcessError, FailedJobError)
            said = " ".join(str(error).split())[:300]
            raise TrainingFailed(
                f"run {task.run_id}: SLURM did not take session s{task.index}'s job ({said}); continue it with"
                f" `rlrun resume {task.run_id} --slurm` once SLURM answers"
            ) from None


def _submitit_executor(folder: Path) -> Any:
    return import_submitit().AutoExecutor(folder=folder, cluster="slurm")


def _check_left_the_queue(run: RunRecord) -> None:
    """A run whose earlier job is still queued or running (a requeue waiting to start) is not
    resumed beside it: that job continues the run itself, or `scancel` ends it first."""
    states = queue.job_states((run.slurm_jobs or "").split(",") if run.slurm_jobs else [])
    active = {job: state for job, state in states.items() if state in queue.ACTIVE}
    if active:
        waiting = ", ".join(f"job {job} is {state}" for job, state in active.items())
        raise BadInput(
            f"run {run.id}'s SLURM {waiting}: it continues the run itself; wait for it,"
            f" or end it with `scancel {' '.join(active)}` and resume then"
        )


@dataclass(frozen=True)
class SlurmTrials:
    """Each search trial's executor when its sessions run as SLURM jobs (`rlrun search --slurm
    --wait`), given the stop its pruner requests: submit the trial's jobs and wait for them, passing
    their evaluations on as they are recorded, so the pruner decides as it would locally. Plain
    data, so that trials trained at once (`--parallel K`; a population's members) each make theirs
    in their worker process (`for_worker`): K trials' jobs in SLURM's queue at once, each waited for
    by its own worker, while the driver takes the trials in its fixed order
    (`rlrun.search.driver`), never the first to end."""

    slurm: SlurmSpec | None = None
    """The search spec's `meta.slurm`, for the check before anything is written."""
    handle_signals: bool = True

    def __call__(self, stop: StopRequest) -> SlurmExecutor:
        executor = SlurmExecutor(wait=True, stop=stop, handle_signals=self.handle_signals)
        executor.use(self.slurm)
        return executor

    def for_worker(self) -> SlurmTrials:
        return replace(self, handle_signals=False)


def _waited(
    tasks: Sequence[SessionTask], jobs: list[str], on_event: OnEvent, stop: StopRequest, handle_signals: bool = True
) -> Execution:
    """`--wait`: until every job has left SLURM's queue for good (a requeued one comes back), then
    each session's end as the registry has it; meanwhile each evaluation, as the registry records
    it. A SIGINT/SIGTERM here (`handle_signals`), or `stop` requested (a pruner, a search's driver),
    asks the run to stop, as `rlrun stop` does: its sessions stop at their next heartbeat with a
    snapshot."""
    from rlrun.training import control

    first = tasks[0]
    home = paths.task_home(first.home)
    asked = False
    told: set[int] = set()
    signals = stop_on_signals(stop) if handle_signals else contextlib.nullcontext()
    with signals, Registry.open(home, first.db_url) as registry:
        while True:
            active = any(state in queue.ACTIVE for state in queue.job_states(jobs).values())
            _tell_evaluations(registry, first.run_id, told, on_event)  # after the states: the last ones too
            if not active:
                break
            if stop.signal and not asked:
                asked = True
                with contextlib.suppress(Exception):
                    control.stop(first.run_id, home=home)
            time.sleep(POLL_SECONDS)
        ended = [_ended(registry.get_session(t.run_id, t.index)) for t in tasks]
    # A session stopped with a snapshot (here, by `rlrun stop`, or by SLURM for good) ends the command
    # as a stopped local run does: 128 + SIGTERM, with how to continue it.
    stopped = asked or any(e.status == "preempted" for e in ended)
    return Execution(ended, signal.SIGTERM if stopped else 0)


def _tell_evaluations(registry: Registry, run_id: str, told: set[int], on_event: OnEvent) -> None:
    """The run's training evaluations recorded since the last look, in the order the sessions made
    them, as the events a local run would have sent."""
    fresh = [e for e in registry.evaluations_of(run_id, "train") if e.id not in told]
    for evaluation in sorted(fresh, key=lambda e: (e.frame, e.session_index)):
        told.add(evaluation.id)
        on_event(events.Evaluated(evaluation.session_index, evaluation.frame, evaluation.mean, evaluation.std, False))


def _ended(session: Any) -> events.SessionEnded:
    return events.SessionEnded(session.index, session.status, session.frame, session.best_eval, session.error)

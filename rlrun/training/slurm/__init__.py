"""The SLURM executor: each session runs as a SLURM job of its own, submitted through submitit
(Meta's submission and requeue library: no hand-written sbatch script), and continues bit for bit
when SLURM ends the job early and requeues it.

`rlrun train|resume SPEC --slurm` records the run, submits one job per session (`submission`:
submitit's `AutoExecutor`, with the spec's `meta.slurm` section: partition, time, cpus, gpus,
memory, account, qos, further sbatch lines; the command's `--partition`, ... are edits of it), records
the jobs' ids with the run (`runs.slurm_jobs`) and returns, as `--detach` does, unless `--wait`.

In the job (`job`), the session trains in a thread of the job's Python process, whose main thread
takes the signals:
- USR2 (SLURM's warning, `signal_delay` seconds before the time limit) reaches submitit's handler,
  which calls the job's `checkpoint()`: it asks the session to stop at its next step, waits for its
  snapshot (the session is then recorded preempted), and hands submitit the same job again, which
  submitit requeues (`scontrol requeue`) at most 3 times after timeouts, without limit otherwise;
- SIGTERM (a preemption, `scontrol requeue`, `scancel`) stops the session the same way; SLURM
  requeues the job itself when it preempts or requeues it.
A job run again (its lease token says an earlier attempt ran) continues from the session's newest
intact snapshot, as `rlrun resume` and a retried Ray task do (`rlrun.training.ray.continue_lost_attempt`),
recorded as an attempt of kind "requeue": the same run and session, exact. A job killed without
warning (a lost node, `scancel --signal=KILL`) continues the same way when SLURM runs it again, or
on `rlrun resume RUN --slurm`, which submits new jobs. `rlrun stop` reaches the sessions through the
registry as everywhere (their heartbeat): they stop with a snapshot, preempted, and the job ends
without a requeue.

Before anything is written, `prepare` checks that submitit is installed (the `slurm` extra), that
the controller answers (else `Unavailable`, exit 3) and that SLURM accepts the options
(`sbatch --test-only`; else one line, exit 2). `rlrun ls` and `rlrun show` ask `squeue` how the
jobs stand (`queue`), which imports neither torch nor submitit.

One idea per module:
    queue       the jobs as SLURM sees them: states, the controller's health, the options' check
    options     the spec's `meta.slurm` as submitit's parameters
    submission  the executor: `SlurmExecutor`, checking, submitting, recording, waiting
    job         what runs in the job: one session's attempt, continued after a requeue
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlrun.training.slurm.submission import SlurmExecutor, SlurmTrials

__all__ = ["SlurmExecutor", "SlurmTrials"]


def __getattr__(name: str) -> Any:
    # Loaded on use: `rlrun ls` reaches `queue` through this package, and needs nothing else of it.
    if name in __all__:
        from rlrun.training.slurm import submission

        return getattr(submission, name)
    raise AttributeError(name)

"""The cluster executor: each session runs as a Ray task (one CPU by default), placed by Ray, and
survives the loss of its worker or node.

Ray runs a task at least once: when a session's worker process or node dies, Ray runs the task
again elsewhere. The retried attempt looks up its own durable state (Ray's habit): it takes the
session's lease (a fencing token in the registry), sees from the token that an earlier attempt ran,
and continues from the session's newest snapshot that passes the deep check, as `rlrun resume` would
(`rlrun.training.api.newest_intact` and `rewind`), recorded as an attempt of kind "retry". An older
attempt that is still alive somewhere (a frozen worker, a partitioned node) finds its lease taken at
its next write and stops without writing anything (`rlrun.registry.database.LeaseLost`).

The user's own env code (the modules `env.id` and `env.packages` name) reaches the workers through
Ray's runtime environment: each module that is not installed on this machine (found in the current
directory or on PYTHONPATH) is shipped as `py_modules` of the job (Ray uploads local folders only for
a whole job, given to `ray.init`), its package folder or its file, so a worker imports it as the
driver does; an installed one must be installed on every node, like rlrun itself.
The storage check imports them on every node before anything is written.

A SIGTERM to a session's worker (a spot notice) stops that session at its next step with a
snapshot, recorded preempted; the task then raises `WorkerStopped`, which Ray retries like a lost
worker. A SIGINT/SIGTERM to this process (the driver), or `rlrun stop` (a request in the registry
that the sessions read with their heartbeat and the driver once a second), asks every session to
stop the same way, and none is retried. Events and the driver's stop request travel through a
small actor on the driver's node (`Mailbox`); sessions poll it a few times a second, never per step.

With `detach` (`--detach`), what the driver does is done on the cluster instead, by the same code
(`rlrun.training.ray.supervision`) in a detached actor (`DetachedSupervisor`) that Ray restarts wherever it
can when its node dies; `run` returns once the actor has taken the run over. A supervisor takes a
run back after a restart only while the registry still names it (`Registry.supervise_run`), and
leaves a run that a resume took over: one supervisor at a time, whoever started last.

Ray is an optional extra, imported only in this package, only when `--ray` is asked for. (The
package's name is `ray` too: its modules import the library absolutely, `import ray`, which
Python 3 never reads as this package.)

One idea per module:
    runtime         Ray itself, and the environment every process rlrun starts there takes along
    preflight       before anything is written: the address, the modules to ship, the storage check
    executor        the driver: `RayExecutor`, connecting, checking, then supervising; `ray_executor`
    supervision     the sessions' tasks supervised to their end, from the driver or a detached supervisor
    mailbox         events and stop requests between the driver and its sessions
    watches         the cluster, each attempt, and how each task ended, as the driver sees them
    worker          one attempt at a session, on a worker; a retried one continues
    detached        rlrun's detached actors: placement, start, label, end (a search's driver too)
    run_supervisor  a detached run's supervisor (`--detach`)
"""

from __future__ import annotations

from rlrun.training.ray.detached import SUPERVISOR_NAMESPACE, start_detached, supervisor_label, until_done
from rlrun.training.ray.executor import RayExecutor, RayTrials, ray_executor
from rlrun.training.ray.run_supervisor import DetachedSupervisor, unfinished
from rlrun.training.ray.runtime import ADDRESS_ENV, import_ray
from rlrun.training.ray.supervision import SupervisionTaken
from rlrun.training.ray.worker import WorkerStopped, continue_lost_attempt, run_attempt

__all__ = [
    "ADDRESS_ENV",
    "SUPERVISOR_NAMESPACE",
    "DetachedSupervisor",
    "RayExecutor",
    "RayTrials",
    "SupervisionTaken",
    "WorkerStopped",
    "continue_lost_attempt",
    "import_ray",
    "ray_executor",
    "run_attempt",
    "start_detached",
    "supervisor_label",
    "unfinished",
    "until_done",
]

"""rlrun's detached actors on a Ray cluster (a run's supervisor, `rlrun.training.ray.run_supervisor`;
a search's driver, `rlrun.search.detached`), their one shape written once: where they may run
(`--supervisor-on`, `check_supervisor_placement`), how they are named and started
(`detached_name`, `start_detached`, `supervisor_label`), what they do once started
(`DetachedActor`: take the work over in the registry, do it in a thread of their own) and how
their work ends (`until_done`). Ray starts one again, with the same arguments, when its node or
process dies; it then looks at the registry again."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from rlrun.errors import BadInput, TrainingFailed
from rlrun.training.ray.preflight import PROBE_SECONDS
from rlrun.training.ray.runtime import forwarded_environment, import_ray

SUPERVISOR_NAMESPACE = "rlrun"
"""The Ray namespace of the supervisors' actors (named rlrun-RUN_ID-XXXXXX)."""

SUPERVISOR_SHARE = 0.001
"""How much of `--supervisor-on`'s resource a supervisor takes: a token, so one node hosts many."""


def detached_name(of: str) -> str:
    """A new detached actor's name: rlrun-OF-XXXXXX (OF: a run id, or search-SEARCH_ID), unique in
    `SUPERVISOR_NAMESPACE` even when the same run or search is detached again."""
    return f"rlrun-{of}-{uuid.uuid4().hex[:6]}"


def start_detached(
    ray: Any, actor_class: type, name: str, placement: str | None, args: tuple[Any, ...], *, what: str, again: str
) -> str:
    """Start a detached actor of `actor_class` named `name` (namespace `rlrun`, started again by Ray
    for ever, no CPU, on the nodes that offer the resource `placement` when given, rlrun's settings
    in its environment) and return where it runs once it says so (its `ready`): TrainingFailed
    naming `what` and what to do (`again`) when it does not start."""
    actor = (
        ray.remote(actor_class)
        .options(
            name=name,
            namespace=SUPERVISOR_NAMESPACE,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            resources={placement: SUPERVISOR_SHARE} if placement else None,
            runtime_env={"env_vars": forwarded_environment()},
        )
        .remote(*args)
    )
    try:
        where: str = ray.get(actor.ready.remote(), timeout=PROBE_SECONDS)
    except Exception as error:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        raise TrainingFailed(
            f"{what} did not start on the cluster ({type(error).__name__}: {error}); {again}"
        ) from None
    return where


def check_supervisor_placement(ray: Any, resource: str) -> None:
    """`--supervisor-on RESOURCE`: some live node must offer it, else Ray would wait for one for
    ever; bad input at once, before anything is written. Ray's own resources are not custom ones."""
    if resource.strip() != resource or not resource or resource in ("CPU", "GPU", "memory", "object_store_memory"):
        raise BadInput(
            f"--supervisor-on {resource!r}: give the name of a custom resource that the nodes meant for"
            " supervisors offer (`ray start --resources '{\"on_demand\": 1}'`)"
        )
    offered = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(resource, 0) >= SUPERVISOR_SHARE]
    if not offered:
        raise BadInput(
            f"--supervisor-on {resource}: no live node of the Ray cluster offers the resource {resource};"
            f" start one with `ray start --resources '{{\"{resource}\": 1}}'`, or drop --supervisor-on"
        )


def supervisor_label(name: str, node: str = "") -> str:
    """How the registry and `rlrun show` name a detached supervisor: its actor, and its node (the
    label without a node begins every label of that actor, wherever Ray restarts it)."""
    return f"actor {SUPERVISOR_NAMESPACE}/{name} on node {node}"


def until_done(work: Callable[[], None]) -> None:
    """A detached actor's thread (a run's supervisor, a search's driver): `work` to its end, then
    the actor ended for good (Ray told not to start it again). An error ends the actor's process
    instead, and Ray starts it again, which looks at the registry again."""
    try:
        work()
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    ray = import_ray()
    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


class DetachedActor:
    """What every detached actor of rlrun does when started (`start_detached`), a first start or
    Ray's restart alike: its constructor, all that a restart runs, learns where it runs (`where`,
    its `supervisor_label`), takes its work over in the registry (`_take_over`, each kind's own),
    and does that work in a thread of its own (`until_done`), so that the constructor returns and
    `ready` answers the starter. A subclass's constructor keeps its arguments, then calls this one."""

    thread_name = "rlrun-detached"
    """The name of the thread that does the work (each kind names its own)."""

    def __init__(self, name: str) -> None:
        import ray

        context = ray.get_runtime_context()
        self.where = supervisor_label(name, context.get_node_id()[:16])
        work = self._take_over(name, restarted=context.was_current_actor_reconstructed)
        self._thread = threading.Thread(target=until_done, args=(work,), daemon=True, name=self.thread_name)
        self._thread.start()

    def _take_over(self, name: str, *, restarted: bool) -> Callable[[], None]:
        """Take the work over in the registry, and return the work (done in the actor's thread).
        `restarted`: Ray started this actor again, which may find the work no longer its own."""
        raise NotImplementedError

    def ready(self) -> str:
        """Where the actor runs, once it has taken its work over."""
        return self.where

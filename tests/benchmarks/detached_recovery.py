"""How long a detached run goes unsupervised when its supervisor's node dies, on a real local Ray
cluster (a head with no CPU, one worker node for the session, CPU-less nodes for supervisors), and
what of it is Ray's own: in the same run, a bare detached actor (`max_restarts=-1`, nothing to pick
up) is put through the same node loss.

    python tests/benchmarks/detached_recovery.py [--repeat 2]

For rlrun, from the node's removal (ungraceful) to:
1. the supervisor back: the restarted actor has recorded itself as the run's supervisor on its new
   node (the registry row);
2. sessions supervised again: the session's retry attempt is recorded (its row, written once the
   new attempt holds the lease and has read and restored the newest snapshot).
For the peer: from the same removal to the bare actor answering a call again on its new node.

The registry is $RLRUN_TEST_POSTGRES when set (as on a real cluster), else SQLite in the home.
Every node and driver binds to 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RLRUN_TENSORBOARD"] = "0"

from rlrun.registry import Registry

SPEC = "reinforce_cartpole"
SUPERVISOR = "bench_supervisor"
QUIET = [
    "--set",
    "meta.num_eval_episodes=1",
    "--set",
    "meta.eval_frequency=1M",
    "--set",
    "meta.log_frequency=1M",
    "--set",
    "meta.checkpoint_frequency=1000",
]


def rlrun(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "RLRUN_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "rlrun", *args], env=environment, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise SystemExit(f"rlrun {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def node_of(cluster: Any, prefix: str) -> Any:
    return next(n for n in cluster.list_all_nodes() if n.node_id.startswith(prefix))


def poll(condition: Any, what: str, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def supervisor_node(home: Path, run_id: str) -> str | None:
    with Registry.open(home, create=False) as registry:
        found = re.search(r"on node (\w+)", registry.get_run(run_id).run.supervisor or "")
    return found[1] if found else None


def rlrun_recovery(cluster: Any, home: Path) -> tuple[float, float]:
    """Seconds from the supervisor's node removed to (the supervisor back, the session's retry)."""
    from ray_scaleout import fresh_registry  # this folder is the script's: on sys.path

    fresh_registry()
    rlrun(
        home,
        "train",
        SPEC,
        "--frames",
        "10M",
        *QUIET,
        "--ray",
        cluster.address,
        "--detach",
        "--supervisor-on",
        SUPERVISOR,
    )
    with Registry.open(home, create=False) as registry:
        run_id = registry.resolve("latest").id

        def training() -> bool:
            run = registry.get_run(run_id)
            return bool(run.checkpoints) and run.sessions[0].status == "running"

        poll(training, "the session to train")
        first = supervisor_node(home, run_id)
        assert first is not None
        removed = time.monotonic()
        cluster.remove_node(node_of(cluster, first), allow_graceful=False)
        poll(lambda: supervisor_node(home, run_id) not in (None, first), "the supervisor back")
        back = time.monotonic() - removed
        poll(lambda: any(a.kind == "retry" for a in registry.get_run(run_id).attempts), "the session's retry")
        supervised = time.monotonic() - removed
        rlrun(home, "stop", run_id)
        poll(lambda: registry.resolve(run_id).status != "running", "the run to stop")
    return back, supervised


class Bare:
    """The peer: a detached actor that Ray restarts and that has nothing to pick up."""

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


def bare_recovery(cluster: Any, ray: Any) -> float:
    """Seconds from the bare actor's node removed to it answering again on another node."""
    actor = (
        ray.remote(Bare)
        .options(lifetime="detached", max_restarts=-1, max_task_retries=-1, num_cpus=0, resources={SUPERVISOR: 0.001})
        .remote()
    )
    first = ray.get(actor.node.remote())
    removed = time.monotonic()
    cluster.remove_node(node_of(cluster, first), allow_graceful=False)
    poll(lambda: ray.get(actor.node.remote(), timeout=300) != first, "the bare actor back")
    back = time.monotonic() - removed
    ray.kill(actor, no_restart=True)
    return back


def replace_lost_nodes(cluster: Any, size: int) -> None:
    while len(cluster.list_all_nodes()) < size:
        cluster.add_node(num_cpus=0, resources={SUPERVISOR: 1})
    cluster.wait_for_nodes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        for _ in range(2):
            cluster.add_node(num_cpus=0, resources={SUPERVISOR: 1})
        cluster.wait_for_nodes()
        size = len(cluster.list_all_nodes())
        backs, supervised, bare = [], [], []
        with tempfile.TemporaryDirectory(prefix="rlrun-detached-") as scratch:
            for i in range(args.repeat):
                back, again = rlrun_recovery(cluster, Path(scratch) / f"run-{i}")
                backs.append(back)
                supervised.append(again)
                replace_lost_nodes(cluster, size)
                ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
                try:
                    bare.append(bare_recovery(cluster, ray))
                finally:
                    ray.shutdown()
                replace_lost_nodes(cluster, size)
                print(
                    f"round {i + 1}: rlrun supervisor back {back:.2f} s, session supervised again {again:.2f} s;"
                    f" bare detached actor back {bare[-1]:.2f} s",
                    flush=True,
                )
        b, s, p = (statistics.median(v) for v in (backs, supervised, bare))
        print(
            f"median of {args.repeat}: supervisor node lost -> supervisor back {b:.2f} s, session supervised"
            f" again {s:.2f} s; a bare detached actor (Ray alone) back {p:.2f} s: rlrun's supervisor"
            f" {b / p:.2f}x Ray's restart, sessions supervised again {s / p:.2f}x",
            flush=True,
        )
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

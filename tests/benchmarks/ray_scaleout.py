"""What `--ray` costs and what it buys, on a real local Ray cluster (head with no CPU, two worker
nodes), against local processes on the same machine:

    python tests/benchmarks/ray_scaleout.py [--frames 20000] [--repeat 3]

1. start-up: the wall time of `rlrun train reinforce_cartpole --frames 1000`, local against `--ray`
   (connecting, the storage check on every node, the first task's worker) — medians of --repeat;
2. throughput: the aggregate frames/s of 4 sessions on two worker nodes of 2 CPUs each against
   `--sessions 4` local processes on the same cores (target: at least 90%), measured over the
   training phase only (first attempt's start to last attempt's end, the database's clock);
3. recovery: a session's node is removed (ungracefully) while it writes a snapshot; the seconds
   from the removal to its retry training again on the other node (its attempt row, written after
   the snapshot is read and restored; target: 10 s + the snapshot read).

The registry is $RLRUN_TEST_POSTGRES when set (as on a real cluster), else SQLite in the home.
Every node and driver binds to 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0).
"""

from __future__ import annotations

import argparse
import os
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
from rlrun.testhooks import HANG_ENV

SPEC = "reinforce_cartpole"
QUIET = ["--set", "meta.num_eval_episodes=1", "--set", "meta.eval_frequency=1M", "--set", "meta.log_frequency=1M"]


def rlrun(home: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True) -> Any:
    environment = {**os.environ, "RLRUN_HOME": str(home), **(env or {})}
    argv = [sys.executable, "-m", "rlrun", *args]
    if not wait:
        return subprocess.Popen(argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"rlrun {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def fresh_registry() -> None:
    """A clean database per measurement when the registry is PostgreSQL."""
    url = os.environ.get("RLRUN_TEST_POSTGRES")
    if url:
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
            conn.execute("CREATE SCHEMA public")
        os.environ["RLRUN_DB"] = url


def timed(home: Path, *args: str) -> float:
    started = time.perf_counter()
    rlrun(home, *args)
    return time.perf_counter() - started


def startup(address: str, root: Path, repeat: int) -> tuple[float, float]:
    local, clustered = [], []
    for i in range(repeat):
        fresh_registry()
        local.append(timed(root / f"start-local-{i}", "train", SPEC, "--frames", "1000", *QUIET))
        fresh_registry()
        clustered.append(timed(root / f"start-ray-{i}", "train", SPEC, "--frames", "1000", *QUIET, "--ray", address))
    return statistics.median(local), statistics.median(clustered)


def training_rate(home: Path) -> tuple[float, float]:
    """Frames of every session over the training phase (first attempt's start to the last one's
    end), and the sum of each session's own rate (which leaves out staggered starts)."""
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    start = min(a.started_at for a in detail.attempts)
    end = max(a.ended_at or start for a in detail.attempts)
    own = sum(
        s.frame / ((a.ended_at or a.started_at) - a.started_at)
        for s, a in zip(detail.sessions, sorted(detail.attempts, key=lambda a: a.session_index), strict=True)
    )
    return sum(s.frame for s in detail.sessions) / (end - start), own


def throughput(address: str, root: Path, frames: int) -> tuple[tuple[float, float], tuple[float, float]]:
    args = ["train", SPEC, "--frames", str(frames), "--sessions", "4", *QUIET]
    fresh_registry()
    rlrun(root / "rate-local", *args)
    local = training_rate(root / "rate-local")
    fresh_registry()
    rlrun(root / "rate-ray", *args, "--ray", address)
    return local, training_rate(root / "rate-ray")


def recovery(cluster: Any, root: Path) -> tuple[float, float]:
    """Seconds from removing the node to the retry's attempt row, and the snapshot read it includes."""
    from rlrun import snapshot

    home = root / "recovery"
    fresh_registry()
    flag = root / "hung"
    driver = rlrun(
        home,
        "train",
        SPEC,
        "--frames",
        "4000",
        "--set",
        "meta.checkpoint_frequency=1000",
        "--set",
        "meta.keep_checkpoints=10",
        *QUIET,
        "--ray",
        cluster.address,
        env={HANG_ENV: f"f000000002000@{flag}"},
        wait=False,
    )
    while not list(home.glob("*/s0/checkpoints/.f000000002000.tmp-*/state.pt")):
        if driver.poll() is not None:
            raise SystemExit(f"the run ended first: {driver.stderr.read()[-3000:]}")
        time.sleep(0.05)
    with Registry.open(home, create=False) as registry:
        run_id = registry.resolve("latest").id
        node = registry.get_run(run_id).attempts[-1].node
        victim = next(n for n in cluster.list_all_nodes() if n.node_id.startswith(node or "?"))
        removed = time.time()
        cluster.remove_node(victim, allow_graceful=False)
        while len(registry.get_run(run_id).attempts) < 2:
            time.sleep(0.05)
        retry = registry.get_run(run_id).attempts[-1]
        start = next(c for c in registry.get_run(run_id).checkpoints if c.frame == retry.start_frame)
    driver.wait(timeout=300)
    snapshot.read(home / start.path, start.sha256)  # warm: torch's import is not the read
    began = time.perf_counter()
    snapshot.read(home / start.path, start.sha256)
    return retry.started_at - removed, time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000, help="frames per session for the throughput run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts", default="startup,rate,recovery", help="which measurements, comma-separated")
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            parts = args.parts.split(",")
            if "startup" in parts:
                local, clustered = startup(cluster.address, root, args.repeat)
                print(
                    f"start-up, 1,000 frames: local {local:.2f} s, --ray {clustered:.2f} s"
                    f" (+{clustered - local:.2f} s)",
                    flush=True,
                )
            if "rate" in parts:
                (local_rate, local_sum), (ray_rate, ray_sum) = throughput(cluster.address, root, args.frames)
                print(
                    f"4 sessions x {args.frames:,} frames: local {local_rate:,.0f} frames/s, --ray on 2 nodes"
                    f" {ray_rate:,.0f} frames/s ({ray_rate / local_rate:.0%} of local; target >= 90%);"
                    f" summed per-session rates: local {local_sum:,.0f}, --ray {ray_sum:,.0f}"
                    f" ({ray_sum / local_sum:.0%})",
                    flush=True,
                )
            if "recovery" in parts:
                cluster.add_node(num_cpus=1)  # somewhere to go once the node is lost
                cluster.wait_for_nodes()
                back, read = recovery(cluster, root)
                print(
                    f"node lost -> training again on another node: {back:.2f} s, of which reading the snapshot"
                    f" {read:.3f} s (target <= 10 s + the read)",
                    flush=True,
                )
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

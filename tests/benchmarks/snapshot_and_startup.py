"""Snapshot size and write time for each built-in spec, and `rlrun resume` start-up next to a fresh
`rlrun train` start-up.

    python tests/benchmarks/snapshot_and_startup.py [--repeat 5]

For each built-in: train it for 2,000 frames (so the snapshot holds real optimiser state and a
partly collected rollout), then time writing and reading its complete session snapshot. Start-up
is the wall time of a whole command that trains a single frame: `rlrun train SPEC --frames 1`
against `rlrun resume RUN --more 1` on a run that has a snapshot. Medians over --repeat runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.session.loop import Session
from rlrun.session.stopping import StopRequest
from rlrun.spec import builtin_names, load_spec
from rlrun.training.api import _task

QUIET = ["--set", "meta.num_eval_episodes=1", "--set", "meta.eval_frequency=1000000"]


def snapshot_cost(name: str, home: Path, repeat: int) -> tuple[int, float, float]:
    spec = load_spec(
        name,
        [
            "meta.max_frame=2000",
            "meta.checkpoint_frequency=1000000",
            "meta.eval_frequency=1000000",
            "meta.num_eval_episodes=1",
            "meta.sessions=1",
        ],
    )
    with Registry.open(home) as registry:
        run = registry.create_run(
            run_id=f"b{name[:8]}",
            name=None,
            spec_name=name,
            algorithm=spec.agent.algorithm,
            env_id=spec.env.id,
            max_frame=2000,
            seed=0,
            num_sessions=1,
            spec_json=spec.model_dump_json(),
            host="bench",
            pid=0,
        )
        (record,) = registry.get_run(run.id).sessions
        session = Session(_task(home, registry.url, run.id, record, spec, "train", None), registry, lambda event: None)
        session.run(StopRequest())
        writes, reads, size = [], [], 0
        for i in range(repeat):
            started = time.perf_counter()
            written = snapshot.write(home / f"{name}-{i}", session.capture("bench"))
            writes.append(time.perf_counter() - started)
            started = time.perf_counter()
            snapshot.read(written.path, written.sha256)
            reads.append(time.perf_counter() - started)
            size = written.size_bytes
    return size, statistics.median(writes), statistics.median(reads)


def command_seconds(args: list[str], home: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rlrun", *args, "--home", str(home)], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        print(f"{'spec':<22} {'snapshot':>10} {'write':>9} {'read+verify':>12}")
        for name in builtin_names():
            size, write, read = snapshot_cost(name, home / "snapshots", args.repeat)
            print(f"{name:<22} {size / 1024:>8.1f}kB {write * 1000:>7.1f}ms {read * 1000:>10.1f}ms")
        startup = home / "startup"
        fresh = [
            command_seconds(["train", "reinforce_cartpole", "--frames", "1", *QUIET], startup)
            for _ in range(args.repeat)
        ]
        command_seconds(["train", "reinforce_cartpole", "--frames", "2000", "--name", "base", *QUIET], startup)
        resumed = [command_seconds(["resume", "base", "--more", "1"], startup) for _ in range(args.repeat)]
        print(
            f"start-up, median of {args.repeat}: train --frames 1 {statistics.median(fresh):.2f} s, "
            f"resume --more 1 {statistics.median(resumed):.2f} s "
            f"(ratio {statistics.median(resumed) / statistics.median(fresh):.2f})"
        )


if __name__ == "__main__":
    main()

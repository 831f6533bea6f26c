"""What `--parallel K` gains a population: the same PBT search of ppo_cartpole run with
`rlrun search --scheduler pbt --parallel 1` and `--parallel K`, interleaved, each a fresh home.

    python tests/benchmarks/pbt_parallel.py [--population 4] [--frames 30k] [--interval 10k] [--parallel 2]
                                            [--rounds 1] [--folder /tmp]

Prints each search's wall time and its CPU time (the driver and every worker process: the
children's rusage), the ratio of the wall times (sequential / parallel: the speed-up) and of the
CPU times (what running K at once costs in extra CPU: worker processes start, import torch and
gymnasium, and read the registry, once per segment). It also checks the two populations score
alike, segment for segment (tests/test_pbt.py checks their snapshots bit for bit).

On a machine of C cores the speed-up is bounded by min(K, C), less each worker's start: a lane
(a worker process training every K-th member's segment) is spawned per generation and imports torch,
gymnasium and rlrun (about 1.7 CPU-seconds quiet, 3 busy); short segments gain less. Say whether the
machine was busy.

Measured at b7a04b6 on the 2-core development machine, BUSY (load 6-9: two other helpers' benchmarks
running), one round each, so the wall ratios are mostly the neighbours' noise; the CPU ratios are the
worker starts:
    --frames 30k  --interval 10k:  parallel 1  34.6 s wall 15.1 s CPU; parallel 2  63.7 s wall 29.2 s CPU
    --frames 120k --interval 40k:  parallel 1  53.7 s wall 42.6 s CPU; parallel 2 123.5 s wall 61.3 s CPU
    --frames 120k --interval 60k:  parallel 1  86.0 s wall 45.7 s CPU; parallel 2  99.6 s wall 59.3 s CPU
(a process per segment instead of per lane: 30k/10k took 129.6 s wall, 46.4 s CPU). No speed-up was
measurable on that machine; rerun quiet, or on more cores, before quoting one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlrun.registry import Registry
from rlrun.sizes import parse_size
from rlrun.spec import builtin_document

SPACE = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}, "agent.entropy_coef": {"uniform": [0.0, 0.05]}}


def spec_file(folder: Path, frames: int) -> Path:
    document = builtin_document("ppo_cartpole")
    document["meta"].update(
        max_frame=frames,
        eval_frequency=frames // 6,
        checkpoint_frequency=frames // 6,
        num_eval_episodes=2,
        log_frequency=frames // 6,
    )
    document["search"] = SPACE
    path = folder / "pbt.json"
    path.write_text(json.dumps(document))
    return path


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def search(home: Path, spec: Path, args: argparse.Namespace, parallel: int) -> tuple[float, float]:
    """Wall and CPU seconds of one search, its driver and workers included (waited for: a child
    and its children count once reaped)."""
    command = [
        sys.executable,
        "-m",
        "rlrun",
        "search",
        str(spec),
        "--scheduler",
        "pbt",
        "--population",
        str(args.population),
        "--interval",
        str(args.interval),
        "--parallel",
        str(parallel),
    ]
    environment = {**os.environ, "RLRUN_HOME": str(home)}
    environment.pop("RLRUN_DB", None)
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run(command, env=environment, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, children_cpu() - cpu


def scores(home: Path) -> list[Any]:
    with Registry.open(home, create=False) as registry:
        search_id = registry.list_searches(1)[0][0].id
        return [(t.number, t.params, t.value) for t in registry.get_search(search_id).trials]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--frames", default="30k", help="each member's budget")
    parser.add_argument("--interval", default="10k", help="frames per segment")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--folder", default=None)
    args = parser.parse_args()
    args.interval = parse_size(args.interval, what="--interval")
    frames = parse_size(args.frames, what="--frames")
    folder = Path(tempfile.mkdtemp(prefix="pbt-parallel-", dir=args.folder))
    spec = spec_file(folder, frames)
    print(
        f"population {args.population} x {frames:,} frames of ppo_cartpole, a segment every {args.interval:,}"
        f" frames ({-(-frames // args.interval)} generations); {os.cpu_count()} cores"
    )
    totals: dict[int, list[float]] = {1: [0.0, 0.0], args.parallel: [0.0, 0.0]}
    for round_ in range(args.rounds):
        order = [1, args.parallel] if round_ % 2 == 0 else [args.parallel, 1]
        homes = {}
        for parallel in order:
            homes[parallel] = folder / f"r{round_}-p{parallel}"
            wall, cpu = search(homes[parallel], spec, args, parallel)
            totals[parallel][0] += wall
            totals[parallel][1] += cpu
            print(f"round {round_}  --parallel {parallel}: {wall:7.1f} s wall  {cpu:7.1f} s CPU")
        assert scores(homes[1]) == scores(homes[args.parallel]), "the populations differ"
    (wall_1, cpu_1), (wall_k, cpu_k) = totals[1], totals[args.parallel]
    print(
        f"--parallel {args.parallel} vs 1: {wall_1 / wall_k:.2f}x faster (wall), {cpu_k / cpu_1:.2f}x the CPU;"
        " the same scores, segment for segment"
    )


if __name__ == "__main__":
    main()

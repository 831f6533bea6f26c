"""What a hung object store costs training: two runs share one registry, one with its home in S3
and one on a local disk, while the S3 server is stopped (SIGSTOP) for each of the given outages.

    python tests/benchmarks/store_outage.py [--outages 15 60] [--spec reinforce_cartpole] \
        [--checkpoint-every 10k] [--after 10]

For each outage: both runs start (`python -m rlrun train SPEC --frames 100M`, snapshots every
--checkpoint-every frames, rows every 2.5k); once each has recorded a snapshot and trained a few
seconds more, the S3 server is stopped for the outage, then continued; --after seconds later both
runs are stopped (SIGTERM: each ends with a snapshot, the S3 one uploaded). Reported per run:

- stall: the longest gap between two consecutive rows of its metrics log (their `wall_time`),
  against the median gap (what a row normally takes): training held up shows as a long gap;
- frames trained during the outage (from the log as flushed at each heartbeat and snapshot);
- how it ended (exit code, seconds from SIGTERM to exit) and its newest snapshot's kind.

moto's S3 server runs in its own process (`object_store_snapshot.start_moto`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from object_store_snapshot import start_moto  # this folder is the script's: on sys.path

from rlrun.session import metrics_log
from rlrun.sizes import parse_size


def rows(log: Path | None) -> list[dict[str, Any]]:
    return [] if log is None or not log.exists() else metrics_log.read_rows(log)[1]


def reached(log: Path | None) -> int:
    return max((int(row["frame"] or 0) for row in rows(log)), default=-1)


def one_outage(
    outage: float, args: argparse.Namespace, folder: Path, settings: dict[str, str], server: int
) -> dict[str, Any]:
    url = f"s3://{args.bucket}/{uuid.uuid4().hex[:8]}/runs"
    database = folder / f"registry-{int(outage)}.sqlite"
    cache, local_home = folder / f"cache-{int(outage)}", folder / f"local-{int(outage)}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("RLRUN_")}
    common = {**base, **settings, "RLRUN_DB": f"sqlite:///{database}"}
    argv = [
        sys.executable,
        "-m",
        "rlrun",
        "train",
        args.spec,
        "--frames",
        "100M",
        "--set",
        f"meta.checkpoint_frequency={args.checkpoint_every}",
        "--set",
        "meta.log_frequency=2500",
    ]
    runs = {
        "s3": subprocess.Popen(
            argv,
            env={**common, "RLRUN_HOME": url, "RLRUN_CACHE": str(cache)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ),
        "local": subprocess.Popen(
            argv,
            env={**common, "RLRUN_HOME": str(local_home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ),
    }
    logs = {
        "s3": lambda: next(cache.glob("homes/s3/*/*/runs/*/s0/metrics.csv"), None),
        "local": lambda: next(local_home.glob("*/s0/metrics.csv"), None),
    }
    deadline = time.monotonic() + 600
    while min(reached(find()) for find in logs.values()) < parse_size(args.checkpoint_every):  # a snapshot each
        assert all(p.poll() is None for p in runs.values()), {n: p.stderr.read() for n, p in runs.items()}  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "no snapshot in 600 s"
        time.sleep(0.1)
    time.sleep(5)
    os.kill(server, signal.SIGSTOP)
    before = {name: reached(find()) for name, find in logs.items()}
    time.sleep(outage)
    during = {name: reached(find()) for name, find in logs.items()}
    os.kill(server, signal.SIGCONT)
    time.sleep(args.after)
    stopping = time.monotonic()
    for process in runs.values():
        process.send_signal(signal.SIGTERM)
    ended: dict[str, dict[str, Any]] = {}
    while len(ended) < len(runs):  # each one's own time from SIGTERM to its exit
        for name, process in runs.items():
            if name not in ended and process.poll() is not None:
                ended[name] = {"exit": process.returncode, "stop_seconds": round(time.monotonic() - stopping, 2)}
        assert time.monotonic() - stopping < 600, "a run did not stop"
        time.sleep(0.05)
    report: dict[str, Any] = {"outage_s": outage}
    for name, find in logs.items():
        walls = [float(row["wall_time"] or 0) for row in rows(find())]
        gaps = [b - a for a, b in itertools.pairwise(walls)]
        report[name] = {
            "longest_gap_s": round(max(gaps), 2),
            "median_gap_s": round(statistics.median(gaps), 3),
            "frames_during_outage": during[name] - before[name],
            **ended[name],
            "newest_snapshot": newest_kind(database, name == "local", local_home),
        }
    return report


def newest_kind(database: Path, local: bool, local_home: Path) -> str:
    local_run = next(local_home.glob("*/s0")).parent.name
    with sqlite3.connect(database) as db:
        found = db.execute(
            "SELECT c.kind FROM checkpoints c JOIN sessions s ON s.id = c.session_id WHERE s.run_id"
            f" {'=' if local else '<>'} ? ORDER BY c.frame DESC LIMIT 1",
            (local_run,),
        ).fetchone()
    return str(found[0]) if found else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outages", type=float, nargs="+", default=[15.0, 60.0])
    parser.add_argument("--spec", default="reinforce_cartpole")
    parser.add_argument("--checkpoint-every", default="10k")
    parser.add_argument("--after", type=float, default=10.0)
    parser.add_argument("--bucket", default="rlrun-bench")
    args = parser.parse_args()
    server, endpoint = start_moto()
    settings = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    os.environ.update(settings)
    import boto3

    boto3.client("s3").create_bucket(Bucket=args.bucket)
    folder = Path(tempfile.mkdtemp(prefix="rlrun-outage-"))
    try:
        for outage in args.outages:
            found = one_outage(outage, args, folder, settings, server.pid)
            print(json.dumps(found), flush=True)
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()

"""`rlrun ls` and `rlrun show` on a registry of 10,000 runs × 4 sessions with evaluation histories,
next to `rlrun --version` (the cost of starting the command at all).

    python tests/benchmarks/registry_at_scale.py [--runs 10000] [--evaluations 25] [--repeat 15]

The registry is built once in a temporary home: the real schema (migrations), then plain SQL
inserts of runs spread over a year (five algorithms, a few envs, every status including crashed
runs whose process is gone), 4 sessions each, `--evaluations` evaluations and 3 checkpoints per
session, one spec revision per run and one attempt per session. Each command is the installed
`rlrun` script run as a user runs it, output piped; the figure is the median wall time of
`--repeat` runs. The goal: `rlrun ls` and `rlrun show` within 0.3 s and within 1.5 × `rlrun --version`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlrun.ids import new_run_id
from rlrun.paths import REGISTRY_FILE
from rlrun.registry import Registry

ALGORITHMS = ("reinforce", "ppo", "dqn", "a2c", "sac")
ENVS = ("CartPole-v1", "Acrobot-v1", "LunarLander-v3", "Pendulum-v1")
STATUSES = ("finished",) * 14 + ("failed", "preempted", "running")  # stored; "running" ones are dead
SPEC = json.dumps(
    {
        "name": "x",
        "agent": {
            "algorithm": "ppo",
            "gamma": 0.99,
            "network": {"hidden": [64, 64]},
            "optimizer": {"name": "adam", "lr": 0.0003},
        },
        "env": {"id": "CartPole-v1", "num_envs": 8},
        "meta": {"max_frame": 1000000, "sessions": 4},
    }
)


def build(home: Path, runs: int, evaluations: int, sessions: int = 4, seed: int = 0) -> None:
    """Fill a fresh registry through plain SQL (the API would take minutes for a million rows)."""
    Registry.open(home).close()  # the schema, by the real migrations
    rng = random.Random(seed)
    now = time.time()
    db = sqlite3.connect(home / REGISTRY_FILE)
    run_rows, session_rows, eval_rows, checkpoint_rows, revision_rows, attempt_rows = [], [], [], [], [], []
    session_id = 0
    for i in range(runs):
        created = now - 365 * 86400 * (runs - i) / runs
        run_id = new_run_id(created)
        algorithm, env = ALGORITHMS[i % len(ALGORITHMS)], ENVS[i % len(ENVS)]
        status = rng.choice(STATUSES)
        max_frame = rng.choice((100_000, 500_000, 1_000_000))
        finished = None if status == "running" else created + 3600
        run_rows.append(
            (
                run_id,
                f"run-{i}" if i % 3 == 0 else None,
                f"{algorithm}_{env.split('-')[0].lower()}",
                algorithm,
                env,
                status,
                max_frame,
                sessions,
                i,
                None,
                "bench-host",
                10**6 + i,
                None,
                created,
                finished,
            )
        )
        revision_rows.append((run_id, 0, 0, SPEC, None, created))
        for k in range(sessions):
            session_id += 1
            means = [rng.gauss(20 + 400 * j / evaluations, 30) for j in range(evaluations)]
            frame = max_frame if status == "finished" else max_frame // 2
            session_rows.append(
                (
                    session_id,
                    run_id,
                    k,
                    i + k,
                    "finished" if status == "finished" else status,
                    frame,
                    frame // 200,
                    frame // 128,
                    max(means),
                    means[-1],
                    "bench-host",
                    10**6 + i,
                    created + 3600,
                    created,
                    finished,
                    None,
                )
            )
            step = frame // evaluations
            eval_rows += [
                (session_id, step * (j + 1), "train", m, 5.0, m - 10, m + 10, 10, created + j)
                for j, m in enumerate(means)
            ]
            checkpoint_rows += [
                (
                    session_id,
                    step * j,
                    "periodic",
                    f"{run_id}/s{k}/checkpoints/f{step * j:012d}",
                    "ab" * 32,
                    120_000,
                    created + j,
                )
                for j in range(evaluations - 2, evaluations + 1)
            ]
            attempt_rows.append(
                (
                    run_id,
                    session_id,
                    "train",
                    "bench-host",
                    10**6 + i,
                    0,
                    created,
                    finished,
                    status if status != "running" else None,
                    0,
                    None,
                )
            )
    with db:
        db.executemany(f"INSERT INTO runs VALUES ({', '.join('?' * 15)})", run_rows)
        db.executemany(f"INSERT INTO sessions VALUES ({', '.join('?' * 16)})", session_rows)
        db.executemany(
            "INSERT INTO evaluations (session_id, frame, kind, mean, std, min, max, episodes, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            eval_rows,
        )
        db.executemany(
            "INSERT INTO checkpoints (session_id, frame, kind, path, sha256, size_bytes, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            checkpoint_rows,
        )
        db.executemany(
            "INSERT INTO spec_revisions (run_id, revision, frame, spec_json, diff_json, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            revision_rows,
        )
        db.executemany(
            "INSERT INTO attempts (run_id, session_id, kind, host, pid, start_frame, started_at, ended_at,"
            " end_status, approximate, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            attempt_rows,
        )
    db.execute("ANALYZE")
    db.close()


def rlrun_script() -> str:
    """The installed console script next to this Python (not a shell shim in front of it)."""
    script = Path(sys.executable).parent / "rlrun"
    return str(script) if script.exists() else "rlrun"


def medians(commands: dict[str, list[str]], home: Path, repeat: int) -> dict[str, float]:
    """Median wall time of each command over `repeat` rounds. The rounds interleave the commands,
    so a machine that gets busier or quieter meanwhile weighs on all of them alike."""
    # As installed: bytecode may be cached (some environments switch that off, which would
    # charge every start for compiling rlrun's modules).
    env = {k: v for k, v in os.environ.items() if k not in ("RLRUN_DB", "PYTHONDONTWRITEBYTECODE")}
    env["RLRUN_HOME"] = str(home)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for round_number in range(repeat + 1):
        for label, args in commands.items():
            started = time.perf_counter()
            subprocess.run(
                [rlrun_script(), *args], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if round_number:  # the first round warms the file cache and writes bytecode
                times[label].append(time.perf_counter() - started)
    return {label: statistics.median(values) for label, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--evaluations", type=int, default=25, help="per session")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "runs"
        started = time.perf_counter()
        build(home, args.runs, args.evaluations)
        size = (home / REGISTRY_FILE).stat().st_size
        print(
            f"registry: {args.runs:,} runs × 4 sessions × {args.evaluations} evaluations"
            f" ({args.runs * 4 * args.evaluations:,} evaluation rows), {size / 1e6:.0f} MB,"
            f" built in {time.perf_counter() - started:.1f} s"
        )
        with Registry.open(home, create=False) as registry:
            some = registry.list_runs(limit=None)[args.runs // 2].id
        commands = {
            "rlrun --version": ["--version"],
            "rlrun ls": ["ls"],
            f"rlrun show {some}": ["show", some],
            "rlrun show latest": ["show", "latest"],
            "rlrun ls --json": ["ls", "--json"],
            "rlrun ls --algo ppo --sort best": ["ls", "--algo", "ppo", "--sort", "best"],
            "rlrun ls --status crashed": ["ls", "--status", "crashed"],
            "rlrun ls --all --csv": ["ls", "--all", "--csv"],
        }
        judged = {"rlrun ls", f"rlrun show {some}", "rlrun show latest"}
        figures = medians(commands, home, args.repeat)
        version = figures["rlrun --version"]
        print(f"{'command':<34} {'median':>8} {'× --version':>12}   (median of {args.repeat})")
        verdicts = []
        for label, seconds in figures.items():
            ok = seconds <= 0.3 and seconds <= 1.5 * version
            mark = ("ok" if ok else "OVER") if label in judged else ""
            print(f"{label:<34} {seconds:>7.3f}s {seconds / version:>12.2f}  {mark}")
            if label in judged:
                verdicts.append(ok)
        print(f"goal (ls and show ≤ 0.3 s and ≤ 1.5 × --version): {'met' if all(verdicts) else 'NOT met'}")


if __name__ == "__main__":
    main()

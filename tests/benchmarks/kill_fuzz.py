"""Random kill -9 fuzz: train, SIGKILL the whole process group at a random moment (sometimes the
resume too), resume until done, and compare with the uninterrupted run, bit for bit.

    python tests/benchmarks/kill_fuzz.py --trials 100 [--seed 0] [--specs reinforce_cartpole,dqn_cartpole]

Prints one line per trial and the counts: trials, resumed to the end, bit-exact, registry errors
(a traceback or "database is locked" on any command's stderr), torn snapshots used (a checkpoint the
registry lists that does not verify), and runs left stuck (neither finished nor resumable).
Not part of CI: it takes about 10 s a trial on two cores.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from helpers import cli_env, fast  # noqa: E402
from same_run import CADENCE, assert_same_run, final_state  # noqa: E402

from rlrun import snapshot  # noqa: E402
from rlrun.registry import Registry  # noqa: E402

BUDGET = 6000


def command(spec: str) -> list[str]:
    return [sys.executable, "-m", "rlrun", "train", spec, "--frames", str(BUDGET), *CADENCE, *fast(spec)]


def run(home: Path, args: list[str], kill_after: float | None, *, from_record: bool = False) -> tuple[int | None, str]:
    """Run `args` in its own process group; SIGKILL the group after `kill_after` seconds, counted
    from its start, or (`from_record`) from when the registry first holds a run."""
    process = subprocess.Popen(
        args, env=cli_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    while from_record and process.poll() is None and not has_run(home):
        time.sleep(0.02)
    try:
        _, stderr = process.communicate(timeout=kill_after)
        return process.returncode, stderr
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        return None, stderr


def uninterrupted(home: Path, args: list[str]) -> tuple[float, float]:
    """Run `args` to the end; how long it took from its start and from when its run was recorded."""
    began = time.monotonic()
    process = subprocess.Popen(args, env=cli_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while process.poll() is None and not has_run(home):
        time.sleep(0.02)
    recorded_at = time.monotonic()
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    ended = time.monotonic()
    return ended - began, ended - recorded_at


def registry_trouble(stderr: str) -> bool:
    return "Traceback" in stderr or "database is locked" in stderr


def has_run(home: Path) -> bool:
    """Whether the registry holds a run yet (plain sqlite3: cheap enough to poll)."""
    database = home / "registry.sqlite"
    if not database.exists():
        return False
    try:
        with sqlite3.connect(database, timeout=0.1) as db:
            return bool(db.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.OperationalError:  # being created, or locked by a writer
        return False


def recorded(home: Path) -> bool:
    if not (home / "registry.sqlite").exists():
        return False
    with Registry.open(home, create=False) as registry:
        return registry.count_runs() > 0


def torn_snapshots(home: Path) -> int:
    with Registry.open(home, create=False) as registry:
        checkpoints = registry.all_checkpoints()
    torn = 0
    for checkpoint in checkpoints:
        try:
            snapshot.verify(home / checkpoint.path, checkpoint.sha256)
        except Exception:
            torn += 1
    return torn


def trial(
    rng: random.Random,
    spec: str,
    straight: dict[str, Any],
    lifetime: tuple[float, float],
    workdir: Path,
    counts: Counter[str],
) -> str:
    """`lifetime`: how long the uninterrupted command took on this machine, from its start and from
    the moment its run was recorded. Most kills land after the run is recorded (start-up is most of
    a tiny run's life, and a kill there leaves nothing to recover); one in five anywhere."""
    home = Path(tempfile.mkdtemp(dir=workdir))
    kills = 2 if rng.random() < 0.1 else 1
    anywhere = rng.random() < 0.2
    window = lifetime[0] if anywhere else lifetime[1]
    code, stderr = run(home, command(spec), kill_after=rng.uniform(0.0, 1.05) * window, from_record=not anywhere)
    counts["registry errors"] += registry_trouble(stderr)
    if code == 0:
        counts["finished before the kill"] += 1
        return "finished before the kill"
    if not recorded(home):
        counts["killed before the run was recorded"] += 1
        return "killed before the run was recorded"
    resume = [sys.executable, "-m", "rlrun", "resume", "latest"]
    for attempt in range(4):
        kill_after = rng.uniform(0.05, 1.0) * lifetime[0] if attempt < kills - 1 else 600
        code, stderr = run(home, resume, kill_after=kill_after)
        counts["registry errors"] += registry_trouble(stderr)
        if code == 0:
            break
    else:
        counts["stuck"] += 1
        return f"not resumable: {stderr.strip().splitlines()[-1:]}"
    counts["resumed"] += 1
    counts["torn snapshots used"] += torn_snapshots(home)
    try:
        assert_same_run(straight, final_state(home))
    except AssertionError as error:
        return f"DIFFERENT: {error}"
    counts["bit-exact"] += 1
    return "bit-exact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--specs", default="reinforce_cartpole,dqn_cartpole,ppo_cartpole")
    options = parser.parse_args()
    os.environ.pop("RLRUN_DB", None)
    rng = random.Random(options.seed)
    specs = options.specs.split(",")
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        straight, lifetime = {}, {}
        for spec in specs:
            home = workdir / f"straight-{spec}"
            lifetime[spec] = uninterrupted(home, command(spec))
            straight[spec] = final_state(home)
        print(
            "uninterrupted:",
            ", ".join(
                f"{spec} {whole:.1f} s ({recorded:.1f} s recorded)" for spec, (whole, recorded) in lifetime.items()
            ),
            flush=True,
        )
        started = time.monotonic()
        for number in range(1, options.trials + 1):
            spec = rng.choice(specs)
            outcome = trial(rng, spec, straight[spec], lifetime[spec], workdir, counts)
            counts["trials"] += 1
            print(f"trial {number:3d} {spec:20s} {outcome}", flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")
    for key in (
        "trials",
        "finished before the kill",
        "killed before the run was recorded",
        "resumed",
        "bit-exact",
        "registry errors",
        "torn snapshots used",
        "stuck",
    ):
        print(f"{key:22s} {counts[key]}")


if __name__ == "__main__":
    main()

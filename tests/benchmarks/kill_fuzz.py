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
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from conftest import cli_env, fast  # noqa: E402
from test_resume import CADENCE, assert_same_run, final_state  # noqa: E402

from rlrun import snapshot  # noqa: E402
from rlrun.registry import Registry  # noqa: E402

BUDGET = 6000


def command(spec: str) -> list[str]:
    return [sys.executable, "-m", "rlrun", "train", spec, "--frames", str(BUDGET), *CADENCE, *fast(spec)]


def run(home: Path, args: list[str], kill_after: float | None) -> tuple[int | None, str]:
    """Run `args` in its own process group; SIGKILL the group after `kill_after` seconds."""
    process = subprocess.Popen(args, env=cli_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=kill_after)
        return process.returncode, stderr
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        return None, stderr


def registry_trouble(stderr: str) -> bool:
    return "Traceback" in stderr or "database is locked" in stderr


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


def trial(rng: random.Random, spec: str, straight: dict[str, Any], lifetime: float, workdir: Path,
          counts: Counter[str]) -> str:
    """`lifetime`: how long the uninterrupted command took, start-up included, so the kill lands
    anywhere in a run's life on this machine (a fixed window lands mostly in start-up on a slow one)."""
    home = Path(tempfile.mkdtemp(dir=workdir))
    kills = 2 if rng.random() < 0.1 else 1
    code, stderr = run(home, command(spec), kill_after=rng.uniform(0.05, 1.05) * lifetime)
    counts["registry errors"] += registry_trouble(stderr)
    if code == 0:
        counts["finished before the kill"] += 1
        return "finished before the kill"
    if not recorded(home):
        counts["killed before the run was recorded"] += 1
        return "killed before the run was recorded"
    resume = [sys.executable, "-m", "rlrun", "resume", "latest"]
    for attempt in range(4):
        code, stderr = run(home, resume, kill_after=rng.uniform(0.05, 1.0) * lifetime if attempt < kills - 1 else 600)
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
            began = time.monotonic()
            code, stderr = run(home, command(spec), kill_after=600)
            lifetime[spec] = time.monotonic() - began
            assert code == 0, stderr
            straight[spec] = final_state(home)
        print("uninterrupted:", ", ".join(f"{spec} {seconds:.1f} s" for spec, seconds in lifetime.items()), flush=True)
        started = time.monotonic()
        for number in range(1, options.trials + 1):
            spec = rng.choice(specs)
            outcome = trial(rng, spec, straight[spec], lifetime[spec], workdir, counts)
            counts["trials"] += 1
            print(f"trial {number:3d} {spec:20s} {outcome}", flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")
    for key in ("trials", "finished before the kill", "killed before the run was recorded", "resumed", "bit-exact",
                "registry errors", "torn snapshots used", "stuck"):
        print(f"{key:22s} {counts[key]}")


if __name__ == "__main__":
    main()

"""What the search machinery costs per trial: `rlrun search` of N trials (no pruning, so every trial
trains its whole budget) against training the very same trials one by one with `rlrun train --set`.

    python tests/benchmarks/search_overhead.py [--trials 6] [--frames 10k] [--repeat 3]

Both sides are the commands a user runs, timed in wall seconds from start to exit, in fresh homes:
the search is one process (suggestions by Optuna, the trial records, one `train` call per trial);
the peer is N processes, so it also pays Python's and torch's start-up N times where the search
pays it once. Rounds interleave the two; each reports its median. The overhead per trial is
(search - sum of the trains) / N, and, more telling, the search's time per trial spent outside
training: its wall time minus the trials' own training time as the sessions recorded it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPACE = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}, "agent.entropy_coef": {"uniform": [0.0, 0.05]}}


def command(home: Path, *args: str) -> float:
    env = {**os.environ, "RLRUN_HOME": str(home)}
    env.pop("RLRUN_DB", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlrun", *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"rlrun {' '.join(args)} failed:\n{done.stderr}")
    return elapsed


def spec_file(folder: Path, frames: int) -> Path:
    from rlrun.spec import builtin_document

    document = builtin_document("reinforce_cartpole")
    document["meta"].update(max_frame=frames, eval_frequency=max(frames // 5, 1), num_eval_episodes=5)
    document["search"] = SPACE
    path = folder / "search.json"
    path.write_text(json.dumps(document))
    return path


def trials_of(home: Path) -> list[tuple[dict[str, float], str]]:
    from rlrun.registry import Registry

    with Registry.open(home, create=False) as registry:
        detail = registry.get_search(registry.resolve_search("search:latest").id)
    return [(t.params, t.run_id or "") for t in detail.trials]


def training_seconds(home: Path, run_ids: list[str]) -> float:
    """The wall time the trials' sessions spent training, as their snapshots' clocks recorded it."""
    from rlrun import snapshot
    from rlrun.registry import Registry

    total = 0.0
    with Registry.open(home, create=False) as registry:
        for run_id in run_ids:
            newest = max(registry.get_run(run_id).checkpoints, key=lambda c: c.frame)
            total += snapshot.read_meta(home / newest.path).clock.wall_time
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--frames", default="10k")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from rlrun.sizes import parse_size

    frames = parse_size(args.frames)
    searches, trains, outside = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        spec = spec_file(folder, frames)
        base = folder / "base.json"
        document = json.loads(spec.read_text())
        del document["search"]
        base.write_text(json.dumps(document))
        for round_ in range(args.repeat):
            home = folder / f"search{round_}"
            searches.append(command(home, "search", str(spec), "--trials", str(args.trials), "--pruner", "none"))
            trials = trials_of(home)
            outside.append(searches[-1] - training_seconds(home, [run for _, run in trials]))
            peer = folder / f"train{round_}"
            total = 0.0
            for params, _ in trials:
                edits = [arg for path, value in params.items() for arg in ("--set", f"{path}={json.dumps(value)}")]
                total += command(peer, "train", str(base), *edits)
            trains.append(total)
    search_s, train_s = statistics.median(searches), statistics.median(trains)
    print(f"reinforce_cartpole, {args.trials} trials of {frames:,} frames, median of {args.repeat} rounds (wall s)")
    print(f"  rlrun search (1 process)     {search_s:8.2f} s  {search_s / args.trials:6.2f} s/trial")
    print(f"  rlrun train x{args.trials} (processes) {train_s:8.2f} s  {train_s / args.trials:6.2f} s/trial")
    print(f"  search / trains ratio        {search_s / train_s:8.2f}")
    print(f"  overhead per trial           {(search_s - train_s) / args.trials:+8.2f} s (search - trains, per trial)")
    print(
        f"  search time outside training {statistics.median(outside) / args.trials:8.2f} s/trial"
        " (start-up once, suggestions, records, env and agent checks)"
    )


if __name__ == "__main__":
    main()

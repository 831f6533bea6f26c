"""`rlrun compare` on 2 specs x 5 seeds x 8 envs x 50 evaluation points at 50,000 bootstrap
repetitions (issue 41), side by side with its peers on the same scores:

- rliable called directly, the same calls (`get_interval_estimates` with the four aggregates, and
  with `probability_of_improvement` for the one pair), at the same repetitions: the floor, since
  compare's statistics are rliable's;
- the RL Zoo's `plot_from_file.py --rliable --versus --iqm`, on the same scores written as its
  pickle, when `rl_zoo3.plots.plot_from_file` can be imported (its repetitions are fixed in the
  script: 2,000 for the aggregates, 1,000 for the probability of improvement, 2,000 for its IQM
  curve over a quarter of the evaluation points), next to `rlrun compare --reps 2000 -o` doing as much.

    python tests/benchmarks/compare_vs_rliable.py [--reps 50000] [--zoo-path DIR]

The registry is synthetic (plain SQL rows, no run folders: compare reads only the evaluations):
eight Atari games, one run per spec and game, five sessions each, fifty evaluations per session,
scores drawn around each game's human score. Timings are wall seconds of a fresh process (what a
user waits for), printed with their ratios; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rlrun.compare.normalize import ATARI_HUMAN, ATARI_RANDOM
from rlrun.ids import new_run_id
from rlrun.paths import REGISTRY_FILE
from rlrun.registry import Registry

GAMES = ("Alien", "Amidar", "Assault", "Asterix", "BankHeist", "Boxing", "Breakout", "Pong")
SPECS = (("dqn_atari", "dqn", 0.6), ("ppo_atari", "ppo", 0.8))  # name, algorithm, typical human-normalised score
SEEDS, POINTS, EVERY = 5, 50, 20_000


def build(home: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """The registry, and each spec's raw final scores (seeds x games) and curves (seeds x games x points)."""
    Registry.open(home).close()
    rng = np.random.default_rng(0)
    db = sqlite3.connect(home / REGISTRY_FILE)
    run_ids: list[str] = []
    curves: dict[str, np.ndarray] = {}
    session_id, now = 0, time.time()
    with db:
        for s, (spec, algorithm, level) in enumerate(SPECS):
            cube = np.empty((SEEDS, len(GAMES), POINTS))
            for g, game in enumerate(GAMES):
                created = now - 1000 + s * 100 + g
                run_id = new_run_id(created)
                run_ids.append(run_id)
                db.execute(
                    "INSERT INTO runs (id, name, spec_name, algorithm, env_id, status, max_frame, num_sessions,"
                    " seed, host, created_at, finished_at) VALUES (?, ?, ?, ?, ?, 'finished', ?, ?, 0, 'bench',"
                    " ?, ?)",
                    (
                        run_id,
                        f"{spec}-{game.lower()}",
                        spec,
                        algorithm,
                        f"ALE/{game}-v5",
                        POINTS * EVERY,
                        SEEDS,
                        created,
                        created + 1,
                    ),
                )
                low, high = ATARI_RANDOM[game], ATARI_HUMAN[game]
                for k in range(SEEDS):
                    session_id += 1
                    progress = np.linspace(0.02, 1.0, POINTS)
                    normalised = level * progress + rng.normal(0, 0.15, POINTS)
                    means = low + (high - low) * normalised
                    cube[k, g] = means
                    db.execute(
                        "INSERT INTO sessions (id, run_id, session_index, seed, status, frame, episode,"
                        " opt_step, best_eval, last_eval) VALUES (?, ?, ?, ?, 'finished', ?, 0, 0, ?, ?)",
                        (session_id, run_id, k, k, POINTS * EVERY, float(means.max()), float(means[-1])),
                    )
                    db.executemany(
                        "INSERT INTO evaluations (session_id, frame, kind, mean, std, min, max, episodes,"
                        " created_at) VALUES (?, ?, 'train', ?, 0, ?, ?, 10, ?)",
                        [
                            (session_id, (j + 1) * EVERY, float(m), float(m), float(m), created)
                            for j, m in enumerate(means)
                        ],
                    )
            curves[spec] = cube
    db.close()
    return run_ids, curves


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}... failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


RLIABLE_DIRECT = """
import pickle, sys
import numpy as np
from rliable import library as rly, metrics
scores, reps = pickle.load(open(sys.argv[1], "rb")), int(sys.argv[2])
aggregate = lambda x: np.array([metrics.aggregate_median(x), metrics.aggregate_iqm(x), metrics.aggregate_mean(x),
                                metrics.aggregate_optimality_gap(x)])
np.random.seed(0)
rly.get_interval_estimates(scores, aggregate, reps=reps)
names = list(scores)
np.random.seed(0)
rly.get_interval_estimates({f"{names[0]},{names[1]}": (scores[names[0]], scores[names[1]])},
                           metrics.probability_of_improvement, reps=reps)
"""


def zoo_pickle(curves: dict[str, np.ndarray], path: Path) -> None:
    """The scores as the RL Zoo's `all_plots.py` writes them: results[env][key], plus a results table."""
    results: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    frames = np.arange(1, POINTS + 1) * EVERY
    for spec, cube in curves.items():
        for g, game in enumerate(GAMES):
            per_eval = cube[:, g, :].T  # (n_eval, n_runs)
            results.setdefault(game, {})[spec] = {
                "timesteps": frames,
                "mean": per_eval.mean(axis=1),
                "std_error": per_eval.std(axis=1) / np.sqrt(SEEDS),
                "last_evals": cube[:, g, -1],
                "mean_per_eval": per_eval,
            }
    table = {"headers": ["env", *curves], "value_matrix": [[game, *(0.0 for _ in curves)] for game in GAMES]}
    path.write_bytes(pickle.dumps({**results, "results_table": table}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50_000)
    parser.add_argument(
        "--zoo-path",
        default=os.environ.get("RL_ZOO_PATH", ""),
        help="Folders to put on PYTHONPATH for the RL Zoo's script (rl_zoo3 and pytablewriter).",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "runs"
        run_ids, curves = build(home)
        env = {k: v for k, v in os.environ.items() if k not in ("RLRUN_DB",)}
        env.update(RLRUN_HOME=str(home), MPLBACKEND="Agg")
        rlrun = [sys.executable, "-m", "rlrun", "compare", *run_ids, "--normalize", "human", "--json"]
        print(
            f"{len(SPECS)} specs x {SEEDS} seeds x {len(GAMES)} envs x {POINTS} evaluation points,"
            f" human-normalised; wall seconds of a fresh process"
        )
        rows: list[tuple[str, float]] = []
        rows.append((f"rlrun compare --reps {args.reps:,}", timed([*rlrun, "--reps", str(args.reps)], env)))
        scores = Path(tmp) / "scores.pkl"
        final = {
            spec: (cube[:, :, -1] - [ATARI_RANDOM[g] for g in GAMES])
            / (np.array([ATARI_HUMAN[g] for g in GAMES]) - [ATARI_RANDOM[g] for g in GAMES])
            for spec, cube in curves.items()
        }
        scores.write_bytes(pickle.dumps(final))
        rows.append(
            (
                f"rliable directly, the same calls, {args.reps:,} reps",
                timed([sys.executable, "-c", RLIABLE_DIRECT, str(scores), str(args.reps)], env),
            )
        )
        report = Path(tmp) / "report.png"
        rows.append(
            ("rlrun compare --reps 2,000 -o report.png", timed([*rlrun, "--reps", "2000", "-o", str(report)], env))
        )
        zoo_env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (args.zoo_path, env.get("PYTHONPATH", "")) if p)}
        probe = subprocess.run(
            [sys.executable, "-c", "import rl_zoo3.plots.plot_from_file"], env=zoo_env, capture_output=True, text=True
        )
        if probe.returncode == 0:
            zoo = Path(tmp) / "zoo.pkl"
            zoo_pickle(curves, zoo)
            command = [
                sys.executable,
                "-m",
                "rl_zoo3.plots.plot_from_file",
                "-i",
                str(zoo),
                "--rliable",
                "--versus",
                "--iqm",
                "--skip-timesteps",
            ]
            rows.append(
                ("RL Zoo plot_from_file.py --rliable --versus --iqm (its 2,000/1,000 reps)", timed(command, zoo_env))
            )
        else:
            last = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "?"
            print(
                f"RL Zoo: not measured, rl_zoo3.plots.plot_from_file does not import here ({last});"
                " rliable called directly is the peer"
            )
        width = max(len(label) for label, _ in rows)
        base = rows[1][1]
        for label, seconds in rows:
            print(f"{label.ljust(width)}  {seconds:7.2f} s  {seconds / base:5.2f} x rliable directly")


if __name__ == "__main__":
    main()

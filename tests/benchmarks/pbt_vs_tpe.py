"""Population-based training against the plain TPE search at the same total frames: best final score
over seeds.

    python tests/benchmarks/pbt_vs_tpe.py [--spec ppo_lunarlander_pbt] [--members 8] [--frames 1M] \
        [--interval 100k] [--seeds 3] [--set key=value]...

For each seed, the spec's search space is searched twice from a fresh home:
- PBT: `--members` members of `--frames` frames each, an exploit every `--interval`;
- TPE: `--members` trials of `--frames` frames each (no pruning, so both spend the same frames).
Each search's score is its best member's (PBT: at the end of the last generation) or best trial's
final evaluation (eval_mean over sessions). Both run one run at a time, in this process.
The defaults are the built-in's full size (8 x 1M LunarLander frames per search per seed: hours on a
small machine); `--cartpole` searches ppo_cartpole's learning rate and entropy coefficient instead,
a check that fits a busy laptop: `--cartpole --members 4 --frames 40k --interval 10k --seeds 3`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rlrun.search import pbt, plan_search, run_search
from rlrun.search.population import plan_pbt
from rlrun.sizes import parse_size
from rlrun.spec import builtin_document, read_document

CARTPOLE_SPACE = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}, "agent.entropy_coef": {"uniform": [0.0, 0.02]}}


def cartpole_document() -> dict[str, Any]:
    document = builtin_document("ppo_cartpole")
    document["name"] = "ppo_cartpole_search"
    document["meta"].update(eval_frequency="5k", num_eval_episodes=5, checkpoint_frequency="50k", log_frequency="5k")
    document["search"] = CARTPOLE_SPACE
    return document


def one(
    document: dict[str, Any], overrides: list[str], scheduler: str, members: int, interval: int, seed: int
) -> tuple[float, float]:
    """The best final score of one search, and its wall time."""
    edits = [*overrides, f"meta.seed={seed}"]
    if scheduler == "pbt":
        plan = plan_pbt(document, edits, options=pbt.Options(population=members, interval=interval))
    else:
        plan = plan_search(document, edits, trials=members, sampler="tpe", pruner="none")
    with tempfile.TemporaryDirectory(prefix=f"{scheduler}-") as home:
        started = time.perf_counter()
        result = run_search(plan, home=Path(home))
        wall = time.perf_counter() - started
    last = result.trials[-members:] if scheduler == "pbt" else result.trials
    return max(t.value for t in last if t.value is not None), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="ppo_lunarlander_pbt")
    parser.add_argument("--cartpole", action="store_true", help="Search ppo_cartpole's lr and entropy instead.")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--frames", default=None, help="Each member's (and trial's) budget; default: the spec's.")
    parser.add_argument("--interval", default="100k")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    document = cartpole_document() if args.cartpole else read_document(args.spec)
    overrides = list(args.overrides) + ([f"meta.max_frame={parse_size(args.frames)}"] if args.frames else [])
    interval = parse_size(args.interval)
    scores: dict[str, list[float]] = {"pbt": [], "tpe": []}
    walls: dict[str, list[float]] = {"pbt": [], "tpe": []}
    for seed in range(args.seeds):
        for scheduler in ("pbt", "tpe"):
            best, wall = one(document, overrides, scheduler, args.members, interval, seed)
            scores[scheduler].append(best)
            walls[scheduler].append(wall)
            print(
                json.dumps({"seed": seed, "scheduler": scheduler, "best_final": best, "wall_s": round(wall, 1)}),
                flush=True,
            )
    for scheduler in ("pbt", "tpe"):
        mean = statistics.mean(scores[scheduler])
        print(
            f"{scheduler}: best final score per seed {scores[scheduler]}, mean {mean:.1f};"
            f" wall {statistics.mean(walls[scheduler]):.0f} s per search"
        )
    print(f"PBT / TPE mean best final score: {statistics.mean(scores['pbt']) / statistics.mean(scores['tpe']):.2f}")


if __name__ == "__main__":
    main()

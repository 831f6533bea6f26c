"""How much of a short Atari run goes to evaluating: before (greedy episodes played to the game's
own limit, inline) and after (the DQN papers' ε = 0.05 and five-minute cap, evaluation on a
background thread), in the same run.

    python tests/benchmarks/eval_share.py [--spec ppo_breakout] [--frames 32k] [--every 8k] \\
        [--episodes 5] [--configs before,after-inline,after]

Each configuration trains the built-in from scratch for `--frames`, evaluating every `--every`
frames and at the end (`--episodes` episodes each), in this process, on the CPU with one torch
thread. What is reported: the run's wall time, the seconds the training loop was held up by
evaluation (all of an inline evaluation; for a background one, copying the policy and waiting for
an evaluation still running when the next is due or the run ends), their share of the wall time,
and the seconds spent playing evaluation episodes (on whichever thread). The training itself is
the same in every configuration (evaluation never touches its randomness), so the differences are
evaluation's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

CONFIGS: dict[str, list[str]] = {
    # the game's own limit (108,000 emulator frames = 27,000 steps) is no tighter than this cap
    "before": ["meta.eval_epsilon=0", "meta.eval_max_steps=1000000", "meta.eval_overlap=false"],
    "after-inline": ["meta.eval_overlap=false"],
    "after": ["meta.eval_overlap=true"],
}


def measure(spec_name: str, edits: list[str], frames: int, every: int, episodes: int) -> dict[str, Any]:
    from rlrun.session import evaluation
    from rlrun.spec import load_spec
    from rlrun.training.api import train

    played: list[float] = []
    waited: list[float] = []
    run_episodes = evaluation.Evaluator._run
    close = evaluation.Evaluator.close

    def timed_run(self: Any, *args: Any) -> Any:
        started = time.monotonic()
        try:
            return run_episodes(self, *args)
        finally:
            played.append(time.monotonic() - started)

    def closing(self: Any) -> None:
        waited.append(self.waited)
        close(self)

    spec = load_spec(
        spec_name,
        [
            f"meta.max_frame={frames}",
            f"meta.eval_frequency={every}",
            f"meta.num_eval_episodes={episodes}",
            f"meta.checkpoint_frequency={frames}",
            *edits,
        ],
    )
    evaluation.Evaluator._run = timed_run  # type: ignore[method-assign]
    evaluation.Evaluator.close = closing  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as home:
            started = time.monotonic()
            result = train(spec, home=Path(home), handle_signals=False)
            wall = time.monotonic() - started
    finally:
        evaluation.Evaluator._run = run_episodes  # type: ignore[method-assign]
        evaluation.Evaluator.close = close  # type: ignore[method-assign]
    assert result.status == "finished", result
    return {
        "wall_s": round(wall, 1),
        "eval_stall_s": round(waited[0], 1),
        "eval_share": round(waited[0] / wall, 3),
        "eval_play_s": round(sum(played), 1),
        "evaluations": len(played),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="ppo_breakout")
    parser.add_argument("--frames", default="32k")
    parser.add_argument("--every", default="8k")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--configs", default="before,after-inline,after")
    args = parser.parse_args()
    from rlrun.sizes import parse_size

    frames, every = parse_size(args.frames), parse_size(args.every)
    rows = {}
    for name in args.configs.split(","):
        rows[name] = measure(args.spec, CONFIGS[name], frames, every, args.episodes)
        print(name, json.dumps(rows[name]), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {"spec": args.spec, "frames": frames, "every": every, "episodes": args.episodes, "results": rows}, indent=1
        )
    )


if __name__ == "__main__":
    main()

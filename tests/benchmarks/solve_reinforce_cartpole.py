"""Does the built-in `reinforce_cartpole` solve CartPole-v1 within its own frame budget?

Trains the built-in spec with 4 sessions (seeds 0..3) exactly as `rlrun train` would, then reads
the evaluations back from the registry and prints, per seed, the first frame whose evaluation mean
reached the threshold and the final evaluation. Passes when at least 3 of 4 seeds reach it.

    python tests/benchmarks/solve_reinforce_cartpole.py [--sessions 4] [--threshold 475]

A benchmark, not a test: it takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from rlrun.registry import Registry
from rlrun.spec import load_spec
from rlrun.training import train


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="reinforce_cartpole")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--need", type=int, default=3, help="seeds that must reach the threshold")
    args = parser.parse_args()

    spec = load_spec(args.spec, [f"meta.sessions={args.sessions}"])
    with tempfile.TemporaryDirectory() as home:
        started = time.monotonic()
        result = train(spec, home=home)
        elapsed = time.monotonic() - started
        with Registry.open(home, create=False) as registry:
            detail = registry.get_run(result.run_id)

    print(f"{spec.name}: {spec.env.id}, budget {spec.meta.max_frame:,} frames per seed, "
          f"{args.sessions} seeds in parallel, {elapsed:.0f} s wall")
    print(f"{'seed':>4}  {'frames to >= ' + format(args.threshold, 'g'):>18}  {'final eval (mean ± std)':>24}  best")
    solved = 0
    for session in detail.sessions:
        evaluations = [e for e in detail.evaluations if e.session_index == session.index]
        first = next((e.frame for e in evaluations if e.mean >= args.threshold), None)
        final = evaluations[-1]
        solved += first is not None
        print(f"{session.seed:>4}  {first if first is not None else 'never':>18}  "
              f"{final.mean:>15.1f} ± {final.std:<6.1f}  {session.best_eval:.1f}")
    verdict = "PASS" if solved >= args.need else "FAIL"
    print(f"{solved}/{args.sessions} seeds reached {args.threshold:g} within the budget: {verdict}")
    return 0 if solved >= args.need else 1


if __name__ == "__main__":
    sys.exit(main())

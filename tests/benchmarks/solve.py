"""Do the built-in specs solve their envs within the frame budget each spec states?

For each built-in spec: train it with 4 sessions (seeds 0..3) exactly as `rlrun train` would,
read the evaluations back from the registry, and print one row per spec: frames until the first
evaluation whose mean reached the env's threshold (per seed), how many seeds reached it, and the
final evaluation mean ± std (mean over seeds of each seed's final evaluation mean, and the spread
across seeds).

    python tests/benchmarks/solve.py [SPEC ...] [--sessions 4] [--need 3] [--set KEY=VALUE ...]

`--set` edits every spec as `rlrun train --set` would: `--set meta.arithmetic=2`, run beside the
default, compares how two arithmetic revisions learn over the same seeds.

A benchmark, not a test: it takes from a minute (REINFORCE) to most of an hour (SAC) per spec on
2 cores. Exit status 1 when a spec misses (fewer than --need seeds reach the threshold).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from rlrun.registry import Registry
from rlrun.spec import ALE_NAMESPACE, builtin_document, builtin_names, load_spec
from rlrun.training import train

THRESHOLDS = {  # the bar per env (and per algorithm on Pendulum)
    ("CartPole-v1", None): 475.0,
    ("Acrobot-v1", None): -100.0,
    ("Pendulum-v1", "sac"): -200.0,
    ("Pendulum-v1", "ppo"): -300.0,
    ("LunarLander-v3", None): 200.0,
    # the RL Zoo's entries (issue 55): Gymnasium's registered reward thresholds
    ("MountainCar-v0", None): -110.0,
    ("MountainCarContinuous-v0", None): 90.0,
    ("LunarLanderContinuous-v3", None): 200.0,
    ("BipedalWalker-v3", None): 300.0,
}


def threshold(env_id: str, algorithm: str) -> float:
    return THRESHOLDS.get((env_id, algorithm), THRESHOLDS.get((env_id, None), float("nan")))


def solve(name: str, sessions: int, edits: list[str]) -> tuple[str, float, list[int | None], list[float], float]:
    spec = load_spec(name, [f"meta.sessions={sessions}", *edits])
    bar = threshold(spec.env.id, spec.agent.algorithm)
    with tempfile.TemporaryDirectory() as home:
        started = time.monotonic()
        result = train(spec, home=home, handle_signals=False)
        elapsed = time.monotonic() - started
        with Registry.open(home, create=False) as registry:
            detail = registry.get_run(result.run_id)
    firsts, finals = [], []
    for session in detail.sessions:
        evaluations = [e for e in detail.evaluations if e.session_index == session.index and e.kind == "train"]
        firsts.append(next((e.frame for e in evaluations if e.mean >= bar), None))
        finals.append(evaluations[-1].mean)
    return f"{spec.agent.algorithm} × {spec.env.id}", bar, firsts, finals, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Not the Atari built-ins by default: 10M frames of a convolutional network take days on a CPU.
    quick = [n for n in builtin_names() if not builtin_document(n)["env"]["id"].startswith(ALE_NAMESPACE)]
    parser.add_argument("specs", nargs="*", default=quick)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--need", type=int, default=3, help="seeds that must reach the threshold")
    parser.add_argument(
        "--set",
        dest="edits",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an edit to every spec, as `rlrun train --set` takes it",
    )
    args = parser.parse_args()
    print(
        f"{'spec':<20} {'algorithm × env':<22} {'budget':>7} {'bar':>6} {'frames to bar, per seed':<34} "
        f"{'solved':>6} {'final eval (mean ± std over seeds)':>34} {'wall':>6}"
    )
    missed = 0
    for name in args.specs:
        label, bar, firsts, finals, elapsed = solve(name, args.sessions, args.edits)
        solved = sum(f is not None for f in firsts)
        missed += solved < args.need
        frames = ", ".join("-" if f is None else f"{f / 1000:g}k" for f in firsts)
        budget = load_spec(name, args.edits).meta.max_frame
        print(
            f"{name:<20} {label:<22} {budget / 1000:>6g}k {bar:>6g} {frames:<34} {solved:>4}/{len(firsts)} "
            f"{statistics.mean(finals):>25.1f} ± {statistics.pstdev(finals):<6.1f} {elapsed:>5.0f}s",
            flush=True,
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

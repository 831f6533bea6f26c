"""What the training metrics log costs: the CPU time a built-in spec's training takes with the log
at its default cadence, against the same training with no log event inside the budget
(`meta.log_frequency` past it), and with TensorBoard on.

    python tests/benchmarks/metrics_overhead.py [--spec ppo_cartpole] [--frames 100k] [--repeat 5]

Each measurement is a fresh process that builds one session (as `rlrun train` does) and times
`Session.run` in CPU seconds of that process (`time.process_time`: torch runs one thread), so
start-up is not counted and other work on a shared machine disturbs it far less than wall time.
Variants run interleaved, round after round; each reports its median as frames per CPU second.
Run with PYTHONPATH pointing at another checkout to compare with it (the variants that need the
log then fall back to what that checkout does).
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

QUIET = ["meta.eval_frequency=1000000000", "meta.num_eval_episodes=1", "meta.checkpoint_frequency=1000000000"]
VARIANTS = {
    "no log event": (["meta.log_frequency=1000000000"], "0"),
    "log, default cadence": ([], "0"),
    "log + tensorboard": ([], "1"),
}


def measure(spec_name: str, frames: int, edits: list[str]) -> float:
    """CPU seconds of one session's training, in this process."""
    from rlrun.registry import Registry
    from rlrun.session.loop import Session
    from rlrun.session.stopping import StopRequest
    from rlrun.spec import load_spec

    try:
        from rlrun.training.api import _task
    except ImportError:  # a checkout from before the training package
        from rlrun.training import _task  # type: ignore[attr-defined,no-redef]

    spec = load_spec(spec_name, [f"meta.max_frame={frames}", "meta.sessions=1", *QUIET, *edits])
    with tempfile.TemporaryDirectory() as tmp, Registry.open(Path(tmp)) as registry:
        run = registry.create_run(
            run_id="bench",
            name=None,
            spec_name=spec_name,
            algorithm=spec.agent.algorithm,
            env_id=spec.env.id,
            max_frame=frames,
            seed=0,
            num_sessions=1,
            spec_json=spec.model_dump_json(),
            host="bench",
            pid=0,
        )
        (record,) = registry.get_run(run.id).sessions
        session = Session(
            _task(Path(tmp), registry.url, run.id, record, spec, "train", None), registry, lambda event: None
        )
        started = time.process_time()
        session.run(StopRequest())
        return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="ppo_cartpole")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: measure this variant, print seconds
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.spec, args.frames, VARIANTS[args.one][0])))
        return
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeat):
        for name, (_, tensorboard) in VARIANTS.items():
            done = subprocess.run(
                [sys.executable, __file__, "--spec", args.spec, "--frames", str(args.frames), "--one", name],
                env={**os.environ, "RLRUN_TENSORBOARD": tensorboard},
                check=True,
                capture_output=True,
                text=True,
            )
            seconds[name].append(float(done.stdout))
    base = args.frames / statistics.median(seconds["no log event"])
    for name, values in seconds.items():
        rate = args.frames / statistics.median(values)
        print(
            f"{name:<22} {rate:>9,.0f} frames/CPU s  ({(rate / base - 1) * 100:+.2f}%)"
            f"  runs: {', '.join(f'{args.frames / v:,.0f}' for v in values)}"
        )


if __name__ == "__main__":
    main()

"""DQN and PPO on the CPU against the GPU (`meta.device`), in the same run, and whether a resume on
this GPU is exact.

    python tests/benchmarks/gpu_device.py [--algorithms dqn ppo] [--frames 20000] [--resume-frames 6000]
        [--exact-specs SPEC ...]

Needs a CUDA GPU (it says so and exits 2 without one). For each algorithm's CartPole spec, at two
network sizes (the spec's own, and 1024x1024 hidden layers with a DQN batch of 256, where a GPU
starts to pay), it trains the same spec on `cpu` and on `cuda`, each in its own fresh process with
one CPU thread, and prints frames/s (the session's training-loop wall time, from its final
snapshot's clock) and their ratio. Then, on `cuda`, it checks exactness the one way the test suite
does (`tests/test_resume.py`: `final_state` / `assert_same_run`): a run trained straight against
one stopped by SIGTERM mid-way and resumed; it prints "exact", or the first difference and the ops
the registry recorded as having no deterministic kernel.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
SPECS = {"dqn": "dqn_cartpole", "ppo": "ppo_cartpole"}
SIZES: dict[str, dict[str, list[str]]] = {
    "spec": {"dqn": [], "ppo": []},
    "1024x2": {
        "dqn": ["agent.network.hidden=[1024, 1024]", "agent.batch_size=256"],
        "ppo": ["agent.network.hidden=[1024, 1024]"],
    },
}
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def require_cuda() -> str:
    """The GPU's model name, or exit 2 saying why this benchmark cannot run here."""
    import torch

    if not torch.cuda.is_available():
        why = "is built without CUDA" if torch.version.cuda is None else "sees no CUDA GPU"
        print(
            f"error: torch {torch.__version__} {why}: this benchmark compares meta.device=cpu with cuda;"
            " run it on a machine with a GPU",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return torch.cuda.get_device_name(0)


def sets(edits: list[str]) -> list[str]:
    return [arg for edit in edits for arg in ("--set", edit)]


def rlrun(home: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlrun", *args, "--home", home],
        capture_output=True,
        text=True,
        env={**os.environ, **SINGLE_THREAD, **(env or {})},
    )


def frames_per_second(spec: str, device: str, edits: list[str], frames: int) -> float:
    from rlrun import snapshot
    from rlrun.registry import Registry

    quiet = [
        f"meta.max_frame={frames}",
        f"meta.eval_frequency={frames}",
        f"meta.checkpoint_frequency={frames}",
        f"meta.log_frequency={frames}",
        "meta.num_eval_episodes=1",
        f"meta.device={device}",
    ]
    with tempfile.TemporaryDirectory() as home:
        done = rlrun(home, "train", spec, *sets(quiet + edits))
        if done.returncode != 0:
            raise SystemExit(f"rlrun train {spec} on {device} failed:\n{done.stderr}")
        with Registry.open(home, create=False) as registry:
            final = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
        return frames / snapshot.read_meta(Path(home) / final.path).clock.wall_time


def resume_is_exact(spec: str, frames: int, device: str = "cuda") -> str:
    """ "exact", or what differs and the ops recorded as nondeterministic, after a SIGTERM at
    mid-budget and a resume, all on `device`."""
    sys.path.insert(0, str(TESTS))
    from helpers import fast
    from same_run import CADENCE, assert_same_run, final_state

    from rlrun.registry import Registry
    from rlrun.testhooks import SIGNAL_AT_ENV

    args = ["train", spec, *CADENCE, *fast(spec), "--frames", str(frames), "--set", f"meta.device={device}"]
    with tempfile.TemporaryDirectory() as straight, tempfile.TemporaryDirectory() as stopped:
        for home, env in ((straight, {}), (stopped, {SIGNAL_AT_ENV: str(frames // 2 + 7)})):
            rlrun(home, *args, env=env)
        resumed = rlrun(stopped, "resume", "latest")
        if resumed.returncode != 0:
            return f"resume failed: {resumed.stderr.strip().splitlines()[-1:]}"
        with Registry.open(stopped, create=False) as registry:
            notes = [a.note for a in registry.get_run(registry.resolve("latest").id).attempts if a.approximate]
        try:
            assert_same_run(final_state(Path(straight)), final_state(Path(stopped)))
        except AssertionError as difference:
            return f"NOT exact ({str(difference).splitlines()[0] or 'state differs'}); recorded: {notes or 'nothing'}"
        return "exact" + (f" (but recorded approximate: {notes})" if notes else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--frames", type=int, default=20_000, help="frames per timed training")
    parser.add_argument("--resume-frames", type=int, default=6_000, help="budget of the exactness check (0: skip)")
    parser.add_argument(
        "--exact-specs",
        nargs="+",
        metavar="SPEC",
        help="built-ins whose resume on the GPU is checked (default: the algorithms' CartPole specs)",
    )
    options = parser.parse_args()
    gpu = require_cuda()
    print(f"GPU: {gpu}; {options.frames:,} frames per training, one CPU thread")
    print(f"{'algo':<5} {'network':<8} {'cpu fps':>9} {'cuda fps':>9} {'cuda/cpu':>9}", flush=True)
    for algorithm in options.algorithms:
        for size, edits in SIZES.items():
            measured: dict[str, Any] = {
                device: frames_per_second(SPECS[algorithm], device, edits[algorithm], options.frames)
                for device in ("cpu", "cuda")
            }
            print(
                f"{algorithm:<5} {size:<8} {measured['cpu']:>9.0f} {measured['cuda']:>9.0f} "
                f"{measured['cuda'] / measured['cpu']:>9.2f}",
                flush=True,
            )
    if options.resume_frames:
        for spec in options.exact_specs or [SPECS[algorithm] for algorithm in options.algorithms]:
            print(f"{spec}: resume on {gpu}: {resume_is_exact(spec, options.resume_frames)}", flush=True)


if __name__ == "__main__":
    main()

"""What putting the env back costs at a resume, at the worst point: the last step of a long episode.

    python tests/benchmarks/resume_replay_cost.py [--repeats 5]

For each env, one copy is stepped to the last step before its episode ends (LunarLander: the
built-in heuristic pilot's landing, the longest episode a fixed policy gives; HalfCheetah: step 999
of its 1000-step time limit), its state is taken as a snapshot takes it (JSON round trip included),
and a freshly built env is put back in that state, each of these ways:
- restart: reset with a new seed (the approximate path; what every resume did before replay);
- replayed: restore the episode's start, reset and replay its actions (the general fallback);
- captured: MuJoCo's own state through `mj_setState` (HalfCheetah only).
Each time includes building the env and its first reset, as a resuming session does. Median of
`--repeats` runs, in milliseconds, single process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from rlrun.envs import envstate, make_vector_env
from rlrun.envs.state import NotCapturable, capture_vector_env, restore_vector_env
from rlrun.spec import EnvSpec


def lunar_pilot(obs: np.ndarray) -> np.ndarray:
    from types import SimpleNamespace

    from gymnasium.envs.box2d.lunar_lander import heuristic

    discrete = SimpleNamespace(unwrapped=SimpleNamespace(continuous=False))
    return np.array([heuristic(discrete, o) for o in obs])


def cheetah_pilot(obs: np.ndarray) -> np.ndarray:
    return np.tile(np.sin(np.arange(6, dtype=np.float32)) * 0.5, (len(obs), 1))


def last_step_state(spec: EnvSpec, pilot: Callable[[np.ndarray], np.ndarray], *, replay: bool) -> tuple[Any, int]:
    """The snapshot state one step before the episode ends, and the episode's length so far."""
    env = make_vector_env(spec)
    obs, _ = env.reset(seed=1)
    trajectory = []
    while True:  # find how long the episode is, then stop one step short of its end
        action = pilot(obs)
        obs, _, terminated, truncated, _ = env.step(action)
        trajectory.append(action)
        if terminated[0] or truncated[0]:
            break
    env.close()
    env = make_vector_env(spec)
    env.reset(seed=1)
    for action in trajectory[:-1]:
        env.step(action)
    state = _capture(env, replay=replay)
    env.close()
    return json.loads(json.dumps(state)), len(trajectory) - 1


def _capture(env: Any, *, replay: bool) -> Any:
    if not replay:
        return capture_vector_env(env)
    captured = envstate.capture_env

    def refuse(*_: Any, **__: Any) -> Any:
        raise NotCapturable("benchmark: forced replay")

    envstate.capture_env = refuse  # the recorder then records what a replay needs
    try:
        return capture_vector_env(env)
    finally:
        envstate.capture_env = captured


def put_back(env: Any, state: Any) -> str:
    return restore_vector_env(env, state)


def timed(spec: EnvSpec, put_back: Callable[[Any], object], repeats: int) -> float:
    times = []
    make_vector_env(spec).close()  # warm: imports and the model file's first load
    for _ in range(repeats):
        started = time.perf_counter()
        env = make_vector_env(spec)
        env.reset(seed=0)
        put_back(env)
        times.append(time.perf_counter() - started)
        env.close()
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    cases = [("LunarLander-v3", lunar_pilot, False), ("HalfCheetah-v5", cheetah_pilot, True)]
    for env_id, pilot, native in cases:
        spec = EnvSpec(id=env_id, num_envs=1)
        replay_state, steps = last_step_state(spec, pilot, replay=True)
        rows = {
            "restart": timed(spec, lambda env: env.reset(seed=2), repeats),
            f"replayed ({steps} steps)": timed(spec, partial(put_back, state=replay_state), repeats),
        }
        if native:
            captured_state, _ = last_step_state(spec, pilot, replay=False)
            rows["captured (mj_setState)"] = timed(spec, partial(put_back, state=captured_state), repeats)
        size = len(json.dumps(replay_state))
        print(f"{env_id}  (replay state: {size / 1024:.0f} KiB of JSON)")
        for how, milliseconds in rows.items():
            print(f"  {how:<28} {milliseconds:8.1f} ms")


if __name__ == "__main__":
    main()

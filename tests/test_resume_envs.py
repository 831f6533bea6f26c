"""Exact resume for envs whose state is not plain attributes: Box2D (episode replay), async vector
envs (capture and replay inside each worker), MuJoCo (the engine's own state, with what its last
step derived: Ant reads it), Acrobot stepped by its exact port (rlrun.envs.ports: captured as
Gymnasium's own env is) — and a non-deterministic env, whose replay cannot reproduce the episode,
restarts and says so.

Like `test_resume.py`: run A trains straight to the budget; run B is stopped mid-episode (SIGTERM
at an exact frame, or kill -9 of its process group) and resumed; A and B must be equal bit for bit.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import cli_env, fast, invoke, run_attempts
from same_run import (
    assert_same_run,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference_state,
    resume_ok,
    train,
)

from rlrun.testhooks import SIGNAL_AT_ENV

pytestmark = pytest.mark.slow

BUDGET = 4000
SMALL = ["--set", "agent.network.hidden=[32, 32]"]

# name: (built-in spec, extra settings, how every copy must come back)
CASES: dict[str, tuple[str, list[str], str]] = {
    "ppo-lunarlander": ("ppo_lunarlander", [*SMALL, "--set", "env.num_envs=4"], "replayed"),
    "dqn-lunarlander": ("dqn_lunarlander", [*SMALL, "--set", "agent.learning_starts=500"], "replayed"),
    "ppo-lunarlander-async": (
        "ppo_lunarlander",
        [*SMALL, "--set", "env.num_envs=2", "--set", "env.vectorization=async"],
        "replayed",
    ),
    "ppo-acrobot": ("ppo_acrobot", ["--set", "env.num_envs=4"], "captured"),
    "dqn-acrobot": ("dqn_acrobot", [], "captured"),
    "sac-halfcheetah": ("sac_halfcheetah", [*SMALL, "--set", "agent.learning_starts=500"], "captured"),
    "ppo-hopper": ("ppo_hopper", [*SMALL, "--set", "env.num_envs=2"], "captured"),
    # Ant's reward reads body positions the last step left behind, not only qpos/qvel
    "sac-ant": (
        "sac_halfcheetah",
        [*SMALL, "--set", "env.id=Ant-v5", "--set", "agent.learning_starts=500"],
        "captured",
    ),
}
NEEDS = {"lunarlander": "Box2D", "halfcheetah": "mujoco", "hopper": "mujoco", "-ant": "mujoco"}


def _skip_without_engine(case: str) -> None:
    for word, module in NEEDS.items():
        if word in case:
            pytest.importorskip(module)


def _args(case: str) -> tuple[str, list[str]]:
    spec, extra, _ = CASES[case]
    return spec, [*fast(spec), *extra, "--frames", str(BUDGET)]


@pytest.fixture(scope="module", params=list(CASES))
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    case = request.param
    _skip_without_engine(case)
    spec, args = _args(case)
    return case, reference_state(tmp_path_factory, spec, *args)


def _assert_resumed_exactly(home: Path, case: str) -> None:
    resumed = run_attempts(home)[-1]
    assert not resumed.approximate, resumed.note
    assert resumed.note is not None and resumed.note.startswith(f"env: {CASES[case][2]}"), resumed.note
    shown = invoke(home, "show", "latest")  # in this process: the command line's own handler
    assert f"yes (env: {CASES[case][2]}" in " ".join(shown.stdout.split()), shown.stdout


def test_sigterm_mid_episode(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    case, a = straight
    spec, args = _args(case)
    preempted_mid_episode(home, spec, *args)
    resume_ok(home)
    _assert_resumed_exactly(home, case)
    assert_same_run(a, final_state(home))


def test_kill_9_of_the_process_group(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    case, a = straight
    spec, args = _args(case)
    killed_after_a_snapshot(home, spec, *args)
    resume_ok(home, "latest")
    _assert_resumed_exactly(home, case)
    assert_same_run(a, final_state(home))


# ---------------------------------------------------------------------------------------------
# An env that replay cannot reproduce

FLAKY_ENV = '''
import os

import gymnasium as gym
import numpy as np


class Flaky(gym.Env):
    """Steps with OS entropy: the same seed and actions give another episode each time."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.world = object()  # not plain data: the env cannot be captured, only replayed
        return np.zeros(2, np.float32), {}

    def step(self, action):
        noise = np.frombuffer(os.urandom(8), np.float32) / np.float32(2**32)
        return np.clip(noise, -1, 1).astype(np.float32), 1.0, False, False, {}


gym.register("Flaky-v0", entry_point=Flaky, max_episode_steps=200)
'''


def test_an_env_that_replay_cannot_reproduce_restarts_its_episodes_and_says_so(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(FLAKY_ENV)  # registers Flaky-v0 in every process
    home = tmp_path / "flaky"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(plugin)]))}
    settings = ["--set", "env.id=Flaky-v0", "--set", "env.num_envs=2", "--frames", "1500"]
    stopped = train(home, "ppo_cartpole", *fast("ppo_cartpole"), *settings, env={**env, SIGNAL_AT_ENV: "777"})
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    resumed = zygote.run(["resume", "latest"], env={**cli_env(home), **env}, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    attempts = run_attempts(home)
    assert [a.approximate for a in attempts] == [False, True]
    note = attempts[1].note or ""
    assert "did not reproduce the observation" in note and "env: restarted" in note, note
    shown = zygote.run(["show", "latest"], env=cli_env(home), timeout=60)
    assert "env: restarted" in " ".join((shown.stdout + shown.stderr).split()), shown.stderr

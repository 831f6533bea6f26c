"""Exact resume of Atari games (issue 12): a session stopped by SIGTERM mid-episode and resumed is,
bit for bit, the session that was never stopped. The env comes back *captured*: the emulator's
state with its random generator, the preprocessing's max-pool buffers and lives, the frame stack,
the sticky actions' previous action and the env's generator.

DQN on Pong (the nature_cnn Q-network, a replay memory) and PPO on Breakout (two copies, a rollout
cut mid-way, a lost life ending the learner's episode while the game goes on): real ROMs, tiny
budgets, episodes cut short by `env.max_episode_steps` (emulator frames) so evaluations are quick.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
from helpers import run_attempts
from same_run import assert_same_run, final_state, reference_state, resume_ok, train

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.testhooks import SIGNAL_AT_ENV

pytestmark = [pytest.mark.slow]
pytest.importorskip("ale_py")
pytest.importorskip("cv2")

SHORT = ["--set", "env.max_episode_steps=1600", "--set", "agent.network.hidden=[64]"]
CASES: dict[str, tuple[str, list[str], str]] = {
    # name: (built-in spec, settings, the frame SIGTERM arrives at)
    "dqn-pong": (
        "dqn_pong",
        [*SHORT, "--set", "agent.learning_starts=300", "--set", "agent.memory.capacity=1000", "--frames", "1500"],
        "1111",
    ),
    "ppo-breakout": (
        "ppo_breakout",
        [*SHORT, "--set", "env.num_envs=2", "--set", "agent.n_steps=96", "--frames", "1500"],
        "1110",
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    spec, settings, _ = CASES[request.param]
    return request.param, reference_state(tmp_path_factory, spec, *settings)


def test_sigterm_mid_episode_then_resume_is_the_uninterrupted_run(
    straight: tuple[str, dict[str, Any]], home: Any
) -> None:
    case, a = straight
    spec, settings, signal_at = CASES[case]
    stopped = train(home, spec, *settings, env={SIGNAL_AT_ENV: signal_at})
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    with Registry.open(home, create=False) as registry:
        newest = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
    assert newest.kind == "preempt"
    meta = snapshot.read_meta(home / newest.path)
    assert all(length > 0 for length in meta.episode_length), "not mid-episode"
    if case == "ppo-breakout":  # a lost life has ended a learner's episode, and the game went on
        assert meta.clock.episode > 0
        copies = meta.env["envs"]
        lives = [layer for copy in copies for layer in copy["layers"] if layer.keys() == {"lives", "game_over"}]
        assert len(lives) == 2 and any(0 < life["lives"] < 5 and not life["game_over"] for life in lives), lives
    resume_ok(home)
    resumed = run_attempts(home)[-1]
    assert not resumed.approximate and resumed.note == "env: captured", resumed.note
    assert_same_run(a, final_state(home))

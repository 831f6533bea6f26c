"""CQL (issue 54) offline then online, on DQN (CartPole, bc_cartpole's dataset) and on SAC (Pendulum,
a dataset recorded by cql_pendulum's recipe from 150 frames of sac_pendulum): one run
SIGKILLed right after its snapshot mid-offline, resumed and killed again right after the one at the
switch, resumed and killed again mid-online, then resumed to the end, equals the uninterrupted run's
final snapshot bit for bit (weights, optimisers, temperature, generator, online memory, metrics,
evaluations), and every attempt is recorded exact; the metrics log has the declared columns and
the kind's scalars in every row; CQL-Lagrange (`agent.lagrange_threshold`) the same way. One chain
per kind: each kill is one resume of the same run, so the three points cost one training, not three."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import environment, run_attempts, run_cli
from same_run import assert_same_run, final_state

from rlrun.algorithms.cql import CONTINUOUS_STATS, DISCRETE_STATS, Agent
from rlrun.session import metrics_log
from rlrun.testhooks import CRASH_ENV

pytestmark = pytest.mark.slow  # real trainings

pytest.importorskip("minari", reason="learning from a dataset needs the minari extra")


def _cadence(every: int) -> list[str]:
    settings = [f"meta.{key}={every}" for key in ("eval_frequency", "checkpoint_frequency", "log_frequency")]
    return [arg for edit in [*settings, "meta.num_eval_episodes=1"] for arg in ("--set", edit)]


def _set(*edits: str) -> list[str]:
    return [arg for edit in edits for arg in ("--set", edit)]


# Snapshots at 1, 2 and 3 periods: mid-offline, at the switch (offline_updates = 2 periods), mid-online.
KINDS = {
    "discrete": (
        "cql_cartpole",
        (*DISCRETE_STATS, "epsilon", "lr"),
        1000,
        [
            "--frames",
            "3500",
            *_cadence(1000),
            *_set(
                "meta.offline_updates=2000",  # on bc_cartpole's dataset, by the built-ins' own recipe: the one
                # the suite's bc_cartpole runs (tests/same_run.py's ALGORITHMS) make it by in the shared folder
                "agent.learning_starts=100",
                "agent.batch_size=32",
                "agent.network.hidden=[32, 32]",
                "agent.target_update_frequency=300",
            ),
        ],
    ),
    "continuous": (
        "cql_pendulum",
        (*CONTINUOUS_STATS, "lr"),
        100,
        [
            "--frames",
            "350",
            *_cadence(100),
            *_set(
                "meta.offline_updates=200",
                "data.dataset=rlrun/pendulum-sac-tiny-v0",  # not the built-in's: a smaller recipe,
                "data.recipe.frames=150",  # tests/test_offline_continuous.py's, which names this id too
                "data.recipe.episodes=1",  # (a dataset made by another recipe is refused)
                "env.max_episode_steps=50",
                "agent.learning_starts=40",
                "agent.batch_size=32",
                "agent.n_action_samples=4",
                "agent.network.hidden=[32, 32]",
            ),
        ],
    ),
}
# CQL-Lagrange: the continuous kind with its multiplier learned (its parameter and optimiser in
# every snapshot), against a threshold the penalty crosses within the run.
KINDS["continuous, Lagrange"] = (
    KINDS["continuous"][0],
    KINDS["continuous"][1],
    KINDS["continuous"][2],
    [*KINDS["continuous"][3], *_set("agent.lagrange_threshold=1.0")],
)


@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_mid_offline_at_the_switch_and_mid_online_resumes_bit_exact(tmp_path: Path, kind: str) -> None:
    spec, logged, period, settings = KINDS[kind]
    straight = tmp_path / "straight"
    done = run_cli(straight, "train", spec, *settings)
    assert done.code == 0, done.stderr
    home, kill = tmp_path / "runs", {CRASH_ENV: "checkpoint-recorded#1"}  # right after the next snapshot
    killed = run_cli(home, "train", spec, *settings, env=kill)
    assert killed.code == -signal.SIGKILL, killed.stderr
    for _ in ("at the switch", "mid-online"):
        killed = run_cli(home, "resume", "latest", env=kill)
        assert killed.code == -signal.SIGKILL, killed.stderr
    resumed = run_cli(home, "resume", "latest")
    assert resumed.code == 0, resumed.stderr
    attempts = run_attempts(home)
    assert [a.start_frame for a in attempts] == [0, period, 2 * period, 3 * period]
    assert not any(a.approximate for a in attempts), "recorded exact"
    reference = _state(straight)
    assert_same_run(reference, _state(home))
    clock = reference["sessions"][0]["saved"].meta.clock
    assert clock.frame == 3.5 * period and clock.opt_step > 2 * period, "offline steps, then online ones"
    header, *rows = reference["sessions"][0]["metrics"]
    assert header == [name for name in metrics_log.columns(Agent.METRICS) if name not in metrics_log.WALL_CLOCK]
    for name in logged:  # the kind's own scalars, offline and online
        column = header.index(name)
        assert all(row[column] != "" for row in rows), f"{name} not logged every period"
    if "Lagrange" in kind:  # the multiplier moved from its start (1), and is in the snapshot
        multipliers = {row[header.index("cql_multiplier")] for row in rows}
        assert multipliers != {"1.0"} and "cql_log_multiplier" in reference["sessions"][0]["saved"].tensors["agent"]


def _state(home: Path) -> dict[str, Any]:
    with environment(home):
        return final_state(home)

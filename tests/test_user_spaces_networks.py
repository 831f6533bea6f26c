"""What users bring, held to rlrun's one test: Dict observations, MultiDiscrete and MultiBinary
actions and networks of their own train, and a run interrupted (SIGTERM mid-run, or kill -9 of the
whole process group) then resumed ends bit for bit where the uninterrupted run ends.

The envs and networks are tests/usernets/ (`my_envs`, `my_nets`): that folder is on PYTHONPATH for
every process a test starts, and its `sitecustomize` registers the envs there (a spawned session
process sees only what it imports itself)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import cli_env, fast, invoke, rlrun
from same_run import CADENCE, assert_same_run, final_state, train, wait_for

from rlrun.registry import Registry
from rlrun.testhooks import FREEZE_ENV, SIGNAL_AT_ENV

pytestmark = pytest.mark.slow

USERNETS = Path(__file__).parent / "usernets"
BUDGET = "3000"

GOAL_NET = ["--set", "agent.network.kind=my_nets:GoalNet", "--set", "agent.network.kwargs.width=16"]
CASES: dict[str, tuple[str, list[str], str]] = {
    # case: built-in spec, settings, how it is interrupted
    "ppo-dict-obs": ("ppo_cartpole", ["--set", "env.id=DictObs-v0"], "sigterm"),
    "ppo-multidiscrete": ("ppo_cartpole", ["--set", "env.id=MultiDiscreteActions-v0"], "sigterm"),
    "ppo-multibinary": ("ppo_cartpole", ["--set", "env.id=MultiBinaryActions-v0"], "sigterm"),
    "a2c-multidiscrete": ("a2c_cartpole", ["--set", "env.id=MultiDiscreteActions-v0"], "sigterm"),
    "a2c-multibinary": ("a2c_cartpole", ["--set", "env.id=MultiBinaryActions-v0"], "kill-9"),
    "reinforce-multidiscrete": ("reinforce_cartpole", ["--set", "env.id=MultiDiscreteActions-v0"], "sigterm"),
    "dqn-flattened-dict-obs": ("dqn_cartpole", ["--set", "env.id=DictObs-v0"], "sigterm"),
    "ppo-user-network": ("ppo_cartpole", ["--set", "env.id=DictObs-v0", *GOAL_NET], "kill-9"),
    # a user's network as a memory's torso (the cell reads its outputs), on a user's env
    "ppo-user-network-memory": (
        "ppo_cartpole",
        ["--set", "env.id=DictObs-v0", *GOAL_NET, "--set", 'agent.network.recurrent={"cell": "lstm", "size": 16}'],
        "sigterm",
    ),
}


@pytest.fixture(autouse=True)
def _user_code_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's code importable in every process a test starts (PYTHONPATH: its `sitecustomize`
    registers the envs as the process starts) and in this one, where the uninterrupted runs train
    through the Python API (`same_run.train`: no signal is under test there), as a notebook that
    imported its envs would."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(USERNETS), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(USERNETS))
    import my_envs  # noqa: F401  # registers the envs here (once: it skips ids already registered)


def interrupted(home: Path, spec: str, settings: list[str], how: str, tmp_path: Path) -> None:
    """Train to BUDGET, stopped on the way: a SIGTERM mid-episode (the session signals itself at
    frame 1234), or a kill -9 of the process group once the session has frozen itself past its
    snapshot at frame 2000."""
    if how == "sigterm":
        stopped = train(home, spec, *settings, "--frames", BUDGET, env={SIGNAL_AT_ENV: "1234"})
        assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
        return
    flag = tmp_path / "frozen"
    process = zygote.start(
        ["train", spec, *_cadence(spec), *settings, "--frames", BUDGET],
        env={**cli_env(home), FREEZE_ENV: f"2500@{flag}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(flag.exists, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL


def _cadence(spec: str) -> list[str]:
    return [*CADENCE, *fast(spec)]


@pytest.mark.parametrize("case", list(CASES))
def test_interrupted_then_resumed_is_the_uninterrupted_run(case: str, tmp_path: Path) -> None:
    spec, settings, how = CASES[case]
    straight = tmp_path / "straight"
    # In this process (the Python API): only the interruption and the resume need processes of their own.
    done = train(straight, spec, *settings, "--frames", BUDGET)
    assert done.code == 0, done.stderr
    home = tmp_path / "interrupted"
    interrupted(home, spec, settings, how, tmp_path)
    resumed = rlrun(home, "resume", "latest")
    assert resumed.code == 0, resumed.stderr
    with Registry.open(home, create=False) as registry:
        attempts = registry.get_run(registry.resolve("latest").id).attempts
    assert [a.approximate for a in attempts] == [False, False], attempts[-1].note
    assert_same_run(final_state(straight), final_state(home))


def test_a_user_network_run_is_enjoyed_and_keeps_its_network(tmp_path: Path) -> None:
    spec, settings, _ = CASES["ppo-user-network"]
    home = tmp_path / "runs"
    done = train(home, spec, *settings, "--frames", "1000")
    assert done.code == 0, done.stderr
    saved = _newest_snapshot(home)
    policy = saved.tensors["agent"]["model"]
    assert {"actor.module.goal.weight", "critic.module.body.2.weight"} <= set(policy), "not the user's modules"
    assert policy["actor.module.body.2.weight"].shape == (3, 16)  # kwargs.width=16, Discrete(3) actions

    played = rlrun(home, "enjoy", "latest", "--episodes", "2", "--json")
    assert played.code == 0, played.stderr
    assert len(played.json()["episodes"]) == 2

    refused = invoke(home, "resume", "latest", "--more", "1k", "--set", "agent.network.kwargs.width=8")
    assert refused.code == 2 and "agent.network.kwargs" in refused.stderr, refused.stderr


def _newest_snapshot(home: Path) -> Any:
    from rlrun import snapshot

    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    newest = max(detail.checkpoints, key=lambda c: c.frame)
    return snapshot.read(home / newest.path, newest.sha256)

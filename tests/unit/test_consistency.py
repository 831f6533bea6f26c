"""Past-future consistency, directly: which spec edits a run trained to frame F may take."""

from __future__ import annotations

from typing import Any

import pytest

from rlrun.spec import Spec, load_spec
from rlrun.spec.consistency import check_edit, fork_conflicts

LINEAR_LR = '{"kind": "linear", "start": 0.001, "end": 0.0, "to_frame": 100000}'


def spec(name: str = "ppo_cartpole", *edits: str) -> Spec:
    return load_spec(name, list(edits))


def changes(old: Spec, new: Spec, frame: int) -> dict[str, Any]:
    return {c.path: c for c in check_edit(old, new, frame)}


def test_no_edit_is_no_change() -> None:
    assert check_edit(spec(), spec(), 5000) == []


@pytest.mark.parametrize(
    "edit",
    [
        "env.num_envs=4",
        "agent.gamma=0.9",
        "agent.network.hidden=[32, 32]",
        "meta.seed=7",
        "agent.n_steps=64",
        "env.id=Acrobot-v1",
        "meta.arithmetic=1",
    ],
)
def test_structural_settings_are_refused_with_old_and_new(edit: str) -> None:
    path = edit.split("=", 1)[0]
    found = changes(spec(), spec("ppo_cartpole", edit), 5000)
    change = found[path] if path in found else next(c for p, c in found.items() if p.startswith(path))
    assert (change.kind, change.allowed) == ("structural", False)
    assert change.old != change.new
    assert "structural" in change.reason


@pytest.mark.parametrize(
    "edit",
    [
        "meta.eval_frequency=2000",
        "meta.log_frequency=100",
        "meta.checkpoint_frequency=3k",
        "meta.keep_checkpoints=1",
        "meta.num_eval_episodes=3",
        "name=renamed",
        "env.vectorization=async",
    ],
)
def test_record_only_settings_change_freely(edit: str) -> None:
    [change] = check_edit(spec(), spec("ppo_cartpole", edit), 50_000)
    assert (change.path, change.kind, change.allowed) == (edit.split("=")[0], "record-only", True)


def test_a_schedule_changed_only_after_the_frame_is_accepted() -> None:
    later = '{"kind": "piecewise", "points": [[0, 0.001], [40000, 0.001], [50000, 0.0005]]}'
    old = spec("ppo_cartpole", 'agent.optimizer.lr={"kind": "constant", "value": 0.001}')
    new = spec("ppo_cartpole", f"agent.optimizer.lr={later}")
    [change] = check_edit(old, new, 40_000)
    assert (change.path, change.kind, change.allowed) == ("agent.optimizer.lr", "schedule", True)
    assert change.reason == "equal at every frame up to 40,000"
    [refused] = check_edit(old, new, 45_000)
    assert not refused.allowed and "differs at frame 45,000" in refused.reason


def test_changing_the_initial_learning_rate_is_refused_at_frame_0() -> None:
    [change] = check_edit(spec(), spec("ppo_cartpole", "agent.optimizer.lr=0.002"), 1000)
    assert (change.kind, change.allowed) == ("schedule", False)
    assert change.reason == "differs at frame 0 (0.001 → 0.002), already trained"


def test_raising_max_frame_with_a_schedule_tied_to_it_is_refused() -> None:
    tied = '{"kind": "linear", "start": 0.001, "end": 0.0}'  # to_frame defaults to max_frame
    old = spec("ppo_cartpole", f"agent.optimizer.lr={tied}", "meta.max_frame=100k")
    new = spec("ppo_cartpole", f"agent.optimizer.lr={tied}", "meta.max_frame=200k")
    [change] = check_edit(old, new, 50_000)
    assert (change.path, change.kind, change.allowed) == ("meta.max_frame", "budget", False)
    assert "agent.optimizer.lr is tied to max_frame" in change.reason


def test_raising_max_frame_without_a_tied_schedule_is_accepted() -> None:
    old = spec("ppo_cartpole", f"agent.optimizer.lr={LINEAR_LR}", "agent.clip_range=0.2", "meta.max_frame=100k")
    new = spec("ppo_cartpole", f"agent.optimizer.lr={LINEAR_LR}", "agent.clip_range=0.2", "meta.max_frame=300k")
    [change] = check_edit(old, new, 50_000)
    assert (change.path, change.allowed) == ("meta.max_frame", True)
    assert change.reason == "no schedule depends on it before this frame"


def test_max_frame_below_the_trained_frames_is_refused() -> None:
    [change] = check_edit(spec(), spec("ppo_cartpole", "meta.max_frame=10k"), 20_000)
    assert not change.allowed and change.reason == "below the 20,000 frames already trained"


def test_exponential_schedules_agree_only_when_identical() -> None:
    decay = '{"kind": "exponential", "start": 0.001, "rate": 0.5, "every": 1000}'
    other = '{"kind": "exponential", "start": 0.001, "rate": 0.6, "every": 1000}'
    old, new = spec("ppo_cartpole", f"agent.optimizer.lr={decay}"), spec("ppo_cartpole", f"agent.optimizer.lr={other}")
    assert check_edit(old, old, 9000) == []
    [change] = check_edit(old, new, 9000)
    assert not change.allowed and "differs at frame" in change.reason


def test_a_fork_refuses_only_what_a_snapshot_cannot_hold() -> None:
    conflicts = fork_conflicts(spec(), spec("ppo_cartpole", "agent.gamma=0.5", "env.num_envs=2"))
    assert [c.path for c in conflicts] == ["env.num_envs"]
    assert conflicts[0].old == 8 and conflicts[0].new == 2


@pytest.mark.parametrize("edit", ["agent.dueling=true", 'agent.network.recurrent={"size": 32}'])
def test_a_fork_refuses_heads_and_memories_the_parents_weights_do_not_fit(edit: str) -> None:
    """A dueling network has one output more than a plain one, a memory has weights a plain network
    lacks: the parent's snapshot cannot be loaded into either."""
    algorithm = "dqn_cartpole" if "dueling" in edit else "ppo_cartpole"
    [conflict] = fork_conflicts(spec(algorithm), spec(algorithm, edit))
    assert conflict.path.startswith(edit.split("=", 1)[0].rsplit(".", 1)[0])


def test_the_device_may_change_on_resume_and_says_it_is_not_exact() -> None:
    [change] = check_edit(spec(), spec("ppo_cartpole", "meta.device=cuda"), 50_000)
    assert (change.path, change.kind, change.allowed) == ("meta.device", "placement", True)
    assert "not exact" in change.reason
    assert fork_conflicts(spec(), spec("ppo_cartpole", "meta.device=auto")) == []


@pytest.mark.parametrize(
    "edit",
    [
        "env.atari.clip_rewards=false",
        "env.atari.terminal_on_life_loss=false",
        "env.atari.noop_max=0",
        "env.atari.screen_size=64",
        "env.atari=null",
        "agent.network.kind=mlp",
    ],
)
def test_atari_preprocessing_and_the_network_kind_are_structural_even_for_a_fork(edit: str) -> None:
    pytest.importorskip("ale_py")
    path = edit.split("=", 1)[0]
    old, new = spec("dqn_pong"), spec("dqn_pong", edit)
    change = next(c for p, c in changes(old, new, 5000).items() if p.startswith(path))
    assert (change.kind, change.allowed) == ("structural", False)
    assert any(c.path.startswith(path) for c in fork_conflicts(old, new))

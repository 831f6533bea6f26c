"""Recurrent DQN in the R2D2 manner (issue 40) on CartPole with its velocities hidden: SIGTERMed
mid-episode or kill -9'd after a snapshot and resumed, it ends bit for bit where the uninterrupted
run ends, recorded exact: every env copy's hidden state is in the snapshot, and so is the replay
memory with the state stored at each row (it wraps within the run). One variant is an LSTM with
prioritised replay, dueling heads, double DQN and n-step returns on; the other a GRU, uniform,
with hard target copies. The
resumed run's checkpoint plays in `rlrun enjoy` and `load_policy` (its state passed along) and
replays its own evaluation, and so does its ONNX export (the state a second input); a resume that
removes the memory is refused.
The pieces by hand: tests/unit/test_recurrent_dqn_units.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import invoke
from same_run import (
    assert_plays_with_its_memory,
    assert_same_run,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference_state,
    resume_ok,
)

from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # real trainings, some in processes of their own

SPEC = "dqn_lstm_cartpole_novel"
FRAMES = 3000
SMALL = [
    "agent.sequence_length=4",
    "agent.burn_in=2",
    "agent.batch_size=8",
    "agent.network.hidden=[16]",
    "agent.memory.capacity=1500",
    "agent.learning_starts=500",
]
VARIANTS = {  # the memory, and what else is on (the built-in's n_step 3, double DQN and polyak targets)
    "lstm-family": [
        'agent.network.recurrent={"cell": "lstm", "size": 16}',
        "agent.dueling=true",
        'agent.memory.prioritized={"alpha": 0.6, "beta": 0.4}',
        "agent.value_rescaling=true",  # R2D2's h(x) in the target (issue 55)
        "agent.sequence_overlap=3",  # stored sequences of 6 rows every 3 steps, drawn by priority
    ],
    "gru": [
        'agent.network.recurrent={"cell": "gru", "size": 16}',
        "agent.target_update=hard",
        "agent.target_update_frequency=500",
        "agent.sequence_overlap=2",  # stored sequences every 4 steps, drawn uniformly
    ],
}


def settings(variant: str) -> list[str]:
    return ["--frames", str(FRAMES), *(arg for edit in [*SMALL, *VARIANTS[variant]] for arg in ("--set", edit))]


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def straight(variant: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference_state(tmp_path_factory, SPEC, *settings(variant))


@pytest.fixture(scope="module")
def resumed(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run SIGTERMed at frame 2345, mid-episode, then resumed to the end."""
    home = tmp_path_factory.mktemp(f"preempted-{variant}") / "runs"
    preempted_mid_episode(home, SPEC, *settings(variant))
    resume_ok(home)
    return home


def _recorded_exact(home: Path) -> None:
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert [(a.kind, a.approximate) for a in detail.attempts] == [("train", False), ("resume", False)]


def test_sigterm_mid_episode_then_resume_is_the_same_run(straight: dict[str, Any], resumed: Path) -> None:
    final = final_state(resumed)
    assert_same_run(straight, final)
    _recorded_exact(resumed)
    agent = final["sessions"][0]["saved"].tensors["agent"]
    assert agent["hidden"].abs().max() > 0 and agent["memory"]["rows_end"] > 1500, "no memory, or no wrap"


@pytest.mark.parametrize("variant", ["lstm-family"], indirect=True)
def test_kill_9_after_a_snapshot_then_resume_is_the_same_run(
    straight: dict[str, Any], variant: str, tmp_path: Path
) -> None:
    home = tmp_path / "runs"
    killed_after_a_snapshot(home, SPEC, *settings(variant), frame=2000)
    resume_ok(home, "latest")
    _recorded_exact(home)
    assert_same_run(straight, final_state(home))


@pytest.mark.parametrize("variant", ["gru"], indirect=True)
def test_a_resume_may_not_remove_the_memory(resumed: Path, variant: str) -> None:
    refused = invoke(
        resumed, "resume", "latest", "--frames", str(FRAMES + 1000), "--set", "agent.network.recurrent=null"
    )
    assert refused.code == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: edit refused: agent.network.recurrent")
    with Registry.open(resumed, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert len(detail.attempts) == 2 and max(c.frame for c in detail.checkpoints) == FRAMES  # nothing written


def test_the_onnx_file_carries_the_memory_and_plays_the_checkpoints_returns(
    resumed: Path, variant: str, tmp_path: Path
) -> None:
    """`rlrun export --onnx` of a recurrent DQN (dueling heads in one variant): its Q-network's
    state in (`state`) and out (`next_state`); `enjoy --policy` carries it through each episode and
    scores what the checkpoint scores."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import onnx

    out = tmp_path / "q.onnx"
    done = invoke(resumed, "export", "latest", "--onnx", str(out))
    assert done.code == 0, done.stderr
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["observation", "state"]
    assert [o.name for o in model.graph.output] == ["action", "q_values", "next_state"]
    metadata = {p.key: p.value for p in model.metadata_props}
    assert metadata["rlrun.state_shape"] == ('[2, "batch", 16]' if variant == "lstm-family" else '[1, "batch", 16]')
    played = [
        invoke(resumed, "enjoy", "latest", "--episodes", "3", "--json", *policy).json()["episodes"]
        for policy in ([], ["--policy", str(out)])
    ]
    assert [(e["return"], e["length"]) for e in played[1]] == [(e["return"], e["length"]) for e in played[0]]


@pytest.mark.parametrize("variant", ["lstm-family"], indirect=True)
def test_the_checkpoint_plays_with_its_memory(resumed: Path, variant: str) -> None:
    """The checkpoint plays with its memory (`same_run.assert_plays_with_its_memory`)."""
    assert_plays_with_its_memory(resumed, FRAMES)


ATARI = [  # R2D2 on Pong, tiny: one frame a step (the memory in place of the stack), short episodes
    "--frames",
    "1200",
    *(
        arg
        for edit in [
            "env.frame_stack=1",
            "env.max_episode_steps=400",
            'agent.network.recurrent={"cell": "lstm", "size": 16}',
            "agent.network.hidden=[32]",
            "agent.sequence_length=4",
            "agent.burn_in=2",
            "agent.sequence_overlap=3",
            "agent.batch_size=4",
            "agent.value_rescaling=true",
            "agent.learning_starts=200",
            "agent.memory.capacity=1000",
        ]
        for arg in ("--set", edit)
    ),
]


def test_r2d2_on_atari_kill_9_after_a_snapshot_then_resume_is_the_same_run(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The nature_cnn torso before the cell (issue 55), with the rescaled targets and overlapping
    sequences: kill -9'd after its snapshot at 1,000 frames and resumed, it ends where the
    uninterrupted run ends, the emulator captured."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    straight = reference_state(tmp_path_factory, "dqn_pong", *ATARI)
    home = tmp_path / "runs"
    killed_after_a_snapshot(home, "dqn_pong", *ATARI, frame=1000)
    resume_ok(home, "latest")
    _recorded_exact(home)
    assert_same_run(straight, final_state(home))
    assert final_state(home)["sessions"][0]["saved"].tensors["agent"]["hidden"].abs().max() > 0

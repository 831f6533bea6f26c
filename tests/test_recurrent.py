"""Agents with a memory (issue 40): recurrent PPO (an LSTM) and A2C (a GRU) on CartPole with its
velocities hidden (`rlrun.envs.pomdp:HideVelocities`), SIGTERMed mid-episode or kill -9'd after a
snapshot and resumed, end bit for bit where the uninterrupted run ends, recorded exact: every env
copy's hidden state is in the snapshot. The resumed run's checkpoint plays in `rlrun enjoy` and
`load_policy` (its state passed along), its evaluation replays from the checkpoint alone, and a
resume that would add, remove or resize the memory is refused; its ONNX export carries the state.
With sequence chunks (`agent.sequence_length`, issue 55) learning re-reads each chunk from the memory
stored at its start, and a kill -9'd chunked run resumes bit for bit too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
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

from rlrun.algorithms import ppo
from rlrun.algorithms.base import Step
from rlrun.clock import Clock
from rlrun.registry import Registry
from rlrun.spec.agents.ppo import Config

pytestmark = pytest.mark.slow  # real trainings, some in processes of their own

FRAMES = 3000
HIDE = 'env.wrappers=[{"class": "rlrun.envs.pomdp:HideVelocities"}]'
VARIANTS = {  # built-in spec, its memory; PPO with its fast settings: minibatches of one env copy's sequence
    "ppo-lstm": ("ppo_cartpole", '{"cell": "lstm", "size": 16}'),
    "a2c-gru": ("a2c_cartpole", '{"cell": "gru", "size": 16}'),
}


def settings(variant: str) -> tuple[str, list[str]]:
    spec, memory = VARIANTS[variant]
    return spec, ["--frames", str(FRAMES), "--set", HIDE, "--set", f"agent.network.recurrent={memory}"]


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def straight(variant: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    spec, args = settings(variant)
    return reference_state(tmp_path_factory, spec, *args)


@pytest.fixture(scope="module")
def resumed(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run SIGTERMed at frame 2345, mid-episode, then resumed to the end."""
    spec, args = settings(variant)
    home = tmp_path_factory.mktemp(f"preempted-{variant}") / "runs"
    preempted_mid_episode(home, spec, *args)
    resume_ok(home)
    return home


def test_sigterm_mid_episode_then_resume_is_the_same_run(straight: dict[str, Any], resumed: Path) -> None:
    assert_same_run(straight, final_state(resumed))
    with Registry.open(resumed, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert [t.approximate for t in detail.attempts] == [False, False]  # recorded exact


@pytest.mark.parametrize("variant", ["ppo-lstm"], indirect=True)  # one is enough: the SIGTERM test holds both
def test_kill_9_after_a_snapshot_then_resume_is_the_same_run(
    straight: dict[str, Any], variant: str, tmp_path: Path
) -> None:
    spec, args = settings(variant)
    home = tmp_path / "runs"
    killed_after_a_snapshot(home, spec, *args, frame=2000)
    resume_ok(home, "latest")
    assert_same_run(straight, final_state(home))


@pytest.mark.parametrize(
    ("edit", "setting"),
    [
        ("agent.network.recurrent.size=32", "agent.network.recurrent.size"),
        ("agent.network.recurrent=null", "agent.network.recurrent"),
    ],
)
def test_a_resume_may_not_add_remove_or_resize_the_memory(resumed: Path, variant: str, edit: str, setting: str) -> None:
    """Refused as every structural edit is (tests/test_resume_edits.py): the table of what would
    change, then one line, exit 2, nothing written."""
    refused = invoke(resumed, "resume", "latest", "--frames", str(FRAMES + 1000), "--set", edit)
    assert refused.code == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: edit refused: {setting}")
    with Registry.open(resumed, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert len(detail.attempts) == 2 and max(c.frame for c in detail.checkpoints) == FRAMES  # nothing written


@pytest.mark.parametrize("variant", ["ppo-lstm"], indirect=True)  # acting from a memory: the same code for both
def test_the_checkpoint_plays_with_its_memory(resumed: Path, variant: str) -> None:
    """The checkpoint plays with its memory (`same_run.assert_plays_with_its_memory`)."""
    assert_plays_with_its_memory(resumed, FRAMES)


@pytest.mark.parametrize("variant", list(VARIANTS), indirect=True)
def test_the_onnx_file_carries_the_memory_and_plays_the_checkpoints_returns(
    resumed: Path, variant: str, tmp_path: Path
) -> None:
    """`rlrun export --onnx` of a policy with a memory: its actor's state in (`state`) and out
    (`next_state`); `enjoy --policy` carries it through each episode and scores what the checkpoint
    scores."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import onnx

    out = tmp_path / "p.onnx"
    done = invoke(resumed, "export", "latest", "--onnx", str(out))
    assert done.code == 0, done.stderr
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["observation", "state"]
    assert model.graph.output[-1].name == "next_state"
    metadata = {p.key: p.value for p in model.metadata_props}
    assert metadata["rlrun.recurrent"] == "true" and metadata["rlrun.state_shape"] == (
        '[2, "batch", 16]' if variant == "ppo-lstm" else '[1, "batch", 16]'
    )
    played = [
        invoke(resumed, "enjoy", "latest", "--episodes", "3", "--json", *policy).json()["episodes"]
        for policy in ([], ["--policy", str(out)])
    ]
    assert [(e["return"], e["length"]) for e in played[1]] == [(e["return"], e["length"]) for e in played[0]]


# The zoo's PendulumNoVel entry's shape at a tiny size: 64 steps a rollout (FAST's) cut into chunks
# of 24 (two whole ones and a padded one of 16 steps), gSDE's matrices drawn every 8 steps (the
# snapshot at frame 2000, step 52 of a rollout, holds the one drawn at step 48)
CHUNKED_GSDE = [
    "--frames",
    str(FRAMES),
    "--set",
    HIDE,
    "--set",
    'agent.network.recurrent={"cell": "lstm", "size": 16}',
    "--set",
    "agent.sequence_length=24",
    "--set",
    "agent.batch_size=48",
    "--set",
    'agent.sde={"sample_freq": 8}',
]


def test_chunked_gsde_kill_9_after_a_snapshot_then_resume_is_the_same_run(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Killed mid-rollout: some chunks' memories stored and the rest to come, an exploration
    matrix held from a draw before the snapshot (episodes of 200 steps start inside chunks)."""
    straight = reference_state(tmp_path_factory, "ppo_pendulum", *CHUNKED_GSDE)
    home = tmp_path / "runs"
    killed_after_a_snapshot(home, "ppo_pendulum", *CHUNKED_GSDE, frame=2000)
    resume_ok(home, "latest")
    assert_same_run(straight, final_state(home))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])  # episodes start inside chunks; a Gaussian
def test_each_chunk_rereads_what_acting_read(env_id: str) -> None:
    """Before any gradient step, every minibatch of chunks (a padded one among them) evaluates the
    collected actions as acting did: the same log-probabilities and values, each real step once per
    epoch (float tolerance: acting is NumPy's arithmetic, learning torch's)."""
    config = Config.model_validate(
        {
            "n_steps": 50,
            "sequence_length": 16,
            "batch_size": 32,
            "n_epochs": 2,
            "network": {"hidden": [8], "recurrent": {"cell": "lstm", "size": 8}},
        }
    )
    envs = gym.make_vec(env_id, num_envs=3)
    space = envs.single_observation_space, envs.single_action_space
    agent = ppo.Agent(config, *space, seed=0, num_envs=3, max_frame=1000, device=torch.device("cpu"))
    batches: list[dict[str, torch.Tensor]] = []
    agent.learn = lambda batch, clock: batches.append(batch) or {}  # type: ignore[method-assign]
    obs, _ = envs.reset(seed=0)
    for _ in range(config.n_steps):
        action = agent.act(obs)
        after, reward, terminated, truncated, _ = envs.step(action)
        agent.observe(Step(obs, action, reward, terminated, truncated, after))
        obs = after
    agent.update(Clock())
    read = 0
    with torch.no_grad():
        for part, _ in ppo.Agent._minibatches(agent, batches[0]):
            log_probs, _, values = agent.evaluate(part, entropy=False)
            np.testing.assert_allclose(log_probs.numpy(), part["log_probs"].numpy(), atol=1e-5)
            np.testing.assert_allclose(values.numpy(), part["values"].numpy(), atol=1e-5)
            read += len(log_probs)
    assert read == config.n_epochs * config.n_steps * 3
    assert env_id != "CartPole-v1" or batches[0]["starts"].sum() > 0  # episodes did start inside chunks

"""gSDE (`agent.sde`, issue 55): rlrun's `StateDependentNoise` computes what Stable-Baselines3's
`StateDependentNoiseDistribution` computes given the same weights, latent features and exploration
matrices (its std, the sampled actions, their log-probabilities and entropies; SAC's squashed ones
too), and a PPO agent draws its matrices at each rollout's start and every `sample_freq` steps,
holding them between. SAC with gSDE kill -9'd mid-round resumes bit for bit; PPO's kill -9 → bit-exact
resume is tests/test_recurrent.py's chunked gSDE test."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from same_run import assert_same_run, final_state, killed_after_a_snapshot, reference_state, resume_ok

import rlrun
from rlrun.algorithms import ppo, sac
from rlrun.algorithms.base import Step
from rlrun.algorithms.distributions import StateDependentNoise
from rlrun.clock import Clock
from rlrun.errors import BadInput
from rlrun.spec.agents.onpolicy import SdeSpec
from rlrun.spec.agents.ppo import Config

LATENT, ACTIONS, BATCH = 6, 2, 5


@pytest.mark.parametrize(("full_std", "use_expln"), [(True, False), (False, False), (True, True), (False, True)])
def test_the_noise_is_sb3s(full_std: bool, use_expln: bool) -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.distributions import StateDependentNoiseDistribution

    ours = StateDependentNoise(LATENT, ACTIONS, SdeSpec(full_std=full_std, use_expln=use_expln), log_std_init=0.0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # log stds on both sides of 0, where expln switches
        ours.log_std.copy_(torch.randn(ours.log_std.shape, generator=generator))
    theirs = StateDependentNoiseDistribution(ACTIONS, full_std=full_std, use_expln=use_expln)
    theirs.proba_distribution_net(LATENT)
    log_std = ours.log_std.detach()
    torch.testing.assert_close(ours.std().detach(), theirs.get_std(log_std))

    latent = torch.randn((BATCH, LATENT), generator=generator)
    mean = torch.randn((BATCH, ACTIONS), generator=generator)
    matrices = ours.draw_matrices(BATCH, generator)
    theirs.sample_weights(log_std, batch_size=BATCH)
    theirs.exploration_matrices = torch.from_numpy(matrices)
    theirs.proba_distribution(mean, log_std, latent)
    actions, log_probs = ours.sample(latent.numpy(), mean.numpy(), matrices)
    np.testing.assert_allclose(actions, theirs.sample().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_probs, theirs.log_prob(torch.from_numpy(actions)).numpy(), rtol=1e-5, atol=1e-5)

    evaluated, entropies = ours.evaluate(latent, mean, torch.from_numpy(actions), entropy=True)
    torch.testing.assert_close(evaluated.detach(), theirs.log_prob(torch.from_numpy(actions)))
    assert entropies is not None
    torch.testing.assert_close(entropies.detach(), theirs.entropy())


def test_the_matrices_are_drawn_at_a_rollouts_start_and_every_sample_freq_steps() -> None:
    config = Config.model_validate(
        {"n_steps": 12, "batch_size": 12, "n_epochs": 1, "network": {"hidden": [8]}, "sde": {"sample_freq": 5}}
    )
    envs = gym.make_vec("Pendulum-v1", num_envs=2)
    space = envs.single_observation_space, envs.single_action_space
    agent = ppo.Agent(config, *space, seed=0, num_envs=2, max_frame=1000, device=torch.device("cpu"))
    obs, _ = envs.reset(seed=0)
    held, clock = [], Clock()
    for _ in range(2 * config.n_steps):
        action = agent.act(obs)
        assert agent.noise is not None
        held.append(agent.noise.copy())
        after, reward, terminated, truncated, _ = envs.step(action)
        agent.observe(Step(obs, action, reward, terminated, truncated, after))
        agent.update(clock)
        obs = after
    drawn = [t for t in range(len(held)) if t == 0 or not np.array_equal(held[t], held[t - 1])]
    assert drawn == [0, 5, 10, 12, 17, 22]  # each rollout of 12 steps: its start, then every 5
    assert not np.array_equal(held[0][0], held[0][1])  # a matrix per env copy


@pytest.mark.parametrize("learn_features", [False, True], ids=["revisions 1-3", "revision 4"])
def test_sacs_squashed_noise_is_sb3s(learn_features: bool) -> None:
    """SAC's actor with gSDE (`sac.SdeActor`): its squashed actions and their log-probabilities,
    change of variables included, are SB3's (`squash_output=True`) for the same matrix, and so are
    their gradients: into the hidden features too where the noise learns them (arithmetic revision
    4, SB3's `learn_features=True` for SAC), into the mean and log-std alone before it."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.distributions import StateDependentNoiseDistribution

    from rlrun.spec import NetworkSpec

    actor = sac.SdeActor(
        3, ACTIONS, NetworkSpec(hidden=[LATENT]), SdeSpec(), log_std_init=-1.0, learn_features=learn_features
    )
    obs = torch.randn((BATCH, 3), generator=torch.Generator().manual_seed(1))
    parameters = list(actor.parameters())
    actions, log_probs = actor(obs, torch.Generator().manual_seed(2))
    ours = torch.autograd.grad(log_probs.sum() + actions.sum(), parameters)
    matrix = actor.noise.std() * torch.randn((LATENT, ACTIONS), generator=torch.Generator().manual_seed(2))
    latent, mean = actor.latent_and_mean(obs)
    theirs = StateDependentNoiseDistribution(ACTIONS, squash_output=True, learn_features=learn_features)
    theirs.proba_distribution_net(LATENT)
    theirs.sample_weights(actor.noise.log_std)
    theirs.exploration_mat = matrix
    theirs.proba_distribution(mean, actor.noise.log_std, latent)
    their_actions = theirs.sample()
    their_log_probs = theirs.log_prob(their_actions)
    torch.testing.assert_close(actions, their_actions)
    torch.testing.assert_close(log_probs, their_log_probs, rtol=1e-4, atol=1e-4)  # SB3 inverts the tanh
    sb3s = torch.autograd.grad(their_log_probs.sum() + their_actions.sum(), parameters)
    for mine, theirs_of_it in zip(ours, sb3s, strict=True):
        torch.testing.assert_close(mine, theirs_of_it, rtol=1e-3, atol=1e-4)


# Rounds of 12 frames: the snapshot at frame 2000 falls at step 8 of one, its matrix drawn at step 6
SAC_GSDE = ["--frames", "2400", "--set", "agent.train_frequency=12", "--set", 'agent.sde={"sample_freq": 3}']


def test_sac_gsde_kill_9_after_a_snapshot_then_resume_is_the_same_run(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    straight = reference_state(tmp_path_factory, "sac_pendulum", *SAC_GSDE)
    home = tmp_path / "runs"
    killed_after_a_snapshot(home, "sac_pendulum", *SAC_GSDE, frame=2000)
    resume_ok(home, "latest")
    assert_same_run(straight, final_state(home))


@pytest.mark.parametrize(
    ("edits", "said"),
    [
        (
            ["agent.sequence_length=24"],
            "agent.sequence_length = 24: cuts sequences for a memory, and the network has none;",
        ),
        (
            ['agent.network.recurrent={"cell": "lstm", "size": 16}', "agent.sequence_length=24", "agent.batch_size=60"],
            "agent.batch_size = 60: is not a multiple of agent.sequence_length (24); each minibatch is whole chunks;"
            " use batch_size 48 (2 chunks per minibatch)",
        ),
        (['agent.sde={"sample_freq": 0}'], "agent.sde.sample_freq = 0: must be a positive number of steps, or -1"),
    ],
)
def test_chunks_and_gsde_refuse_what_they_cannot_do_in_one_line(edits: list[str], said: str) -> None:
    with pytest.raises(BadInput) as refused:
        rlrun.load_spec("ppo_pendulum", edits)
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value), str(refused.value)

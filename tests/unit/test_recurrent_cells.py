"""PPO's and A2C's memory (`agent.network.recurrent`, rlrun/algorithms/recurrent.py), in process: the
state is in `state_dict` and comes back from it, an episode's end clears it, learning re-reads a
rollout as acting read it, no kernel takes a model with a memory, and the spec holds minibatches to
whole sequences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlrun
from rlrun.algorithms import build_agent
from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import Step
from rlrun.envs import make_env
from rlrun.errors import BadInput

HIDE = 'env.wrappers=[{"class": "rlrun.envs.pomdp:HideVelocities"}]'


def agent_and_env(algorithm: str, cell: str, *edits: str) -> tuple[Any, Any, Any]:
    spec = rlrun.load_spec(
        f"{algorithm}_cartpole",
        [
            HIDE,
            f'agent.network.recurrent={{"cell": "{cell}", "size": 8}}',
            "env.num_envs=3",
            "agent.n_steps=16",
            *edits,
        ],
    )
    env = make_env(spec.env)
    agent = build_agent(spec, env.observation_space, env.action_space, seed=3)
    return spec, agent, env


def collect(agent: Any, env: Any, steps: int, seed: int = 0) -> np.ndarray:
    """`steps` training steps of 3 env copies (each its own copy of `env`, reset on its own)."""
    rng = np.random.default_rng(seed)
    obs = np.stack([env.reset(seed=seed + i)[0] for i in range(3)]).astype(np.float32)
    for _ in range(steps):
        actions = agent.act(obs)
        next_obs = obs + rng.normal(0, 0.1, obs.shape).astype(np.float32)
        terminated = rng.random(3) < 0.15
        truncated = ~terminated & (rng.random(3) < 0.05)
        agent.observe(Step(obs, actions, np.ones(3, np.float32), terminated, truncated, next_obs))
        obs = np.where((terminated | truncated)[:, None], rng.normal(0, 0.05, obs.shape), next_obs).astype(np.float32)
    return obs


USER_TORSO = "agent.network.kind=usernets.my_nets:small_mlp"


@pytest.mark.parametrize(
    ("algorithm", "cell", "edits"), [("ppo", "lstm", []), ("a2c", "gru", []), ("ppo", "gru", [USER_TORSO])]
)
def test_learning_rereads_the_rollout_as_acting_read_it(algorithm: str, cell: str, edits: list[str]) -> None:
    """The rollout's log-probabilities and values, taken while acting step by step in NumPy, are
    what the torch cells give re-reading each env copy's sequence from its stored start memory,
    reset where episodes started (wrong resets would be far off, not a rounding away). A user's
    network is the torso: called for `size` outputs, which the cell reads."""
    _, agent, env = agent_and_env(algorithm, cell, *edits)
    if edits:
        from rlrun.algorithms.user_network import UserNetwork

        torso = agent.model.recurrent.actor_torso
        assert isinstance(torso, UserNetwork) and torso(torch.zeros(2, 4)).shape == (2, 8)
    collect(agent, env, 5)  # the rollout starts mid-episode, from a memory that is not zeros
    agent.rollout.filled = 0
    collect(agent, env, 16, seed=1)
    assert agent.rollout.full and np.abs(agent.rollout_hidden).max() > 0 and agent.rollout.done.any()
    rollout = agent.rollout
    obs = torch.from_numpy(rollout.obs).flatten(0, 1)
    with torch.no_grad():
        log_probs, _, values = agent.model.evaluate_sequences(
            obs,
            torch.from_numpy(rollout.actions).flatten(0, 1),
            torch.from_numpy(agent.rollout_hidden),
            torch.from_numpy(rollout.starts()),
            entropy=False,
        )
    np.testing.assert_allclose(log_probs.numpy(), rollout.log_probs.ravel(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values.numpy(), rollout.values.ravel(), rtol=1e-5, atol=1e-5)


def test_the_memory_is_state_and_an_episodes_end_clears_it() -> None:
    spec, agent, env = agent_and_env("ppo", "lstm")
    obs = collect(agent, env, 7)
    state = agent.state_dict()
    assert state["hidden"].shape == (4, 3, 8) and state["hidden"].abs().max() > 0  # actor's h, c; critic's h, c
    again: Any = build_agent(spec, env.observation_space, env.action_space, seed=4)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.hidden, agent.hidden)
    np.testing.assert_array_equal(again.rollout_hidden, agent.rollout_hidden)
    np.testing.assert_array_equal(again.act(obs), agent.act(obs))  # the same memory and generator: the same draw

    # an episode that ends clears its env copy's memory: the next step acts from a fresh one
    step = Step(obs, agent.act(obs), np.ones(3, np.float32), np.array([False, True, False]), np.zeros(3, bool), obs)
    agent.observe(step)
    assert not agent.hidden[:, 1].any() and agent.hidden[:, 0].any()
    out, _, values = agent.model.remember(obs, agent.hidden)
    fresh, _, fresh_values = agent.model.remember(obs[1:2], agent.model.recurrent.initial(1))
    np.testing.assert_allclose(out[1:2], fresh, rtol=1e-6)
    np.testing.assert_allclose(values[1:2], fresh_values, rtol=1e-6)

    # playing from a state of the caller's (the actor's cell alone) never touches training's
    # memory, nor the state passed in; its greedy actions read what training's actor part reads
    before, memory = agent.hidden.copy(), agent.actor.initial_state(3)
    assert memory.shape == (2, 3, 8) and agent.actor.state_shape == (2, 8)
    actions, after = agent.actor.step(obs, memory, deterministic=True)
    assert not memory.any() and after.shape == memory.shape and actions.shape == (3,)
    np.testing.assert_array_equal(agent.hidden, before)
    trained, _, _ = agent.model.remember(obs, np.concatenate([memory, memory]))
    np.testing.assert_array_equal(actions, trained.argmax(axis=-1))
    with pytest.raises(ValueError, match="generator"):
        agent.actor.step(obs, memory)

    agent.restart_episodes()  # a resume that could not restore the env mid-episode
    assert not agent.hidden.any()


def test_no_kernel_learns_through_a_memory() -> None:
    _, agent, _ = agent_and_env("ppo", "lstm")
    assert kernel_for.find_actor_critic(agent.model, "ppo", "auto") is None
    assert agent.actor.state_shape is not None
    _, plain, _ = agent_and_env("ppo", "lstm", "agent.network.recurrent=null")
    assert plain.actor.state_shape is None and plain.actor.initial_state(2) is None
    assert "hidden" not in plain.state_dict()


def test_minibatches_are_whole_sequences_and_only_ppo_and_a2c_remember() -> None:
    with pytest.raises(BadInput) as refused:
        rlrun.load_spec("ppo_cartpole", ['agent.network.recurrent={"cell": "gru", "size": 16}', "agent.batch_size=48"])
    assert str(refused.value).startswith("agent.batch_size = 48: is not a multiple of agent.n_steps (32);")
    assert "use batch_size 32" in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(BadInput) as refused:
        rlrun.load_spec("reinforce_cartpole", ['agent.network.recurrent={"cell": "lstm", "size": 16}'])
    assert str(refused.value).startswith("agent.network.recurrent = {") and "takes no memory" in str(refused.value)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_acting_in_numpy_steps_the_cell_as_torch_does(cell: str) -> None:
    """`Cell.step`'s NumPy gates (acting on the CPU) against torch's own layer (acting on a GPU)."""
    from rlrun.algorithms.recurrent import Cell
    from rlrun.spec import RecurrentSpec

    layer = Cell(5, RecurrentSpec(cell=cell, size=6))  # type: ignore[arg-type]
    with torch.no_grad():
        for param in layer.parameters():  # biases too: the initialisation zeroes them
            param.uniform_(-0.5, 0.5)
    rng = np.random.default_rng(0)
    x, state = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(layer.parts, 3, 6)).astype(np.float32)
    np.testing.assert_allclose(layer.step(x, state), layer._step_torch(x, state), rtol=1e-5, atol=1e-6)

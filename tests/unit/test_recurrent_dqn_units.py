"""Recurrent DQN's pieces (R2D2's, issue 40), by hand: each replay row keeps the state the agent
acted from; a replayed sequence, unrolled from its first row's stored state and reset where an
episode starts within it, gives the Q-values acting computed; the burn-in only warms the state up;
n-step targets within a sequence stop at an episode's end; the memory is in the agent's state and
its snapshot's logs. Whole trainings resumed bit for bit: tests/test_recurrent_dqn.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlrun
from rlrun.algorithms import build_agent
from rlrun.algorithms.base import Step
from rlrun.algorithms.dqn import Autograd, RecurrentQ
from rlrun.algorithms.kernels.q_network import QKernel
from rlrun.algorithms.q_learning import rescale, td_target, unrescale
from rlrun.algorithms.replay import ReplayMemory
from rlrun.envs import make_env
from rlrun.spec import MemorySpec

SPEC = "dqn_lstm_cartpole_novel"


def agent_and_env(cell: str = "lstm", *edits: str) -> tuple[Any, Any, Any]:
    spec = rlrun.load_spec(
        SPEC,
        [
            f'agent.network.recurrent={{"cell": "{cell}", "size": 8}}',
            "env.num_envs=3",
            "agent.network.hidden=[16]",
            *edits,
        ],
    )
    env = make_env(spec.env)
    agent = build_agent(spec, env.observation_space, env.action_space, seed=3)
    return spec, agent, env


def collect(agent: Any, env: Any, steps: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """`steps` training steps of 3 env copies with made-up dynamics (episodes ending by termination
    and by truncation); each step's observations, the memory acted from, and its done flags."""
    rng = np.random.default_rng(0)
    obs = np.stack([env.reset(seed=i)[0] for i in range(3)]).astype(np.float32)
    seen, states, dones = [], [], []
    for _ in range(steps):
        seen.append(obs)
        states.append(agent.hidden.copy())
        actions = agent.act(obs)
        next_obs = obs + rng.normal(0, 0.1, obs.shape).astype(np.float32)
        terminated = rng.random(3) < 0.15
        truncated = ~terminated & (rng.random(3) < 0.05)
        agent.observe(Step(obs, actions, np.ones(3, np.float32), terminated, truncated, next_obs))
        dones.append(terminated | truncated)
        obs = np.where((terminated | truncated)[:, None], rng.normal(0, 0.05, obs.shape), next_obs).astype(np.float32)
    return seen, states, dones


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_each_row_keeps_the_state_acted_from_and_an_episodes_end_clears_it(cell: str) -> None:
    _, agent, env = agent_and_env(cell)
    _, states, dones = collect(agent, env, 30)
    stored = agent.memory.states
    for k, state in enumerate(states):
        np.testing.assert_array_equal(stored[3 * k : 3 * k + 3], np.swapaxes(state, 0, 1))
        if k:
            assert not state[:, dones[k - 1]].any()  # a copy whose episode ended acts from zeros
    assert np.abs(states[-1]).max() > 0 and any(d.any() for d in dones)


def test_a_replayed_sequence_gives_the_q_values_acting_computed() -> None:
    """Unrolled in torch from its first row's stored state, reset where an episode starts within
    it, a sequence's Q-values are acting's (NumPy's, step by step), a rounding away; the burn-in
    only moves the state: the steps after it are the same. A wrong state or reset would be far off."""
    _, agent, env = agent_and_env()
    seen, states, dones = collect(agent, env, 40)
    length, first_step, copy = 20, 7, 1
    batch = agent.memory.sequences(np.array([3 * first_step + copy]), length)
    starts = batch.starts[:length, 0].numpy()
    assert starts.any() and batch.valid.all()
    assert starts[1:].tolist() == [float(dones[first_step + k][copy]) for k in range(length - 1)]
    obs = batch.obs.float()
    with torch.no_grad():
        q = agent.q.unroll(obs, batch.states, batch.starts)
        warmed = agent.q.unroll(obs, batch.states, batch.starts, burn_in=5)
    acted = np.concatenate(
        [
            agent.q.step(seen[first_step + k][copy : copy + 1], states[first_step + k][:, copy : copy + 1])[0]
            for k in range(length)
        ]
    )
    np.testing.assert_allclose(q[:length, 0].numpy(), acted, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(warmed[:, 0].numpy(), q[5:, 0].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(
        obs[:length, 0].numpy(), np.stack([seen[first_step + k][copy] for k in range(length)])
    )


def test_a_sequence_stops_at_its_copys_newest_row() -> None:
    _, agent, env = agent_and_env()
    collect(agent, env, 10)
    batch = agent.memory.sequences(np.array([3 * 6 + 2]), 8)  # rows of steps 6..9 exist, not 10..13
    assert batch.valid[:, 0].tolist() == [True] * 4 + [False] * 4
    assert not batch.starts[5:, 0].any()


def test_n_step_targets_within_a_sequence_stop_at_an_episodes_end() -> None:
    """Rewards 1, γ = 0.5, three steps: a window sums what its episode has left of them, and
    bootstraps where it stops (nothing after a termination; past a truncation the sequence runs
    on into, the step is not learnt from). The memory makes the windows, by the transitions' rule."""
    memory = ReplayMemory(
        MemorySpec(capacity=16),
        (1,),
        np.dtype(np.float32),
        (),
        np.dtype(np.int64),
        n_step=3,
        gamma=0.5,
        state_shape=(1, 2),
    )
    # episodes: rows 0-2 (terminated), rows 3-4 (truncated), rows 5-6
    for obs, terminated, truncated in [(0, 0, 0), (1, 0, 0), (2, 1, 0), (10, 0, 0), (11, 0, 1), (20, 0, 0), (21, 0, 0)]:
        memory.add(
            np.array([[obs]], np.float32),
            np.zeros(1, np.int64),
            np.ones(1, np.float32),
            np.array([[obs + 1]], np.float32),
            np.array([bool(terminated)]),
            np.array([bool(truncated)]),
            np.zeros((1, 1, 2), np.float32),
        )
    batch = memory.sequences(np.array([0]), 6)
    targets = td_target(batch.rewards, batch.discounts, batch.terminated, torch.full((6, 1, 1), 10.0))
    assert targets[:, 0].tolist() == [1.75, 1.5, 1.0, 1.5 + 0.25 * 10, 1.0 + 0.5 * 10, 1.0 + 0.5 * 10]
    assert batch.learnt[:, 0].tolist() == [True, True, True, False, False, True]
    assert batch.last[:, 0].tolist() == [2, 2, 2, 4, 4, 5]


def test_the_memory_is_state_and_no_kernel_learns_it() -> None:
    spec, agent, env = agent_and_env("gru")
    seen, _, _ = collect(agent, env, 12)
    assert isinstance(agent.q, RecurrentQ) and isinstance(agent.learner, Autograd) and not QKernel.fits(agent.q)
    assert agent.actor.state_shape == (1, 8)
    state = agent.state_dict()
    assert state["hidden"].shape == (1, 3, 8) and set(state["logs"]) == {"rows", "frames", "states"}
    again: Any = build_agent(spec, env.observation_space, env.action_space, seed=4)
    again.load_state_dict({**state, "logs": {name: Filled(log.ring) for name, log in state["logs"].items()}})
    np.testing.assert_array_equal(again.hidden, agent.hidden)
    np.testing.assert_array_equal(again.memory.states, agent.memory.states)
    np.testing.assert_array_equal(again.act(seen[-1]), agent.act(seen[-1]))

    before, memory = agent.hidden.copy(), agent.actor.initial_state(3)
    actions, after = agent.actor.step(seen[-1], memory, deterministic=True)
    assert not memory.any() and after.shape == memory.shape and actions.shape == (3,)
    np.testing.assert_array_equal(agent.hidden, before)  # playing never touches training's memory
    agent.restart_episodes()
    assert not agent.hidden.any() and not agent.memory.known.any()

    _, plain, _ = agent_and_env("lstm", "agent.network.recurrent=null")
    assert plain.actor.state_shape is None and "hidden" not in plain.state_dict()


def test_a_cnn_torso_reads_frames_as_bytes_and_replays_what_acting_computed() -> None:
    """R2D2 on Atari (issue 55): nature_cnn's convolutions before the cell, one frame a step (a
    memory in place of frame stacking); its sequences replay the Q-values it acted with, a rounding
    away, and its ONNX graph takes the frames as they are."""
    pytest.importorskip("ale_py", reason="dqn_pong's env needs the atari extra (pip install 'rlrun[atari]')")
    import gymnasium as gym

    spec = rlrun.load_spec(
        "dqn_pong",
        ['agent.network.recurrent={"cell": "lstm", "size": 8}', "agent.network.hidden=[16]", "env.frame_stack=1"],
    )
    agent: Any = build_agent(spec, gym.spaces.Box(0, 255, (84, 84), np.uint8), gym.spaces.Discrete(6), seed=0)
    assert isinstance(agent.q, RecurrentQ) and agent.q.cnn is not None
    frames = torch.randint(0, 256, (5, 2, 84, 84), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    state, acted = agent.q.initial(2), []
    for frame in frames.numpy():
        q, state = agent.q.step(frame, state)
        acted.append(q)
    with torch.no_grad():
        replayed = agent.q.unroll(frames, torch.from_numpy(agent.q.initial(2)), torch.zeros(5, 2))
        graphed = agent.actor.graph()(frames[0], torch.from_numpy(agent.q.initial(2)))[1]
    np.testing.assert_allclose(replayed.numpy(), np.stack(acted), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(graphed.numpy(), acted[0], rtol=1e-4, atol=1e-5)


def test_value_rescaling_is_h_and_its_target_inverts_it() -> None:
    """h(x) = sign(x)(√(|x| + 1) − 1) + 0.001x; the target h(r + γ·h⁻¹(Q')) equals the plain target
    of the unrescaled value, rescaled."""
    x = torch.tensor([-1000.0, -3.0, 0.0, 0.5, 8.0, 475.0], dtype=torch.float64)
    np.testing.assert_allclose(rescale(x).numpy(), np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + 1e-3 * x)
    np.testing.assert_allclose(unrescale(rescale(x)).numpy(), x.numpy(), atol=1e-9)
    rewards, discounts, terminated = torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.5]), torch.tensor([0.0, 1.0])
    next_q = rescale(torch.tensor([[30.0, 50.0], [7.0, 1.0]], dtype=torch.float64)).float()
    rescaled = td_target(rewards, discounts, terminated, next_q, rescaled=True)
    np.testing.assert_allclose(rescaled.numpy(), rescale(torch.tensor([1.0 + 0.9 * 50.0, 2.0])).numpy(), rtol=1e-5)


@pytest.mark.parametrize("prioritized", [False, True])
def test_overlapping_sequences_start_every_stride_steps_and_share_their_frames(prioritized: bool) -> None:
    """`sequence_overlap` 4 of 6-step sequences: each copy's sequences start at its steps 0, 2, 4, …
    and only those rows are drawn (by priority too: the rows between them have none); the memory
    still holds one row and one frame a step, whatever the overlap."""
    edits = ["agent.burn_in=2", "agent.sequence_length=4", "agent.sequence_overlap=4"]
    if prioritized:
        edits.append('agent.memory.prioritized={"alpha": 0.6, "beta": 0.4}')
    _, agent, env = agent_and_env("gru", *edits)
    _, _, _ = collect(agent, env, 21)
    stored, memory = agent.sequences.stored, agent.memory
    assert stored.stride == 2 and memory.rows_end == 63 and memory.frames_end < 63 + 3 * 21
    slots = stored.draw(200, torch.Generator().manual_seed(0))
    if prioritized:
        slots, _ = memory.draw_prioritized_slots(200, torch.Generator().manual_seed(0), 0.4)
        assert (memory.priorities.leaves[:63].reshape(21, 3)[1::2] == 0).all()
    steps = slots // 3
    assert (steps % 2 == 0).all() and set(steps.tolist()) == set(range(0, 21, 2))


class Filled:
    """A snapshot's log, as `rlrun.snapshot.StoredLog` hands it over: it fills a ring."""

    def __init__(self, ring: np.ndarray) -> None:
        self.ring = ring.copy()

    def fill(self, into: np.ndarray) -> None:
        into[...] = self.ring


def _atari_spaces() -> tuple[Any, Any]:
    import gymnasium as gym

    return gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6)

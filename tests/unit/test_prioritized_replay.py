"""The pieces of DQN's family, by hand: the sum tree's draws and sums, prioritised replay's
importance-sampling weights and snapshot, n-step windows over a hand-made run of episodes (a
termination, a truncation, an episode still open), and dueling's aggregation. Whole trainings
resumed bit for bit: tests/test_dqn_family.py."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlrun.algorithms.base import Step
from rlrun.algorithms.dqn import Agent, Autograd, Dueling
from rlrun.algorithms.kernels.q_network import QKernel
from rlrun.algorithms.replay import ReplayMemory, SumTree
from rlrun.clock import Clock
from rlrun.spec import MemorySpec, NetworkSpec, PrioritizedSpec
from rlrun.spec.agents.dqn import Config


def bits(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64).view(np.int64)


# -- the sum tree ---------------------------------------------------------------------------------


def test_draws_are_proportional_to_the_priorities() -> None:
    tree = SumTree(5)
    tree.set(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    assert tree.total == 10.0
    slots = tree.find((np.arange(1000) + 0.5) * (tree.total / 1000))
    assert np.bincount(slots, minlength=5).tolist() == [100, 200, 300, 400, 0]
    tree.set(np.array([3, 0]), np.array([0.0, 4.0]))  # updates move the sums with them
    slots = tree.find((np.arange(1000) + 0.5) * (tree.total / 1000))
    assert tree.total == 9.0
    assert np.bincount(slots, minlength=5).tolist() == [444, 223, 333, 0, 0]


def test_a_slot_given_twice_takes_its_last_priority() -> None:
    tree = SumTree(4)
    tree.set(np.array([1, 2, 1]), np.array([5.0, 1.0, 7.0]))
    assert tree.leaves.tolist() == [0.0, 7.0, 1.0, 0.0] and tree.total == 8.0


@pytest.mark.parametrize("capacity", [1, 7, 64, 1000])
def test_a_tree_rebuilt_from_its_leaves_has_the_same_bits(capacity: int) -> None:
    """What makes a snapshot of the leaves alone exact: sums are never adjusted by differences."""
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity)
    for _ in range(50):
        slots = rng.integers(capacity, size=8)
        tree.set(slots, rng.random(8) ** 3 * 1e3)
    rebuilt = SumTree(capacity)
    rebuilt.load(tree.leaves.copy())
    assert np.array_equal(bits(rebuilt.nodes), bits(tree.nodes))


# -- prioritised replay ---------------------------------------------------------------------------


def memory(
    *,
    num_envs: int = 1,
    n_step: int = 1,
    gamma: float = 1.0,
    capacity: int = 100,
    prioritized: dict[str, float] | None = None,
) -> ReplayMemory:
    spec = MemorySpec(capacity=capacity, prioritized=PrioritizedSpec(**prioritized) if prioritized else None)
    return ReplayMemory(
        spec, (1,), np.dtype(np.float32), (), np.dtype(np.int64), num_envs=num_envs, n_step=n_step, gamma=gamma
    )


def add(
    mem: ReplayMemory,
    obs: list[float],
    reward: list[float],
    next_obs: list[float],
    terminated: list[bool] | None = None,
    truncated: list[bool] | None = None,
) -> None:
    n = len(obs)
    mem.add(
        np.array(obs, dtype=np.float32)[:, None],
        np.zeros(n, dtype=np.int64),
        np.array(reward, np.float32),
        np.array(next_obs, dtype=np.float32)[:, None],
        np.array(terminated or [False] * n),
        np.array(truncated or [False] * n),
    )


def test_importance_weights_and_new_rows_at_the_largest_priority() -> None:
    mem = memory(prioritized={"alpha": 1.0, "beta": 0.4, "epsilon": 1.0})
    for i in range(4):
        add(mem, [i], [0.0], [i + 1])
    assert mem.priorities is not None and mem.priorities.leaves[:4].tolist() == [1.0] * 4  # none learnt yet
    mem.set_priorities(np.arange(4), np.array([0.0, 0.0, -1.0, 3.0]))  # p = |δ| + 1: 1, 1, 2, 4 of 8
    # stratified: one draw in each eighth of the total, wherever the generator puts it in its eighth
    slots, batch = mem.draw_prioritized(8, torch.Generator().manual_seed(0), beta=1.0)
    assert slots.tolist() == [0, 1, 2, 2, 3, 3, 3, 3]
    # (N·P)^-1 = (4 · [1/8, 1/8, 1/4, 1/2])^-1 = [2, 2, 1, 0.5], over the largest drawn
    assert batch.weights.tolist() == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
    assert batch.obs[:, 0].tolist() == [0.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    add(mem, [4], [0.0], [5])
    assert mem.priorities.leaves[4] == 4.0


def test_alpha_flattens_the_priorities() -> None:
    mem = memory(prioritized={"alpha": 0.5, "beta": 0.4, "epsilon": 1e-6})
    add(mem, [0], [0.0], [1])
    add(mem, [1], [0.0], [2])
    mem.set_priorities(np.array([0, 1]), np.array([4.0 - 1e-6, 16.0 - 1e-6]))
    assert mem.priorities is not None
    assert np.allclose(mem.priorities.leaves[:2], [2.0, 4.0]) and mem.max_priority == mem.priorities.leaves[1]


class Held:
    """A log as a snapshot gives it back: its items, copied into the ring."""

    def __init__(self, log: Any) -> None:
        self.ring = log.ring.copy()

    def fill(self, ring: np.ndarray) -> None:
        ring[...] = self.ring


def test_a_prioritised_memory_restored_from_its_state_draws_the_same() -> None:
    settings = {"capacity": 50, "num_envs": 2, "n_step": 3, "gamma": 0.9, "prioritized": {"alpha": 0.6, "beta": 0.4}}
    a, b = memory(**settings), memory(**settings)  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    for step in range(40):  # wraps the rows (80 into 50)
        add(
            a,
            [step, -step],
            rng.random(2).tolist(),
            [step + 1, -step - 1],
            [step % 9 == 8, False],
            [False, step % 7 == 6],
        )
        if step % 5 == 4:
            slots, _ = a.draw_prioritized(6, torch.Generator().manual_seed(step), beta=0.5)
            a.set_priorities(slots, rng.normal(size=6))
    state = a.state_dict()
    b.load_state_dict({**state, "logs": {name: Held(log) for name, log in state["logs"].items()}})
    assert a.priorities is not None and b.priorities is not None
    assert np.array_equal(bits(b.priorities.nodes), bits(a.priorities.nodes)) and b.max_priority == a.max_priority
    draws = [m.draw_prioritized(16, torch.Generator().manual_seed(7), beta=0.7) for m in (a, b)]
    assert draws[0][0].tolist() == draws[1][0].tolist()
    for name, value in draws[0][1]._asdict().items():
        assert (value is None and getattr(draws[1][1], name) is None) or torch.equal(
            value, getattr(draws[1][1], name)
        ), name


def test_a_fork_that_turns_prioritised_replay_on_starts_every_row_at_priority_one() -> None:
    uniform, prioritized = memory(capacity=8), memory(capacity=8, prioritized={"alpha": 0.6, "beta": 0.4})
    for i in range(5):
        add(uniform, [i], [0.0], [i + 1])
    state = uniform.state_dict()
    prioritized.load_state_dict({**state, "logs": {name: Held(log) for name, log in state["logs"].items()}})
    assert prioritized.priorities is not None
    assert prioritized.priorities.leaves.tolist() == [1.0] * 5 + [0.0] * 3 and prioritized.priorities.total == 5.0


# -- n-step returns -------------------------------------------------------------------------------


def test_n_step_windows_stop_at_terminations_truncations_and_the_newest_row() -> None:
    mem = memory(n_step=3, gamma=0.5)
    # episode A: 10 → 14, its last step terminated
    for i, reward in enumerate([1.0, 2.0, 4.0, 8.0]):
        add(mem, [10 + i], [reward], [11 + i], terminated=[i == 3])
    # episode B: 20 → 22, truncated
    for i, reward in enumerate([16.0, 32.0]):
        add(mem, [20 + i], [reward], [21 + i], truncated=[i == 1])
    # episode C: 30 → 32, still going: its windows stop at the newest row
    for i, reward in enumerate([64.0, 128.0]):
        add(mem, [30 + i], [reward], [31 + i])
    batch = mem.batch(np.arange(8))
    assert batch.obs[:, 0].tolist() == [10, 11, 12, 13, 20, 21, 30, 31]
    assert batch.rewards.tolist() == [1 + 1 + 1, 2 + 2 + 2, 4 + 4, 8, 16 + 16, 32, 64 + 64, 128]
    assert batch.discounts.tolist() == [0.125, 0.125, 0.25, 0.5, 0.25, 0.5, 0.25, 0.5]
    assert batch.next_obs[:, 0].tolist() == [13, 14, 14, 14, 22, 22, 32, 32]
    assert batch.terminated.tolist() == [0, 1, 1, 1, 0, 0, 0, 0]


def test_n_step_windows_follow_each_copy_of_a_vector_env() -> None:
    mem = memory(num_envs=2, n_step=2, gamma=0.5)
    add(mem, [0, 100], [1.0, 10.0], [1, 101])
    add(mem, [1, 101], [2.0, 20.0], [2, 102], terminated=[False, True])
    add(mem, [2, 200], [4.0, 40.0], [3, 201])
    batch = mem.batch(np.arange(6))
    assert batch.rewards.tolist() == [1 + 1, 10 + 10, 2 + 2, 20, 4, 40]
    assert batch.next_obs[:, 0].tolist() == [2, 102, 3, 102, 3, 201]
    assert batch.terminated.tolist() == [0, 1, 0, 1, 0, 0]


def test_n_step_windows_over_frame_stacks() -> None:
    """The next observation of a window is its last row's (stacks rebuilt from frame numbers)."""
    mem = ReplayMemory(
        MemorySpec(capacity=10),
        (2, 1),
        np.dtype(np.float32),
        (),
        np.dtype(np.int64),
        frame_stack=2,
        n_step=2,
        gamma=0.5,
    )
    stacks = [[1, 1], [1, 2], [2, 3], [3, 4], [5, 5], [5, 6], [6, 7]]  # an episode of 3 steps, then 2
    for i, (obs, next_obs) in enumerate(pairwise(stacks)):
        if i == 3:
            continue  # [3, 4] ended the first episode: [5, 5] is the next one's first observation
        mem.add(
            np.array(obs, np.float32).reshape(1, 2, 1),
            np.zeros(1, np.int64),
            np.array([2.0**i], np.float32),
            np.array(next_obs, np.float32).reshape(1, 2, 1),
            np.array([i == 2]),
            np.array([False]),
        )
    batch = mem.batch(np.arange(5))
    assert batch.obs[:, :, 0].tolist() == [[1, 1], [1, 2], [2, 3], [5, 5], [5, 6]]
    assert batch.next_obs[:, :, 0].tolist() == [[2, 3], [3, 4], [3, 4], [6, 7], [6, 7]]
    assert batch.rewards.tolist() == [1 + 1, 2 + 2, 4, 16 + 16, 32]
    assert batch.terminated.tolist() == [0, 1, 1, 0, 0]


def test_one_step_batches_are_the_one_step_memorys() -> None:
    mem = memory()
    add(mem, [0], [1.5], [1], terminated=[True])
    batch = mem.batch(np.arange(1))
    assert batch.discounts is None and batch.weights is None  # the learner's gamma, as it always was


# -- dueling --------------------------------------------------------------------------------------


def test_dueling_adds_the_value_to_the_advantages_less_their_mean() -> None:
    q = Dueling(torch.nn.Identity())(torch.tensor([[1.0, 2.0, 3.0, 7.0], [0.0, -3.0, 0.0, 3.0]]))
    assert q.tolist() == [[-1.0, 0.0, 4.0], [-3.0, 0.0, 3.0]]


@pytest.mark.parametrize(
    ("settings", "learner"),
    [
        ({}, QKernel),
        ({"dueling": True}, Autograd),  # the kernel declines what it cannot compute by hand
        ({"memory": {"prioritized": {}}}, Autograd),  # a weighted loss
        ({"n_step": 3}, QKernel),  # only the targets change (an update's all at once: a hard target, not double)
        ({"n_step": 3, "dueling": True, "double": True, "memory": {"prioritized": {}}}, Autograd),
    ],
)
def test_the_kernel_serves_only_what_it_computes_exactly(settings: dict[str, Any], learner: type) -> None:
    env = gym.make("CartPole-v1")
    config = Config(**settings, learning_starts=0, batch_size=8, train_frequency=4, gradient_steps=2)
    agent = Agent(
        config, env.observation_space, env.action_space, seed=0, num_envs=2, max_frame=1000, device=torch.device("cpu")
    )
    assert type(agent.learner) is learner
    rng = np.random.default_rng(0)
    clock = Clock()
    for _ in range(10):
        obs = rng.normal(size=(2, 4)).astype(np.float32)
        action = agent.act(obs)
        agent.observe(Step(obs, action, np.ones(2, np.float32), rng.random(2) < 0.2, np.zeros(2, bool), obs + 0.1))
        clock.frame += 2
        stats = agent.update(clock)
    assert clock.opt_step == 4 * 2 and np.isfinite(stats["loss"])  # rounds at frames 8, 12, 16, 20 (8 rows in)


def test_dueling_over_each_kind_of_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "usernets"))
    frames = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    for space, network in (
        (frames, NetworkSpec(kind="nature_cnn", hidden=[16])),
        (gym.spaces.Box(-1, 1, (4,), np.float32), NetworkSpec(kind="my_nets:small_mlp")),
    ):
        agent = Agent(
            Config(dueling=True, network=network),
            space,
            gym.spaces.Discrete(3),
            seed=0,
            num_envs=1,
            max_frame=1000,
            device=torch.device("cpu"),
        )
        obs = np.stack([space.sample() for _ in range(5)])
        q = agent.q(torch.as_tensor(obs))
        assert isinstance(agent.q, Dueling) and q.shape == (5, 3)
        assert np.allclose(agent.actor.values(obs), q.detach().numpy(), atol=1e-5)  # acting reads the same values

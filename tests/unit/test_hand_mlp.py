"""The hand-written passes of a built-in MLP compute exactly what autograd computes, and DQN learns
the same bits with them as without them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlrun.algorithms.base import Metrics, NatureCNN, Step, mlp
from rlrun.algorithms.dqn import Agent, Config
from rlrun.algorithms.kernels.mlp import HandMLP
from rlrun.algorithms.kernels.q_network import QKernel
from rlrun.algorithms.user_network import UserNetwork
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec, load_spec


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("hidden", [[], [7], [64, 32]])
def test_gradients_are_autograds_bit_for_bit(activation: Literal["relu", "tanh"], hidden: list[int]) -> None:
    torch.manual_seed(0)
    net = mlp(5, 3, NetworkSpec(hidden=hidden, activation=activation))
    x, weights = torch.randn(33, 5), torch.randn(33, 3)
    out = net(x)
    out.backward(weights)
    autograds = [p.grad for p in net.parameters()]
    for p in net.parameters():
        p.grad = None
    hand = HandMLP(net)
    assert torch.equal(hand.forward(x, keep=True), out.detach())
    ours = hand.backward(weights)
    assert [p.grad for p in net.parameters()] == ours  # the same tensors, set on the parameters
    for mine, torchs in zip(ours, autograds, strict=True):
        assert mine is not None and torchs is not None
        assert mine.stride() == torchs.stride() and torch.equal(mine, torchs)


def test_which_networks_take_the_hand_path() -> None:
    for activation in ("relu", "tanh"):
        assert HandMLP.fits(mlp(4, 2, NetworkSpec(hidden=[8, 8], activation=activation)))
    assert not HandMLP.fits(mlp(4, 2, NetworkSpec(hidden=[8], activation="elu")))  # no hand-written backward
    assert not HandMLP.fits(nn.Sequential(nn.Linear(4, 8), nn.ReLU()))  # ends in an activation
    assert not HandMLP.fits(UserNetwork(mlp(4, 2, NetworkSpec(hidden=[8])), gym.spaces.Box(-1, 1, (4,))))
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cnn = NatureCNN(frames, NetworkSpec(kind="nature_cnn"))
    assert not HandMLP.fits(nn.Sequential(cnn, nn.Linear(cnn.width, 2)))


def _learned(edits: list[str], *, hand: bool, read_at_once: bool = False) -> tuple[dict, list[Mapping[str, float]]]:
    """A DQN agent's state and metrics after a few updates on the same random transitions: each
    update's metrics read after the last update (they are computed when read), or as it returns."""
    small = [
        "agent.network.hidden=[32, 16]",
        "agent.learning_starts=64",
        "agent.train_frequency=16",
        "agent.gradient_steps=4",
        "agent.memory.capacity=500",
    ]
    config = load_spec("dqn_cartpole", [*small, *edits]).agent
    assert isinstance(config, Config)
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)  # the networks' initial weights
    agent = Agent(
        config,
        env.observation_space,
        env.action_space,
        seed=3,
        num_envs=1,
        max_frame=2000,
        device=torch.device("cpu"),
        kernels="auto" if hand else "autograd",
    )
    assert isinstance(agent.learner, QKernel) == hand
    rng = np.random.default_rng(0)
    metrics = []
    for frame in range(1, 161):
        obs = rng.standard_normal((1, 4)).astype(np.float32)
        agent.observe(
            Step(
                obs,
                agent.act(obs),
                np.ones(1, np.float32),
                np.array([rng.random() < 0.05]),
                np.array([False]),
                obs + 0.01,
            )
        )
        metrics.append(agent.update(Clock(frame=frame)))
        if read_at_once:
            metrics[-1] = dict(metrics[-1])
    return agent.state_dict(), metrics


@pytest.mark.parametrize(
    "edits",
    [
        [],
        ["agent.double=true"],
        ["agent.loss=mse"],
        ["agent.network.activation=tanh"],
        ["agent.target_update=polyak", "agent.tau=0.05"],
        ["agent.optimizer.name=rmsprop", "agent.optimizer.eps=1e-5"],
    ],
    ids=["dqn", "double", "mse", "tanh", "polyak", "rmsprop"],
)
def test_dqn_learns_the_same_bits_by_hand(edits: list[str]) -> None:
    by_hand, hand_metrics = _learned(edits, hand=True)
    by_autograd, autograd_metrics = _learned(edits, hand=False)
    assert hand_metrics == autograd_metrics and any(hand_metrics)
    # read long after they were formed, the metrics are the ones read at once: no update overwrote
    # a tensor an earlier one deferred its diagnostics to
    assert [dict(m) for m in hand_metrics] == _learned(edits, hand=True, read_at_once=True)[1]
    for name in ("q", "target", "optimizer"):
        _assert_equal(by_hand[name], by_autograd[name])


def _assert_equal(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_equal(x, y)
    else:
        assert a == b


def test_metrics_are_computed_once_when_first_read() -> None:
    calls = []

    def compute() -> dict[str, float]:
        calls.append(1)
        return {"loss": 0.5, "q_mean": 2.0}

    metrics = Metrics(compute)
    assert metrics and not calls  # an update that reports something, not yet computed
    row = {"frame": 7, **metrics}
    assert row == {"frame": 7, "loss": 0.5, "q_mean": 2.0} and metrics.get("q_mean") == 2.0
    assert metrics == {"loss": 0.5, "q_mean": 2.0} and len(metrics) == 2 and calls == [1]

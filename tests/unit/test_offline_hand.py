"""TD3+BC's and IQL's kernels (rlrun.algorithms.kernels.td3_bc, .implicit_q, and the twin critics
they share with SAC's, .critics) compute exactly what autograd computes: an agent learns the same
bits either way, over every network the kernels take (ReLU and tanh, one or two hidden layers) and
both of IQL's actors, its diagnostics included. A gradient one ulp off is told apart."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from same_run import assert_tensors_equal

from rlrun.algorithms import iql, td3bc
from rlrun.algorithms.kernels import critics
from rlrun.clock import Clock
from rlrun.data import Transitions
from rlrun.spec import NetworkSpec
from rlrun.spec.agents.iql import Config as IQLConfig
from rlrun.spec.agents.td3bc import Config as TD3BCConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROWS = 500


def dataset() -> Transitions:
    """Pendulum-shaped rows, a few of them terminal, rewards of either sign."""
    rng = np.random.default_rng(0)
    return Transitions(
        rng.standard_normal((ROWS, 3)).astype(np.float32),
        rng.uniform(-2, 2, (ROWS, 1)).astype(np.float32),
        rng.standard_normal(ROWS).astype(np.float32),
        rng.random(ROWS) < 0.05,
        np.zeros(ROWS, bool),
        rng.standard_normal((ROWS, 3)).astype(np.float32),
    )


def learned(algorithm: str, kernels: str, network: NetworkSpec, steps: int = 40, **config: Any) -> dict[str, Any]:
    """An agent's state and every step's diagnostics after `steps` gradient steps on `dataset()`."""
    module, make = (td3bc, TD3BCConfig) if algorithm == "td3bc" else (iql, IQLConfig)
    env = gym.make("Pendulum-v1")
    torch.manual_seed(0)
    agent = module.Agent(
        make(network=network, batch_size=24, **config),
        env.observation_space,
        env.action_space,
        seed=0,
        num_envs=1,
        max_frame=1000,
        device=torch.device("cpu"),
        kernels=kernels,
    )
    assert type(agent.learner).__module__.startswith("rlrun.algorithms.kernels.") == (kernels == "auto")
    agent.learn_from(dataset())
    clock = Clock()
    stats = [agent.update_offline(clock) for _ in range(steps)]
    state = {key: value for key, value in agent.state_dict().items() if key != "logs"}  # no online rows yet
    return {"state": state, "stats": stats}


CASES = [
    ("td3bc", NetworkSpec(hidden=[16, 16], activation="relu"), {}),
    ("td3bc", NetworkSpec(hidden=[12], activation="tanh"), {"policy_freq": 1}),
    ("iql", NetworkSpec(hidden=[16, 16], activation="relu"), {}),
    ("iql", NetworkSpec(hidden=[12, 8], activation="tanh"), {"actor": "deterministic", "expectile": 0.9}),
]


@pytest.mark.parametrize(("algorithm", "network", "config"), CASES)
def test_the_kernel_learns_autograds_bits(algorithm: str, network: NetworkSpec, config: dict[str, Any]) -> None:
    by_kernel, by_autograd = (learned(algorithm, kernels, network, **config) for kernels in ("auto", "autograd"))
    assert_tensors_equal(by_kernel, by_autograd)


def test_one_gradient_one_ulp_off_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    network = NetworkSpec(hidden=[16, 16], activation="relu")
    exact = critics.HandCritics.gradients

    def one_ulp_off(self: critics.HandCritics, *args: Any) -> tuple:
        q1, q2, loss, grads = exact(self, *args)
        bias = grads[1]
        bias[0] = torch.nextafter(bias[0], torch.tensor(np.inf, dtype=bias.dtype))
        return q1, q2, loss, grads

    monkeypatch.setattr(critics.HandCritics, "gradients", one_ulp_off)
    with pytest.raises(AssertionError):
        assert_tensors_equal(learned("iql", "auto", network), learned("iql", "autograd", network))

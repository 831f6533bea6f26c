"""A2C's and PPO's hand-written learning pass (rlrun.algorithms.hand_actor_critic, the losses'
gradients in a2c.py and ppo.py) computes exactly what autograd computes: whole agents learn the same
bits either way, across policies (categorical, Gaussian), entropy bonus on and off, advantage
normalisation on and off, clipped and unclipped updates. A deliberately wrong summation order shows
the comparison can fail."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlrun.algorithms import a2c, ppo
from rlrun.algorithms.base import Step, float_variance
from rlrun.algorithms.kernels import actor_critic
from rlrun.algorithms.kernels.actor_critic import ActorCriticKernel
from rlrun.algorithms.onpolicy import ActorCritic
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec, load_spec

SMALL = ["agent.network.hidden=[32, 16]", "agent.n_steps=8"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _learned(spec: str, edits: list[str], *, hand: bool, updates: int = 12) -> tuple[dict[str, Any], list[dict]]:
    """An on-policy agent's state and metrics after `updates` updates on the same random transitions."""
    loaded = load_spec(spec, [*SMALL, *edits])
    config = loaded.agent
    env = gym.make(loaded.env.id)
    torch.manual_seed(0)  # the networks' initial weights
    agent_class = a2c.Agent if config.algorithm == "a2c" else ppo.Agent
    agent = agent_class(
        config,
        env.observation_space,
        env.action_space,
        seed=3,
        num_envs=4,  # type: ignore[arg-type]
        max_frame=4 * 8 * updates,
        device=torch.device("cpu"),
        kernels="auto" if hand else "autograd",
    )
    assert isinstance(agent.learner, ActorCriticKernel) == hand  # built-in MLP heads take the kernel
    rng = np.random.default_rng(0)
    size = int(np.prod(env.observation_space.shape))
    clock, metrics = Clock(), []
    for _ in range(8 * updates):
        obs = rng.standard_normal((4, size)).astype(np.float32)
        agent.observe(
            Step(
                obs,
                agent.act(obs),
                rng.standard_normal(4).astype(np.float32),
                rng.random(4) < 0.1,
                rng.random(4) < 0.05,
                obs + 0.01,
            )
        )
        clock.frame += 4
        metrics.append(agent.update(clock))
    assert sum(map(bool, metrics)) == updates
    return agent.state_dict(), metrics


def _same(mine: object, torchs: object) -> bool:
    if isinstance(mine, dict):
        return (
            isinstance(torchs, dict) and mine.keys() == torchs.keys() and all(_same(mine[k], torchs[k]) for k in mine)
        )
    if isinstance(mine, torch.Tensor):
        return isinstance(torchs, torch.Tensor) and torch.equal(mine, torchs)
    if isinstance(mine, np.ndarray):
        return isinstance(torchs, np.ndarray) and np.array_equal(mine, torchs)
    if isinstance(mine, list | tuple):
        return isinstance(torchs, list | tuple) and len(mine) == len(torchs) and all(map(_same, mine, torchs))
    return bool(mine == torchs or (mine != mine and torchs != torchs))  # NaN metrics alike


CASES = {
    "a2c-cartpole": ("a2c_cartpole", []),
    "a2c-entropy-normalized-relu": (
        "a2c_cartpole",
        ["agent.entropy_coef=0.01", "agent.normalize_advantages=true", "agent.network.activation=relu"],
    ),
    "a2c-gaussian-entropy-gae": (
        "a2c_cartpole",
        ["env.id=Pendulum-v1", "agent.entropy_coef=0.01", "agent.returns=gae"],
    ),
    "a2c-gaussian-adam": ("a2c_cartpole", ["env.id=Pendulum-v1", "agent.optimizer.name=adam"]),
    "ppo-cartpole": ("ppo_cartpole", ["agent.batch_size=12", "agent.n_epochs=3"]),
    "ppo-entropy-value-clip": (
        "ppo_cartpole",
        [
            "agent.batch_size=32",
            "agent.n_epochs=2",
            "agent.entropy_coef=0.01",
            "agent.clip_range_vf=0.05",
            "agent.network.activation=relu",
        ],
    ),
    "ppo-clip-zero": ("ppo_cartpole", ["agent.batch_size=32", "agent.n_epochs=2", "agent.clip_range=0.0"]),
    "ppo-gaussian": ("ppo_pendulum", ["agent.batch_size=16", "agent.n_epochs=2"]),
    "ppo-gaussian-entropy-raw-advantages": (
        "ppo_pendulum",
        [
            "agent.batch_size=32",
            "agent.n_epochs=2",
            "agent.entropy_coef=0.01",
            "agent.normalize_advantages=false",
            "agent.optimizer.grad_clip=null",
        ],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_on_policy_agents_learn_the_same_bits_by_hand(case: str) -> None:
    spec, edits = CASES[case]
    by_hand, hand_metrics = _learned(spec, edits, hand=True)
    by_autograd, autograd_metrics = _learned(spec, edits, hand=False)
    assert _same(hand_metrics, autograd_metrics)
    assert _same(by_hand, by_autograd)


def _misordered(
    out: torch.Tensor, actions: torch.Tensor, grad_log_probs: torch.Tensor, grad_entropies: torch.Tensor | None
) -> torch.Tensor:
    """The logits' gradient with its three parts summed in another order than autograd's engine."""
    all_log_probs = torch.log_softmax(out, dim=-1)
    grad = all_log_probs.new_zeros(all_log_probs.shape).scatter_add_(
        -1, actions[..., None].long(), grad_log_probs.unsqueeze(-1)
    )
    assert grad_entropies is not None
    probs = all_log_probs.exp()
    grad_product = (-grad_entropies).unsqueeze(-1).expand(all_log_probs.shape)
    grad = grad_product * probs + ((grad_product * all_log_probs) * probs + grad)
    return torch._log_softmax_backward_data(grad, all_log_probs, -1, all_log_probs.dtype)


def test_the_comparison_catches_a_gradient_summed_in_another_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same sums in another order differ only in the last bits, now and then: enough to fail."""
    edits = ["agent.entropy_coef=0.5", "agent.normalize_advantages=true"]
    right, _ = _learned("a2c_cartpole", edits, hand=True)
    monkeypatch.setattr(actor_critic, "_categorical_backward", _misordered)
    wrong, _ = _learned("a2c_cartpole", edits, hand=True)
    autograd, _ = _learned("a2c_cartpole", edits, hand=False)
    assert _same(right, autograd) and not _same(wrong, autograd)


def test_which_models_learn_by_hand() -> None:
    box = spaces.Box(-1, 1, (3,), np.float32)

    def model(action_space: spaces.Space, **network: Any) -> ActorCritic:
        return ActorCritic(box, action_space, NetworkSpec(**network), 0.0, torch.device("cpu"))

    assert ActorCriticKernel.fits(model(spaces.Discrete(3), hidden=[8]), "a2c")
    assert ActorCriticKernel.fits(model(spaces.Box(-1, 1, (2,)), hidden=[8, 8], activation="relu"), "ppo")
    assert not ActorCriticKernel.fits(model(spaces.Discrete(3), hidden=[8], activation="elu"), "a2c")  # no backward
    assert not ActorCriticKernel.fits(model(spaces.MultiDiscrete([2, 3]), hidden=[8]), "a2c")  # autograd's policies
    assert not ActorCriticKernel.fits(model(spaces.MultiBinary(2), hidden=[8]), "a2c")
    frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cnn = ActorCritic(frames, spaces.Discrete(3), NetworkSpec(kind="nature_cnn"), 0.0, torch.device("cpu"))
    assert not ActorCriticKernel.fits(cnn, "ppo")  # convolutions shared by both heads


def test_the_lean_variance_is_numpys() -> None:
    rng = np.random.default_rng(0)
    for shape, dtype in [((8, 4), np.float32), ((1000,), np.float32), ((33, 3), np.float64), ((1,), np.float32)]:
        for _ in range(50):
            x = (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3) + rng.uniform(-50, 50)).astype(dtype)
            assert float_variance(x) == float(np.var(x))

"""SAC's kernel (rlrun.algorithms.kernels.soft_actor_critic: its steps, squashed_backward, HandMLP's input
gradient and workspaces) compute exactly what autograd computes: the agent learns the same bits
either way."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlrun.algorithms import sac
from rlrun.algorithms.base import Step, mlp
from rlrun.algorithms.kernels import soft_actor_critic as kernel
from rlrun.algorithms.kernels.mlp import FLOAT32_PRODUCTS, HandMLP, Workspace
from rlrun.algorithms.kernels.soft_actor_critic import SoftActorCriticKernel, squashed_backward, temperature_gradient
from rlrun.algorithms.sac import LOG_STD_MAX, Agent, Config, sample_squashed
from rlrun.arithmetic import revision
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec, load_spec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_input_gradient_and_workspaces_are_autograds_bit_for_bit(activation: str) -> None:
    torch.manual_seed(0)
    net = mlp(5, 2, NetworkSpec(hidden=[16, 8], activation=activation))  # type: ignore[arg-type]
    x, weights = torch.randn(33, 5, requires_grad=True), torch.randn(33, 2)
    net(x).backward(weights)
    autograds = [x.grad, *(p.grad for p in net.parameters())]
    hand = HandMLP(net)
    workspace: Workspace = {}
    scratch: Workspace = {}
    for _ in range(2):  # the second time, into the buffers the first one made
        for p in net.parameters():
            p.grad = None
        out, saved = hand.run(x.detach(), workspace)
        assert torch.equal(out, net(x).detach())
        grad_input = hand.backward_from(saved, weights, inputs=True, workspace=scratch)
        for mine, torchs in zip([grad_input, *(p.grad for p in net.parameters())], autograds, strict=True):
            assert mine is not None and torchs is not None and torch.equal(mine, torchs)
    frozen = [p.grad for p in net.parameters()]
    hand.backward_from(hand.run(x.detach())[1], weights, params=False, inputs=True)
    assert all(p.grad is g for p, g in zip(net.parameters(), frozen, strict=True))  # frozen: left alone


@pytest.mark.parametrize("narrow", [False, True])
def test_narrow_products_and_input_columns(narrow: bool) -> None:
    """With `narrow` (arithmetic revision 2) a first layer of few inputs and a last layer of few
    outputs have their products formed the other way round: autograd's values up to rounding, the
    gradients in the parameters' layout, also written into the buffers of a previous backward. The
    input's gradient for some of its columns is those columns of autograd's (bit for bit without
    `narrow`)."""
    torch.manual_seed(0)
    net = mlp(4, 2, NetworkSpec(hidden=[64, 32], activation="relu"))
    x, weights = torch.randn(256, 4, requires_grad=True), torch.randn(256, 2)
    out = net(x)
    out.backward(weights)
    assert x.grad is not None
    autograds = [x.grad[:, 3:], *(p.grad for p in net.parameters())]
    hand = HandMLP(net, narrow=narrow)
    assert hand.narrow_in == hand.narrow_out == narrow
    workspace: Workspace = {}
    for _ in range(2):  # the second time, into the gradient buffers the first one made
        mine_out, saved = hand.run(x.detach(), workspace)
        grad_input = hand.backward_from(saved, weights, inputs=True, workspace=workspace, input_columns=slice(3, None))
        mine = [grad_input, *(p.grad for p in net.parameters())]
        for value, torchs in zip([mine_out, *mine], [out.detach(), *autograds], strict=True):
            assert value is not None and torchs is not None and value.shape == torchs.shape
            assert torch.equal(value, torchs) if not narrow else torch.allclose(value, torchs, rtol=1e-4, atol=1e-6)
        assert all(p.grad is not None and p.grad.is_contiguous() for p in net.parameters())


def test_the_squashed_gaussians_gradient_is_autograds_bit_for_bit() -> None:
    torch.manual_seed(0)
    out = torch.randn(64, 6) * 3  # three action dimensions; some log-stds past the clamp on either side
    out[:8, 3:] = LOG_STD_MAX + 1
    out[8:16, 3:] = -25.0
    grad_log_prob, grad_action = torch.randn(64), torch.randn(64, 3)
    leaf = out.clone().requires_grad_()
    sample = sample_squashed(leaf, torch.Generator().manual_seed(1))
    torch.autograd.backward([sample.log_prob, sample.action], [grad_log_prob, grad_action])
    mine = sample_squashed(out, torch.Generator().manual_seed(1))
    assert torch.equal(mine.action, sample.action.detach()) and torch.equal(mine.log_prob, sample.log_prob.detach())
    assert leaf.grad is not None and torch.equal(squashed_backward(mine, grad_log_prob, grad_action), leaf.grad)


@pytest.mark.parametrize("rows", [1, 3, 100, 256, 1000])
def test_the_temperatures_gradient_is_autograds_bit_for_bit(rows: int) -> None:
    torch.manual_seed(rows)
    log_prob = torch.randn(rows) * 3
    for target_entropy in (-1.0, -2.5):
        log_alpha = torch.nn.Parameter(torch.tensor(0.3))
        (-(log_alpha * (log_prob + target_entropy)).mean()).backward()
        mine = temperature_gradient(log_prob, target_entropy)
        assert log_alpha.grad is not None and torch.equal(mine, log_alpha.grad)


def _tie_critics(agent: Agent) -> None:
    """The second critic a copy of the first: their values tie, and the minimum splits its gradient."""
    agent.critic.q2.load_state_dict(agent.critic.q1.state_dict())
    agent.critic_target.load_state_dict(agent.critic.state_dict())


def _clamp_log_std(agent: Agent) -> None:
    """Log-stds past LOG_STD_MAX at first, where the clamp stops their gradient."""
    last = agent.policy.body[-1]
    assert isinstance(last, torch.nn.Linear)
    with torch.no_grad():
        last.bias[1:] = LOG_STD_MAX + 3


def _learned(
    edits: list[str],
    prepare: Callable[[Agent], None] | None,
    *,
    hand: bool,
    read_at_once: bool = False,
    arithmetic: int = 1,
) -> tuple[dict, list[Mapping[str, float]]]:
    """A SAC agent's state and metrics after a few updates on the same random transitions (the
    metrics read when all are done, as a session reads them, or with `read_at_once` each as its
    update returns it), learning with revision `arithmetic` (1: the hand path is autograd's bits)."""
    small = [
        "agent.network.hidden=[32, 16]",
        "agent.learning_starts=64",
        "agent.batch_size=32",
        "agent.memory.capacity=500",
    ]
    config = load_spec("sac_pendulum", [*small, *edits]).agent
    assert isinstance(config, Config)
    env = gym.make("Pendulum-v1")
    torch.manual_seed(0)  # the networks' initial weights
    agent = Agent(
        config,
        env.observation_space,
        env.action_space,
        seed=3,
        num_envs=1,
        max_frame=2000,
        device=torch.device("cpu"),
        arithmetic=revision(arithmetic),
        kernels="auto" if hand else "autograd",
    )
    assert isinstance(agent.learner, SoftActorCriticKernel) == hand  # a built-in MLP takes the kernel
    if prepare is not None:
        prepare(agent)
    rng = np.random.default_rng(0)
    metrics: list[Mapping[str, float]] = []
    for frame in range(1, 121):
        obs = rng.standard_normal((1, 3)).astype(np.float32)
        agent.observe(
            Step(
                obs,
                agent.act(obs),
                -rng.random(1).astype(np.float32),
                np.array([rng.random() < 0.05]),
                np.array([False]),
                obs + 0.01,
            )
        )
        update = agent.update(Clock(frame=frame))
        metrics.append(dict(update) if read_at_once else update)
    return agent.state_dict(), metrics


def _same(mine: object, torchs: object) -> None:
    if isinstance(mine, dict):
        assert isinstance(torchs, dict) and mine.keys() == torchs.keys()
        for key in mine:
            _same(mine[key], torchs[key])
    elif isinstance(mine, torch.Tensor):
        assert isinstance(torchs, torch.Tensor) and torch.equal(mine, torchs)
    elif isinstance(mine, list | tuple):
        assert isinstance(torchs, list | tuple)
        for a, b in zip(mine, torchs, strict=True):
            _same(a, b)
    else:
        assert mine == torchs


@pytest.mark.parametrize(
    ("edits", "prepare"),
    [
        ([], None),
        (["agent.network.activation=tanh"], None),
        (["agent.alpha=0.2"], None),
        ([], _tie_critics),
        ([], _clamp_log_std),
    ],
    ids=["sac", "tanh", "fixed-alpha", "tied-critics", "clamped-log-std"],
)
def test_sac_learns_the_same_bits_by_hand(edits: list[str], prepare: Callable[[Agent], None] | None) -> None:
    by_hand, hand_metrics = _learned(edits, prepare, hand=True)
    by_autograd, autograd_metrics = _learned(edits, prepare, hand=False)
    assert hand_metrics == autograd_metrics and any(hand_metrics)
    _same({k: v for k, v in by_hand.items() if k != "logs"}, {k: v for k, v in by_autograd.items() if k != "logs"})


def _close(mine: object, torchs: object) -> None:
    if isinstance(mine, dict):
        assert isinstance(torchs, dict) and mine.keys() == torchs.keys()
        for key in mine:
            _close(mine[key], torchs[key])
    elif isinstance(mine, torch.Tensor) and mine.is_floating_point():
        assert isinstance(torchs, torch.Tensor) and torch.allclose(mine, torchs, rtol=1e-3, atol=1e-5)
    elif isinstance(mine, list | tuple):
        assert isinstance(torchs, list | tuple)
        for a, b in zip(mine, torchs, strict=True):
            _close(a, b)
    else:
        _same(mine, torchs)


@pytest.mark.parametrize(
    ("edits", "prepare"),
    [([], None), (["agent.network.activation=tanh"], None), ([], _tie_critics), ([], _clamp_log_std)],
    ids=["sac", "tanh", "tied-critics", "clamped-log-std"],
)
def test_revision_2_learns_what_autograd_learns_up_to_rounding(
    edits: list[str], prepare: Callable[[Agent], None] | None
) -> None:
    """Arithmetic revision 2's hand path (narrow products formed the other way round) computes
    SAC's update: autograd's up to rounding, not its bits."""
    by_hand, _ = _learned(edits, prepare, hand=True, arithmetic=2)
    by_autograd, _ = _learned(edits, prepare, hand=False, arithmetic=2)
    drop = ("logs", "memory")
    _close({k: v for k, v in by_hand.items() if k not in drop}, {k: v for k, v in by_autograd.items() if k not in drop})
    with pytest.raises(AssertionError):  # not the same bits (else this test would not be needed)
        _same(by_hand["actor"], by_autograd["actor"])


def test_one_ulp_off_in_the_temperatures_gradient_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-agent comparison above can fail: the hand path's temperature gradient one float
    step away from autograd's is told apart."""
    exact = kernel.temperature_gradient
    monkeypatch.setattr(
        kernel,
        "temperature_gradient",
        lambda log_prob, target_entropy: torch.nextafter(exact(log_prob, target_entropy), torch.tensor(math.inf)),
    )
    by_hand, _ = _learned([], None, hand=True)
    by_autograd, _ = _learned([], None, hand=False)
    with pytest.raises(AssertionError):
        _same(by_hand["log_alpha"], by_autograd["log_alpha"])


def test_diagnostics_read_late_are_those_read_at_once() -> None:
    """An update's diagnostics are reduced only when read (base.Metrics): from tensors nothing
    changes afterwards, so read after a hundred more steps they are what they were."""
    _, late = _learned([], None, hand=True)
    _, at_once = _learned([], None, hand=True, read_at_once=True)
    assert [dict(m) for m in late] == at_once and any(at_once)


def test_diagnostics_from_a_tensor_written_later_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: critics' values handed over in a buffer the next gradient
    step writes over are told apart."""
    exact = SoftActorCriticKernel.critic_gradients
    kept: dict[str, torch.Tensor] = {}

    def reused(self: SoftActorCriticKernel, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor) -> tuple:
        q1, q2, loss, grads = exact(self, obs, action, target)
        buffer = kept.setdefault("q1", torch.empty_like(q1))
        return buffer.copy_(q1), q2, loss, grads

    monkeypatch.setattr(SoftActorCriticKernel, "critic_gradients", reused)
    _, late = _learned([], None, hand=True)
    kept.clear()
    _, at_once = _learned([], None, hand=True, read_at_once=True)
    assert [dict(m) for m in late] != at_once


def test_an_activation_without_a_hand_backward_keeps_autograd() -> None:
    config = load_spec(
        "sac_pendulum",
        ["agent.network.hidden=[16]", "agent.network.activation=elu", "agent.learning_starts=8", "agent.batch_size=8"],
    ).agent
    assert isinstance(config, Config)
    env = gym.make("Pendulum-v1")
    agent = Agent(
        config, env.observation_space, env.action_space, seed=0, num_envs=1, max_frame=100, device=torch.device("cpu")
    )
    assert isinstance(agent.learner, sac.Autograd)
    obs = np.zeros((1, 3), np.float32)
    for frame in range(1, 11):
        agent.observe(Step(obs, agent.act(obs), np.ones(1, np.float32), np.array([False]), np.array([False]), obs))
        stats = agent.update(Clock(frame=frame))
    assert np.isfinite(stats["critic_loss"])


def _relative_distance(mine: torch.Tensor, torchs: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(mine - torchs) / torch.linalg.vector_norm(torchs))


def test_bf16_products_are_the_wide_layers_within_bfloat16s_rounding() -> None:
    """`HandMLP(bf16=True)` (arithmetic revision 3): the products of a 256-to-256 layer take
    bfloat16 operands, so the output and every gradient are autograd's within bfloat16's rounding
    (three significant digits); the process's setting for float32 products is as it was afterwards.
    Whether oneDNN rounds at all depends on the CPU (AMX, AVX-512 BF16, or float32 kept), so the
    test bounds the distance from above only."""
    torch.manual_seed(0)
    net = mlp(4, 2, NetworkSpec(hidden=[256, 256], activation="relu"))
    x, weights = torch.randn(256, 4), torch.randn(256, 2)
    leaf = x.clone().requires_grad_()
    out = net(leaf)
    out.backward(weights)
    assert leaf.grad is not None
    autograds = [out.detach(), leaf.grad, *(p.grad.clone() for p in net.parameters() if p.grad is not None)]
    before = FLOAT32_PRODUCTS.fp32_precision
    hand = HandMLP(net, narrow=True, bf16=True)
    mine_out, saved = hand.run(x)
    grad_input = hand.backward_from(saved, weights, inputs=True)
    assert FLOAT32_PRODUCTS.fp32_precision == before
    assert grad_input is not None
    mine = [mine_out, grad_input, *hand.gradients()]
    assert len(mine) == len(autograds)
    distances = [_relative_distance(value, torchs) for value, torchs in zip(mine, autograds, strict=True)]
    # bfloat16 keeps 8 significant bits (a relative rounding of 2^-9), and a gradient sums 256
    # products of either sign, which cancel: its relative error is about 16 times that (measured
    # 2-7%, against 1e-6 in float32); a wrong product (a layout, a missing layer) is off by 100%
    assert distances[0] < 1e-2 and max(distances) < 0.15, distances


def test_bf16_leaves_narrow_layers_in_float32() -> None:
    """A network all of whose layers have a narrow side computes autograd's bits with `bf16`: no
    product of it takes bfloat16 operands (they would be slower, and rounded for nothing)."""
    torch.manual_seed(0)
    net = mlp(4, 2, NetworkSpec(hidden=[HandMLP.NARROW], activation="relu"))
    x, weights = torch.randn(64, 4, requires_grad=True), torch.randn(64, 2)
    out = net(x)
    out.backward(weights)
    autograds = [p.grad.clone() for p in net.parameters() if p.grad is not None]
    hand = HandMLP(net, bf16=True)
    mine_out, saved = hand.run(x.detach())
    hand.backward_from(saved, weights)  # sets the parameters' .grad afresh
    assert torch.equal(mine_out, out.detach())
    mine = hand.gradients()
    assert len(mine) == len(autograds) and all(torch.equal(a, b) for a, b in zip(mine, autograds, strict=True))


def test_revision_3_learns_revision_2s_update_in_bfloat16_products() -> None:
    """SAC under arithmetic revision 3 (the hand path's wide products in bfloat16) learns what
    revision 2 learns, up to bfloat16's rounding (whether the rounding shows depends on the CPU)."""
    revision_2, _ = _learned([], None, hand=True, arithmetic=2)
    revision_3, _ = _learned([], None, hand=True, arithmetic=3)
    for part in ("actor", "critic"):
        for name, value in revision_2[part].items():
            assert _relative_distance(revision_3[part][name], value) < 5e-2, name  # measured under 2%

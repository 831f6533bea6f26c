"""Kernels: faster ways of computing what autograd computes, behind one seam.

An algorithm writes its loss once, in autograd's form, and steps it with one call on its learner.
The learner is autograd's (the algorithm's own, in its module: every agent and network has it)
unless a kernel here serves the agent, its network and the run's arithmetic: then the kernel runs
the forward passes without a graph and the backward pass from autograd's formulas, each with the
kernels autograd would call, in its order: autograd's bits, unless the run's arithmetic lets it
round some products another way (the flags it reads).
At the sizes rlrun's built-ins learn at, autograd's bookkeeping costs more than the arithmetic; the
kernels are most of why rlrun trains more frames per CPU-second than Stable-Baselines3.

`KERNELS` is the dispatcher: each kernel declares what it serves and how it is built for an
algorithm's parts. An algorithm asks for its kind of kernel here (`find_actor_critic`,
`find_q_network`, `find_soft_actor_critic`: lookups in the table) and gets None when none serves it
(another network, another loss, `meta.kernels: "autograd"`), and falls back to autograd. A new algorithm
needs no kernel. `tests/test_kernels.py` trains every registered kernel's example against
autograd, bit for bit, over a whole tiny training.

This module is light (no torch) and imports no algorithm: the declarations are read by the spec's
consistency rules; each kernel's module is imported when an agent asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlrun.arithmetic import Arithmetic

if TYPE_CHECKING:
    from torch import nn

    from rlrun.algorithms.kernels.actor_critic import ActorCriticKernel
    from rlrun.algorithms.kernels.implicit_q import IQLKernel
    from rlrun.algorithms.kernels.q_network import QKernel
    from rlrun.algorithms.kernels.soft_actor_critic import SoftActorCriticKernel
    from rlrun.algorithms.kernels.td3_bc import TD3BCKernel


@dataclass(frozen=True)
class Kernel:
    """What a kernel serves, where it is, and how it is built."""

    name: str
    """`rlrun.algorithms.kernels.<name>`, the module."""
    algorithms: tuple[str, ...]
    networks: str
    """Which networks, in words (the module's `fits` is the rule)."""
    flags: tuple[str, ...]
    """The arithmetic flags it reads (`rlrun.arithmetic.Arithmetic`): where the run's revision sets
    one, it rounds differently from autograd (`Arithmetic.kernel_is_autograd` says for a run)."""
    examples: tuple[tuple[str, tuple[str, ...]], ...]
    """Built-in specs and edits it serves that train in seconds (tests/test_kernels.py)."""
    build: Callable[..., Any]
    """The kernel for an algorithm's parts (its `find_*` says which), or None when it does not fit
    them; its module is imported only here."""


def _actor_critic(model: nn.Module, loss: str) -> ActorCriticKernel | None:
    if model.recurrent is not None:  # a memory's cells: autograd's (no kernel learns through one)
        return None
    from rlrun.algorithms.kernels.actor_critic import ActorCriticKernel

    return ActorCriticKernel(model, loss) if ActorCriticKernel.fits(model, loss) else None


def _q_network(q: nn.Module, target: nn.Module) -> QKernel | None:
    from rlrun.algorithms.kernels.q_network import QKernel

    return QKernel(q, target) if QKernel.fits(q) else None


def _soft_actor_critic(
    actor: Any, critic: Any, critic_target: Any, arithmetic: Arithmetic
) -> SoftActorCriticKernel | None:
    from rlrun.algorithms.kernels.soft_actor_critic import SoftActorCriticKernel

    if not SoftActorCriticKernel.fits(actor, critic):
        return None
    return SoftActorCriticKernel(actor, critic, critic_target, arithmetic=arithmetic)


def _td3_bc(policy: Any, policy_target: Any, critic: Any, critic_target: Any) -> TD3BCKernel | None:
    from rlrun.algorithms.kernels.td3_bc import TD3BCKernel

    return TD3BCKernel(policy, policy_target, critic, critic_target) if TD3BCKernel.fits(policy, critic) else None


def _implicit_q(policy: Any, log_std: Any, value: Any, critic: Any, critic_target: Any) -> IQLKernel | None:
    from rlrun.algorithms.kernels.implicit_q import IQLKernel

    fits = IQLKernel.fits(policy, value, critic)
    return IQLKernel(policy, log_std, value, critic, critic_target) if fits else None


OFFLINE_EXAMPLE = (
    "meta.max_frame=300",
    "meta.offline_updates=200",
    "data.dataset=rlrun/pendulum-sac-tiny-v0",
    "data.recipe.frames=150",
    "data.recipe.episodes=1",
    "agent.batch_size=32",
    "agent.network.hidden=[32, 32]",
)
"""A TD3+BC or IQL example: 200 gradient steps offline then 100 online, on the tiny dataset of
tests/test_offline_continuous.py (the built-ins' recipe, shorter: made once per test session)."""


KERNELS: tuple[Kernel, ...] = (
    Kernel(
        "actor_critic",
        ("a2c", "ppo"),
        "separate built-in MLP heads (ReLU or tanh) with a categorical (Discrete) or Gaussian (Box) policy",
        (),
        (
            ("ppo_cartpole", ("meta.max_frame=512", "agent.n_epochs=2", "agent.batch_size=64")),
            ("a2c_cartpole", ("meta.max_frame=400",)),
        ),
        _actor_critic,
    ),
    Kernel(
        "q_network",
        ("dqn",),
        "a built-in MLP (ReLU or tanh); not dueling heads, prioritised replay's weighted loss or a memory",
        (),
        (
            (
                "dqn_cartpole",
                (
                    "meta.max_frame=400",
                    "agent.learning_starts=100",
                    "agent.train_frequency=16",
                    "agent.gradient_steps=4",
                    "agent.batch_size=32",
                ),
            ),
        ),
        _q_network,
    ),
    Kernel(
        "soft_actor_critic",
        ("sac",),
        "built-in MLPs (ReLU or tanh)",
        ("narrow_products_wide_first", "bf16_wide_products"),
        (
            (
                "sac_pendulum",
                (
                    "meta.max_frame=300",
                    "agent.learning_starts=100",
                    "agent.batch_size=32",
                    "agent.network.hidden=[32, 32]",
                    "meta.arithmetic=1",
                ),
            ),
        ),
        _soft_actor_critic,
    ),
    Kernel(
        "td3_bc",
        ("td3bc",),
        "built-in MLPs (ReLU or tanh)",
        (),
        (("td3bc_pendulum", OFFLINE_EXAMPLE),),
        _td3_bc,
    ),
    Kernel(
        "implicit_q",
        ("iql",),
        "built-in MLPs (ReLU or tanh), the Gaussian actor or the deterministic",
        (),
        (("iql_pendulum", OFFLINE_EXAMPLE),),
        _implicit_q,
    ),
)


def find_actor_critic(model: nn.Module, loss: str, kernels: str) -> ActorCriticKernel | None:
    """The kernel that learns `model` (an on-policy `ActorCritic`) down the loss named `loss`, or None
    (always for a model with a memory: no kernel learns through a recurrent cell)."""
    found: ActorCriticKernel | None = _find("actor_critic", kernels, model, loss)
    return found


def find_q_network(q: nn.Module, target: nn.Module, kernels: str) -> QKernel | None:
    """The kernel that runs a Q-network `q` and its `target` and steps `q` down a TD loss, or None."""
    found: QKernel | None = _find("q_network", kernels, q, target)
    return found


def find_soft_actor_critic(
    actor: Any, critic: Any, critic_target: Any, arithmetic: Arithmetic, kernels: str
) -> SoftActorCriticKernel | None:
    """The kernel that takes SAC's critics' and actor's gradient steps, or None."""
    found: SoftActorCriticKernel | None = _find("soft_actor_critic", kernels, actor, critic, critic_target, arithmetic)
    return found


def find_td3_bc(
    policy: Any, policy_target: Any, critic: Any, critic_target: Any, arithmetic: Arithmetic, kernels: str
) -> TD3BCKernel | None:
    """The kernel that takes TD3+BC's critics' and actor's gradient steps, or None. It computes
    autograd's bits under every revision, so `arithmetic` is not read."""
    found: TD3BCKernel | None = _find("td3_bc", kernels, policy, policy_target, critic, critic_target)
    return found


def find_implicit_q(
    policy: Any, log_std: Any, value: Any, critic: Any, critic_target: Any, kernels: str
) -> IQLKernel | None:
    """The kernel that takes IQL's value network's, critics' and actor's gradient steps, or None."""
    found: IQLKernel | None = _find("implicit_q", kernels, policy, log_std, value, critic, critic_target)
    return found


def _find(name: str, kernels: str, *parts: Any) -> Any:
    """The kernel `name` built for `parts` (None when it does not fit them), where the run lets
    kernels serve (`meta.kernels: "auto"`); None otherwise."""
    if kernels != "auto":
        return None
    return next(kernel for kernel in KERNELS if kernel.name == name).build(*parts)

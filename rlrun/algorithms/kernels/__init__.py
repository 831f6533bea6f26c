"""Kernels: faster ways of computing what autograd computes, behind one seam.

An algorithm writes its loss once, in autograd's form, and steps it with one call on its learner.
The learner is autograd's (the algorithm's own, in its module: every agent and network has it)
unless a kernel here serves the agent, its network and the run's arithmetic: then the kernel runs
the forward passes without a graph and the backward pass from autograd's formulas, each with the
kernels autograd would call, in its order: autograd's bits, unless the run's arithmetic lets it
round some products another way (the flags it reads).
At the sizes rlrun's built-ins learn at, autograd's bookkeeping costs more than the arithmetic; the
kernels are most of why rlrun trains more frames per CPU-second than Stable-Baselines3.

Each kernel declares what it serves (`KERNELS`); an algorithm asks for its kind of kernel here
(`find_actor_critic`, `find_q_network`, `find_soft_actor_critic`) and gets None when none serves it (another
network, another loss, `meta.kernels: "autograd"`), and falls back to autograd. A new algorithm
needs no kernel. `tests/test_kernels.py` trains every registered kernel's example against
autograd, bit for bit, over a whole tiny training.

This module is light (no torch): the declarations are read by the spec's consistency rules; each
kernel's module is imported when an agent asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlrun.arithmetic import Arithmetic

if TYPE_CHECKING:
    from torch import nn

    from rlrun.algorithms.kernels.actor_critic import ActorCriticKernel
    from rlrun.algorithms.kernels.q_network import QKernel
    from rlrun.algorithms.kernels.soft_actor_critic import SoftActorCriticKernel
    from rlrun.algorithms.onpolicy import ActorCritic


@dataclass(frozen=True)
class Kernel:
    """What a kernel serves, and where it is."""

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
    ),
)


def find_actor_critic(model: ActorCritic, loss: str, kernels: str) -> ActorCriticKernel | None:
    """The kernel that learns `model` (an on-policy `ActorCritic`) down the loss named `loss`, or None
    (always for a model with a memory: no kernel learns through a recurrent cell)."""
    if kernels != "auto" or model.recurrent is not None:  # a memory's cells: autograd's
        return None
    from rlrun.algorithms.kernels.actor_critic import ActorCriticKernel

    return ActorCriticKernel(model, loss) if ActorCriticKernel.fits(model, loss) else None


def find_q_network(q: nn.Module, target: nn.Module, kernels: str) -> QKernel | None:
    """The kernel that runs a Q-network `q` and its `target` and steps `q` down a TD loss, or None."""
    if kernels != "auto":
        return None
    from rlrun.algorithms.kernels.q_network import QKernel

    return QKernel(q, target) if QKernel.fits(q) else None


def find_soft_actor_critic(
    actor: Any, critic: Any, critic_target: Any, arithmetic: Arithmetic, kernels: str
) -> SoftActorCriticKernel | None:
    """The kernel that takes SAC's critics' and actor's gradient steps, or None."""
    if kernels != "auto":
        return None
    from rlrun.algorithms.kernels.soft_actor_critic import SoftActorCriticKernel

    if not SoftActorCriticKernel.fits(critic):
        return None
    return SoftActorCriticKernel(actor, critic, critic_target, arithmetic=arithmetic)

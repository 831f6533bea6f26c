"""The kernel of a Q-network (DQN's, for a built-in MLP): its forward passes and the TD loss's
gradient step by hand (`HandMLP`), each operation's gradient as autograd's formula computes it,
with the same kernels: autograd's bits (tests/unit/test_hand_mlp.py holds whole agents to that,
tests/test_kernels.py whole trainings). The learner interface of `q_learning.Autograd`."""

from __future__ import annotations

import torch
from torch import nn

from rlrun.algorithms.kernels.mlp import HandMLP, Workspace
from rlrun.algorithms.optim import apply_gradients
from rlrun.spec import OptimizerSpec

LOSS_BACKWARD = {  # d loss / d taken given d loss / d loss (a 1), by autograd's kernels for each of
    # `q_learning`'s losses (`.default`: the overload itself; the packet `torch.ops.aten.x` looks it up on
    # every call); taken and target have the same shape
    "huber": lambda grad, taken, target: torch.ops.aten.smooth_l1_loss_backward.default(grad, taken, target, 1, 1.0),
    "mse": lambda grad, taken, target: torch.ops.aten.mse_loss_backward.default(grad, taken, target, 1),
}


class QKernel:
    @staticmethod
    def fits(q: nn.Module) -> bool:
        """A built-in MLP alone. A dueling network (`dqn.Dueling`, an MLP under V + A − mean(A))
        is declined: its aggregation's backward is not written here, so autograd serves it.
        (Prioritised replay's weighted loss is declined by the agent, which never asks.)"""
        return HandMLP.fits(q)

    def __init__(self, q: nn.Module, target: nn.Module) -> None:
        self.q, self.target = HandMLP(q), HandMLP(target)
        self.one = torch.ones((), device=next(q.parameters()).device)
        """d loss / d loss, where the backward chain starts (read only)."""
        self.scratch: Workspace = {}
        """The gradient step's hidden layers, forward and backward (`mlp.Workspace`)."""
        self.targets_scratch: Workspace = {}
        """The TD targets' passes' hidden layers (an update's batches at once: other shapes)."""

    def values(self, obs: torch.Tensor, *, target: bool) -> torch.Tensor:
        """The target network's Q-values of `obs` (`target`), or the online one's; no gradient.
        Only each pass's output is kept: their hidden layers may share a workspace."""
        return (self.target if target else self.q).run(obs, self.targets_scratch)[0]

    def step(
        self,
        obs: torch.Tensor,
        chosen: torch.Tensor,
        target: torch.Tensor,
        loss: str,
        optimizer: torch.optim.Optimizer,
        spec: OptimizerSpec,
        frame: int,
        max_frame: int,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """`q_learning.Autograd.step`: the loss (None: its gradient needs only `taken` and `target`, so it
        is a diagnostic, formed if read), the Q-values of the actions taken, the gradient norm.
        The unweighted loss only: an agent with prioritised replay's weights learns by autograd."""
        if weights is not None:
            raise ValueError("the Q-network kernel steps the unweighted TD loss: weights are autograd's")
        q, saved = self.q.run(obs, self.scratch)
        taken = q.gather(1, chosen).squeeze(1)
        # the loss's gradient, then the gather's, as autograd forms them, for the network's backward
        grad_taken = LOSS_BACKWARD[loss](self.one, taken, target)
        grad_q = torch.zeros_like(q).scatter_add_(1, chosen, grad_taken[:, None])
        self.q.backward_from(saved, grad_q, workspace=self.scratch)
        return None, taken, apply_gradients(optimizer, self.q.gradients(), spec, frame, max_frame)

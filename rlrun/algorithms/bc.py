"""Behaviour cloning: the policy that imitates a dataset's actions (CORL's `any_percent_bc`).

Discrete actions: the categorical policy's logits, trained by the cross-entropy of the dataset's
actions. Continuous actions: SAC's tanh-squashed actor (`rlrun.algorithms.sac`), its squashed mean
trained by the squared error to the dataset's action scaled to [-1, 1]; it plays that mean. Each
gradient step draws `batch_size` rows uniformly with the agent's own generator. It learns only from
the dataset: online (after `meta.offline_updates`) it acts and learns nothing more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms.base import Fast, Step, flat_float, mlp_or_user, obs_size
from rlrun.algorithms.distributions import policy_for
from rlrun.algorithms.optim import make_optimizer, optimise
from rlrun.algorithms.reinforce import Actor as CategoricalActor
from rlrun.algorithms.sac import Actor as SquashedNetwork
from rlrun.algorithms.sac import SquashedActor
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.data import Transitions
from rlrun.spec.agents.bc import Config


class Agent:
    METRICS = ("bc_loss", "grad_norm", "lr")
    """`bc_loss`: the cross-entropy (discrete) or squared error (continuous) of the batch."""
    HEADLINE = "bc_loss"

    def __init__(
        self,
        config: Config,
        obs_space: spaces.Space,
        action_space: spaces.Space,
        *,
        seed: int,
        num_envs: int,
        max_frame: int,
        device: torch.device,
        arithmetic: Arithmetic = NEWEST,
        kernels: str = "auto",
    ) -> None:
        self.config, self.max_frame, self.device = config, max_frame, device
        self.continuous = isinstance(action_space, spaces.Box)
        self.policy: nn.Module
        self.actor: SquashedActor | CategoricalActor
        """How the agent plays outside training (`base.Actor`)."""
        if self.continuous:
            assert isinstance(action_space, spaces.Box)
            self.low = action_space.low.astype(np.float32)
            self.high = action_space.high.astype(np.float32)
            network = SquashedNetwork(obs_size(obs_space), int(np.prod(action_space.shape)), config.network)
            self.policy = network.to(device)
            self.actor = SquashedActor(network, Fast(network.body), self.low, self.high)
        else:
            distribution = policy_for(action_space)
            self.policy = mlp_or_user(obs_space, distribution.outputs, config.network, output_gain=0.01).to(device)
            self.actor = CategoricalActor(self.policy, Fast(self.policy), distribution)
        self.optimizer = make_optimizer(config.optimizer, list(self.policy.parameters()), max_frame)
        self.generator = torch.Generator().manual_seed(seed)
        self.rows: Transitions | None = None
        """The dataset (given by the session, never in a snapshot: the spec names and pins it)."""

    def learn_from(self, rows: Transitions) -> None:
        self.rows = rows

    # -- acting ---------------------------------------------------------------------------------

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        return self.actor.step(obs, None, deterministic=deterministic, generator=generator or self.generator)[0]

    def observe(self, step: Step) -> None:
        """Online steps teach behaviour cloning nothing: it imitates the dataset alone."""

    # -- learning -------------------------------------------------------------------------------

    def update(self, clock: Clock) -> dict[str, float]:
        return {}

    def update_offline(self, clock: Clock) -> dict[str, float]:
        obs, actions = self._batch()
        loss = self._loss(obs, actions)
        grad_norm = optimise(self.optimizer, loss, self.config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        loss_value, norm_value = torch.stack([loss.detach(), grad_norm]).tolist()
        return {"bc_loss": loss_value, "grad_norm": norm_value, "lr": self.optimizer.param_groups[0]["lr"]}

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`batch_size` rows drawn uniformly with the agent's generator."""
        assert self.rows is not None, "the session gives the dataset before the first update"
        index = torch.randint(len(self.rows), (self.config.batch_size,), generator=self.generator).numpy()
        obs = flat_float(torch.from_numpy(self.rows.obs[index])).to(self.device)
        actions = torch.from_numpy(self.rows.action[index]).to(self.device)
        return obs, actions

    def _loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        if not self.continuous:
            return nn.functional.cross_entropy(self.policy(obs), actions.long())
        low, high = torch.from_numpy(self.low).to(self.device), torch.from_numpy(self.high).to(self.device)
        target = 2 * (actions.reshape(len(actions), -1).float() - low) / (high - low) - 1
        squashed, _ = self.policy(obs, None)
        return (squashed - target).pow(2).mean()

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])

"""CQL's hyper-parameters (the agent: `rlrun.algorithms.cql`): DQN's for discrete actions, SAC's
for continuous ones, and the conservative penalty's."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rlrun.spec import AgentConfig, MemorySpec, NetworkSpec, OptimizerSpec
from rlrun.spec.agents import dqn, sac
from rlrun.spec.schedules import Constant, Schedule


class Config(AgentConfig):
    algorithm: Literal["cql"] = "cql"
    ACTION_SPACES = ("Discrete", "Box")
    TAKES_DATA: ClassVar[bool] = True
    NEEDS_DATA: ClassVar[bool] = True
    conservative_weight: float = Field(default=1.0, ge=0)
    """The penalty's weight α (Kumar et al., 2020): α · (logsumexp_a Q(s, a) − Q(s, a_data)) is
    added to the TD loss, pushing down the values of actions the data did not take. d3rlpy's
    defaults: 1 for discrete actions (`DiscreteCQL`), 5 for continuous ones (`CQL`; CORL's: 10)."""
    lagrange_threshold: float | None = None
    """Continuous: CQL-Lagrange (Kumar et al., 2020, §F; CORL's `cql_lagrange` with its
    `cql_target_action_gap`, d3rlpy's `alpha_threshold`). With a threshold τ each critic's penalty
    term becomes α' · α · (penalty − τ), and the multiplier α' = exp(log α'), clipped to [0, 1e6],
    starting at 1, takes a gradient step up the same terms after each critic step (the optimiser's
    settings): it grows while the penalty stays above τ and shrinks below. Null: α fixed."""
    n_action_samples: int = Field(default=10, gt=0, le=1000)
    """Continuous actions: the actions per observation the logsumexp is estimated from, of each kind
    (uniformly random, the policy's at s, the policy's at s′), each weighed by its density. Unused
    with discrete actions (the logsumexp is exact over them)."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    batch_size: int = Field(default=256, gt=0)
    """Transitions per gradient step: dataset rows offline, online memory rows online."""
    learning_starts: int = Field(default=1000, ge=0)
    """Online: rows in the online memory before online gradient steps start (counted from the
    switch, whatever `meta.offline_updates` is)."""
    train_frequency: int = Field(default=1, gt=0)
    """Online: frames between training rounds."""
    gradient_steps: int = Field(default=1, gt=0)
    """Online: gradient steps per training round (offline: one per frame of the clock)."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak step of the target network(s) after every gradient step (continuous; discrete with
    `target_update` "polyak")."""
    target_update: Literal["hard", "polyak"] = "hard"
    """Discrete: copy the Q-network into its target every `target_update_frequency` frames
    ("hard", d3rlpy's), or move the target towards it after every step ("polyak")."""
    target_update_frequency: int = Field(default=1000, gt=0)
    """Discrete: frames (offline gradient steps count as frames) between hard copies."""
    double: bool = False
    """Discrete: double DQN's target (the online network picks the next action)."""
    loss: Literal["huber", "mse"] = "huber"
    """Discrete: the TD loss (d3rlpy's DQN: Huber)."""
    epsilon: Schedule = Constant(value=0.05)
    """Discrete, online: the probability of a random action, a number or a schedule over frames."""
    alpha: float | Literal["auto"] = "auto"
    """Continuous: SAC's entropy temperature, fixed or "auto" (tuned towards `target_entropy`)."""
    alpha_init: float = Field(default=1.0, gt=0)
    """Continuous: the starting temperature when tuned."""
    target_entropy: float | Literal["auto"] = "auto"
    """Continuous: the entropy the tuned temperature aims at; "auto" is minus the action dimension."""
    network: NetworkSpec = NetworkSpec(hidden=[256, 256], activation="relu")
    """The Q-network (discrete), or the actor and each critic (continuous)."""
    optimizer: OptimizerSpec = OptimizerSpec(lr=Constant(value=3e-4))
    """Used for every network (and the temperature)."""
    memory: MemorySpec = MemorySpec(capacity=100_000)
    """The online replay memory (the dataset is not copied into it)."""

    def as_dqn(self) -> dqn.Config:
        """DQN's config for the same networks, memory and online acting."""
        return dqn.Config(
            gamma=self.gamma,
            double=self.double,
            batch_size=self.batch_size,
            learning_starts=0,
            train_frequency=self.train_frequency,
            gradient_steps=self.gradient_steps,
            target_update=self.target_update,
            target_update_frequency=self.target_update_frequency,
            tau=self.tau,
            loss=self.loss,
            epsilon=self.epsilon,
            network=self.network,
            optimizer=self.optimizer,
            memory=self.memory,
        )

    def as_sac(self) -> sac.Config:
        """SAC's config for the same networks, memory and online acting (its policy from the start)."""
        return sac.Config(
            gamma=self.gamma,
            tau=self.tau,
            batch_size=self.batch_size,
            learning_starts=0,
            train_frequency=self.train_frequency,
            gradient_steps=self.gradient_steps,
            alpha=self.alpha,
            alpha_init=self.alpha_init,
            target_entropy=self.target_entropy,
            network=self.network,
            optimizer=self.optimizer,
            memory=self.memory,
        )

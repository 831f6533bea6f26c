"""DQN's hyper-parameters (the agent: `rlrun.algorithms.dqn`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlrun.spec import AgentConfig, MemorySpec, NetworkSpec, OptimizerSpec
from rlrun.spec.schedules import Constant, Linear, Schedule


class Config(AgentConfig):
    algorithm: Literal["dqn"] = "dqn"
    ACTION_SPACES = ("Discrete",)
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    double: bool = False
    """Double DQN: the online network picks the next action, the target network values it."""
    batch_size: int = Field(default=64, gt=0)
    """Transitions per gradient step."""
    learning_starts: int = Field(default=1000, ge=0)
    """Frames of experience gathered before the first gradient step."""
    train_frequency: int = Field(default=4, gt=0)
    """Frames between training rounds."""
    gradient_steps: int = Field(default=1, gt=0)
    """Gradient steps per training round."""
    target_update: Literal["hard", "polyak"] = "hard"
    """Copy the online network into the target ("hard"), or move the target towards it ("polyak")."""
    target_update_frequency: int = Field(default=1000, gt=0)
    """Frames between hard copies."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak step: target ← tau · online + (1 − tau) · target, after every gradient step."""
    loss: Literal["huber", "mse"] = "huber"
    """Temporal-difference loss: Huber (smooth L1) or squared error."""
    exploration: Literal["epsilon_greedy", "boltzmann"] = "epsilon_greedy"
    """Random action with probability epsilon, or actions sampled from softmax(Q / temperature)."""
    epsilon: Schedule = Field(default_factory=lambda: Linear(kind="linear", start=1.0, end=0.05, to_frame=10_000))
    """Exploration probability of epsilon-greedy: a number or a schedule over frames."""
    temperature: Schedule = Constant(value=1.0)
    """Temperature of Boltzmann exploration: a number or a schedule over frames."""
    network: NetworkSpec = NetworkSpec(activation="relu")
    optimizer: OptimizerSpec = OptimizerSpec()
    memory: MemorySpec = MemorySpec()

"""DQN's hyper-parameters (the agent: `rlrun.algorithms.dqn`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlrun.spec import AgentConfig, MemorySpec, NetworkSpec, OptimizerSpec, PrioritizedSpec
from rlrun.spec.problems import KeyProblem
from rlrun.spec.schedules import Constant, Linear, Schedule


class Config(AgentConfig):
    algorithm: Literal["dqn"] = "dqn"
    ACTION_SPACES = ("Discrete",)
    PRIORITIZES = True
    REMEMBERS = True
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    double: bool = False
    """Double DQN: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling heads (Wang et al., 2016): the network's torso feeds a state value V and an advantage
    A per action, and Q = V + A − mean(A). A user's network is asked for one output more than
    there are actions: the first is V, the rest A."""
    n_step: int = Field(default=1, gt=0, le=100)
    """Rewards summed into each TD target (n-step returns): r_t + γ·r_t+1 + … + γ^(n−1)·r_t+n−1 +
    γ^n·max Q_target(s_t+n), cut where an episode ends (no bootstrap past a termination; past a
    truncation, from its final observation). 1: DQN's one-step target."""
    value_rescaling: bool = False
    """R2D2's value rescaling (Kapturowski et al., 2019, after Pohlen et al., 2018): the network
    learns h(Q), h(x) = sign(x)(√(|x| + 1) − 1) + εx with ε = 0.001, towards the target
    h(r + γ^n·(1 − terminated)·h⁻¹(Q_target(s', a'))), in place of rescaling or clipping rewards;
    Q-values, greedy actions and diagnostics are the network's, in h's scale."""
    batch_size: int = Field(default=64, gt=0)
    """Transitions per gradient step; with a memory (`network.recurrent`), sequences of
    `burn_in` + `sequence_length` transitions."""
    sequence_length: int = Field(default=8, gt=0, le=1000)
    """With a memory (R2D2, Kapturowski et al., 2019): the steps of each replayed sequence that
    are learnt from (R2D2's 80 minus its burn-in, on Atari); structural. Unused without one."""
    burn_in: int = Field(default=4, ge=0, le=1000)
    """With a memory: the steps before them that only warm the networks' state up, unrolled
    without gradient from the state the agent acted from (R2D2's 40, on Atari); structural."""
    sequence_overlap: int | None = Field(default=None, ge=0)
    """With a memory: R2D2's stored sequences, `burn_in` + `sequence_length` steps of one env
    copy starting every `burn_in` + `sequence_length` − `sequence_overlap` steps of it (R2D2's 80
    overlapping by 40), and only those are drawn; the memory still holds each frame once. None:
    a sequence may start at any row (every overlap at once). Must be below `burn_in` +
    `sequence_length`; structural."""
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

    @model_validator(mode="after")
    def _sequences_advance(self) -> Config:
        length = self.burn_in + self.sequence_length
        if self.sequence_overlap is not None and self.sequence_overlap >= length:
            raise KeyProblem(
                "sequence_overlap",
                f"is {self.sequence_overlap}, not below a sequence's {{burn_in}} + {{sequence_length}} ({length}):"
                f" each stored sequence must start after the one before; use at most {length - 1}"
                f" (R2D2's: half, {length // 2})",
            )
        return self

    @property
    def sequence_stride(self) -> int:
        """Steps of an env copy between the starts of its stored sequences (1: every row)."""
        if self.sequence_overlap is None:
            return 1
        return self.burn_in + self.sequence_length - self.sequence_overlap


def importance_exponent(prioritized: PrioritizedSpec) -> Linear:
    """Prioritised replay's importance-sampling exponent β over frames: `beta` at frame 0, 1 at
    `meta.max_frame` (Schaul et al., 2016), a schedule like any other, so that the consistency rules
    see it is tied to the budget."""
    return Linear(kind="linear", start=prioritized.beta, end=1.0, to_frame="max_frame")

"""`rlrun export --check N`: an exported policy proves itself. N observations are recorded from the
run's env (`Policy.make_env`), seeded as `rlrun enjoy --seed` seeds its episodes and played by the
checkpoint's greedy policy; each is replayed, one step at a time, through torch (the acting graph
both exports trace, `rlrun.enjoy.graph.acting_graph`), onnxruntime (the .onnx file) and TorchScript
(the .pt file). A policy with a memory carries its own state through the replay in each runtime,
from zeros at each episode's start, as a deployment would.

The largest difference between a file's action and torch's is the verdict: above 0 for discrete
actions (an integer or boolean action space) or above 1e-6 for continuous ones, the export fails
its check (`ExportMismatch`, exit 1: the files are written and do not act as the checkpoint does,
which is neither bad input nor an unreachable service)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlrun import seeding
from rlrun.enjoy.graph import acting_graph
from rlrun.errors import RlrunError

if TYPE_CHECKING:
    from rlrun.enjoy.policy import Policy

CONTINUOUS_TOLERANCE = 1e-6
"""The largest action difference a continuous policy's file may show (float rounding between runtimes)."""

Step = Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray | None]]
"""One runtime's step: (observation batch, state) → (action batch, next state)."""


class ExportMismatch(RlrunError):
    """An exported file whose actions are not the checkpoint's (exit 1)."""


@dataclass(frozen=True)
class Checked:
    """A check's outcome: the steps replayed, the tolerance and each file's largest action difference."""

    steps: int
    episodes: int
    tolerance: float
    differences: dict[str, float] = field(default_factory=dict)
    """By runtime ("onnxruntime", "torchscript"): the largest |action - torch's action|."""

    @property
    def passed(self) -> bool:
        return all(difference <= self.tolerance for difference in self.differences.values())

    def line(self) -> str:
        shown = ", ".join(f"{name} {difference:.3g}" for name, difference in self.differences.items())
        return (
            f"checked {self.steps} observations ({self.episodes} episodes) against torch: largest action"
            f" difference {shown} (allowed {self.tolerance:g})"
        )


def check_exports(
    policy: Policy, *, onnx: Path | None = None, torchscript: Path | None = None, steps: int = 256, seed: int = 0
) -> Checked:
    """Replay `steps` recorded observations through torch and each file given; ExportMismatch
    (its line said) when a file's actions differ from torch's by more than the tolerance."""
    observations, starts = record_observations(policy, steps, seed)
    runtimes: dict[str, Step] = {}
    if onnx is not None:
        runtimes["onnxruntime"] = _onnx_step(onnx)
    if torchscript is not None:
        runtimes["torchscript"] = _torchscript_step(torchscript)
    expected = _replay(_torch_step(policy), policy, observations, starts)
    discrete = np.issubdtype(np.asarray(expected).dtype, np.integer) or np.asarray(expected).dtype == np.bool_
    tolerance = 0.0 if discrete else CONTINUOUS_TOLERANCE
    differences = {}
    for name, step in runtimes.items():
        actions = _replay(step, policy, observations, starts)
        differences[name] = float(np.max(np.abs(actions.astype(np.float64) - expected.astype(np.float64)), initial=0.0))
    checked = Checked(len(observations), int(sum(starts)), tolerance, differences)
    if not checked.passed:
        raise ExportMismatch(f"{checked.line()}: the exported policy does not act as its checkpoint")
    return checked


def record_observations(policy: Policy, steps: int, seed: int) -> tuple[list[np.ndarray], list[bool]]:
    """`steps` observations the checkpoint's greedy policy meets in the run's env, its episodes
    seeded as `rlrun enjoy --seed SEED` seeds them, and whether each starts an episode."""
    env = policy.make_env()
    observations: list[np.ndarray] = []
    starts: list[bool] = []
    try:
        episode, done, state = 0, True, None
        while len(observations) < steps:
            if done:
                obs, _ = env.reset(seed=seeding.derive(seed, seeding.ENJOY, episode))
                episode, state = episode + 1, None
            observations.append(np.asarray(obs))
            starts.append(done)
            action, state = policy.act(obs, state)
            obs, _, terminated, truncated, _ = env.step(action)
            done = bool(terminated or truncated)
    finally:
        env.close()
    return observations, starts


def _replay(step: Step, policy: Policy, observations: list[np.ndarray], starts: list[bool]) -> np.ndarray:
    """The runtime's actions on the observations, one at a time, its own state carried."""
    actions, state = [], None
    for obs, start in zip(observations, starts, strict=True):
        if start:
            state = policy.actor.initial_state(1)
        action, state = step(obs[None], state)
        actions.append(np.asarray(action)[0])
    return np.stack(actions)


def _torch_step(policy: Policy) -> Step:
    graph = acting_graph(policy.actor, policy.normalizer)

    def step(obs: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        with torch.no_grad():
            if state is None:
                return graph(torch.from_numpy(obs))[0].numpy(), None
            out = graph(torch.from_numpy(obs), torch.from_numpy(state))
            return out[0].numpy(), out[-1].numpy()

    return step


def _onnx_step(path: Path) -> Step:
    from rlrun.enjoy.onnx_policy import runtime

    session = runtime(path.read_bytes())
    names = [output.name for output in session.get_outputs()]

    def step(obs: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        if state is None:
            return session.run(["action"], {"observation": obs})[0], None
        action, after = session.run(["action", names[-1]], {"observation": obs, "state": state})
        return action, after

    return step


def _torchscript_step(path: Path) -> Step:
    module: Any = torch.jit.load(str(path), map_location="cpu")

    def step(obs: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        with torch.no_grad():
            if state is None:
                return module(torch.from_numpy(obs)).numpy(), None
            action, after = module(torch.from_numpy(obs), torch.from_numpy(state))
            return action.numpy(), after.numpy()

    return step

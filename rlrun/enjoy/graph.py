"""What every policy file rlrun writes is built from (`rlrun export --onnx`, `--torchscript`): the
checkpoint's acting graph, the run's frozen observation normalisation before its actor's own
`graph()` (`acting_graph`), and the checks and example inputs both exporters share. One rule: an
ONNX graph (`rlrun.enjoy.onnx`) and a TorchScript module (`rlrun.enjoy.torchscript`) of the same
checkpoint compute the same thing, because both trace the module built here.

The graph's input, `observation`, is a batch as the run's env gives it (`Policy.make_env`), in the
env's dtype; inside, the snapshot's normalisation statistics (float64 constants, as
`Normalizer.observation` computes), then the actor's conversions, network and greedy choice. A
policy with a memory takes `state` too and gives `next_state` last (`rlrun.algorithms.base.Actor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlrun.algorithms.base import ActingGraph, Actor
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.enjoy.policy import Policy
    from rlrun.refs import RunFilter, RunRef


def acting_graph(actor: Actor, normalizer: Any) -> ActingGraph:
    """The module an export traces: the actor's greedy graph after the run's frozen normalisation."""
    graph = actor.graph()
    if normalizer is not None and normalizer.obs_rms is not None:
        graph = (Normalized if actor.state_shape is None else NormalizedWithState)(graph, normalizer)
    return graph.eval()


class Normalized(ActingGraph):
    """`Normalizer.observation` (in float64, as it computes, then float32) before the actor's graph
    (`policy`: not `graph`, which names a traced module's own graph)."""

    def __init__(self, graph: ActingGraph, normalizer: Any) -> None:
        super().__init__()
        rms, spec = normalizer.obs_rms, normalizer.spec
        self.policy, self.outputs, self.clip = graph, graph.outputs, float(spec.clip_obs)
        self.obs_mean: torch.Tensor  # not `mean`: an ONNX initializer may not share an output's name
        self.obs_scale: torch.Tensor
        self.register_buffer("obs_mean", torch.from_numpy(np.array(rms.mean, np.float64)))
        self.register_buffer("obs_scale", torch.from_numpy(np.sqrt(rms.var + spec.epsilon)))

    def normalize(self, observation: torch.Tensor) -> torch.Tensor:
        scaled = (observation.to(torch.float64) - self.obs_mean) / self.obs_scale
        return scaled.clamp(-self.clip, self.clip).to(torch.float32)

    def forward(self, observation: torch.Tensor) -> Any:
        return self.policy(self.normalize(observation))


class NormalizedWithState(Normalized):
    """`Normalized` for a graph with a memory: the state passes through."""

    def forward(self, observation: torch.Tensor, state: torch.Tensor) -> Any:  # type: ignore[override]
        return self.policy(self.normalize(observation), state)


def normalization(normalizer: Any) -> dict[str, Any] | None:
    """The normalisation inside the graph, as a contract states it (None: the graph takes the
    observations as they are)."""
    if normalizer is None or normalizer.obs_rms is None:
        return None
    rms, spec = normalizer.obs_rms, normalizer.spec
    return {
        "observation": "clip((obs - mean) / sqrt(var + epsilon), -clip, clip), in float64, then float32",
        "mean": np.asarray(rms.mean, np.float64).tolist(),
        "var": np.asarray(rms.var, np.float64).tolist(),
        "epsilon": float(spec.epsilon),
        "clip": float(spec.clip_obs),
    }


@dataclass(frozen=True)
class Exported:
    """A policy file written: where, of which checkpoint, its outputs and size."""

    path: str
    run_id: str
    session: int
    checkpoint_frame: int
    checkpoint_sha256: str
    outputs: list[str]
    bytes: int


def exported(path: Path, policy: Policy, outputs: list[str], size: int) -> Exported:
    target = policy.target
    return Exported(
        str(path), target.run.id, target.session.index, target.checkpoint.frame, target.checkpoint.sha256, outputs, size
    )


def check_destination(path: Path, suffixes: tuple[str, ...], option: str) -> None:
    """BadInput unless `path` ends in one of `suffixes` and its folder exists."""
    if path.suffix.lower() not in suffixes:
        raise BadInput(f"{option} {path}: write a {' or '.join(suffixes)} file")
    if not path.parent.is_dir():
        raise BadInput(f"{option} {path}: folder {path.parent} does not exist; create it or write elsewhere")


def policy_of(
    source: Policy | RunRef | str,
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    checkpoint: str | int | None = None,
    on_target: Any = None,
) -> Policy:
    """The policy an export writes: `source` itself, or the checkpoint a reference names (as
    `rlrun enjoy` chooses it); `on_target` is told which checkpoint that is."""
    from rlrun.enjoy.policy import Policy, load_policy

    policy = (
        source
        if isinstance(source, Policy)
        else load_policy(source, filters, home=home, checkpoint=checkpoint, option="--checkpoint")
    )
    if on_target is not None:
        on_target(policy.target)
    return policy


def example_inputs(policy: Policy, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A batch of zero observations in the env's dtype, and fresh episodes' state (None without a memory)."""
    space = policy.observation_space
    example = torch.from_numpy(np.zeros((batch, *space.shape), dtype=space.dtype))
    actor = policy.actor
    return example, None if actor.state_shape is None else torch.from_numpy(actor.initial_state(batch))

"""The algorithms rlrun can train, looked up by the name a spec gives in `agent.algorithm`.

Each algorithm is two modules: `rlrun/spec/agents/<name>.py`, its hyper-parameters (a pydantic
`Config` whose field docstrings are the documentation; part of the spec, torch-free), and
`<name>.py` here, the agent: networks, acting and the update, which starts by importing that
`Config`. Agent modules are imported only when asked for. The replay memory (`replay.py`) is here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlrun.spec.agents import ALGORITHMS, algorithm_names, config_class

if TYPE_CHECKING:
    from rlrun.algorithms.base import Agent
    from rlrun.spec import Spec


def agent_class(name: str) -> Any:
    """The algorithm's agent class (imports torch)."""
    return importlib.import_module(f"rlrun.algorithms.{name}").Agent


def build_agent(spec: Spec, obs_space: Any, action_space: Any, seed: int, device: str = "cpu") -> Agent:
    """The spec's agent, its weights initialised from the session seed (on the CPU, whatever the
    device: a run starts from the same weights anywhere), then moved to `device` to learn there.
    BadInput when the algorithm cannot act in the env's action space, or a network of the user's
    cannot be built."""
    import torch

    from rlrun import seeding
    from rlrun.arithmetic import revision
    from rlrun.spec.spaces import check_action_space

    check_action_space(spec.agent.algorithm, action_space, spec.env.id)
    torch.manual_seed(seeding.derive(seed, seeding.TORCH_INIT))
    # An agent with a replay memory learns how observations are stacked, so it stores each frame once.
    stacking = {"frame_stack": spec.env.frame_stack} if getattr(spec.agent, "memory", None) is not None else {}
    # An agent that learns from data and keeps a replay memory learns online too, from batches mixed by data.mixing.
    mixing = {"mixing": spec.data.mixing} if spec.data is not None and stacking else {}
    agent: Agent = agent_class(spec.agent.algorithm)(
        spec.agent,
        obs_space,
        action_space,
        seed=seeding.derive(seed, seeding.AGENT),
        num_envs=spec.env.num_envs,
        max_frame=spec.meta.max_frame,
        device=torch.device(device),
        arithmetic=revision(spec.meta.arithmetic),
        kernels=spec.meta.kernels,
        **stacking,
        **mixing,
    )
    return agent


__all__ = ["ALGORITHMS", "agent_class", "algorithm_names", "build_agent", "config_class"]

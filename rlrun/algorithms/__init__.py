"""The algorithms rlrun can train, looked up by the name a spec gives in `agent.algorithm`.

Modules are imported only when asked for, so reading this table costs nothing (no torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlrun.spec import AgentConfig

_MODULES = {
    "a2c": "rlrun.algorithms.a2c",
    "dqn": "rlrun.algorithms.dqn",
    "ppo": "rlrun.algorithms.ppo",
    "reinforce": "rlrun.algorithms.reinforce",
    "sac": "rlrun.algorithms.sac",
}


def algorithm_names() -> list[str]:
    return sorted(_MODULES)


def _module(name: str) -> Any:
    return importlib.import_module(_MODULES[name])


def config_class(name: str) -> type[AgentConfig]:
    config: type[AgentConfig] = _module(name).Config
    return config


def agent_class(name: str) -> Any:
    return _module(name).Agent

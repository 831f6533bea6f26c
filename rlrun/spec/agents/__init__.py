"""Each algorithm's hyper-parameters: a pydantic `Config` per algorithm, named by its module, and the
table of algorithm names a spec may give in `agent.algorithm`.

Kept apart from the agents (`rlrun.algorithms`) so that a spec validates (and `rlrun spec schema`,
`rlrun gc` read one) without importing torch or gymnasium: nothing here may import them. Modules are
imported only when asked for, so reading the table costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlrun.spec.sections import AgentConfig

ALGORITHMS = ("a2c", "bc", "cql", "dqn", "ppo", "reinforce", "sac", "td3bc", "iql")


def algorithm_names() -> list[str]:
    return sorted(ALGORITHMS)


def config_class(name: str) -> type[AgentConfig]:
    """The algorithm's hyper-parameter schema (torch-free)."""
    config: type[AgentConfig] = importlib.import_module(f"rlrun.spec.agents.{name}").Config
    return config

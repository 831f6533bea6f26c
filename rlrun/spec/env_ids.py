"""Which env ids a spec may name: Gymnasium's registry, plus the packages that register more envs when
imported (ale-py's Atari games), and the rlrun extra each optional package comes with. The spec's
validation asks here; `rlrun.envs` makes the envs. Gymnasium and the packages are imported only
when an id is checked."""

from __future__ import annotations

from rlrun.errors import BadInput
from rlrun.spec.sections import ALE_NAMESPACE

# Gymnasium envs whose physics come from an optional package, and the rlrun extra that brings it:
# by the id's name (before its version), or by its namespace (the games ale-py registers).
EXTRAS = {
    "LunarLander": "box2d", "BipedalWalker": "box2d", "CarRacing": "box2d",
    **dict.fromkeys(["Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
                     "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d"], "mujoco"),
    ALE_NAMESPACE: "atari",
}


def extra_for(env_id: str) -> str | None:
    """The rlrun extra an env id needs, if any."""
    if env_id.startswith(ALE_NAMESPACE):
        return EXTRAS[ALE_NAMESPACE]
    return EXTRAS.get(env_id.split("-")[0])


def missing_package(env_id: str, error: BaseException) -> BadInput:
    """The one line for an env whose package is not installed, naming the extra that brings it."""
    extra = extra_for(env_id)
    fix = f"pip install 'rlrun[{extra}]'" if extra else "install the package it names"
    return BadInput(f"{env_id} needs a package that is not installed ({error}); {fix}")


def register_env_package(env_id: str) -> None:
    """Register the envs of the package that provides `env_id` when Gymnasium does not do it by itself
    (ale-py's games), importing it only then; BadInput naming the extra when it is missing."""
    if not env_id.startswith(ALE_NAMESPACE):
        return
    import gymnasium

    try:
        import ale_py
    except ImportError as error:
        raise missing_package(env_id, error) from None
    if ale_py.__name__ not in _REGISTERED:
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # not its banner on every env made
        gymnasium.register_envs(ale_py)
        _REGISTERED.add(ale_py.__name__)


_REGISTERED: set[str] = set()
"""The packages whose envs this process has registered."""

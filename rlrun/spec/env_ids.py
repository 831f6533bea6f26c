"""Which env ids a spec may name, and the one place where the code that registers them is imported:
Gymnasium's registry; ale-py's Atari games (imported when an ALE id is named); the user's own envs,
named as Gymnasium's `module:EnvId` (the module registers the env when imported) or registered by
the packages listed in `env.packages` (imported first, like RL Zoo's `--gym-packages`); envs that
packages register through Gymnasium's entry points are registered when Gymnasium is imported.

The spec's validation asks here, and `rlrun.envs.make_env` calls `import_env_code` before it makes
an env, so every process that makes one — a session, an async vector env's worker, `enjoy`, a
search trial, a Ray worker — imports the same code the same way, from the spec recorded with the run.

Where the user's code is found is `rlrun.spec.user_imports`'s rule, the same for wrappers and networks.
Gymnasium and the packages are imported only when an id is checked or an env made."""

from __future__ import annotations

import json
import sys

from rlrun.errors import BadInput, install_hint
from rlrun.spec.sections import ALE_NAMESPACE
from rlrun.spec.user_imports import cannot_import, first_line, try_import

# Gymnasium envs whose physics come from an optional package, and the rlrun extra that brings it:
# by the id's name (before its version), or by its namespace (the games ale-py registers).
EXTRAS = {
    "LunarLander": "box2d",
    "LunarLanderContinuous": "box2d",
    "BipedalWalker": "box2d",
    "BipedalWalkerHardcore": "box2d",
    "CarRacing": "box2d",
    **dict.fromkeys(
        [
            "Ant",
            "HalfCheetah",
            "Hopper",
            "Humanoid",
            "HumanoidStandup",
            "InvertedDoublePendulum",
            "InvertedPendulum",
            "Pusher",
            "Reacher",
            "Swimmer",
            "Walker2d",
        ],
        "mujoco",
    ),
    ALE_NAMESPACE: "atari",
}


def extra_for(env_id: str) -> str | None:
    """The rlrun extra an env id needs, if any."""
    if env_id.startswith(ALE_NAMESPACE):
        return EXTRAS[ALE_NAMESPACE]
    return EXTRAS.get(split_env_id(env_id)[1].split("-")[0])


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """`("my_robot.envs", "Reach-v0")` for Gymnasium's "my_robot.envs:Reach-v0", `(None, id)` for a
    plain id. Gymnasium accepts one colon at most."""
    module, colon, name = env_id.partition(":")
    return (module, name) if colon else (None, env_id)


def user_modules(env_id: str, packages: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The modules a spec names for its env to be registered: `env.packages`, then the id's module."""
    module = split_env_id(env_id)[0]
    return [*packages, *([module] if module else [])]


def missing_package(env_id: str, error: BaseException) -> BadInput:
    """The one line for an env whose package is not installed, naming the extra that brings it."""
    extra = extra_for(env_id)
    fix = install_hint(extra) if extra else "install the package it names"
    return BadInput(f"{env_id} needs a package that is not installed ({error}); {fix}")


def import_env_code(env_id: str, packages: tuple[str, ...] | list[str] = ()) -> None:
    """Import what registers `env_id`: `packages`, the id's module, or ale-py for an ALE id; BadInput
    (one line naming the module and the fix) when one does not import."""
    for index, package in enumerate(packages):
        _import_env_module(package, f"env.packages[{index}] = {json.dumps(package)}")
    module = split_env_id(env_id)[0]
    if module is not None:
        _import_env_module(module, f"env.id = {json.dumps(env_id)}")
    if env_id.startswith(ALE_NAMESPACE):
        _register_ale(env_id)


register_env_package = import_env_code  # the name callers used before user modules


def env_id_problems(env_id: str, packages: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Why a spec may not name `env_id` (with `packages`): one line per problem, none if it may."""
    import gymnasium

    if env_id.count(":") > 1:
        return [f'env.id = {json.dumps(env_id)}: one colon at most, as module:EnvId ("my_robot.envs:Reach-v0")']
    try:
        import_env_code(env_id, packages)
    except BadInput as bad:
        return [str(bad)]
    module, name = split_env_id(env_id)
    known = list(gymnasium.envs.registry.keys())
    if name not in known:
        return [_unknown(env_id, module, name, known, packages)]
    if module is None and not packages:
        return []
    return _not_an_env(env_id, name)


def _unknown(
    env_id: str, module: str | None, name: str, known: list[str], packages: tuple[str, ...] | list[str]
) -> str:
    from rlrun.spec import did_you_mean

    mine = [i for m in user_modules(env_id, packages) for i in _REGISTERED_BY.get(m, [])]
    if module is None:
        hint = did_you_mean(name, known) or " see gymnasium.pprint_registry() for the ids"
        return f"env.id = {json.dumps(env_id)}: unknown Gymnasium environment;{hint}"
    registered = f"it registers {', '.join(mine)}" if mine else "it registers no env"
    hint = did_you_mean(name, mine or known) or f" register it there: gymnasium.register({json.dumps(name)}, ...)"
    return f"env.id = {json.dumps(env_id)}: importing {module} registers no {name} ({registered});{hint}"


def _not_an_env(env_id: str, name: str) -> list[str]:
    """A user's registration whose entry point does not load, or is a class that is no Gymnasium
    env. (A factory function is judged by what it returns, when the env is made.)"""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    entry = gymnasium.spec(name).entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception as error:  # the user's code: any failure is theirs to fix
        return [
            f"env.id = {json.dumps(env_id)}: its entry point {entry!r} does not load ({first_line(error)});"
            " fix the entry point given to gymnasium.register"
        ]
    if isinstance(creator, type) and not issubclass(creator, gymnasium.Env):
        return [not_an_env(env_id, f"{creator.__module__}.{creator.__qualname__}")]
    return []


def not_an_env(env_id: str, made: str) -> str:
    """The one line for an entry point that gives `made` (a class's dotted name), not a Gymnasium env."""
    return (
        f"env.id = {json.dumps(env_id)}: its entry point gives {made}, not a gymnasium.Env;"
        " make the class inherit from gymnasium.Env"
    )


# -- importing ------------------------------------------------------------------------------------


def _import_env_module(module: str, where: str) -> None:
    failure = import_failure(module)
    if failure is not None:
        raise cannot_import(module, where, failure)


def import_failure(module: str) -> tuple[str, bool] | None:
    """Import the user's `module` (once per process), noting the envs it registers; None when it
    imports, else why not in one line, and whether it is the module itself (or its package) that
    is not found."""
    if module in _REGISTERED_BY:
        return None
    import gymnasium

    before = set(gymnasium.envs.registry) if module not in sys.modules else None
    failure = try_import(module)
    if isinstance(failure, tuple):
        return failure
    _REGISTERED_BY[module] = (
        [i for i in gymnasium.envs.registry if i not in before] if before is not None else _entry_points_in(module)
    )
    return None


def _entry_points_in(module: str) -> list[str]:
    """The ids whose entry point lives in `module`'s package: what a module imported before rlrun
    asked (so its registrations cannot be told apart by import) registered, most likely."""
    import gymnasium

    package = module.split(".")[0]
    found = []
    for env_id, spec in gymnasium.envs.registry.items():
        entry = spec.entry_point
        where = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
        if where.split(".")[0].split(":")[0] == package:
            found.append(env_id)
    return found


def _register_ale(env_id: str) -> None:
    """ale-py's games, which Gymnasium does not register by itself; BadInput naming the extra."""
    import gymnasium

    try:
        import ale_py
    except ImportError as error:
        raise missing_package(env_id, error) from None
    if ale_py.__name__ not in _REGISTERED_BY:
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # not its banner on every env made
        gymnasium.register_envs(ale_py)
        _REGISTERED_BY[ale_py.__name__] = []


_REGISTERED_BY: dict[str, list[str]] = {}
"""The modules this process has imported for their envs, and the env ids each registered."""

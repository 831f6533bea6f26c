"""The spec's `env.wrappers`: Gymnasium wrappers named by import path, applied around each env copy.

Every problem with one (a module that does not import, a name it lacks, a class that is not a
`gymnasium.Wrapper`, keyword arguments its constructor refuses) is bad input naming the wrapper by
its place in the list and its path, raised when the env is first built (`check_compatible`, before
a run is recorded).
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import gymnasium as gym

from rlrun.errors import BadInput
from rlrun.spec import WrapperSpec, did_you_mean
from rlrun.spec.user_imports import import_user_module


def apply_wrappers(env: gym.Env[Any, Any], wrappers: list[WrapperSpec]) -> gym.Env[Any, Any]:
    """`env` inside each wrapper in turn, the first innermost."""
    for index, wrapper in enumerate(wrappers):
        env = _wrap(env, wrapper, f"env.wrappers[{index}]")
    return env


def wrapper_class(wrapper: WrapperSpec, where: str) -> type[gym.Wrapper[Any, Any, Any, Any]]:
    """The class `module:Name` names; BadInput when it cannot be imported or is not a wrapper."""
    module_name, _, qualified = wrapper.class_.partition(":")
    named = f"{where}.class = {wrapper.class_!r}"
    found: Any = import_user_module(module_name, named)
    for part in qualified.split("."):
        if not hasattr(found, part):
            hint = did_you_mean(part, _names_in(found)) or " check the name after the colon"
            raise BadInput(f"{named}: module {module_name} has no {qualified};{hint}")
        found = getattr(found, part)
    if not (inspect.isclass(found) and issubclass(found, gym.Wrapper)):
        what = found.__name__ if inspect.isclass(found) else type(found).__name__
        raise BadInput(
            f"{named}: {what} is not a gymnasium.Wrapper; name a subclass of gymnasium.Wrapper"
            " (ObservationWrapper, ActionWrapper, RewardWrapper…)"
        )
    return found


def _names_in(namespace: Any) -> list[str]:
    """The public names a module (or class) offers: what a mistyped wrapper name was meant to be.
    A module's `__all__` first, and names only: Gymnasium loads its wrappers lazily, and loading
    each would import its optional dependencies."""
    return list(getattr(namespace, "__all__", None) or [n for n in vars(namespace) if not n.startswith("_")])


def _wrap(env: gym.Env[Any, Any], wrapper: WrapperSpec, where: str) -> gym.Env[Any, Any]:
    cls = wrapper_class(wrapper, where)
    try:
        inspect.signature(cls).bind(env, **wrapper.kwargs)
    except TypeError as error:
        raise BadInput(
            f"{where}.kwargs = {json.dumps(wrapper.kwargs)}: {wrapper.class_} refused them ({error});"
            f" its constructor takes {_parameters(cls)}"
        ) from None
    except ValueError:
        pass  # no signature to check against (a builtin): the constructor says
    try:
        return cls(env, **wrapper.kwargs)
    except (TypeError, ValueError, AssertionError) as error:
        detail = str(error) or type(error).__name__
        if not wrapper.kwargs:  # nothing of the user's but the env it wraps
            env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
            raise BadInput(
                f"{where}.class = {wrapper.class_!r}: it does not fit {env_id} ({detail}); remove it"
                " or choose a wrapper for this env"
            ) from None
        raise BadInput(
            f"{where}.kwargs = {json.dumps(wrapper.kwargs)}: {wrapper.class_} refused them ({detail});"
            " fix or remove them"
        ) from None


def _parameters(cls: type) -> str:
    """The constructor's keyword parameters after the env, as a user would write them."""
    parameters = list(inspect.signature(cls).parameters.values())[1:]
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return ", ".join(names) if names else "no keyword arguments"

"""Where the user's own code is found, one rule for every kind a spec names: the env's modules
(`env.id`'s `module:`, `env.packages`), its wrappers (`env.wrappers`) and the network
(`agent.network.kind`). Where Python finds it (`sys.path`: PYTHONPATH, installed packages), then
the current directory, appended last as `python -m` would put it first: a `mymod.py` beside the spec
is found when rlrun is started by its `rlrun` script too, and never shadows an installed module.
The session processes rlrun spawns inherit that `sys.path`; a Ray worker checks the same rule in
its preflight. A module that does not import is one line naming it, why, and the fix."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from types import ModuleType

from rlrun.errors import BadInput

WHERE = "run rlrun from the folder that holds it, or add that folder to PYTHONPATH"
"""Where a user's module must be for rlrun (and every process it starts) to import it."""


def search_current_directory() -> None:
    """Let the current directory hold the user's modules (see the module's note), in this process
    and in the session processes it spawns (multiprocessing's spawn hands children `sys.path`)."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or ".") == here for entry in sys.path):
        sys.path.append(here)


def try_import(module: str) -> ModuleType | tuple[str, bool]:
    """The user's `module`, imported where the rule says; or why not in one line, and whether it is
    the module itself (or its package) that is not found."""
    search_current_directory()
    try:
        return importlib.import_module(module)
    except Exception as error:  # the user's code: any failure to import it is theirs to fix
        not_found = isinstance(error, ModuleNotFoundError) and error.name is not None and module.startswith(error.name)
        return first_line(error), not_found


def import_user_module(module: str, where: str) -> ModuleType:
    """The user's `module`; BadInput naming `where` the spec names it, the reason and the fix."""
    found = try_import(module)
    if isinstance(found, tuple):
        raise cannot_import(module, where, found)
    return found


def cannot_import(module: str, where: str, failure: tuple[str, bool]) -> BadInput:
    """The one line for a user's module that did not import (`try_import`'s reason)."""
    reason, not_found = failure
    fix = f"install it, or {WHERE}" if not_found else "fix the module, or install what it imports"
    return BadInput(f"{where}: cannot import {module} ({reason}); {fix}")


def first_line(error: BaseException) -> str:
    """An error of the user's code in one line, with the user's file and line it came from."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    if isinstance(error, SyntaxError | ModuleNotFoundError):
        return text  # a syntax error names its file and line itself; a missing module is no one line's fault
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = traceback.extract_tb(error.__traceback__)
    user = [f for f in frames if not f.filename.startswith(("<", ours))]
    if user:
        text += f", at {os.path.basename(user[-1].filename)}:{user[-1].lineno}"
    return text

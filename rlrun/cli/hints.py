"""The commands rlrun suggests (`rlrun show ID` in a hint) carry what the command that suggests them
was given: `rlrun pull ... --home other` suggests `rlrun show ID --home other`, which finds the run
there, not `rlrun show ID`, which looks in ./runs and says it has no runs.

The command line records what it was given (`given`, for the run of one command, `context`);
`suggest` builds one suggested command with it and `in_context` does it for every `rlrun ...` a
message quotes between backticks, so a hint written anywhere (the registry's reference errors, a
bundle's, the CLI's own) is said with it. An option given through the environment (RLRUN_HOME) is
not repeated: the next command reads the same environment. Nothing here imports anything heavy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_GIVEN: ContextVar[tuple[tuple[str, str], ...] | None] = ContextVar("rlrun_hint_context", default=None)
"""None outside a command's run: parsing a command line without running it (the docs' checks parse
every command they show) records nothing that a later command would inherit."""

WITHOUT_HOME = ("spec", "version", "help")
"""The commands that take no --home: the built-in specs are the same in every home."""

_QUOTED = re.compile(r"`(rlrun(?: [^`]*)?)`")


@contextmanager
def context() -> Iterator[None]:
    """One command's run: what it is given (`given`) is forgotten when it ends (the next command
    run in the same process, a test's, starts with nothing)."""
    token = _GIVEN.set(())
    try:
        yield
    finally:
        _GIVEN.reset(token)


def given(option: str, value: str) -> None:
    """Record an option the person typed (`--home`, `other`), for every command suggested after."""
    held = _GIVEN.get()
    if held is not None:
        _GIVEN.set((*(pair for pair in held if pair[0] != option), (option, value)))


def suggest(command: str) -> str:
    """`command` (`rlrun show ID`) with the options the current command was given that it takes
    and does not give already."""
    words = command.split()
    if len(words) < 2 or words[1] in WITHOUT_HOME or words[1].startswith("-"):
        return command
    extra = [f"{option} {_quoted(value)}" for option, value in _GIVEN.get() or () if option not in words]
    return " ".join([command, *extra])


def in_context(text: str) -> str:
    """`text` with every command it quotes (`rlrun ...` between backticks) said by `suggest`."""
    if not _GIVEN.get():
        return text
    return _QUOTED.sub(lambda match: f"`{suggest(match.group(1))}`", text)


def _quoted(value: str) -> str:
    import shlex

    return shlex.quote(value)

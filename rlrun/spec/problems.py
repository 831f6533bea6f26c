"""A problem a model-level check finds with one key of its block, said as the key errors are:
`agent.batch_size = 100: is not a multiple of agent.n_steps (32); ...`, never the whole block.

A validator raises `KeyProblem("batch_size", "is not a multiple of {n_steps} (32); ...")`: the key
it is about, relative to the block it checks (dotted for a nested one), and what is wrong with it
and the fix. `{name}` in the text names another key of the same block; the spec's error message
writes both with their whole path (`rlrun.spec._line`)."""

from __future__ import annotations

import re
from typing import Any

_SIBLING = re.compile(r"\{([A-Za-z_][\w.]*)\}")


class KeyProblem(ValueError):
    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"{key}: {_SIBLING.sub(lambda m: m.group(1), text)}")  # read alone: the keys' own names
        self.key, self.text = key, text

    def path(self, block: str) -> str:
        """The key's whole path below `block` (`agent`, `env`; empty at the top)."""
        return f"{block}.{self.key}" if block else self.key

    def said(self, block: str) -> str:
        """The text, with each key it names written with its whole path below `block`."""
        return _SIBLING.sub(lambda m: f"{block}.{m.group(1)}" if block else m.group(1), self.text)

    def value(self, block_input: Any) -> Any:
        """The key's value in the block as given (None when it was left to its default)."""
        current = block_input
        for part in self.key.split("."):
            current = current.get(part) if isinstance(current, dict) else getattr(current, part, None)
        return current

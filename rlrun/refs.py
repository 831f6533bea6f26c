"""Run references: the one argument that names a run everywhere (see DESIGN.md).

    REF     := BASE [ "/s" K ] [ "@" CKPT ]     (the two suffixes may come in either order)
    BASE    := "latest" [ "~" N ] | ROW | TOKEN
    ROW     := 1, 2, ...          the row of `rlrun ls`, newest first
    TOKEN   := a run id, an id prefix or a run name
    CKPT    := "best" | "latest" | a frame count such as 5M, 1.5M, 500k, 2e6, 20_000

Parsing is pure: no database. `rlrun.registry.Registry.resolve` turns a `RunRef` into a run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from rlrun.errors import BadInput, RunReferenceError, SizeError
from rlrun.sizes import parse_size

RefKind = Literal["latest", "row", "token"]

FORMS = (
    "use latest, latest~N, a row number from `rlrun ls`, a run id, id prefix or name, "
    "optionally followed by /sK and @best, @latest or @<frames> (e.g. latest/s1@best)"
)

_LATEST = re.compile(r"latest(?:~(?P<offset>[0-9]*))?")
_ROW = re.compile(r"[0-9]+")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SESSION = re.compile(r"[sS](?P<index>[0-9]+)")
_SUFFIX = re.compile(r"([/@])([^/@]*)")
_NAMED_CHECKPOINTS = ("best", "latest")


@dataclass(frozen=True)
class RunRef:
    """A parsed reference. Only the fields that belong to `kind` are meaningful."""

    kind: RefKind
    offset: int = 0  # latest~N: how many runs before the newest
    row: int = 0  # 1-based row of `rlrun ls`
    token: str = ""  # id, id prefix or name
    session: int | None = None  # /sK
    checkpoint: str | None = None  # "best", "latest", or a frame count as decimal digits

    @property
    def base(self) -> str:
        """The run part in canonical form, for messages: `latest~2`, `3`, `k3ab`."""
        if self.kind == "latest":
            return f"latest~{self.offset}" if self.offset else "latest"
        return str(self.row) if self.kind == "row" else self.token

    @property
    def checkpoint_frame(self) -> int | None:
        """The frame of an `@<frames>` suffix, None for @best, @latest or no suffix."""
        if self.checkpoint is None or self.checkpoint in _NAMED_CHECKPOINTS:
            return None
        return int(self.checkpoint)

    def __str__(self) -> str:
        session = "" if self.session is None else f"/s{self.session}"
        checkpoint = "" if self.checkpoint is None else f"@{self.checkpoint}"
        return f"{self.base}{session}{checkpoint}"


def _error(text: str, problem: str) -> RunReferenceError:
    return RunReferenceError(f"bad run reference {text!r}: {problem}; {FORMS}")


def _parse_base(text: str, base: str) -> RunRef:
    if not base:
        raise _error(text, "no run named before the suffix" if text.strip() else "it is empty")
    if base.startswith("latest~"):
        match = _LATEST.fullmatch(base)
        if match is None:
            raise _error(text, "`latest~` must be followed by a number")
        # `latest~` alone means the one before the newest, as `HEAD~` does in git.
        return RunRef("latest", offset=int(match["offset"] or 1))
    if base == "latest":
        return RunRef("latest")
    if _ROW.fullmatch(base):
        if int(base) == 0:
            raise _error(text, "rows start at 1")
        return RunRef("row", row=int(base))
    if _TOKEN.fullmatch(base) is None:
        raise _error(text, f"{base!r} has characters a run id or name cannot have")
    return RunRef("token", token=base)


def _parse_session(text: str, value: str) -> int:
    match = _SESSION.fullmatch(value)
    if match is None:
        raise _error(text, f"session suffix '/{value}' is not /s0, /s1, ...")
    return int(match["index"])


def _parse_checkpoint(text: str, value: str) -> str:
    if value in _NAMED_CHECKPOINTS:
        return value
    try:
        return str(parse_size(value, what="checkpoint frame"))
    except SizeError:
        raise _error(
            text, f"checkpoint '@{value}' is not @best, @latest or a frame count like @5M"
        ) from None


def _parse_suffixes(text: str, suffixes: str) -> tuple[int | None, str | None]:
    session: int | None = None
    checkpoint: str | None = None
    seen: set[str] = set()
    for marker, value in _SUFFIX.findall(suffixes):
        if marker in seen:
            raise _error(text, f"'{marker}' appears twice")
        seen.add(marker)
        if marker == "/":
            session = _parse_session(text, value)
        else:
            checkpoint = _parse_checkpoint(text, value)
    return session, checkpoint


def parse_ref(text: str) -> RunRef:
    """Parse a run reference; bad syntax raises RunReferenceError naming the problem."""
    cleaned = text.strip()
    cuts = [i for i in (cleaned.find("/"), cleaned.find("@")) if i >= 0]
    cut = min(cuts, default=len(cleaned))
    session, checkpoint = _parse_suffixes(text, cleaned[cut:])
    return replace(_parse_base(text, cleaned[:cut]), session=session, checkpoint=checkpoint)


def check_run_name(name: str) -> str:
    """A run name must read back as itself: not `latest`, not a row number, no `/` or `@`."""
    try:
        ref = parse_ref(name)
    except RunReferenceError:
        ref = None
    if ref != RunRef("token", token=name):
        raise BadInput(
            f"run name {name!r} cannot be used: a name starts with a letter or digit, uses only "
            "letters, digits, '.', '_' and '-', is not all digits and is not `latest`"
        )
    return name

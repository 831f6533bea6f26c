"""Domain errors, each carrying the exit code the CLI maps it to.

Library code raises these; only `rlrun.cli` turns them into a message and an exit code, so a
notebook calling the library gets ordinary exceptions with readable messages.
"""

from __future__ import annotations

import os
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3


class RlrunError(Exception):
    """Base class: a problem rlrun can explain in one line."""

    exit_code = EXIT_FAILED


class BadInput(RlrunError):
    """The user asked for something invalid; nothing was written or changed."""

    exit_code = EXIT_BAD_INPUT


class SpecError(BadInput):
    """A spec failed validation: one message per problem, each with its JSON path and a fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class SizeError(BadInput):
    """A size such as `20M` or `1.5k` could not be parsed."""


class RunReferenceError(BadInput):
    """A run reference is unknown, ambiguous or out of range."""


class EditRefused(BadInput):
    """A resume edit would change what the run already trained. `changes` holds the offending
    settings (objects with path, old, new and reason), shown as a table by the CLI."""

    def __init__(self, run_id: str, frame: int, changes: list[Any], *, fork: bool = False) -> None:
        self.run_id, self.frame, self.changes = run_id, frame, changes
        names = ", ".join(c.path for c in changes)
        if fork:
            advice = "a fork continues the parent's snapshot, which cannot hold them; train a new run instead"
        else:
            advice = "resume without them, or branch a new run with --fork"
        super().__init__(f"edit refused: {names} would change run {run_id} before frame {frame:,}; {advice}")


class Unavailable(RlrunError):
    """A service rlrun needs (the registry's database, a Ray cluster, an object store) is busy or
    cannot be reached. Nothing was written, and the same command succeeds once it answers: not bad
    input, so a script can tell "retry later" (this code) from "fix the command" (2)."""

    exit_code = EXIT_UNAVAILABLE


class RegistryError(RlrunError):
    """The registry cannot be used as it is (for example, it is newer than this rlrun)."""

    exit_code = EXIT_BAD_INPUT


class RegistryUnavailable(RegistryError):
    """The registry's database is busy (locked longer than rlrun waits) or its server cannot be
    reached or takes no more connections."""

    exit_code = EXIT_UNAVAILABLE


class StoreUnreachable(Unavailable):
    """An object-storage home's endpoint does not answer (a wrong bucket or credentials are bad
    input: the store answered no)."""


class TrainingFailed(RlrunError):
    """A session raised while training; the run is marked failed with the message."""

    exit_code = EXIT_FAILED


class ClusterUnreachable(Unavailable):
    """The cluster named for the sessions cannot be reached, or has no node that can run one, when
    a command starts; mid-search, the cluster was lost (`ClusterLost`'s case)."""


class ClusterLost(RlrunError):
    """The cluster that ran a run's sessions was lost while they ran: each session still open is
    recorded preempted (its snapshots kept, `rlrun resume` continues it), not failed."""

    exit_code = EXIT_FAILED


class Stopped(RlrunError):
    """A SIGINT/SIGTERM arrived before a command had written anything: it stops there, with the
    exit code of a graceful stop (128 + the signal)."""

    def __init__(self, signum: int, when: str) -> None:
        super().__init__(f"stopped by signal {signum} {when}")
        self.exit_code = 128 + signum


def install_hint(extra: str) -> str:
    """The command that installs an optional extra into this rlrun, for every message that needs
    one: from a clone (an editable install) the clone's extra, else the package index's."""
    return install_command(extra, _direct_url(), os.getcwd())


def install_command(extra: str, direct_url: dict[str, Any] | None, cwd: str) -> str:
    """`pip install 'rlrun[extra]'`, or for an editable install (pip's direct_url.json says so)
    `pip install -e '.[extra]'` run from the clone, the clone's path from elsewhere."""
    url = (direct_url or {}).get("url", "")
    if not (direct_url or {}).get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return f"pip install 'rlrun[{extra}]'"
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    clone = os.path.realpath(url2pathname(urlparse(url).path))
    where = "." if os.path.realpath(cwd) == clone else clone
    return f"pip install -e '{where}[{extra}]'"


def _direct_url() -> dict[str, Any] | None:
    """How pip installed rlrun (PEP 610), or None when it does not say."""
    import json
    from importlib import metadata

    try:
        text = metadata.distribution("rlrun").read_text("direct_url.json")
        return json.loads(text) if text else None
    except (metadata.PackageNotFoundError, ValueError):
        return None

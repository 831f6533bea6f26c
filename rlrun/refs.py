"""Run references: the one argument that names a run everywhere (see DESIGN.md).

    REF     := BASE [ "/s" K ] [ "@" CKPT ]     (the two suffixes may come in either order)
    BASE    := "latest" [ "~" N ] | ROW | TOKEN
    ROW     := 1, 2, ...          the row of `rlrun ls`, newest first
    TOKEN   := a run id, an id prefix or a run name
    CKPT    := "best" | "latest" | a frame count such as 5M, 1.5M, 500k, 2e6, 20_000
    PATH    := a run folder, a session folder (`.../s1`) or a checkpoint folder
               (`.../s1/checkpoints/f000000050000`), or a file in one, optionally followed by @CKPT

Which texts are paths (one rule, so a text never means two things): a text that starts with `/`,
`./`, `../` or `~` (or is `.` or `..`) is a path; any other text is a reference when it reads as
one (`abc/s1` is session s1 of run abc, never a folder `abc/s1` in the current directory: write
`./abc/s1` for that); a text that does not read as a reference but contains a `/` is a path when
it exists on disk (`runs/abc`, `runs/abc/s1/checkpoints/f000000050000`). A path is read back to its
run folder (the one holding `run.json`), session and checkpoint frame here; whether that folder is
inside the runs home is the resolver's question.

A `RunFilter` (status, algorithm, env, spec, name glob, since, sort) narrows the runs a reference
counts: `latest` is the newest run that passes it, a row number the row of `rlrun ls` with the
same filter and sort order.

Parsing touches no database (a path is looked at on disk, nothing more).
`rlrun.registry.Registry.resolve` turns a `RunRef` and a `RunFilter` into a run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, NamedTuple

from rlrun.errors import BadInput, RunReferenceError, SizeError
from rlrun.paths import RUN_MANIFEST
from rlrun.sizes import parse_size

RefKind = Literal["latest", "row", "token", "path"]

FORMS = (
    "use latest, latest~N, a row number from `rlrun ls`, a run id, id prefix or name, "
    "optionally followed by /sK and @best, @latest or @<frames> (e.g. latest/s1@best), "
    "or the path of a run, session or checkpoint folder"
)
_PATH_STARTS = ("/", "./", "../", "~")
_SNAPSHOT_FOLDER = re.compile(r"f(?P<frame>[0-9]{12})")

_LATEST = re.compile(r"latest(?:~(?P<offset>[0-9]*))?")
_ROW = re.compile(r"[0-9]+")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SESSION = re.compile(r"[sS](?P<index>[0-9]+)")
_SUFFIX = re.compile(r"([/@])([^/@]*)")
_NAMED_CHECKPOINTS = ("best", "latest")


class RunRef(NamedTuple):
    """A parsed reference. Only the fields that belong to `kind` are meaningful. (Named tuples
    here and in the registry: cheap to define, which `rlrun ls` start-up time notices.)"""

    kind: RefKind
    offset: int = 0  # latest~N: how many runs before the newest
    row: int = 0  # 1-based row of `rlrun ls`
    token: str = ""  # id, id prefix or name
    session: int | None = None  # /sK
    checkpoint: str | None = None  # "best", "latest", or a frame count as decimal digits
    path: str = ""  # kind "path": the absolute run folder (the one holding run.json)

    @property
    def base(self) -> str:
        """The run part in canonical form, for messages: `latest~2`, `3`, `k3ab`."""
        if self.kind == "latest":
            return f"latest~{self.offset}" if self.offset else "latest"
        if self.kind == "path":
            return self.path
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
    error = RunReferenceError(f"bad run reference {text!r}: {problem}; {FORMS}")
    error.problem = problem  # type: ignore[attr-defined]  # for parse_ref's path-or-reference message
    return error


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
        raise _error(text, f"checkpoint '@{value}' is not @best, @latest or a frame count like @5M") from None


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
    """Parse a run reference or a path (the rule is in the module's docstring); bad syntax, or a
    path that is not a run's, raises RunReferenceError naming the problem."""
    cleaned = text.strip()
    marked = cleaned in (".", "..") or cleaned.startswith(_PATH_STARTS)
    # A missing `/...` is also read as a reference, only to say what is wrong with it (`/s1`).
    if marked and (not cleaned.startswith("/") or _exists(cleaned)):
        return _parse_path(text, cleaned)
    try:
        return _parse_reference(text, cleaned)
    except RunReferenceError as error:
        if "/" not in cleaned:
            raise
        if _exists(cleaned):
            return _parse_path(text, cleaned)
        raise _error(
            text, f"no file or folder {cleaned!r} exists, and as a run reference: {getattr(error, 'problem', error)}"
        ) from None


def _exists(cleaned: str) -> bool:
    """Whether a path names something on disk, with or without an @CKPT suffix."""
    return any(
        Path(candidate).expanduser().exists() for candidate in (cleaned, cleaned.rpartition("@")[0]) if candidate
    )


def _parse_reference(text: str, cleaned: str) -> RunRef:
    cuts = [i for i in (cleaned.find("/"), cleaned.find("@")) if i >= 0]
    cut = min(cuts, default=len(cleaned))
    session, checkpoint = _parse_suffixes(text, cleaned[cut:])
    return _parse_base(text, cleaned[:cut])._replace(session=session, checkpoint=checkpoint)


def _parse_path(text: str, cleaned: str) -> RunRef:
    """A path to a run, session or checkpoint folder (or a file in one), with an optional @CKPT
    when the text as a whole names nothing on disk."""
    typed, checkpoint = cleaned, None
    if not Path(typed).expanduser().exists() and "@" in Path(typed).name:
        typed, _, suffix = cleaned.rpartition("@")
        checkpoint = _parse_checkpoint(text, suffix)
    target = Path(typed).expanduser()
    if not target.exists():
        raise _error(text, f"no file or folder {typed!r} exists")
    folder = target.absolute()
    folder = folder.parent if folder.is_file() else folder
    session: int | None = None
    snapshot = _SNAPSHOT_FOLDER.fullmatch(folder.name)
    if snapshot is not None and folder.parent.name == "checkpoints":
        if checkpoint is not None:
            raise _error(text, "a checkpoint folder already names its checkpoint; drop the '@' suffix")
        checkpoint, folder = str(int(snapshot["frame"])), folder.parent
    if folder.name == "checkpoints":
        folder = folder.parent
    if (match := _SESSION.fullmatch(folder.name)) is not None and not (folder / RUN_MANIFEST).is_file():
        session, folder = int(match["index"]), folder.parent
    if not (folder / RUN_MANIFEST).is_file():
        raise _error(
            text, f"{str(folder)!r} is not a run folder, nor a session or checkpoint folder in one (no {RUN_MANIFEST})"
        )
    return RunRef("path", path=str(folder), session=session, checkpoint=checkpoint)


def whole_run(text: str, command: str) -> RunRef:
    """A reference for a command that acts on whole runs: a /sK or @checkpoint suffix is refused,
    not ignored (`rlrun rm latest@1k` must not delete the run)."""
    ref = parse_ref(text)
    if ref.session is not None or ref.checkpoint is not None:
        raise RunReferenceError(
            f"{text!r}: `rlrun {command}` takes whole runs, not a session or a checkpoint;"
            f" name the run alone ({ref.base})"
        )
    return ref


# ---------------------------------------------------------------------------------------------
# Search references: `search:` and then what names a run (`latest`, `latest~N`, an id, an id prefix
# or a name), so a search and a run never read as each other.

SEARCH_PREFIX = "search:"
SEARCH_FORMS = "use search:latest, search:latest~N, or search: followed by a search id, id prefix or name"


def is_search_ref(text: str) -> bool:
    return text.strip().startswith(SEARCH_PREFIX)


class SearchRef(NamedTuple):
    """A parsed search reference: `ref` is what follows `search:` (kind latest or token), `text`
    the reference as messages show it (`search:` included)."""

    ref: RunRef
    text: str


def parse_search_ref(text: str) -> RunRef:
    """`search:latest` and the like: a RunRef of kind latest or token (rows and suffixes are refused)."""
    cleaned = text.strip()
    if not cleaned.startswith(SEARCH_PREFIX):
        raise RunReferenceError(f"{text!r} is not a search reference; {SEARCH_FORMS}")
    base = cleaned[len(SEARCH_PREFIX) :]
    if not base:
        raise RunReferenceError(f"bad search reference {text!r}: no search named after 'search:'; {SEARCH_FORMS}")
    try:
        ref = _parse_base(text, base)
    except RunReferenceError as error:
        raise RunReferenceError(
            f"bad search reference {text!r}: {getattr(error, 'problem', error)}; {SEARCH_FORMS}"
        ) from None
    if ref.kind == "row":
        raise RunReferenceError(f"bad search reference {text!r}: searches have no row numbers; {SEARCH_FORMS}")
    return ref


def parse_target(text: str) -> RunRef | SearchRef:
    """What a reference names, decided here once for every command: a search when it is in the
    `search:` namespace, else a run (`parse_ref`)."""
    return search_target(text) if is_search_ref(text) else parse_ref(text)


def search_target(text: str) -> SearchRef:
    """A reference read as a search's, `search:` optional (`ls --search abc` is `search:abc`)."""
    named = text if is_search_ref(text) else SEARCH_PREFIX + text.strip()
    return SearchRef(parse_search_ref(named), named)


NAME_RULE = (
    "a name uses only plain ASCII letters and digits and `_`, `.`, `-`, starts with a letter or"
    " digit, is not all digits and is not `latest`"
)
"""The run-name rule (`_TOKEN`, less what a reference reads otherwise), as messages and the docs say it."""


def check_run_name(name: str) -> str:
    """A run name must read back as itself: not `latest`, not a row number, no `/` or `@`."""
    try:
        ref = parse_ref(name)
    except RunReferenceError:
        ref = None
    if ref != RunRef("token", token=name):
        # The name as typed (a control character as ?), and each character the rule leaves out,
        # named so it can be seen: repr() would print 'caf\xe9' for a name that is not ASCII.
        shown = "".join(c if c.isprintable() else "?" for c in name)
        outside = dict.fromkeys(c for c in name if not (c.isascii() and (c.isalnum() or c in "._-")))
        named = [_character(c) for c in outside]
        said = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        why = f" ({said} {'is' if len(outside) == 1 else 'are'} not allowed)" if outside else ""
        raise BadInput(f'run name "{shown}" cannot be used{why}: {NAME_RULE}')
    return name


def _character(c: str) -> str:
    if c == " ":
        return "a space"
    return f"`{c}`" if c.isprintable() else f"U+{ord(c):04X}"


# ---------------------------------------------------------------------------------------------
# Filters: `--status`, `--algo`, `--env`, `--spec`, `--name`, `--since` and `--sort` narrow the
# runs that `rlrun ls` lists, and `latest` and row numbers count only the runs that pass them, so
# `rlrun enjoy latest --algo ppo` is the newest PPO run and `rlrun show 3 --sort best` is the third
# row of `rlrun ls --sort best`.

STATUSES = ("running", "finished", "failed", "preempted", "crashed")
"""A run's status as reported (crashed is computed on read, never stored)."""
SORTS = ("started", "best", "frames")
"""`--sort`: newest first, best evaluation first, most frames first."""

_DURATION = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[smhdw])", re.I)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SINCE_FORMS = "a duration like 2d, 12h, 30m or 1w, or a date like 2025-05-01 or 2025-05-01T09:30"


class RunFilter(NamedTuple):
    """Which runs a listing or a reference considers, and in what order rows are numbered.

    Matching: `algorithm`, `env` and `spec` are exact but ignore case; `name` is a glob (`*` any
    text, `?` one character) that ignores case; `since` keeps runs created at or after it.
    """

    status: str | None = None
    algorithm: str | None = None
    env: str | None = None
    spec: str | None = None
    name: str | None = None
    since: float | None = None
    since_text: str | None = None  # as the user typed it, for messages
    sort: str = "started"
    spec_option: str = "--spec"  # the option that gave `spec`, for messages: --spec or --of (resume has only --of)

    @classmethod
    def of(
        cls,
        *,
        status: str | None = None,
        algorithm: str | None = None,
        env: str | None = None,
        spec: str | None = None,
        name: str | None = None,
        since: str | None = None,
        sort: str | None = None,
        now: float | None = None,
        of: str | None = None,
    ) -> RunFilter:
        """A filter from command-line values; a bad value raises BadInput naming the option.
        `of` is `--of SPEC`, the spec-name filter every command that takes a reference accepts
        (`resume`'s `--spec` is an edited spec file, so `--of` is the name that never collides);
        `spec` is the older `--spec NAME` of `ls`, `show`, `enjoy`, `plot` and `rm`.

        Args:
            status: Only runs with this status: running, finished, failed, preempted, crashed.
            algorithm: Only runs of this algorithm (`ppo`).
            env: Only runs on this env id (`CartPole-v1`).
            spec: Only runs of this spec name (`ls --spec`).
            name: Only runs whose name matches this glob (`cartpole-*`).
            since: Only runs started since: 2d, 12h, 30m, 1w or a date such as 2025-05-01.
            sort: Row order: started (newest first; the default), best (best evaluation first) or
                frames (most frames first).
            now: The time `since` counts back from (None: now).
            of: Only runs of this spec name (`--of`), as `spec`.
        """
        if of is not None and spec is not None and of.lower() != spec.lower():
            raise BadInput(f"--of {of} and --spec {spec} name different specs; give one of them")
        if status is not None and status not in STATUSES:
            raise BadInput(
                f"--status {status!r} is not a run status{_suggest(status, STATUSES)}; use one of {', '.join(STATUSES)}"
            )
        if sort is not None and sort not in SORTS:
            raise BadInput(f"--sort {sort!r} is not a sort order{_suggest(sort, SORTS)}; use one of {', '.join(SORTS)}")
        return cls(
            status=status,
            algorithm=algorithm,
            env=env,
            spec=of or spec,
            name=name,
            since=None if since is None else parse_since(since, now),
            since_text=since,
            sort=sort or "started",
            spec_option="--of" if of is not None else "--spec",
        )

    @property
    def narrows(self) -> bool:
        """Whether some runs may be left out (sorting alone leaves every run in)."""
        return any(v is not None for v in (self.status, self.algorithm, self.env, self.spec, self.name, self.since))

    def describe(self) -> str:
        """The options as typed, for messages: `--status finished --algo ppo`."""
        options = [
            ("--status", self.status),
            ("--algo", self.algorithm),
            ("--env", self.env),
            (self.spec_option, self.spec),
            ("--name", self.name),
            ("--since", self.since_text),
        ]
        if self.sort != "started":
            options.append(("--sort", self.sort))
        return " ".join(f"{flag} {value}" for flag, value in options if value is not None)


def _suggest(value: str, choices: tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_since(text: str, now: float | None = None) -> float:
    """`--since`: a duration back from now (`2d`, `12h`, `1.5w`) or a local date or date-time."""
    import time
    from datetime import datetime

    cleaned = text.strip()
    match = _DURATION.fullmatch(cleaned)
    if match is not None:
        seconds = float(match["number"]) * _UNIT_SECONDS[match["unit"].lower()]
        return (time.time() if now is None else now) - seconds
    try:
        return datetime.fromisoformat(cleaned).timestamp()
    except ValueError:
        raise BadInput(f"--since {text!r} is not a time; use {_SINCE_FORMS}") from None


def like_pattern(glob: str) -> str:
    r"""A `--name` glob as a SQL LIKE pattern with `\` as the escape character."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")

"""Run references (`latest`, a row number, a name, an id or its prefix, with filters): which run
one names, and the messages that say why none or several do; and which session and checkpoint
its `/sK` and `@checkpoint` suffixes name in it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rlrun import paths, storage
from rlrun.errors import RunReferenceError
from rlrun.refs import RunFilter, RunRef, like_pattern, parse_ref
from rlrun.registry.database import Transaction
from rlrun.registry.liveness import SETTLED_SQL, Liveness, page_status
from rlrun.registry.queries import Reads
from rlrun.registry.records import (
    NEWEST_FIRST,
    RUN_SELECT,
    SEARCH_SELECT,
    CheckpointRecord,
    RunDetail,
    RunRecord,
    SearchRecord,
    SessionRecord,
)
from rlrun.snapshot.retention import kinds

_MAX_CANDIDATES = 10


class Resolution(Reads):
    """Resolving references (mixed into `Registry`)."""

    def resolve(self, ref: str | RunRef, filters: RunFilter | None = None, *, anywhere: bool = False) -> RunRecord:
        """The run a reference names among the runs that pass `filters` (`latest` is the newest
        of them, a row number counts them in `filters.sort` order). The caller handles the
        reference's /sK and @checkpoint parts.

        A registry in $RLRUN_DB may list runs of other homes. A caller that reads or writes the
        run's folder in this home (`enjoy`, `resume`, ...) gets a run of another home refused in one
        line that says where it lives and how to name it (`RunElsewhere`, exit 2), never a run
        whose snapshots it would then call missing; `anywhere=True` returns it, for a caller that
        finds its folder with `home_of` (`show`, `rm`)."""
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        chosen = filters or RunFilter()
        with self._transaction(write=False) as tx:
            run, settled = self._find(tx, parsed, chosen)
            alive = run.status == "running" and settled is None and bool(self._live_runs(tx, [run.id]))
        run = run._replace(status=page_status(run.status, settled, alive))
        if parsed.session is not None and parsed.session >= run.num_sessions:
            raise RunReferenceError(_no_such_session(parsed, run))
        if not anywhere and (where := self.elsewhere(run)) is not None:
            raise RunElsewhere(
                f"run {run.id} lives in another home, {run_address(where, run.id)}, not in"
                f" {paths.home_address(self.home)}; name its home: --home {_quoted(where)}"
            )
        return run

    def elsewhere(self, run: RunRecord) -> str | None:
        """The home `run` lives in (its address) when it is not this registry's home, else None.

        A run lives where its home was recorded (`RunRecord.home`); one recorded before rlrun kept
        it lives in the registry's home, as it always did. A run recorded in a local folder whose
        folder is in this (local) home lives here too: a home moved or copied whole keeps its runs.
        A run recorded in object storage lives only there (a working copy is a cache, not a home)."""
        recorded = run.home
        if recorded is None or recorded == paths.home_address(self.home):
            return None
        if (
            not storage.is_url(recorded)
            and storage.mirror_of(self.home) is None
            and (paths.run_dir(self.home, run.id) / paths.RUN_MANIFEST).is_file()
        ):
            return None
        return recorded

    def runs_elsewhere(self) -> dict[str, str]:
        """The runs of this registry that live in another home (`elsewhere`), by id: their homes.
        A home's upkeep (`rlrun gc`) leaves them to theirs."""
        here = paths.home_address(self.home)
        with self._transaction(write=False) as tx:
            found = tx.rows(
                f"SELECT {RUN_SELECT} FROM runs r WHERE r.home IS NOT NULL AND r.home <> :here", {"here": here}
            )
        runs = [RunRecord(*row) for row in found]
        return {run.id: where for run in runs if (where := self.elsewhere(run)) is not None}

    def home_of(self, run: RunRecord) -> Path:
        """The folder on this machine that holds `run`'s home: this registry's, or the home it lives
        in (`elsewhere`): for a home in object storage its working copy (its store is not contacted
        here: `storage.reach`), for a local one its folder. A local home elsewhere that this
        machine does not hold is bad input naming it (`RunElsewhere`); a store whose library is
        not installed, bad input naming what to install."""
        where = self.elsewhere(run)
        if where is None:
            return self.home
        if storage.is_url(where):
            return storage.open_home(where)
        folder = Path(where)
        if not paths.run_dir(folder, run.id).is_dir():
            raise RunElsewhere(
                f"run {run.id} lives in another home, {run_address(where, run.id)}, which this"
                f" machine does not hold; run the command where it does, with --home {_quoted(where)}"
            )
        return folder

    def resolve_search(self, ref: str | RunRef) -> SearchRecord:
        """The search a `search:...` reference names: the newest (`search:latest~N`), or one by
        id, name or unambiguous id prefix; its status as reported."""
        from rlrun.refs import parse_search_ref

        parsed = parse_search_ref(ref) if isinstance(ref, str) else ref
        with self._transaction(write=False) as tx:
            return Liveness(tx.now()).search_of(self._find_search(tx, parsed))

    def _find_search(self, tx: Transaction, ref: RunRef) -> SearchRecord:
        newest = "q.created_at DESC, q.id DESC"
        if not tx.rows("SELECT 1 FROM searches LIMIT 1"):
            raise RunReferenceError(
                f"no searches in {paths.home_address(self.home)} yet; start one with `rlrun search SPEC`"
            )
        if ref.kind == "latest":
            rows = tx.rows(
                f"SELECT {SEARCH_SELECT} FROM searches q ORDER BY {newest} LIMIT 1 OFFSET :offset",
                {"offset": ref.offset},
            )
            if rows:
                return SearchRecord(*rows[0])
            total = int(tx.rows("SELECT COUNT(*) FROM searches")[0][0])
            raise RunReferenceError(f"search:{ref.base}: only {total} searches; see `rlrun ls --searches`")
        for condition, value in (("q.id = :token", ref.token.lower()), ("q.name = :token", ref.token)):
            exact = tx.rows(f"SELECT {SEARCH_SELECT} FROM searches q WHERE {condition}", {"token": value})
            if exact:
                return SearchRecord(*exact[0])
        candidates = [
            SearchRecord(*row)
            for row in tx.rows(
                f"SELECT {SEARCH_SELECT} FROM searches q WHERE q.id LIKE :prefix ESCAPE '\\' ORDER BY {newest}"
                f" LIMIT {_MAX_CANDIDATES + 1}",
                {"prefix": like_pattern(ref.token.lower()) + "%"},
            )
        ]
        if len(candidates) > 1:
            shown = ", ".join(f"{c.id}{f' ({c.name})' if c.name else ''}" for c in candidates[:_MAX_CANDIDATES])
            raise RunReferenceError(f"'search:{ref.token}' is ambiguous: {shown}; type more of the id")
        if not candidates:
            raise RunReferenceError(f"no search matches 'search:{ref.token}'; see `rlrun ls --searches`")
        return candidates[0]

    def _find(self, tx: Transaction, ref: RunRef, filters: RunFilter) -> tuple[RunRecord, str | None]:
        """The run and, if it is stored running, the status its sessions settle it at (or None)."""
        found: tuple[RunRecord, str | None] | None
        if ref.kind == "path":
            found = self._find_folder(tx, ref, filters)
        elif ref.kind == "token":
            found = self._find_token(tx, ref.token, filters)
        else:
            # `latest` is always the newest; rows follow the listing's order.
            order = filters if ref.kind == "row" else filters._replace(sort="started")
            position = ref.offset if ref.kind == "latest" else ref.row - 1
            page = self._page(tx, order, 1, position)
            found = (page[0][0], page[0][3]) if page else None
        if found is None:
            raise RunReferenceError(self._not_found(tx, ref, filters))
        return found

    def _find_folder(self, tx: Transaction, ref: RunRef, filters: RunFilter) -> tuple[RunRecord, str | None] | None:
        """A run folder names its run by its id, and only inside this home."""
        folder = Path(ref.path)
        if not is_inside(folder, self.home):
            raise RunReferenceError(
                f"{folder} is a run folder outside the runs home {paths.home_address(self.home)}; `rlrun enjoy` and"
                f" `rlrun show` read it where it is, `rlrun import {folder}` adds it to the home"
            )
        where, params = self._where(tx, filters)
        found = tx.rows(
            f"SELECT {RUN_SELECT}, {SETTLED_SQL} FROM runs r WHERE r.id = :id AND {where}",
            {**params, "id": folder.name},
        )
        if found:
            return RunRecord(*found[0][:-1]), found[0][-1]
        if filters.narrows and tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": folder.name}):
            return None
        raise RunReferenceError(
            f"{folder} is a run folder the registry of {paths.home_address(self.home)} does not"
            " list; `rlrun db rebuild` adds it"
        )

    def _find_token(self, tx: Transaction, token: str, filters: RunFilter) -> tuple[RunRecord, str | None] | None:
        # Ids are lowercase; a name is matched exactly as typed; then id prefixes.
        where, params = self._where(tx, filters)
        columns = f"{RUN_SELECT}, {SETTLED_SQL}"
        for condition, value in (("r.id = :token", token.lower()), ("r.name = :token", token)):
            exact = tx.rows(f"SELECT {columns} FROM runs r WHERE {condition} AND {where}", {**params, "token": value})
            if exact:
                return RunRecord(*exact[0][:-1]), exact[0][-1]
        candidates = tx.rows(
            f"SELECT {columns} FROM runs r WHERE r.id LIKE :prefix ESCAPE '\\' AND {where}"
            f" ORDER BY {NEWEST_FIRST} LIMIT {_MAX_CANDIDATES + 1}",
            {**params, "prefix": like_pattern(token.lower()) + "%"},
        )
        if len(candidates) > 1:
            raise RunReferenceError(_ambiguous(token, [RunRecord(*row[:-1]) for row in candidates]))
        return (RunRecord(*candidates[0][:-1]), candidates[0][-1]) if candidates else None

    def _not_found(self, tx: Transaction, ref: RunRef, filters: RunFilter) -> str:
        if not tx.rows("SELECT 1 FROM runs LIMIT 1"):
            return f"no runs in {paths.home_address(self.home)} yet; start one with `rlrun train reinforce_cartpole`"
        narrowed = filters.describe() if filters.narrows else ""
        listing = f"`rlrun ls {narrowed}`" if narrowed else "`rlrun ls`"
        if ref.kind == "path":
            return f"run {Path(ref.path).name} ({ref.path}) does not match {narrowed}; see {listing}"
        if ref.kind == "token":
            with_filters = f" with {narrowed}" if narrowed else ""
            if tx.rows(
                "SELECT 1 FROM searches WHERE name = :name OR id = :id", {"name": ref.token, "id": ref.token.lower()}
            ):
                return f"{ref.token!r} is a search, not a run: use `search:{ref.token}`"
            closest = self._closest_name(tx, ref.token, filters)
            return f"no run matches {ref.token!r}{with_filters}{closest}; see {listing}"
        where, params = self._where(tx, filters)
        total = int(tx.rows(f"SELECT COUNT(*) FROM runs r WHERE {where}", params)[0][0])
        if total == 0:
            return f"no runs match {narrowed}{self._hint(tx, filters)}; see `rlrun ls`"
        plural = "run" if total == 1 else "runs"
        matching = f" match {narrowed}" if narrowed else ""
        return f"{ref.base}: only {total} {plural}{matching}; see {listing}"

    def _closest_name(self, tx: Transaction, token: str, filters: RunFilter) -> str:
        """` (did you mean 'NAME'?)` for the name closest to a mistyped one among the runs the
        filters pass, or nothing."""
        import difflib

        where, params = self._where(tx, filters)
        names = [
            name
            for (name,) in tx.rows(f"SELECT r.name FROM runs r WHERE r.name IS NOT NULL AND {where}", params)
            if name != token
        ]
        close = difflib.get_close_matches(token, names, n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""

    @staticmethod
    def _hint(tx: Transaction, filters: RunFilter) -> str:
        """Name the values that exist when a filter asks for one that does not."""
        for flag, column, value in (
            ("--algo", "algorithm", filters.algorithm),
            ("--env", "env_id", filters.env),
            (filters.spec_option, "spec_name", filters.spec),
        ):
            if value is None:
                continue
            known = [v for (v,) in tx.rows(f"SELECT DISTINCT {column} FROM runs ORDER BY {column}")]
            if value.lower() not in {v.lower() for v in known}:
                return f" (no run has {flag} {value}; there are {', '.join(known[:_MAX_CANDIDATES])})"
        return ""


class RunElsewhere(RunReferenceError):
    """The run lives in another home than the one a command was given (bad input: exit 2)."""


def run_address(home: str, run_id: str) -> str:
    """How messages name a run's folder: under its home's URL (`s3://bucket/runs/k3ab9x2m`) or folder."""
    return f"{home.rstrip('/')}/{run_id}"


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def is_inside(run_folder: Path, home: Path) -> bool:
    """Whether a run folder is one of this home's (symbolic links followed)."""
    return run_folder.resolve().parent == home.resolve()


class CheckpointChoice(NamedTuple):
    """The session and checkpoint a reference names in a run."""

    session: SessionRecord
    checkpoint: CheckpointRecord
    score: float | None
    """The training evaluation mean at the checkpoint's frame (what made it best), if any."""


def choose_checkpoint(detail: RunDetail, ref: RunRef) -> CheckpointChoice:
    """The session `/sK` names, else the one with the best training evaluation; in it, the
    checkpoint `@best` (the default: the best evaluation mean), `@latest` or `@FRAMES` names; the
    newest where nothing was evaluated. A checkpoint that is not there is bad input listing those
    that are."""
    session = _session(detail, ref.session)
    checkpoints = sorted((c for c in detail.checkpoints if c.session_index == session.index), key=lambda c: c.frame)
    where = f"run {detail.run.id} session s{session.index}"
    if not checkpoints:
        raise RunReferenceError(f"{where} has no checkpoint yet; train or resume it first")
    scores = {e.frame: e.mean for e in detail.evaluations if e.session_index == session.index and e.kind == "train"}
    wanted = ref.checkpoint_frame
    if wanted is not None:
        exact = [c for c in checkpoints if c.frame == wanted]
        if not exact:
            frames = ", ".join(f"{c.frame:,}" for c in checkpoints)
            raise RunReferenceError(f"{where} has no checkpoint at frame {wanted:,}; it has {frames}")
        chosen = exact[0]
    elif ref.checkpoint == "latest" or not any(c.frame in scores for c in checkpoints):
        chosen = checkpoints[-1]
    else:
        # On a tied score the checkpoint labelled `best` (the first to reach it) wins, then the newest.
        chosen = max(
            (c for c in checkpoints if c.frame in scores), key=lambda c: (scores[c.frame], "best" in kinds(c), c.frame)
        )
    return CheckpointChoice(session, chosen, scores.get(chosen.frame))


def _session(detail: RunDetail, index: int | None) -> SessionRecord:
    if index is not None:
        return next(s for s in detail.sessions if s.index == index)  # resolve() checked the range
    evaluated = [s for s in detail.sessions if s.best_eval is not None]
    if evaluated:
        return max(evaluated, key=lambda s: (s.best_eval, -s.index))
    return max(detail.sessions, key=lambda s: (s.frame, -s.index))


def _no_such_session(ref: RunRef, run: RunRecord) -> str:
    count = run.num_sessions
    sessions = "1 session, s0" if count == 1 else f"{count} sessions, s0 to s{count - 1}"
    which = "it" if count == 1 else "one of them"
    return f"{ref}: run {run.id} has {sessions}; name {which} as {ref._replace(session=0)} or leave out /s{ref.session}"


def _ambiguous(token: str, candidates: Sequence[RunRecord]) -> str:
    shown = [
        f"{run.id} ({run.name + ', ' if run.name else ''}{_format_time(run.created_at)})"
        for run in candidates[:_MAX_CANDIDATES]
    ]
    more = ", and more" if len(candidates) > _MAX_CANDIDATES else ""
    return f"{token!r} is ambiguous: {', '.join(shown)}{more}; type more of the id"


def _format_time(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))

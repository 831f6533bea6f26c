"""Run references (`latest`, a row number, a name, an id or its prefix, with filters): which run
one names, and the messages that say why none or several do.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rlrun.errors import RunReferenceError
from rlrun.refs import RunFilter, RunRef, like_pattern, parse_ref
from rlrun.registry.database import Transaction
from rlrun.registry.liveness import SETTLED_SQL, page_status
from rlrun.registry.queries import Reads
from rlrun.registry.records import NEWEST_FIRST, RUN_SELECT, RunRecord

_MAX_CANDIDATES = 10


class Resolution(Reads):
    """Resolving references (mixed into `Registry`)."""

    def resolve(self, ref: str | RunRef, filters: RunFilter | None = None) -> RunRecord:
        """The run a reference names among the runs that pass `filters` (`latest` is the newest
        of them, a row number counts them in `filters.sort` order). The caller handles the
        reference's /sK and @checkpoint parts."""
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        chosen = filters or RunFilter()
        with self._transaction(write=False) as tx:
            run, settled = self._find(tx, parsed, chosen)
            alive = run.status == "running" and settled is None and bool(self._live_runs(tx, [run.id]))
        run = run._replace(status=page_status(run.status, settled, alive))
        if parsed.session is not None and parsed.session >= run.num_sessions:
            raise RunReferenceError(
                f"{parsed}: run {run.id} has {_sessions_phrase(run.num_sessions)}"
            )
        return run

    def _find(self, tx: Transaction, ref: RunRef, filters: RunFilter) -> tuple[RunRecord, str | None]:
        """The run and, if it is stored running, the status its sessions settle it at (or None)."""
        found: tuple[RunRecord, str | None] | None
        if ref.kind == "token":
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
        )  # fmt: skip
        if len(candidates) > 1:
            raise RunReferenceError(_ambiguous(token, [RunRecord(*row[:-1]) for row in candidates]))
        return (RunRecord(*candidates[0][:-1]), candidates[0][-1]) if candidates else None

    def _not_found(self, tx: Transaction, ref: RunRef, filters: RunFilter) -> str:
        if not tx.rows("SELECT 1 FROM runs LIMIT 1"):
            return f"no runs in {self.home} yet; start one with `rlrun train reinforce_cartpole`"
        narrowed = filters.describe() if filters.narrows else ""
        listing = f"`rlrun ls {narrowed}`" if narrowed else "`rlrun ls`"
        if ref.kind == "token":
            with_filters = f" with {narrowed}" if narrowed else ""
            return f"no run matches {ref.token!r}{with_filters}; see {listing}"
        where, params = self._where(tx, filters)
        total = int(tx.rows(f"SELECT COUNT(*) FROM runs r WHERE {where}", params)[0][0])
        if total == 0:
            return f"no runs match {narrowed}{self._hint(tx, filters)}; see `rlrun ls`"
        plural = "run" if total == 1 else "runs"
        matching = f" match {narrowed}" if narrowed else ""
        return f"{ref.base}: only {total} {plural}{matching}; see {listing}"

    @staticmethod
    def _hint(tx: Transaction, filters: RunFilter) -> str:
        """Name the values that exist when a filter asks for one that does not."""
        for flag, column, value in (("--algo", "algorithm", filters.algorithm), ("--env", "env_id", filters.env),
                                    ("--spec", "spec_name", filters.spec)):  # fmt: skip
            if value is None:
                continue
            known = [v for (v,) in tx.rows(f"SELECT DISTINCT {column} FROM runs ORDER BY {column}")]
            if value.lower() not in {v.lower() for v in known}:
                return f" (no run has {flag} {value}; there are {', '.join(known[:_MAX_CANDIDATES])})"
        return ""



def _sessions_phrase(count: int) -> str:
    if count == 1:
        return "1 session (s0)"
    return f"{count} sessions (s0..s{count - 1})"


def _ambiguous(token: str, candidates: Sequence[RunRecord]) -> str:
    shown = [
        f"{run.id} ({run.name + ', ' if run.name else ''}{_format_time(run.created_at)})"
        for run in candidates[:_MAX_CANDIDATES]
    ]
    more = ", and more" if len(candidates) > _MAX_CANDIDATES else ""
    return f"{token!r} is ambiguous: {', '.join(shown)}{more}; type more of the id"


def _format_time(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))

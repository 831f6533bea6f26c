"""Plain-text views of the registry for `rlrun ls`, `show` and `gc`: aligned tables, sparklines and
one-line summaries, coloured on a terminal.

They use nothing but the standard library, not Rich: registry commands answer within a small
multiple of the interpreter's own start-up, and importing Rich alone would spend a good part of
that. (Rich draws the live training display and the other commands' output, in `rlrun.cli.display`.)
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from rlrun import paths, storage
from rlrun.arithmetic import as_recorded_document
from rlrun.catalog.scores import scores
from rlrun.registry import RunDetail, RunRecord, RunSummary
from rlrun.registry.resolve import run_address
from rlrun.sizes import format_size

if TYPE_CHECKING:
    from rlrun.catalog import RunListing, TrackerReport

_STATUS_COLOUR = {
    "running": "36",
    "finished": "32",
    "failed": "31",
    "preempted": "33",
    "interrupted": "33",
    "crashed": "35",
    "pending": "2",
    "queued": "2",
}
SPARKS = "▁▂▃▄▅▆▇█"
_EVALUATIONS_SHOWN = 10  # per session in `rlrun show`; the sparkline and --json have them all


class Cell(NamedTuple):
    """Table text with an ANSI style (a number such as "32" for green) used on terminals."""

    text: str
    style: str = ""


def colour_enabled(stream: Any = None) -> bool:
    """Colour on a terminal, unless NO_COLOR asks otherwise (https://no-color.org)."""
    stream = stream or sys.stdout
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


def terminal_width(stream: Any = None) -> int | None:
    """The terminal's width in columns (COLUMNS first, as the shell sets it), or None off a terminal:
    piped into a file or another program, lines are not cut, so ids and paths stay whole."""
    stream = stream or sys.stdout
    if not (hasattr(stream, "isatty") and stream.isatty()):
        return None
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def fit(text: str, width: int | None) -> str:
    """Each line wider than `width` wrapped at its spaces, never inside a word, its continuation
    indented two past the line's own indent (a terminal would split the word where the line ends)."""
    if width is None:
        return text
    lines = []
    for line in text.split("\n"):
        if len(_ANSI.sub("", line)) <= width:
            lines.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        lines += textwrap.wrap(
            line,
            width,
            initial_indent="",
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
            drop_whitespace=True,
        )
    return "\n".join(lines)


def _paint(cell: Cell | str, colour: bool, width: int, right: bool) -> str:
    text, style = (cell.text, cell.style) if isinstance(cell, Cell) else (cell, "")
    padded = text.rjust(width) if right else text.ljust(width)
    return f"\x1b[{style}m{padded}\x1b[0m" if colour and style and text else padded


def _text(cell: Cell | str) -> str:
    return cell.text if isinstance(cell, Cell) else cell


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell | str]],
    *,
    right: Sequence[str] = (),
    title: str | None = None,
    colour: bool = False,
    indent: str = "",
    width: int | None = None,
    drop: Sequence[str] = (),
) -> str:
    """Columns padded to their widest cell, two spaces apart; `right` names right-aligned ones.

    Within `width` columns (a terminal's), the columns named in `drop` give way in that order until
    the table fits, as the live training table's do; a last column still too wide (free text: a
    change, a reason) wraps at its spaces under itself, so no word is ever split."""
    keep = list(range(len(headers)))

    def widths_of(kept: list[int]) -> list[int]:
        return [max([len(headers[i])] + [len(_text(row[i])) for row in rows]) for i in kept]

    def total(kept: list[int]) -> int:
        return len(indent) + sum(widths_of(kept)) + 2 * (len(kept) - 1)

    for name in drop:
        if width is None or total(keep) <= width:
            break
        keep = [i for i in keep if headers[i] != name]
    widths = widths_of(keep)
    aligned = [headers[i] in right for i in keep]
    # The last column wraps within what is left of the line, if that leaves it room to read.
    start = len(indent) + sum(widths[:-1]) + 2 * (len(keep) - 1)
    if width is not None and total(keep) > width and width - start >= 16 and not aligned[-1]:
        widths[-1] = max(len(headers[keep[-1]]), width - start)
    head = "  ".join(_paint(Cell(headers[i], "1"), colour, w, r) for i, w, r in zip(keep, widths, aligned, strict=True))
    lines = [title] if title else []
    lines.append(indent + head.rstrip())
    for row in rows:
        last = _text(row[keep[-1]])
        pieces = (
            textwrap.wrap(last, widths[-1], break_long_words=False, break_on_hyphens=False) or [""]
            if len(last) > widths[-1]
            else [last]
        )
        cells = [_paint(row[i], colour, w, r) for i, w, r in zip(keep[:-1], widths, aligned, strict=False)]
        final = row[keep[-1]]
        first = Cell(pieces[0], final.style) if isinstance(final, Cell) else pieces[0]
        lines.append(indent + "  ".join([*cells, _paint(first, colour, widths[-1], aligned[-1])]).rstrip())
        lines += [" " * start + piece for piece in pieces[1:]]
    return "\n".join(lines)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def when(timestamp: float | None) -> str:
    return "-" if timestamp is None else datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def status_cell(status: str) -> Cell:
    return Cell(status, _STATUS_COLOUR.get(status, ""))


def format_bytes(count: int) -> str:
    """1536 -> 1.5 kB (decimal units, as disks are sold)."""
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}"
    return f"{count} bytes"


def sparkline(values: Sequence[float], width: int = 32) -> str:
    """Values as a row of block characters, lowest to highest; at most `width` of them, evenly
    picked (always keeping the first and the last)."""
    if not values:
        return ""
    if len(values) > width:
        values = [values[round(i * (len(values) - 1) / (width - 1))] for i in range(width)]
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return SPARKS[3] * len(values)
    return "".join(SPARKS[round((v - low) / (high - low) * (len(SPARKS) - 1))] for v in values)


def described(run: RunRecord) -> str:
    """`run ID (NAME), SPEC, STATUS`: a run this command added to the home (import, pull)."""
    return f"run {run.id}{f' ({run.name})' if run.name else ''}, {run.spec_name}, {run.status}"


def resolved(run: RunRecord, reference: str, where: str | None = None) -> str:
    """What a reference named, as every command prints it; where the run's folder is (`where`,
    else under its home's URL when it lives in object storage), never a working copy's path."""
    label = f" ({run.name})" if run.name else ""
    if where is None and run.home is not None and storage.is_url(run.home):
        where = run_address(run.home, run.id)
    located = f", in {where}" if where else ""
    return f"{reference} → run {run.id}{label}, {run.spec_name}, {run.status}{located}"


# ---------------------------------------------------------------------------------------------
# ls


# The columns of `ls` in the order they give way on a narrow terminal: the name and id (what a
# person refers to a run by), its status, progress and score stay longest.
_LS_DROP = ("algorithm", "sessions", "training", "env", "started", "spec")


def runs_table(
    runs: Sequence[RunSummary],
    *,
    total: int,
    filters: str = "",
    colour: bool = False,
    width: int | None = None,
    jobs: dict[str, str] | None = None,
) -> str:
    """`jobs`: the SLURM jobs' states by id (`slurm_states`), shown after the status of a run whose
    jobs are queued or running (`preempted (PENDING)`: requeued, waiting to continue)."""
    title = [f"{len(runs)} of {total} runs"] if total > len(runs) else []
    if filters:
        title.append(f"{'' if title else f'{len(runs)} run{_s(len(runs))} '}matching {filters}")
    rows: list[list[Cell | str]] = []
    for run, best in zip(runs, scores([run.best_eval for run in runs]), strict=True):
        per_session = run.frames_target // max(run.num_sessions, 1)
        rows.append(
            [
                str(run.row),
                run.id,
                run.name or "",
                run.spec_name,
                run.algorithm,
                run.env_id,
                _with_jobs(run.status, run.slurm_jobs, jobs),
                str(run.num_sessions),
                f"{format_size(run.session_frame)}/{format_size(per_session)}{f' {run.phase}' if run.phase else ''}",
                best,
                when(run.created_at),
                duration(run.training_seconds),
            ]
        )
    # frames: the slowest session's against the per-session target; training: time spent training
    # (idle time between a stop and a resume left out). See docs/how-to/find-runs.md.
    headers = (
        "#",
        "id",
        "name",
        "spec",
        "algorithm",
        "env",
        "status",
        "sessions",
        "frames",
        "best eval",
        "started",
        "training",
    )
    shown = table(
        headers,
        rows,
        right=("#", "sessions", "frames", "best eval", "training"),
        title=" ".join(title) or None,
        colour=colour,
        width=width,
        drop=_LS_DROP,
    )
    return fit(shown, width)


def hidden_trials(count: int, *, alone: bool) -> str:
    """The line under `ls` that says how many trial runs it left out, and the option that shows them."""
    runs = f"{count} trial run{_s(count)}"
    return f"{runs} (of searches): --trials" if alone else f"and {runs}: --trials"


def runs_csv(runs: Sequence[RunSummary]) -> str:
    """`rlrun ls --csv`: the fields of `--json`, one run per line; times as local ISO 8601."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*RunSummary._fields, "phase"], lineterminator="\n")
    writer.writeheader()
    for run in runs:
        row = run.to_json()
        for key in ("created_at", "finished_at"):
            if row[key] is not None:
                row[key] = datetime.fromtimestamp(row[key]).astimezone().isoformat(timespec="seconds")
        writer.writerow(row)
    return buffer.getvalue()


def nothing_listed(listing: RunListing) -> str:
    """`rlrun ls` with no row to show: a filter that matches nothing, or an empty home."""
    if listing.filters.narrows and listing.everything:
        return (
            f"no runs match {listing.filters.describe()} ({listing.everything} runs in"
            f" {paths.home_address(listing.home)}); see `rlrun ls`"
        )
    return f"no runs in {paths.home_address(listing.home)} yet; start one with `rlrun train reinforce_cartpole`"


def slurm_states(jobs: Iterable[str | None]) -> dict[str, str]:
    """How SLURM says the runs' jobs stand (`runs.slurm_jobs`, comma-separated), in one `squeue`
    call; {} when no run has any, or SLURM cannot be asked."""
    ids = [job for listed in jobs if listed for job in listed.split(",")]
    if not ids:
        return {}
    from rlrun.training.slurm.queue import job_states

    return job_states(ids)


def _with_jobs(status: str, listed: str | None, jobs: dict[str, str] | None) -> Cell:
    """A run's status, followed by its SLURM jobs' states while one is queued or running."""
    active = _active_states(listed, jobs)
    cell = status_cell(_queued_or(status, active))
    return Cell(f"{cell.text} ({', '.join(active)})", cell.style) if active else cell


def _active_states(listed: str | None, jobs: dict[str, str] | None) -> list[str]:
    from rlrun.training.slurm.queue import ACTIVE

    if not listed or not jobs:
        return []
    return sorted({jobs[job] for job in listed.split(",") if jobs.get(job) in ACTIVE})


def _queued_or(status: str, job_states: list[str]) -> str:
    """A run that reads crashed only because its sessions have not started is queued: its job waits in
    SLURM's queue (longer than the liveness limit allows a silent session), it did not die."""
    if status != "crashed" or not job_states:
        return status
    from rlrun.training.slurm.queue import WAITING

    return "queued" if any(state in WAITING for state in job_states) else status


# ---------------------------------------------------------------------------------------------
# show


def run_detail(
    detail: RunDetail,
    *,
    colour: bool = False,
    width: int | None = None,
    jobs: dict[str, str] | None = None,
    stacks: dict[int, dict[str, str]] | None = None,
) -> str:
    """Everything `rlrun show` prints about a run, section by section; within `width` columns (a
    terminal's) its tables give way column by column and its lines wrap between words. `jobs`: its
    SLURM jobs' states (`slurm_states`); `stacks`: the software each session ran on last
    (`rlrun.session.stack.recorded_stacks`)."""
    sections = [_header(detail, colour, width, jobs), _data(detail), _sessions(detail, colour, width, stacks or {})]
    trend = _trend(detail)
    if trend:
        sections.append(trend)
    sections += [
        _checkpoints(detail, width),
        _evaluations(detail, width),
        _revisions(detail, width),
        _attempts(detail, width),
    ]
    if detail.spec_revisions:
        latest = _changed_revisions(detail)[-1]
        sections.append(
            f"spec: revision {latest.revision} (from frame {format_size(latest.frame)}); print it with"
            f" `rlrun show {detail.run.id} --spec-json`"
        )
    return fit("\n\n".join(s for s in sections if s), width)


def spec_document(detail: RunDetail) -> str:
    """`rlrun show --spec-json`: the run's latest spec revision, as JSON ready to edit and pass to
    `rlrun resume --spec`, or to `rlrun train` for a new run with the same arithmetic (an old run's
    revision made explicit)."""
    return json.dumps(as_recorded_document(json.loads(detail.spec_revisions[-1].spec_json)), indent=2)


def _between_dots(parts: Sequence[str], width: int | None) -> list[str]:
    """Parts joined by " · ", a new (indented) line where the next part would pass `width`."""
    lines = [parts[0]]
    for part in parts[1:]:
        if width is not None and len(lines[-1]) + 3 + len(part) > width:
            lines.append("  " + part)
        else:
            lines[-1] += " · " + part
    return lines


def _header(detail: RunDetail, colour: bool, width: int | None, jobs: dict[str, str] | None = None) -> str:
    run = detail.run
    plural = "s" if run.num_sessions != 1 else ""
    about = [
        f"spec {run.spec_name}",
        f"{run.algorithm} on {run.env_id}",
        f"{run.num_sessions} session{plural}",
        f"seed {run.seed}",
        f"target {format_size(run.max_frame)} frames",
        f"started {when(run.created_at)}",
        *([f"ended {when(run.finished_at)}"] if run.finished_at else []),
    ]
    status = status_cell(_queued_or(run.status, _active_states(run.slurm_jobs, jobs)))
    lines = [
        f"run {run.id}  {run.name or ''}  {_paint(status, colour, 0, False)}".replace("    ", "  "),
        *_between_dots(about, width),
    ]
    if run.error:
        lines.append(f"error: {run.error}")
    if run.origin is not None:
        from rlrun.imports.foreign import ORIGINS

        lines.append(
            f"foreign: imported from a {ORIGINS.get(run.origin, run.origin)} log folder (`rlrun import"
            f" {run.origin}`): its evaluations only, for ls, show, plot and compare"
        )
    if run.supervisor:
        lines.append(f"detached: {'supervised' if run.status == 'running' else 'was supervised'} by {run.supervisor}")
    if run.slurm_jobs:
        states = jobs or {}
        said = ", ".join(f"job {job} {states.get(job, '(state unknown)')}" for job in run.slurm_jobs.split(","))
        lines.append(f"slurm: {said}")
    if run.stop_requested_at is not None and run.status == "running":
        lines.append(
            f"stop requested {when(run.stop_requested_at)} (`rlrun stop`): its sessions stop at their next"
            " heartbeat with a snapshot"
        )
    lineage = []
    if run.parent_id:
        branched = next((r.frame for r in detail.spec_revisions if r.revision > 0), None)
        at = f" at frame {format_size(branched)}" if branched is not None else ""
        lineage.append(f"forked from {run.parent_id}{at}")
    if detail.forks:
        lineage.append(f"forks: {', '.join(detail.forks)}")
    if lineage:
        lines.append(" · ".join(lineage))
    return "\n".join(lines)


def _data(detail: RunDetail) -> str:
    """The dataset a run learns from, pinned by its digest, and each session's phase: offline (the
    gradient steps on the dataset, counted as frames) or online (`meta.offline_updates`)."""
    if not detail.spec_revisions:
        return ""
    spec = json.loads(detail.spec_revisions[-1].spec_json)
    data, offline = spec.get("data"), int(spec.get("meta", {}).get("offline_updates") or 0)
    if not data:
        return ""
    pinned = f" (sha256 {data['sha256'][:12]}…)" if data.get("sha256") else ""
    phases = [
        f"s{s.index} offline, {s.opt_step:,} of {offline:,} gradient steps"
        if s.frame < offline
        else f"s{s.index} online, {s.opt_step:,} gradient steps"
        for s in detail.sessions
    ]
    return "\n".join([f"data: {data['dataset']}{pinned}, {offline:,} offline updates", *phases])


def _history(detail: RunDetail, index: int) -> list[float]:
    return [e.mean for e in detail.evaluations if e.session_index == index and e.kind == "train"]


def _sessions(detail: RunDetail, colour: bool, width: int | None, stacks: dict[int, dict[str, str]]) -> str:
    # On a cluster: the node of each session's newest attempt (where it runs, or ran last).
    nodes = {a.session_index: a.node for a in detail.attempts if a.node}
    attempts = {s.index: sum(a.session_index == s.index for a in detail.attempts) for s in detail.sessions}
    # Best and last evaluations side by side, so one precision for both columns.
    shown_scores = scores([v for s in detail.sessions for v in (s.best_eval, s.last_eval)])
    rows: list[list[Cell | str]] = [
        [
            f"s{s.index}",
            str(s.seed),
            status_cell(s.status),
            format_size(s.frame),
            str(s.episode),
            str(s.opt_step),
            shown_scores[2 * i],
            shown_scores[2 * i + 1],
            Cell(sparkline(_history(detail, s.index)), "36"),
            *([nodes.get(s.index, "-"), str(attempts[s.index])] if nodes else []),
        ]
        for i, s in enumerate(detail.sessions)
    ]
    headers = (
        "session",
        "seed",
        "status",
        "frames",
        "episodes",
        "opt steps",
        "best eval",
        "last eval",
        "evaluations",
        *(("node", "attempts") if nodes else ()),
    )
    shown = table(
        headers,
        rows,
        right=("frames", "episodes", "opt steps", "best eval", "last eval"),
        title="sessions",
        colour=colour,
        indent="  ",
        width=width,
        drop=("opt steps", "episodes", "seed", "attempts", "node", "evaluations"),
    )
    # Why a session failed, in its own words (the exception's line), under the table: a failure
    # with no reason shown leaves a person nothing to act on.
    reasons = [f"  s{s.index} {s.status}: {s.error}" for s in detail.sessions if s.error]
    return "\n".join([shown, *reasons, *_software(stacks)])


def _software(stacks: dict[int, dict[str, str]]) -> list[str]:
    """The software the sessions ran on last: one line when they share it, else one per session."""
    from rlrun.session.stack import describe

    shown = {index: describe(stack) for index, stack in sorted(stacks.items())}
    if len(set(shown.values())) == 1:
        return [f"  software: {next(iter(shown.values()))}"]
    return [f"  s{index} software: {line}" for index, line in shown.items()]


def _trend(detail: RunDetail) -> str:
    """The evaluation return averaged over sessions at each frame, as a sparkline with its ends."""
    by_frame: dict[int, list[float]] = {}
    for e in detail.evaluations:
        if e.kind == "train":
            by_frame.setdefault(e.frame, []).append(e.mean)
    if not by_frame:
        return ""
    frames = sorted(by_frame)
    means = [sum(by_frame[f]) / len(by_frame[f]) for f in frames]
    best = max(range(len(means)), key=lambda i: means[i])
    across = " (mean of sessions)" if len(detail.sessions) > 1 else ""
    first, last, top = scores([means[0], means[-1], means[best]])
    return (
        f"evaluation return{across}: {sparkline(means, 48)}  {first} at {format_size(frames[0])}"
        f" → {last} at {format_size(frames[-1])}, best {top} at {format_size(frames[best])}"
    )


def _checkpoints(detail: RunDetail, width: int | None) -> str:
    if not detail.checkpoints:
        return "checkpoints: none yet"
    rows = [
        [f"s{c.session_index}", format_size(c.frame), c.kind, format_bytes(c.size_bytes), c.path, c.sha256[:16]]
        for c in detail.checkpoints
    ]
    return table(
        ("session", "frame", "kind", "size", "path", "sha256"),
        rows,
        right=("frame", "size"),
        title="checkpoints",
        indent="  ",
        width=width,
        drop=("sha256", "size"),
    )


def _evaluations(detail: RunDetail, width: int | None) -> str:
    if not detail.evaluations:
        return "evaluations: none yet"
    shown = []
    hidden: list[str] = []
    for session in detail.sessions:
        own = [e for e in detail.evaluations if e.session_index == session.index]
        if len(own) > _EVALUATIONS_SHOWN:
            hidden.append(f"{len(own) - _EVALUATIONS_SHOWN} earlier of s{session.index}")
        shown += own[-_EVALUATIONS_SHOWN:]
    columns = [scores([getattr(e, field) for e in shown]) for field in ("mean", "std", "min", "max")]
    rows: list[list[Cell | str]] = [
        [f"s{e.session_index}", format_size(e.frame), e.kind, *(column[i] for column in columns), str(e.episodes)]
        for i, e in enumerate(shown)
    ]
    text = table(
        ("session", "frame", "kind", "mean", "std", "min", "max", "episodes"),
        rows,
        right=("frame", "mean", "std", "min", "max", "episodes"),
        title="evaluations",
        indent="  ",
        width=width,
        drop=("episodes", "min", "max", "kind"),
    )
    if hidden:
        text += f"\n  ({', '.join(hidden)} not shown; `rlrun show --json` lists them all)"
    return text


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _changed_revisions(detail: RunDetail) -> list[Any]:
    """The first spec revision and those that changed something: a plain resume records a revision
    too (the spec it continued with, at its frame), which has nothing to say here; the attempts
    table shows the resume, `--json` every revision."""
    return [r for r in detail.spec_revisions if r.revision == 0 or (r.diff_json and json.loads(r.diff_json))]


def _revisions(detail: RunDetail, width: int | None) -> str:
    rows = []
    for r in _changed_revisions(detail):
        changes = json.loads(r.diff_json) if r.diff_json else []
        shown = "; ".join(f"{c['path']}: {_value(c['old'])} → {_value(c['new'])}" for c in changes)
        rows.append([str(r.revision), format_size(r.frame), when(r.created_at), shown or "initial"])
    return table(
        ("revision", "from frame", "made", "changes"),
        rows,
        title="spec revisions",
        indent="  ",
        width=width,
        drop=("made",),
    )


def _exactness(approximate: bool, note: str | None) -> str:
    """ "yes", with how the env came back when a resume says so ("yes (env: replayed 143 steps)")."""
    if approximate:
        return f"approximate: {note or ''}"
    return f"yes ({note})" if note else "yes"


def _attempts(detail: RunDetail, width: int | None) -> str:
    if not detail.attempts:
        return "attempts: none yet"
    clustered = any(a.node for a in detail.attempts)
    rows: list[list[Cell | str]] = [
        [
            f"s{a.session_index}",
            _kind(a.kind),
            format_size(a.start_frame),
            a.host or "-",
            *([a.node or "-"] if clustered else []),
            str(a.pid or "-"),
            when(a.started_at),
            a.end_status or "-",
            _exactness(a.approximate, a.note),
        ]
        for a in detail.attempts
    ]
    headers = (
        "session",
        "kind",
        "from frame",
        "host",
        *(("node",) if clustered else ()),
        "pid",
        "started",
        "ended",
        "exact",
    )
    return table(
        headers, rows, title="attempts", indent="  ", width=width, drop=("pid", "host", "started", "node", "from frame")
    )


def _kind(kind: str) -> str:
    """An attempt's kind; a retry or a requeue says it was automatic (the cluster executor's or
    SLURM's, not a person's)."""
    return f"{kind} (automatic)" if kind in ("retry", "requeue") else kind


# ---------------------------------------------------------------------------------------------
# gc


def garbage_report(report: Any, home: Any) -> str:
    """What `rlrun gc` removed (or would), and what it left alone and why."""
    verb = "would remove" if report.dry_run else "removed"
    found = [
        (len(report.orphans), "snapshot folder{s} no registry row points at"),
        (len(report.temporaries), "unfinished snapshot write{s}"),
        (len(report.retired), "snapshot{s} the retention setting no longer keeps"),
    ]
    done = [f"{n} {text.format(s='' if n == 1 else 's')}" for n, text in found if n]
    lines = [
        f"gc in {home}: {verb} {', '.join(done)} ({format_bytes(report.freed_bytes)})"
        if done
        else f"gc in {home}: nothing to remove"
    ]
    if report.skipped_running:
        lines.append(f"  left alone, still running: {', '.join(report.skipped_running)}")
    if report.other_homes:
        count = len(report.other_homes)
        lines.append(
            f"  left alone, {count} run{_s(count)} of the registry in other homes (`rlrun show ID` says"
            " where; gc there with --home)"
        )
    if report.missing:
        more = " ..." if len(report.missing) > 5 else ""
        lines.append(
            f"  {len(report.missing)} checkpoint row(s) point at a folder that is gone:"
            f" {', '.join(report.missing[:5])}{more}"
        )
    if report.unregistered:
        lines.append(
            f"  {len(report.unregistered)} run folder(s) not in the registry, left alone:"
            f" {', '.join(report.unregistered)}; `rlrun db rebuild` adds them back"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# show --metrics


def metrics_summary(logs: Sequence[tuple[str, dict[str, list[Any]]]], *, colour: bool = False) -> str:
    """`rlrun show --metrics`: per session (label, its log's columns), each logged scalar's latest
    value, range and sparkline over frames."""
    from rlrun.session.metrics_log import CLOCK, latest

    sections = []
    for label, log in logs:
        frames = log.get("frame", [])
        if not frames:
            sections.append(f"metrics of {label}: none logged yet")
            continue
        rows: list[list[Cell | str]] = []
        for name, values in log.items():
            present = [float(v) for v in values if v is not None and math.isfinite(v)]
            if name in CLOCK or not present:
                continue
            rows.append(
                [
                    name,
                    significant(latest(values)),
                    significant(min(present)),
                    significant(max(present)),
                    Cell(sparkline(present, 40), "36"),
                ]
            )
        title = (
            f"metrics of {label}: {len(frames)} rows, frames {format_size(int(frames[0] or 0))}"
            f" → {format_size(int(frames[-1] or 0))}"
        )
        sections.append(
            table(
                ("metric", "latest", "min", "max", "over frames"),
                rows,
                right=("latest", "min", "max"),
                title=title,
                colour=colour,
                indent="  ",
            )
        )
    return "\n\n".join(sections)


def significant(value: float | None) -> str:
    """Four significant digits: losses, rates and returns alike."""
    return "-" if value is None else f"{value:.4g}"


# ---------------------------------------------------------------------------------------------
# Searches (`rlrun ls --search`, `rlrun ls --searches`, `rlrun show search:...`)


def resolved_search(search: Any, reference: str) -> str:
    label = f" ({search.name})" if search.name else ""
    return f"{reference} → search {search.id}{label}, {search.spec_name}, {search.status}"


def _param(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if not isinstance(value, str) else value


def _trial_value(trial: Any) -> tuple[float | None, bool]:
    """A trial's score, and whether it is only its last intermediate one (it did not complete)."""
    if trial.value is not None:
        return trial.value, False
    intermediate = json.loads(trial.intermediate_json)
    return (intermediate[-1][1], True) if intermediate else (None, False)


def _trial_scores(trials: Sequence[Any]) -> dict[int, str]:
    """Each trial's score by trial id, told apart from the others' (in brackets: the last score of a
    trial that did not complete)."""
    values = [_trial_value(t) for t in trials]
    texts = scores([value for value, _ in values])
    return {t.id: f"({text})" if partial else text for t, (_, partial), text in zip(trials, values, texts, strict=True)}


def _how_searched(settings: dict[str, Any]) -> str:
    if settings.get("scheduler") == "pbt":
        factors = ",".join(f"{f:g}" for f in settings["factors"])
        return (
            f"population-based training seeded {settings['seed']}: {settings['population']} members, an exploit"
            f" every {settings['interval']:,} frames of {settings['max_frame']:,} (quantile"
            f" {settings['quantile']:g}, resample {settings['resample_probability']:g}, factors {factors})"
        )
    return f"{settings['sampler']} sampler seeded {settings['seed']}, {settings['pruner']} pruner"


def lineage_tree(detail: Any, lineage: Any) -> str:
    """A population-based training search's segments as a tree: each segment under the one it
    continues (its own member's, or, marked ←, the winner it copied at that frame), with its score
    and the values it explored."""
    trials = {t.id: t for t in detail.trials}
    scored = _trial_scores(detail.trials)
    children: dict[str | None, list[Any]] = {}
    for line in lineage:
        children.setdefault(line.parent_run_id, []).append(line)
    lines = ["lineage (m: member, g: generation; ← copied another member's snapshot and explored):"]

    def walk(line: Any, prefix: str, last: bool, root: bool) -> None:
        trial = trials[line.trial_id]
        exploit = line.parent_member is not None and line.parent_member != line.member
        explored = ", ".join(f"{path}={_param(trial.params[path])}" for path in line.mutated)
        mark = f" ← m{line.parent_member} at {line.frame:,}" + (f": {explored}" if explored else "") if exploit else ""
        branch = "" if root else ("└─ " if last else "├─ ")
        lines.append(
            f"  {prefix}{branch}m{line.member} g{line.generation} run {trial.run_id or '-'} {scored[trial.id]}{mark}"
        )
        below = children.get(trial.run_id, []) if trial.run_id is not None else []
        deeper = prefix if root else prefix + ("   " if last else "│  ")
        for i, child in enumerate(below):
            walk(child, deeper, i == len(below) - 1, False)

    for line in children.get(None, []):
        walk(line, "", True, True)
    return "\n".join(lines)


def trials_table(detail: Any, *, colour: bool = False, best_first: bool = False) -> str:
    """A search's trials: number, run, state, each parameter, score (in brackets: the last score of a
    trial that did not complete), and why a trial was pruned or failed."""
    paths = list(json.loads(detail.search.space_json))
    trials = list(detail.trials)
    if best_first:
        trials.sort(key=lambda t: (t.value is None, -(t.value or 0.0), t.number))
    scored = _trial_scores(trials)
    rows: list[list[Cell | str]] = []
    for trial in trials:
        params = json.loads(trial.params_json)
        rows.append(
            [
                str(trial.number),
                trial.run_id or "-",
                status_cell(trial.state),
                *[_param(params.get(p)) for p in paths],
                scored[trial.id],
                trial.note or "",
            ]
        )
    settings = json.loads(detail.search.settings_json)
    headers = ("trial", "run", "state", *paths, settings["metric"], "note")
    return table(headers, rows, right=("trial", settings["metric"]), colour=colour)


def searches_table(searches: Sequence[tuple[Any, int, float | None]], *, colour: bool = False) -> str:
    rows: list[list[Cell | str]] = []
    bests = scores([best for _, _, best in searches])
    for (search, ended, _), best in zip(searches, bests, strict=True):
        settings = json.loads(search.settings_json)
        rows.append(
            [
                search.id,
                search.name or "",
                search.spec_name,
                status_cell(search.status),
                f"{ended}/{settings['trials']}",
                settings["metric"],
                best,
                when(search.created_at),
            ]
        )
    headers = ("id", "name", "spec", "status", "trials", "metric", "best", "started")
    return table(headers, rows, right=("trials", "best"), colour=colour)


def search_detail(detail: Any, *, colour: bool = False) -> str:
    """`rlrun show search:...`: the search, its best trials, each parameter's importance, every trial."""
    search = detail.search
    settings = json.loads(search.settings_json)
    ended = [t for t in detail.trials if t.state != "running"]
    lines = [
        f"search {search.id}{f' ({search.name})' if search.name else ''}: {search.spec_name}, {search.status},"
        f" {len(ended)} of {settings['trials']} trials ended",
        f"  {_how_searched(settings)}, score: {settings['metric']} (mean over each trial's sessions),"
        f" started {when(search.created_at)}",
    ]
    if search.error:
        lines.append(f"  error: {search.error}")
    if search.stop_requested_at is not None and search.status == "running":
        lines.append(
            f"  stop requested {when(search.stop_requested_at)} (`rlrun stop search:`): it starts no more"
            " trials, and its trials in flight stop with snapshots"
        )
    lines.append("space:")
    lines += [f"  {path}: {json.dumps(distribution)}" for path, distribution in json.loads(search.space_json).items()]
    complete = sorted(
        (t for t in detail.trials if t.state == "complete" and t.value is not None),
        key=lambda t: (-(t.value or 0.0), t.number),
    )
    if complete:
        lines.append("best trials:")
        best = complete[:3]
        for trial, value in zip(best, scores([t.value for t in best]), strict=True):
            params = ", ".join(f"{k}={_param(v)}" for k, v in json.loads(trial.params_json).items())
            lines.append(f"  trial {trial.number} (run {trial.run_id or '-'}): {value}  {params}")
    if search.importance_json:
        # The method `rlrun.search.optuna_adapter.importance` uses (its IMPORTANCE_METHOD; not imported:
        # this view loads neither Optuna nor the search package).
        lines.append("parameter importance (PED-ANOVA over the complete trials):")
        for path, share in sorted(json.loads(search.importance_json).items(), key=lambda kv: -kv[1]):
            lines.append(f"  {path}: {share:.2f}")
    counts = {
        state: sum(t.state == state for t in detail.trials) for state in ("complete", "pruned", "failed", "running")
    }
    lines.append("trials: " + ", ".join(f"{n} {state}" for state, n in counts.items() if n))
    if detail.trials:
        lines.append(trials_table(detail, colour=colour))
    return "\n".join(lines)


def tracker_lines(run_id: str, reports: Iterable[TrackerReport]) -> list[str]:
    """What each session's trackers did not get, with the command that sends it; nothing when
    every point arrived."""
    lines = []
    for report in reports:
        delivered = report.delivered
        if delivered.undelivered:
            reason = f": {delivered.error}" if delivered.error else ""
            held = "" if delivered.last_frame is None else f" (it has points up to frame {delivered.last_frame:,})"
            lines.append(
                f"s{report.session}: {delivered.undelivered} point(s) not delivered to {delivered.tracker}"
                f"{held}{reason}; re-send with `rlrun track {run_id} --to {delivered.tracker}`"
            )
    return lines

"""What rlrun shows a person while it trains, resumes and replays: the live training display and
Rich tables, progress on stderr and a table that answers the command on stdout. (The registry
commands' views are plain text, in `rlrun.cli.views`, so they start fast.)

Nothing here imports torch or gymnasium.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rlrun.catalog.scores import score, scores, spread
from rlrun.cli.views import duration, resolved, significant
from rlrun.session import events
from rlrun.sizes import format_size

STATUS_STYLE = {
    "running": "cyan",
    "finished": "green",
    "failed": "red",
    "preempted": "yellow",
    "interrupted": "yellow",
    "crashed": "magenta",
    "pending": "dim",
}


def stderr_console() -> Console:
    """Rich output on stderr. Piped into a file or another program, lines are not cut at 80
    columns: tables keep their ids and paths whole."""
    console = Console(stderr=True)
    if not console.is_terminal:
        console.width = max(console.width, 200)
    return console


def stdout_console() -> Console:
    """Rich output on stdout, for a table that is the command's answer (`enjoy`'s episodes), with
    the same width rule as `stderr_console`."""
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 200)
    return console


def _status(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


# ---------------------------------------------------------------------------------------------
# Training progress


@dataclass
class _SessionLine:
    seed: int = 0
    frame: int = 0
    max_frame: int = 1
    fps: float = 0.0
    episode: int = 0
    return_mean: float | None = None
    headline: str | None = None
    headline_value: float | None = None
    last_eval: float | None = None
    best_eval: float | None = None
    status: str = "pending"
    started: float = field(default_factory=time.monotonic)


class TrainingDisplay:
    """Receives session events. On a terminal it keeps a live table, one row per session;
    elsewhere (a log file, CI) it prints a plain line per report."""

    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.lines: dict[int, _SessionLine] = {}
        self.live_mode = console.is_terminal if live is None else live
        self._live: Live | None = None

    def __enter__(self) -> TrainingDisplay:
        if self.live_mode:
            self._live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(*exc)

    def __call__(self, event: events.Event) -> None:
        line = self.lines.setdefault(event.index, _SessionLine())
        if isinstance(event, events.SessionStarted):
            line.seed, line.frame, line.max_frame, line.status = event.seed, event.frame, event.max_frame, "running"
            line.started = time.monotonic()
        elif isinstance(event, events.Progress):
            line.frame, line.max_frame, line.fps = event.frame, event.max_frame, event.frames_per_second
            line.episode, line.return_mean = event.episode, event.return_mean
            line.headline, line.headline_value = event.headline, event.headline_value
        elif isinstance(event, events.Evaluated):
            line.last_eval = event.mean
            if event.is_best:
                line.best_eval = event.mean
        elif isinstance(event, events.SessionEnded):
            line.status, line.frame = event.status, event.frame
        elif isinstance(event, events.Warned):  # above the live table too: said once, it must stay in view
            self.console.print(
                f"s{event.index} warning: {event.text}", style="yellow", highlight=False, markup=False, soft_wrap=True
            )
            return
        if self._live is not None:
            self._live.update(self._table())
        else:
            self._plain(event)

    def _plain(self, event: events.Event) -> None:
        tag = f"s{event.index}"
        if isinstance(event, events.Progress):
            line = self.lines[event.index]
            self.console.print(
                f"{tag} frame {format_size(event.frame)}/{format_size(event.max_frame)}  "
                f"{event.frames_per_second:,.0f} f/s  episodes {event.episode}  return {score(event.return_mean)}  "
                f"{_headline(line)}eval {score(line.last_eval)}  eta {duration(_eta(line))}",
                highlight=False,
            )
        elif isinstance(event, events.Evaluated):
            best = " (best)" if event.is_best else ""
            self.console.print(
                f"{tag} eval at {format_size(event.frame)}: {spread(event.mean, event.std)}{best}", highlight=False
            )
        elif isinstance(event, events.SessionEnded):
            detail = f": {event.error}" if event.error else f", best eval {score(event.best_eval)}"
            self.console.print(f"{tag} {event.status} at frame {format_size(event.frame)}{detail}", highlight=False)

    def _table(self) -> Table:
        """One row per session, with the columns that fit the console's width: the least important
        are dropped first (`_DROP_ORDER`), so no header or value is ever cut."""
        headline = next((line.headline for line in self.lines.values() if line.headline), None)
        cells = {index: self._cells(index, headline) for index in sorted(self.lines)}
        headers = {key: (headline or "") if key == "headline" else key for key in _COLUMNS}
        shown = [key for key in _COLUMNS if key != "headline" or headline]
        for key in _DROP_ORDER:
            if _width(shown, headers, cells.values()) <= self.console.width:
                break
            if key in shown:
                shown.remove(key)
        table = Table(box=None, pad_edge=False)
        for key in shown:
            table.add_column(headers[key], no_wrap=True, justify="left" if key in _LEFT else "right")
        for row in cells.values():
            table.add_row(*[_status(row[key]) if key == "status" else row[key] for key in shown])
        return table

    def _cells(self, index: int, headline: str | None) -> dict[str, str]:
        line = self.lines[index]
        done = min(line.frame / max(line.max_frame, 1), 1.0)
        filled = int(done * _BAR)
        return {
            "session": f"s{index}",
            "seed": str(line.seed),
            "frames": f"{format_size(line.frame)}/{format_size(line.max_frame)}",
            "": "█" * filled + "░" * (_BAR - filled),
            "done": f"{done:.0%}",
            "frames/s": f"{line.fps:,.0f}",
            "episodes": str(line.episode),
            "return": score(line.return_mean),
            "headline": significant(line.headline_value) if headline else "",
            "last eval": score(line.last_eval),
            "best eval": score(line.best_eval),
            "eta": duration(_eta(line)),
            "status": line.status,
        }


# The live table's columns, left to right, and the order they give way in on a narrow terminal:
# what a person glances at (which session, how far, how good, finished or not) goes last, and the
# algorithm's headline diagnostic (PPO's approx_kl: the first thing anyone debugging it looks at)
# outlasts the progress bar, so an 80-column terminal keeps it.
_COLUMNS = (
    "session",
    "seed",
    "frames",
    "",
    "done",
    "frames/s",
    "episodes",
    "return",
    "headline",
    "last eval",
    "best eval",
    "eta",
    "status",
)
_DROP_ORDER = ("seed", "episodes", "frames/s", "", "last eval", "headline", "eta", "return", "best eval")
_LEFT = {"session", "", "status"}
_BAR = 20
_GAP = 2  # Rich's default padding: one cell on each side of an inner column edge


def _width(shown: list[str], headers: dict[str, str], rows: Any) -> int:
    """The table's width with these columns: each column as wide as its widest cell, plus the gaps."""
    rows = list(rows)
    widths = [max([cell_len(headers[key])] + [cell_len(row[key]) for row in rows]) for key in shown]
    return sum(widths) + _GAP * (len(shown) - 1)


def _headline(line: _SessionLine) -> str:
    """The algorithm's main diagnostic and two spaces, once it has one."""
    return f"{line.headline} {significant(line.headline_value)}  " if line.headline else ""


def _eta(line: _SessionLine) -> float | None:
    if line.status != "running" or line.fps <= 0:
        return None
    return (line.max_frame - line.frame) / line.fps


# ---------------------------------------------------------------------------------------------
# Resume


def resume_plan(plan: Any, reference: str) -> Text:
    run = plan.run
    verb = "fork" if plan.fork else "resume"
    lines = [resolved(run, reference)]
    for session, start in plan.starts:
        origin = f"snapshot at frame {start.frame:,} ({start.kind})" if start else "the start (no snapshot)"
        lines.append(f"  {verb} s{session.index} from {origin}, to {plan.spec.meta.max_frame:,} frames")
    for change in plan.changes:
        lines.append(f"  edit {change.path}: {_value(change.old)} → {_value(change.new)} ({change.reason})")
    for skipped in plan.skipped:
        lines.append(f"  warning: skipped {skipped}")
    return Text("\n".join(lines))


def _value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def refusal_table(changes: list[Any]) -> Table:
    table = Table(title="edit refused", title_justify="left")
    for column in ("setting", "old value", "new value", "why"):
        table.add_column(column, overflow="fold")
    for change in changes:
        table.add_row(change.path, _value(change.old), _value(change.new), change.reason)
    return table


# ---------------------------------------------------------------------------------------------
# Enjoy


def enjoy_target(target: Any, reference: str) -> Text:
    checkpoint = target.checkpoint
    why = f", evaluation mean {score(target.score)} there" if target.score is not None else ", not evaluated"
    return Text(
        f"{resolved(target.run, reference)}\n  session s{target.session.index} (seed {target.session.seed}),"
        f" checkpoint at frame {checkpoint.frame:,} ({checkpoint.kind}){why}"
    )


def enjoy_table(result: Any) -> Table:
    mode = "stochastic" if result.stochastic else "greedy"
    table = Table(title=f"{len(result.episodes)} episodes, {mode}, seed {result.seed}", title_justify="left")
    table.add_column("episode", justify="right")
    table.add_column("return", justify="right")
    table.add_column("length", justify="right")
    returns = scores([episode.episode_return for episode in result.episodes])
    for i, (episode, shown) in enumerate(zip(result.episodes, returns, strict=True)):
        table.add_row(str(i), shown, str(episode.length))
    table.add_section()
    table.add_row("mean ± std", spread(result.mean, result.std), "")
    return table


def enjoy_video_line(result: Any) -> str | None:
    """Where the replay's video went: a line of its own under the table (a caption would wrap inside
    the table's narrow width and split the path)."""
    return f"video: {result.video} ({result.video_frames} frames)" if result.video else None

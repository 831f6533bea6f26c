"""`rlrun plot`: evaluation return (or, with `--metric`, any scalar of the training metrics logs)
against frames, mean ± std across a run's sessions, several runs overlaid with a legend, written to
an image file by matplotlib's headless Agg renderer.

Reads only the registry and the metrics logs; matplotlib is the one heavy import, and only once there is something to
draw. It is an optional extra: `pip install 'rlrun[plot]'`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput
from rlrun.registry import RunDetail

FORMATS = (".png", ".svg", ".pdf")


@dataclass(frozen=True)
class Curve:
    """One run's training evaluations: at each frame, the mean and std across its sessions."""

    label: str
    frames: list[int]
    mean: list[float]
    std: list[float]
    sessions: int


def curve(detail: RunDetail) -> Curve:
    """Average the sessions' evaluation means frame by frame (a frame where only some sessions
    have evaluated averages those)."""
    return _across_sessions(detail, [(e.frame, e.mean) for e in detail.evaluations if e.kind == "train"])


def metric_curve(detail: RunDetail, table: dict[str, list[Any]], metric: str) -> Curve:
    """One logged scalar of the run's sessions (`table`: their gathered metrics logs), averaged
    frame by frame as `curve` does; empty cells are skipped."""
    points = [(int(f), float(v)) for f, v in zip(table["frame"], table.get(metric, []), strict=False)
              if f is not None and v is not None and math.isfinite(v)]
    return _across_sessions(detail, points)


def _across_sessions(detail: RunDetail, points: list[tuple[int, float]]) -> Curve:
    by_frame: dict[int, list[float]] = {}
    for frame, value in points:
        by_frame.setdefault(frame, []).append(value)
    frames = sorted(by_frame)
    means = [sum(by_frame[f]) / len(by_frame[f]) for f in frames]
    stds = [_std(by_frame[f]) for f in frames]
    run = detail.run
    label = f"{run.name or run.id} ({run.algorithm}, {run.env_id}, {run.num_sessions} session"
    label += "s)" if run.num_sessions != 1 else ")"
    return Curve(label, frames, means, stds, run.num_sessions)


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def check_output(output: Path) -> None:
    """Refuse, before any work, a file type matplotlib will not write here or a missing folder."""
    if output.suffix.lower() not in FORMATS:
        raise BadInput(f"-o {output}: cannot write a {output.suffix or 'file without an extension'};"
                       f" use a {', '.join(FORMATS)} file")
    if not output.parent.is_dir():
        raise BadInput(f"-o {output}: folder {output.parent} does not exist; create it or write elsewhere")


def draw(curves: list[Curve], output: Path, *, title: str | None = None, metric: str | None = None) -> Path:
    """Write the curves (evaluation returns, or the training `metric`) to `output` and return it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BadInput("rlrun plot needs matplotlib: pip install 'rlrun[plot]'") from None
    # A bare Figure renders through Agg when saved: no pyplot, no GUI backend, no display needed.
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    for item in curves:
        if not item.frames:
            axes.plot([], [], label=f"{item.label}: {'nothing logged' if metric else 'not evaluated'} yet")
            continue
        line = axes.plot(item.frames, item.mean, marker="o" if len(item.frames) < 30 else None, markersize=3,
                         label=item.label)[0]  # fmt: skip
        low = [m - s for m, s in zip(item.mean, item.std, strict=True)]
        high = [m + s for m, s in zip(item.mean, item.std, strict=True)]
        axes.fill_between(item.frames, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel("frames")
    axes.set_ylabel(f"{metric or 'evaluation return'} (mean ± std across sessions)")
    axes.set_title(title or (f"training {metric}" if metric else "evaluation return"))
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.savefig(output, dpi=120)
    return output


def draw_search(detail: Any, output: Path, *, title: str | None = None) -> Path:
    """A search's score against its trial number, with the best so far as a step line; a trial that
    did not complete is drawn hollow at its last score."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BadInput("rlrun plot needs matplotlib: pip install 'rlrun[plot]'") from None
    import json

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    complete = [(t.number, t.value) for t in detail.trials if t.state == "complete" and t.value is not None]
    partial = [(t.number, t.intermediate[-1][1]) for t in detail.trials
               if t.state != "complete" and t.intermediate]  # fmt: skip
    if complete:
        axes.plot([n for n, _ in complete], [v for _, v in complete], "o", label="complete trials")
        best, steps = -math.inf, []
        for number, value in complete:
            best = max(best, value)
            steps.append((number, best))
        axes.step([n for n, _ in steps], [b for _, b in steps], where="post", label="best so far")
    if partial:
        axes.plot([n for n, _ in partial], [v for _, v in partial], "o", fillstyle="none",
                  label="pruned, failed or running (last score)")
    metric = json.loads(detail.search.settings_json)["metric"]
    axes.set_xlabel("trial")
    axes.set_ylabel(f"{metric} (mean over sessions)")
    search = detail.search
    axes.set_title(title or f"search {search.name or search.id}: {search.spec_name}")
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.savefig(output, dpi=120)
    return output

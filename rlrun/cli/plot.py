"""`rlrun plot`: draws what `rlrun.catalog.plot_data` computed (evaluation return, or with
`--metric` any scalar of the training metrics logs, against frames, mean ± std across a run's
sessions, several runs overlaid with a legend; or a search's trials) to an image file by
matplotlib's headless Agg renderer.

Draws only; matplotlib is the one heavy import, and only once there is something to draw. It is an
optional extra (`rlrun.errors.install_hint` writes the command).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlrun.catalog.curves import Curve, curve, metric_curve
from rlrun.catalog.figures import FORMATS, check_output, draw, frame_tick
from rlrun.errors import BadInput, install_hint

# Curves are computed, and a run's drawn, in rlrun.catalog (`rlrun publish` draws one too); their
# names stay importable from here, where they were.
__all__ = ["FORMATS", "Curve", "check_output", "curve", "draw", "draw_population", "draw_search", "metric_curve"]


def draw_search(detail: Any, output: Path, *, title: str | None = None) -> Path:
    """A search's score against its trial number, with the best so far as a step line; a trial that
    did not complete is drawn hollow at its last score."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise BadInput(f"rlrun plot needs matplotlib: {install_hint('plot')}") from None
    import json

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    complete = [(t.number, t.value) for t in detail.trials if t.state == "complete" and t.value is not None]
    partial = [(t.number, t.intermediate[-1][1]) for t in detail.trials if t.state != "complete" and t.intermediate]
    if complete:
        axes.plot([n for n, _ in complete], [v for _, v in complete], "o", label="complete trials")
        best, steps = -math.inf, []
        for number, value in complete:
            best = max(best, value)
            steps.append((number, best))
        axes.step([n for n, _ in steps], [b for _, b in steps], where="post", label="best so far")
    if partial:
        axes.plot(
            [n for n, _ in partial],
            [v for _, v in partial],
            "o",
            fillstyle="none",
            label="pruned, failed or running (last score)",
        )
    metric = json.loads(detail.search.settings_json)["metric"]
    axes.set_xlabel("trial")
    axes.set_ylabel(f"{metric} (mean over sessions)")
    search = detail.search
    axes.set_title(title or f"search {search.name or search.id}: {search.spec_name}")
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.savefig(output, dpi=120)
    return output


def draw_population(population: Any, output: Path, *, title: str | None = None) -> Path:
    """A population-based training search: each member's evaluation return against frames, each
    exploit marked where the member took over another's snapshot (a triangle at that member's
    score there, labelled with whom it copied)."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise BadInput(f"rlrun plot needs matplotlib: {install_hint('plot')}") from None
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    for member in population.members:
        line = axes.plot(
            member.frames,
            member.mean,
            marker="o" if len(member.frames) < 30 else None,
            markersize=3,
            label=f"member {member.member}",
        )[0]
        for frame, value, source in member.exploits:
            if math.isfinite(value):
                axes.plot([frame], [value], marker="^", markersize=9, color=line.get_color(), linestyle="none")
                axes.annotate(
                    f"m{member.member}←m{source}",
                    (frame, value),
                    textcoords="offset points",
                    xytext=(4, 6),
                    fontsize="x-small",
                    color=line.get_color(),
                )
    axes.plot([], [], marker="^", color="grey", linestyle="none", label="exploit (copied m←m)")
    search = population.search.search
    axes.set_xlabel("frames")
    axes.xaxis.set_major_formatter(FuncFormatter(frame_tick))
    axes.set_ylabel("evaluation return (mean over sessions)")
    axes.set_title(title or f"population {search.name or search.id}: {search.spec_name}")
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.savefig(output, dpi=120)
    return output

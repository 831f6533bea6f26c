"""The report image of a comparison (`rlrun compare -o report.png`): each group's IQM, median, mean
and optimality gap (not on raw returns, `--normalize none`: it means nothing there) with their
intervals; performance profiles (the fraction of runs scoring above each threshold) with their
bands; the IQM over frames with its band. Every number drawn comes from rliable
(`rlrun.compare.statistics`); the bands from `FIGURE_REPS` repetitions.

Drawn with matplotlib's headless Agg renderer on a bare `Figure` (no pyplot, no display), its
metadata fixed, so the same comparison writes the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlrun.compare import statistics
from rlrun.compare.comparison import Comparison
from rlrun.errors import BadInput, install_hint

_AGGREGATES = (("iqm", "IQM"), ("median", "Median"), ("mean", "Mean"), ("optimality_gap", "Optimality gap"))
_PROFILE_POINTS = 101


def draw(comparison: Comparison, output: Path, *, title: str | None = None) -> Path:
    """Write the report of `comparison` to `output` (.png, .svg or .pdf) and return it."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise BadInput(f"rlrun compare -o needs matplotlib: {install_hint('plot')}") from None
    from rlrun.sizes import format_size

    if not comparison.scores:
        raise BadInput(
            "the runs are identical: there is nothing to draw; compare them without --baseline to draw their scores"
        )
    names = list(comparison.scores)
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    scale = "normalised score" if comparison.normalize != "none" else "return"
    figure = Figure(figsize=(14, 4.2 + 0.25 * len(names)), layout="constrained")
    figure.suptitle(
        title or f"{comparison.metric} {scale}: {', '.join(names)} on {', '.join(comparison.tasks)}", fontsize="medium"
    )
    panels: Any = figure.subfigures(1, 3, width_ratios=[1.4, 1, 1])
    _intervals(panels[0], comparison, names, colors, scale)
    _profiles(panels[1].add_subplot(), comparison, names, colors, scale)
    curves = panels[2].add_subplot()
    _curves(curves, comparison, names, colors, scale)
    curves.xaxis.set_major_formatter(FuncFormatter(lambda value, _: format_size(value)))
    metadata: dict[str, Any] = {
        "png": {"Software": None},
        "svg": {"Date": None, "Creator": None},
        "pdf": {"CreationDate": None, "Creator": None, "Producer": None},
    }
    figure.savefig(output, dpi=110, metadata=metadata.get(output.suffix.lower().lstrip("."), {}))
    return output


def _intervals(panel: Any, comparison: Comparison, names: list[str], colors: dict[str, str], scale: str) -> None:
    by_name = {g.name: g for g in comparison.groups}
    shown = [(key, label) for key, label in _AGGREGATES if key in by_name[names[0]].estimates]  # no gap: raw
    axes = panel.subplots(1, len(shown), sharey=True)
    for ax, (key, label) in zip(axes, shown, strict=True):
        for row, name in enumerate(names):
            estimate = by_name[name].estimates[key]
            ax.barh(row, estimate.high - estimate.low, left=estimate.low, height=0.6, color=colors[name], alpha=0.7)
            ax.vlines(estimate.point, row - 0.3, row + 0.3, color="black", linewidth=1.5)
        ax.set_title(label, fontsize="small")
        ax.set_yticks(range(len(names)), names, fontsize="small")
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize="x-small")
    axes[0].invert_yaxis()  # the first group named on top
    panel.supxlabel(f"{scale} (95% CI, {comparison.reps:,} reps)", fontsize="small")


def _profiles(ax: Any, comparison: Comparison, names: list[str], colors: dict[str, str], scale: str) -> None:
    every = np.concatenate([comparison.scores[name].ravel() for name in names])
    taus = np.linspace(float(every.min()), float(every.max()), _PROFILE_POINTS)
    drawn = statistics.profiles(comparison.scores, taus, seed=comparison.seed)
    for name in names:
        points, band = drawn[name]
        ax.plot(taus, points, color=colors[name], label=name)
        ax.fill_between(taus, band[0], band[1], color=colors[name], alpha=0.2, linewidth=0)
    ax.set_xlabel(f"{scale} (τ)", fontsize="small")
    ax.set_ylabel("fraction of runs with score > τ", fontsize="small")
    ax.set_title("Performance profiles", fontsize="small")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")


def _curves(ax: Any, comparison: Comparison, names: list[str], colors: dict[str, str], scale: str) -> None:
    usable = {name: cube for name, (frames, cube) in comparison.curves.items() if frames}
    drawn = statistics.iqm_curves(usable, seed=comparison.seed) if usable else {}
    for name in names:
        if name not in drawn:
            ax.plot([], [], color=colors[name], label=f"{name}: no evaluation frame shared by all its sessions")
            continue
        frames = comparison.curves[name][0]
        points, band = drawn[name]
        ax.plot(frames, points, color=colors[name], marker="o" if len(frames) < 30 else None, markersize=3, label=name)
        ax.fill_between(frames, band[0], band[1], color=colors[name], alpha=0.2, linewidth=0)
    ax.set_xlabel("frames", fontsize="small")
    ax.set_ylabel(f"IQM {scale}", fontsize="small")
    ax.set_title("IQM over frames (95% CI)", fontsize="small")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")

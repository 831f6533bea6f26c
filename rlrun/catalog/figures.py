"""Which image files rlrun's figures are written to (`rlrun plot -o`, `rlrun compare -o`): one
rule, checked before any work so a wrong name costs nothing; and a run's curves drawn (`draw`:
`rlrun plot`, and the curve a published model card shows), matplotlib imported only then."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun.errors import BadInput, install_hint
from rlrun.sizes import format_size

if TYPE_CHECKING:
    from rlrun.catalog.curves import Curve

FORMATS = (".png", ".svg", ".pdf")
"""The file types matplotlib's headless renderer writes here."""


def check_output(output: Path) -> None:
    """Refuse, before any work, a file type matplotlib will not write here or a missing folder."""
    if output.suffix.lower() not in FORMATS:
        raise BadInput(
            f"-o {output}: cannot write a {output.suffix or 'file without an extension'};"
            f" use a {', '.join(FORMATS)} file"
        )
    if not output.parent.is_dir():
        raise BadInput(f"-o {output}: folder {output.parent} does not exist; create it or write elsewhere")


def draw(curves: list[Curve], output: Path, *, title: str | None = None, metric: str | None = None) -> Path:
    """Write the curves (evaluation returns, or the training `metric`) to `output` and return it."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise BadInput(f"rlrun plot needs matplotlib: {install_hint('plot')}") from None
    # A bare Figure renders through Agg when saved: no pyplot, no GUI backend, no display needed.
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    for item in curves:
        if not item.frames:
            axes.plot([], [], label=f"{item.label}: {'nothing logged' if metric else 'not evaluated'} yet")
            continue
        line = axes.plot(
            item.frames, item.mean, marker="o" if len(item.frames) < 30 else None, markersize=3, label=item.label
        )[0]
        low = [m - s for m, s in zip(item.mean, item.std, strict=True)]
        high = [m + s for m, s in zip(item.mean, item.std, strict=True)]
        axes.fill_between(item.frames, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel("frames")
    axes.xaxis.set_major_formatter(FuncFormatter(frame_tick))
    axes.set_ylabel(f"{metric or 'evaluation return'} (mean ± std across sessions)")
    axes.set_title(title or (f"training {metric}" if metric else "evaluation return"))
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.savefig(output, dpi=120)
    return output


def frame_tick(value: float, _position: Any = None) -> str:
    """A frames axis tick as a size, the way every command prints frames: 200k, 1.5M."""
    return format_size(value)

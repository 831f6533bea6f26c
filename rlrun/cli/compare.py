"""compare: is B better than A? Groups runs (sessions are seeds, envs are tasks) and reports
rliable's statistics, or, with --baseline and --gate, a verdict as an exit code. Reads the registry
and the run folders, never writes them (the image aside)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rlrun.cli.app import app
from rlrun.cli.options import AsJson, Home, filtered, reference_label
from rlrun.cli.output import answer, print_json, say
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.compare import Comparison
    from rlrun.refs import RunFilter

_HEADERS = {"iqm": "IQM", "median": "median", "mean": "mean", "optimality_gap": "optimality gap"}
GATE_EXIT_CODES = {"identical": 0, "improved": 0, "regressed": 1, "inconclusive": 4}
"""`--gate`: the exit code of each verdict (2 stays bad input, 3 a registry that does not answer)."""


@app.command(short_help="Compare runs across seeds with rliable.")
@filtered()
def compare(
    references: Annotated[
        list[str],
        typer.Argument(
            metavar="REFERENCES...",
            show_default=False,
            help="The runs to compare: references, filters, search:NAME for a search's trials or a population.",
        ),
    ],
    by: Annotated[str, typer.Option(metavar="spec|algo|name", help="What makes runs one group.")] = "spec",
    score: Annotated[
        str,
        typer.Option(
            "--metric",
            metavar="final|best|auc",
            help="A session's score: its last evaluation, its best, or the mean of its evaluations.",
        ),
    ] = "final",
    normalize: Annotated[
        str,
        typer.Option(
            metavar="none|minmax|human",
            help="Scores on one scale across envs: min-max by the env's known range, or Atari human-normalised.",
        ),
    ] = "none",
    reps: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Bootstrap repetitions for the intervals. 2000 (rliable's default for performance profiles, the"
            " RL Zoo's for intervals): a first look in seconds; 50000 (rliable's default for interval estimates):"
            " the paper-grade figure, minutes.",
        ),
    ] = 2_000,
    seed: Annotated[int, typer.Option(metavar="S", help="Seed of the bootstrap: the same seed, the same numbers.")] = 0,
    baseline: Annotated[
        list[str] | None,
        typer.Option(
            "--baseline",
            metavar="REFERENCE",
            help="Compare REFERENCES (one group, new) with these runs (repeatable), and give a verdict.",
        ),
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate",
            help="With --baseline: exit 0 identical or improved, 1 regressed, 4 inconclusive; a run still"
            " running is refused (exit 2).",
        ),
    ] = False,
    allow_running: Annotated[
        bool,
        typer.Option(
            "--allow-running", help="With --gate: judge a run still running on its evaluations so far (with a note)."
        ),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="Also draw the report (intervals, performance profiles, IQM over frames): .png, .svg or .pdf.",
        ),
    ] = None,
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Compare runs with the statistics the field trusts (rliable): per group the IQM, median, mean
    and (on normalised scores) optimality gap with 95% stratified-bootstrap intervals, and the
    probability that one group improves on another. Each session is a seed, each env a task. With
    --baseline, a verdict: identical (bit for bit), improved, regressed or inconclusive; with --gate,
    as the exit code, and a run still running is refused unless --allow-running. Read-only."""
    from rlrun import compare as comparing
    from rlrun.cli import views

    if gate and not baseline:
        raise BadInput("--gate judges against a baseline; add --baseline REFERENCE")
    if allow_running and not gate:
        raise BadInput("--allow-running is for --gate (a comparison alone notes a run still running); add --gate")
    if output is not None:
        from rlrun.catalog.figures import check_output

        check_output(output)
    with _bar() as progress:
        result = comparing.compare(
            references,
            filters,
            by=by,
            metric=score,
            normalize_by=normalize,
            reps=reps,
            seed=seed,
            baseline=baseline or (),
            home=home,
            allow_running=allow_running or not gate,
            progress=progress,
        )
    for reference, run in result.named:
        say(views.resolved(run, reference_label(reference, filters)))
    for note in result.notes:
        say(f"note: {note}")
    if output is not None and result.verdict == "identical":
        say(f"nothing drawn to {output}: the runs are identical, bit for bit, so there are no statistics to draw")
    elif output is not None:
        from rlrun.compare.figure import draw

        say(f"wrote {draw(result, output)}")
    if as_json:
        print_json(result.to_json())
    else:
        answer(table(result))  # the comparison is the answer: stdout, for a file or a pager
    if gate and result.verdict is not None and GATE_EXIT_CODES[result.verdict]:
        raise SystemExit(GATE_EXIT_CODES[result.verdict])


@contextmanager
def _bar() -> Iterator[Callable[[int], Callable[[], None]]]:
    """A Rich progress bar on stderr over the bootstrap, on a terminal only (a pipe or a log gets
    the result alone), gone once it is done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from rlrun.cli.output import make_console

    console = make_console()
    bar = Progress(
        TextColumn("bootstrap"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )

    def start(total: int) -> Callable[[], None]:
        task = bar.add_task("bootstrap", total=total)
        bar.start()
        return lambda: bar.advance(task)

    try:
        yield start
    finally:
        bar.stop()


def table(result: "Comparison") -> str:
    """The comparison as a person reads it: one row per group, then the probabilities, then the verdict."""
    from rlrun.catalog.scores import score

    lines: list[str] = []
    if result.verdict == "identical":
        return "\n".join(
            [
                *(f"{g.name}: {', '.join(g.runs)}" for g in result.groups),
                "verdict: identical (metrics logs and final snapshots equal, bit for bit)",
            ]
        )
    shown = [m for m in ("iqm", "median", "mean", "optimality_gap") if m in result.groups[0].estimates]
    header = ["group", "seeds", *(_HEADERS[m] for m in shown)]
    rows = [header]
    for group in result.groups:
        cells = [group.name, str(group.seeds)]
        for metric in shown:
            e = group.estimates[metric]
            cells.append(f"{score(e.point)} [{score(e.low)}, {score(e.high)}]")
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    scale = "normalised " if result.normalize != "none" else ""
    lines.append(
        f"({result.metric} {scale}score over {', '.join(result.tasks)}; 95% stratified-bootstrap intervals,"
        f" {result.reps:,} reps, seed {result.seed})"
    )
    for item in result.improvement:
        e = item.estimate
        lines.append(f"P({item.a} > {item.b}) = {score(e.point)} [{score(e.low)}, {score(e.high)}]")
    if result.verdict is not None:
        lines.append(f"verdict: {result.verdict}")
    return "\n".join(lines)

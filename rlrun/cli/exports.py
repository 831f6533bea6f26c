"""track, plot and export: a run's records carried out of rlrun, to a tracker (MLflow, W&B), an
image or a CSV file. They read the registry and the run folders, never write them."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rlrun.cli.app import app
from rlrun.cli.options import AsJson, Home, filtered, reference_argument, reference_label, references_argument
from rlrun.cli.output import print_json, say
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.refs import RunFilter


@app.command(short_help="Send a run's history to MLflow or W&B.")
def track(
    reference: Annotated[
        str, reference_argument("latest, latest~N, a row of `rlrun ls`, an id, id prefix or name.")
    ] = "latest",
    to: Annotated[
        list[str],
        typer.Option(
            "--to", metavar="TRACKER", help="mlflow or wandb (repeatable); where, from their own environment variables."
        ),
    ] = [],  # noqa: B006  # typer reads the default, never mutates it
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Send run REFERENCE's whole history (metrics logs and evaluations, every session) to each
    tracker: for a run trained without it, or whose tracker was down (`rlrun show` says so). Each
    session's tracker run is rewound first, so nothing is there twice."""
    from rlrun import catalog
    from rlrun.cli import views
    from rlrun.training.tracking import track as track_run

    if not to:
        raise BadInput("say where with --to mlflow or --to wandb")
    unknown = [name for name in to if name not in ("mlflow", "wandb")]
    if unknown:
        raise BadInput(f"no tracker {unknown[0]!r}; use --to mlflow or --to wandb")
    found = catalog.lookup(reference, None, home=home)
    if isinstance(found, catalog.SearchLookup):
        raise BadInput("rlrun track sends one run; give a trial's run (see `rlrun show search:...`)")
    say(views.resolved(found.run, reference))
    sent = track_run(found.run.id, to=list(dict.fromkeys(to)), home=found.home)
    if as_json:
        print_json([{"session": index, **vars(delivered)} for index, delivered in sent])
    for index, delivered in sent:
        say(f"s{index}: history sent to {delivered.tracker} (run {delivered.run})")


@app.command(short_help="Plot evaluation return against frames.")
@filtered()
def plot(
    references: Annotated[list[str] | None, references_argument("the runs to draw (default: latest).")] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="Image file to write: .png, .svg or .pdf (default: NAME.png here, after the run or search).",
        ),
    ] = None,
    title: Annotated[str | None, typer.Option(metavar="TEXT", help="Title of the plot.")] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="Draw this training metric (a metrics log column) instead of evaluation return."
        ),
    ] = None,
    *,
    filters: "RunFilter",
    home: Home = None,
) -> None:
    """Plot evaluation return against frames: mean ± std across each run's sessions, runs overlaid."""
    from rlrun import catalog
    from rlrun.cli import views
    from rlrun.cli.plot import check_output, draw, draw_population, draw_search

    if output is not None:
        check_output(output)
    drawn = catalog.plot_data(references or ["latest"], filters, home=home, metric=metric)
    output = output or catalog.default_image(drawn, metric)
    if isinstance(drawn, catalog.PopulationCurves):  # each member's curve, its exploits marked
        say(views.resolved_search(drawn.search.search, drawn.reference))
        say(f"wrote {draw_population(drawn, output, title=title)}")
        return
    if isinstance(drawn, catalog.SearchLookup):  # score against trial, with the best so far
        say(views.resolved_search(drawn.detail.search, drawn.reference))
        say(f"wrote {draw_search(drawn.detail, output, title=title)}")
        return
    for reference, run in drawn.named:
        say(views.resolved(run, reference_label(reference, filters)))
    say(f"wrote {draw(drawn.curves, output, title=title, metric=metric)}")


@app.command(short_help="Write runs' metrics as CSV, a policy as ONNX or TorchScript.")
def export(
    references: Annotated[
        list[str] | None,
        references_argument(
            "the runs to export (default: latest); with --onnx or --torchscript one run, /sK and @best,"
            " @latest or @5M allowed."
        ),
    ] = None,
    metrics: Annotated[bool, typer.Option("--metrics", help="Export the training metrics logs.")] = False,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", metavar="PATH", help="CSV file to write (default: standard output)."),
    ] = None,
    onnx: Annotated[
        Path | None,
        typer.Option(
            "--onnx", metavar="PATH", help="Write the checkpoint's acting policy to this .onnx file (the onnx extra)."
        ),
    ] = None,
    torchscript: Annotated[
        Path | None,
        typer.Option(
            "--torchscript",
            metavar="PATH",
            help="Write the checkpoint's acting policy to this .pt file: frozen TorchScript, for torch.jit.load.",
        ),
    ] = None,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT", help="With --onnx or --torchscript: best (default), latest or a frame count such as 5M."
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Replay recorded observations through torch and each file written; exit 1 if an action differs"
            " (above 0 for discrete actions, 1e-6 for continuous ones).",
        ),
    ] = False,
    observations: Annotated[
        int,
        typer.Option("--observations", metavar="N", min=1, help="With --check: how many observations to replay."),
    ] = 256,
    seed: Annotated[
        int, typer.Option(metavar="N", help="With --check: seeds the episodes observed, as `rlrun enjoy --seed`.")
    ] = 0,
    home: Home = None,
) -> None:
    """Export runs' records as CSV: with --metrics, every session's training metrics, with run and
    session columns. Or, with --onnx and/or --torchscript, a checkpoint's acting policy (the one
    `rlrun enjoy` plays, its observation normalisation inside) as an ONNX graph for onnxruntime or a
    frozen TorchScript module for torch.jit.load, each with its contract (NAME.contract.json) beside
    it; --check then proves the files act as the checkpoint does. Never writes the registry or the runs."""
    if onnx is not None or torchscript is not None:
        if metrics or output is not None:
            raise BadInput("a policy file is written on its own; export --metrics -o FILE in another command")
        checked = (observations, seed) if check else None
        _export_policy(references or ["latest"], onnx, torchscript, checkpoint, checked, home=home)
        return
    if check:
        raise BadInput(
            "--check replays the policy files this command writes; add --onnx policy.onnx or --torchscript agent.pt"
        )
    from rlrun import catalog
    from rlrun.cli import views
    from rlrun.session import metrics_log

    if checkpoint is not None:
        raise BadInput("--checkpoint picks the checkpoint --onnx exports; add --onnx policy.onnx")
    if not metrics:
        raise BadInput(
            "say what to export: rlrun export REFERENCE --metrics -o metrics.csv, or"
            " rlrun export REFERENCE --onnx policy.onnx"
        )
    if output is not None and not output.parent.is_dir():
        raise BadInput(f"-o {output}: folder {output.parent} does not exist; create it or write elsewhere")
    exported = catalog.export_metrics(references or ["latest"], home=home)
    for reference, run in exported.named:
        say(views.resolved(run, reference))
    text = metrics_log.to_csv(exported.table)
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    say(f"wrote {output} ({text.count(chr(10)) - 1} rows)")


def _export_policy(
    references: list[str],
    onnx: Path | None,
    torchscript: Path | None,
    checkpoint: str | None,
    checked: tuple[int, int] | None,
    *,
    home: Path | str | None,
) -> None:
    """The checkpoint's policy, loaded once, written as each file asked for; with `checked`
    (observations, seed), each file replayed against torch (`rlrun.enjoy.check`)."""
    from rlrun.cli.display import enjoy_target

    if len(references) != 1:
        option = "--onnx" if onnx is not None else "--torchscript"
        raise BadInput(f"{option} exports one checkpoint, and {len(references)} runs are named; give one reference")
    from rlrun.enjoy.contract import contract_path
    from rlrun.enjoy.graph import check_destination, policy_of
    from rlrun.refs import parse_ref

    if onnx is not None:
        from rlrun.enjoy.onnx_policy import require

        require("onnx", "onnxscript", "onnxruntime", doing="rlrun export --onnx")
        check_destination(onnx, (".onnx",), "--onnx")
    if torchscript is not None:
        check_destination(torchscript, (".pt", ".pth"), "--torchscript")
    if onnx is not None and torchscript is not None and contract_path(onnx) == contract_path(torchscript):
        raise BadInput(
            f"--onnx {onnx} and --torchscript {torchscript} would share one contract ({contract_path(onnx)});"
            " give them different names, as policy.onnx and agent.pt"
        )
    reference = references[0]
    policy = policy_of(
        parse_ref(reference),
        home=home,
        checkpoint=checkpoint,
        on_target=lambda chosen: say(str(enjoy_target(chosen, reference))),
    )
    if onnx is not None:
        from rlrun.enjoy.onnx import export_onnx

        done = export_onnx(policy, onnx, home=home)
        say(
            f"wrote {done.path} ({done.bytes:,} bytes; outputs {', '.join(done.outputs)}); play it with"
            f" `rlrun enjoy {done.run_id}/s{done.session}@{done.checkpoint_frame} --policy {done.path}`"
        )
    if torchscript is not None:
        from rlrun.enjoy.torchscript import write_agent

        done = write_agent(policy, torchscript, home=home)
        say(
            f"wrote {done.path} ({done.bytes:,} bytes; outputs {', '.join(done.outputs)}); load it with"
            f" torch.jit.load({str(done.path)!r})"
        )
    if checked is not None:
        from rlrun.enjoy.check import check_exports

        steps, seed = checked
        say(check_exports(policy, onnx=onnx, torchscript=torchscript, steps=steps, seed=seed).line())

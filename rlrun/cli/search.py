"""search, and the search side of resume and stop (`search:REF`): a search planned by the library
(`rlrun.search.plan_search`, which applies the defaults), its trials shown as they end."""

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rlrun.catalog.scores import score
from rlrun.cli.app import app
from rlrun.cli.hints import in_context
from rlrun.cli.options import (
    Account,
    AsJson,
    Cpus,
    Detach,
    Gpus,
    Home,
    Memory,
    Partition,
    Qos,
    Ray,
    Sbatch,
    Slurm,
    SupervisorOn,
    Time,
    Track,
    Wait,
    check_detach,
    check_slurm_alone,
    slurm_edits,
    track_edit,
    trial_executors,
)
from rlrun.cli.output import make_console, print_json, say
from rlrun.errors import BadInput, TrainingFailed

if TYPE_CHECKING:
    from rlrun.refs import RunFilter


@app.command(short_help="Search hyper-parameters, a run per trial.")
def search(
    spec: Annotated[str, typer.Argument(metavar="SPEC", show_default=False)],
    trials: Annotated[
        int | None,
        typer.Option(min=1, metavar="INTEGER RANGE", help="Trials to run (default: every point of an all-grid space)."),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            min=1,
            metavar="INTEGER RANGE",
            help="Trials (PBT: members of a generation) at a time, each driven from a process of its own.",
        ),
    ] = 1,
    name: Annotated[str | None, typer.Option(metavar="TEXT", help="A unique name for the search.")] = None,
    metric: Annotated[
        str | None,
        typer.Option(metavar="TEXT", help="Score: eval_mean (final evaluation; default) or best_eval, over sessions."),
    ] = None,
    sampler: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT", help="tpe (default), random, or grid (the default when every dimension is a grid)."
        ),
    ] = None,
    pruner: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Stop poor trials early: median (default), halving, or none.")
    ] = None,
    prune_after: Annotated[
        int | None, typer.Option(min=0, metavar="INTEGER RANGE", help="Trials the median pruner waits for (default 5).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="TEXT", help="Override a base spec value: --set meta.max_frame=50k (repeatable)."
        ),
    ] = None,
    scheduler: Annotated[
        str, typer.Option(metavar="TEXT", help="trials (default: a run per trial) or pbt (population-based training).")
    ] = "trials",
    population: Annotated[int | None, typer.Option(min=2, metavar="INTEGER RANGE", help="PBT: members.")] = None,
    interval: Annotated[
        str | None, typer.Option(metavar="TEXT", help="PBT: frames between exploits, e.g. 50k.")
    ] = None,
    quantile: Annotated[
        float | None,
        typer.Option(metavar="FLOAT", help="PBT: the bottom fraction that copies the top one (default 0.25)."),
    ] = None,
    resample: Annotated[
        float | None,
        typer.Option(metavar="FLOAT", help="PBT: chance a value is drawn again rather than scaled (default 0.25)."),
    ] = None,
    factors: Annotated[
        str | None, typer.Option(metavar="TEXT", help="PBT: factors that scale an explored value (default 0.8,1.2).")
    ] = None,
    track: Track = None,
    ray: Ray = None,
    cpus: Cpus = None,
    gpus: Gpus = None,
    detach: Detach = False,
    supervisor_on: SupervisorOn = None,
    slurm: Slurm = False,
    partition: Partition = None,
    time: Time = None,
    memory: Memory = None,
    account: Account = None,
    qos: Qos = None,
    sbatch: Sbatch = None,
    wait: Wait = False,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Search hyper-parameters: train a run per trial over the spec's `search` block, suggested by
    Optuna (seeded by the spec), scored on evaluations, poor trials pruned; `rlrun resume search:REF`
    continues it after a stop or a crash. `--scheduler pbt` trains a population instead, whose
    weaker members continue exact forks of stronger ones with explored values."""
    from rlrun.cli.display import TrainingDisplay
    from rlrun.search import plan_search, run_search

    edits = slurm_edits(
        slurm, cpus=cpus, gpus=gpus, partition=partition, time=time, memory=memory, account=account, qos=qos,
        sbatch=sbatch, wait=wait,
    )  # fmt: skip
    plan = plan_search(
        spec,
        list(overrides or ()) + track_edit(track) + edits,
        scheduler=scheduler,
        trials=trials,
        sampler=sampler,
        parallel=parallel,
        metric=metric,
        pruner=pruner,
        prune_after=prune_after,
        population=population,
        interval=interval,
        quantile=quantile,
        resample_probability=resample,
        factors=factors,
    )
    make_executor = trial_executors(ray, cpus, gpus, slurm=slurm, wait=wait, slurm_spec=plan.spec.meta.slurm)
    hand_over = None if wait else search_hand_over(ray, cpus, gpus, detach, supervisor_on, slurm=slurm)
    console = make_console()

    def announce(record: Any) -> None:
        label = f" ({record.name})" if record.name else ""
        settings: Any = plan.settings  # a PbtSettings under --scheduler pbt
        how = (
            f"{settings.sampler} sampler, {settings.pruner} pruner"
            if scheduler == "trials"
            else f"{settings.population} members, an exploit every {settings.interval:,} frames"
        )
        console.print(
            in_context(
                f"search {record.id}{label}: {settings.trials} trials of {plan.spec.name} over "
                f"{', '.join(d.path for d in plan.dimensions)}; {how}, score {settings.metric}"
            ),
            highlight=False,
            markup=False,
        )

    with TrainingDisplay(console) as display:
        result = run_search(
            plan,
            home=home,
            name=name,
            on_event=display,
            on_start=announce,
            on_trial=_trial_line(console),
            make_executor=make_executor,
            hand_over=hand_over,
        )
    _conclude_search(result, console, as_json)


def search_hand_over(
    ray: str | None,
    cpus: float | None,
    gpus: float | None,
    detach: bool,
    supervisor_on: str | None,
    *,
    slurm: bool = False,
) -> Any:
    """Where `--detach` (a Ray actor) or `--slurm` (a SLURM job) hands a search's driving (None: it
    stays with this command)."""
    if slurm:
        check_slurm_alone("drives the search from a SLURM job, which outlives", ray, detach)
        from rlrun.search.slurm import SlurmHandOver

        return SlurmHandOver()
    check_detach("search", ray, detach, supervisor_on)
    if not detach:
        return None
    from rlrun.search.detached import RayHandOver

    return RayHandOver(ray or None, cpus=cpus, gpus=gpus, supervisor_on=supervisor_on)


def _trial_line(console: Any) -> Any:
    def say(outcome: Any) -> None:
        params = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={json.dumps(v)}" for k, v in outcome.params.items()
        )
        scored = score(outcome.value)
        note = f" ({outcome.note})" if outcome.note else ""
        console.print(
            in_context(f"trial {outcome.number} {outcome.state} (run {outcome.run_id}): {scored}{note}  {params}"),
            highlight=False,
            markup=False,
        )

    return say


def _conclude_search(result: Any, console: Any, as_json: bool) -> None:
    """The search's outcome and exit code: 0 done (or handed to a detached driver), 128 + the
    signal after a graceful stop."""
    if result.detached:
        console.print(
            in_context(
                f"search {result.search_id} detached: driven by {result.detached}; follow it with"
                f" `rlrun ls --search search:{result.search_id}` or `rlrun show search:{result.search_id}`"
            ),
            highlight=False,
            markup=False,
        )
    if as_json:
        print_json(result.to_json())
    if result.detached:
        return
    if result.nothing_to_do:
        console.print(
            in_context(f"nothing to do: search {result.search_id} has ended all its trials"),
            highlight=False,
            markup=False,
        )
        return
    if result.signal > 0:
        console.print(
            in_context(
                f"search {result.search_id} stopped by signal {result.signal}; continue it with"
                f" `rlrun resume search:{result.search_id}`"
            ),
            highlight=False,
            markup=False,
        )
        raise SystemExit(128 + result.signal)
    if result.status in ("failed", "interrupted"):
        raise TrainingFailed(
            f"search {result.search_id} {result.status}: {result.error}; continue it with"
            f" `rlrun resume search:{result.search_id}`"
        )
    best = result.best
    found = f"; best: trial {best.number} (run {best.run_id}), {score(best.value)}" if best else ""
    console.print(
        in_context(f"search {result.search_id} {result.status}{found}: see `rlrun show search:{result.search_id}`"),
        highlight=False,
        markup=False,
    )


def resume_search_command(
    reference: str, home: str | None, as_json: bool, given: dict[str, Any], make_executor: Any, hand_over: Any
) -> None:
    from rlrun.cli.display import TrainingDisplay
    from rlrun.search import resume_search

    extra = [option for option, value in given.items() if value]
    if extra:
        raise BadInput(f"{', '.join(extra)} edit a run; a search resumes as it was recorded: drop them")
    console = make_console()
    with TrainingDisplay(console) as display:
        result = resume_search(
            reference,
            home=home,
            on_event=display,
            on_trial=_trial_line(console),
            on_start=lambda record: say(_views().resolved_search(record, reference)),
            make_executor=make_executor,
            hand_over=hand_over,
        )
    _conclude_search(result, console, as_json)


def _views() -> Any:
    from rlrun.cli import views

    return views


def stop_search_command(target: Any, filters: "RunFilter", home: str | None, as_json: bool) -> None:
    from rlrun.cli import views
    from rlrun.training.control import resume_command, stop_search

    if filters.narrows:
        raise BadInput(f"{filters.describe()} narrow runs; a search is named by its reference alone: drop them")
    outcome = stop_search(target.ref, home=home)
    search = outcome.search
    say(views.resolved_search(search, target.text))
    if as_json:
        print_json(outcome.to_json())
    if not outcome.stopping:
        advice = (
            f"; continue it with `{resume_command(search)}`"
            if search.status in ("crashed", "preempted", "interrupted")
            else ""
        )
        say(f"search {search.id} is {search.status}: nothing to stop{advice}")
    elif outcome.repeated:
        say(
            f"search {search.id}: a stop was already requested {views.when(outcome.requested_at)}; it starts no"
            " more trials and its trials in flight stop with snapshots (`rlrun ls --searches` says preempted"
            " once they have)"
        )
    else:
        say(
            f"search {search.id}: stop requested; it starts no more trials and its trials in flight stop with"
            f" snapshots (`rlrun ls --searches` says preempted once they have); continue it with"
            f" `{resume_command(search)}`"
        )

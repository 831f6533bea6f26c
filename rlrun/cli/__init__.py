"""The `rlrun` command: parse, resolve, print, and call the library. Nothing else lives here.

Human output goes to stderr (Rich for training, plain text for the registry commands); `--json`
puts one JSON document on stdout. Domain errors and usage errors become one line on stderr and an
exit code in `main`, the only error handler.

A Typer app: one function per command, its options as `Annotated` parameters. Typer is pinned to
0.28: from 0.29 on it validates every argument through pydantic, whose import alone costs more than
`rlrun ls` may take in all. Rich help and Rich tracebacks are off, so parsing loads neither Rich nor
anything else heavy; heavy modules (torch, gymnasium, Rich, SQLAlchemy) are imported inside the
commands that need them.
"""

import functools
import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.exceptions import NoSuchOption  # Typer 0.28 vendors Click; see _usage_message

from rlrun import __version__, paths
from rlrun.errors import BadInput, EditRefused, RlrunError, SpecError, TrainingFailed

if TYPE_CHECKING:
    from rlrun.refs import RunFilter

app = typer.Typer(
    help="Train reinforcement-learning agents from JSON specs; every run is recorded, resumable and replayable.",
    add_completion=False,
    # Usage errors, tracebacks and help are ours (see `main`) and plain: no Rich on the way.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer()  # help: the docstrings of their callbacks, below
spec_app = typer.Typer()
app.add_typer(db_app, name="db", short_help="Registry schema: current, upgrade, rebuild.")
app.add_typer(spec_app, name="spec")


# ---------------------------------------------------------------------------------------------
# Options shared by several commands

# A string, not a Path: a home may be a URL (s3://bucket/runs), which Path would fold into s3:/bucket/runs.
Home = Annotated[
    str | None,
    typer.Option(envvar=paths.HOME_ENV, show_envvar=False, metavar="PATH|URL",
                 help="Runs home: a folder (default ./runs, or $RLRUN_HOME) or s3://bucket/prefix (needs $RLRUN_DB)."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print only JSON on stdout.")]
Track = Annotated[list[str] | None, typer.Option(
    "--track", metavar="TRACKER", help="Also log each session to mlflow or wandb (repeatable; sets meta.track).")]

# The filter options: they narrow the runs a command considers, before `latest` and row numbers
# count them (`rlrun enjoy latest --algo ppo` is the newest PPO run).
Status = Annotated[str | None, typer.Option(
    metavar="TEXT", help="Only runs with this status: running, finished, failed, preempted, crashed.")]
Algo = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs of this algorithm.")]
Env = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs on this env id.")]
SpecName = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs of this spec name (as --of).")]
Of = Annotated[str | None, typer.Option(
    "--of", metavar="SPEC", help="Only runs of this spec name: `resume latest --of reinforce_cartpole`.")]
Name = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs whose name matches this glob (* and ?).")]
Since = Annotated[str | None, typer.Option(
    metavar="TEXT", help="Only runs started since: 2d, 12h, 30m, 1w or a date such as 2025-05-01.")]
Sort = Annotated[str | None, typer.Option(
    metavar="TEXT", help="Row order for row numbers: started (newest first, the default), best, frames.")]
# Each filter option by its parameter name, in the order `--help` lists them.
FILTER_OPTIONS: dict[str, Any] = {"status": Status, "algo": Algo, "env": Env, "spec": SpecName, "of": Of,
                                  "name": Name, "since": Since, "sort": Sort}  # fmt: skip
# resume and stop take a reference to one run: `--of`, not `--spec` (resume's `--spec` is a spec file).
ONE_RUN_FILTERS = ("status", "algo", "env", "of", "since")


def filtered(*names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the filter options `names` (default: all of them) where its signature has
    `filters: RunFilter`; the command receives them as that one RunFilter, checked before it runs.
    Each option's name, help and default is said once, in FILTER_OPTIONS."""
    chosen = names or tuple(FILTER_OPTIONS)

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name != "filters":
                parameters.append(parameter)
                continue
            parameters += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                             annotation=FILTER_OPTIONS[name]) for name in chosen]  # fmt: skip

        @functools.wraps(command)
        def with_filters(**values: Any) -> None:
            given = {name: values.pop(name) for name in chosen}
            command(**values, filters=_filters(**given))

        # What Typer reads: the signature with the options in place of `filters`, and their types.
        with_filters.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_filters.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_filters

    return decorate


# `--ray` alone is $RLRUN_RAY_ADDRESS, else "auto" (the cluster this machine belongs to, as Ray
# finds it); `--ray HOST:PORT` names one. Without it nothing imports Ray. Typer has no option with
# an optional value, so `run` turns a bare `--ray` into `--ray=` first (see `_bare_ray`).
Ray = Annotated[str | None, typer.Option(
    "--ray", metavar="[ADDRESS]",
    help="Run the sessions on a Ray cluster: ADDRESS, else $RLRUN_RAY_ADDRESS, else auto.")]
Cpus = Annotated[float | None, typer.Option(
    "--cpus", min=0, metavar="FLOAT", help="With --ray: CPUs per session (default 1).")]
Gpus = Annotated[float | None, typer.Option(
    "--gpus", min=0, metavar="FLOAT", help="With --ray: GPUs per session (default 0).")]
Detach = Annotated[bool, typer.Option(
    "--detach", help="With --ray: return once the run is recorded; the cluster supervises it (see `rlrun stop`).")]
SupervisorOn = Annotated[str | None, typer.Option(
    "--supervisor-on", metavar="RESOURCE",
    help="With --detach: place the run's supervisor only on nodes that offer this custom Ray resource"
         " (on-demand nodes, say, not spot ones).")]


def _reference(text: str) -> Any:
    """The REFERENCE argument (default `latest`), with the forms this command accepts as its help."""
    return typer.Argument(metavar="REFERENCE", show_default=False, help=text)


def _references(text: str) -> Any:
    """The REFERENCES... arguments (any number), with `text` as their help."""
    return typer.Argument(metavar="[REFERENCES]...", show_default=False, help=text)


def _filters(status: str | None = None, algo: str | None = None, env: str | None = None, spec: str | None = None,
             name: str | None = None, since: str | None = None, sort: str | None = None,
             of: str | None = None) -> "RunFilter":  # fmt: skip
    from rlrun.refs import RunFilter

    return RunFilter.of(status=status, algorithm=algo, env=env, spec=spec, name=name, since=since, sort=sort, of=of)


def _executor(ray: str | None, cpus: float | None, gpus: float | None, stop: Any = None,
              detach: bool = False, supervisor_on: str | None = None) -> Any:  # fmt: skip
    """The executor the options ask for: None (the local one) without --ray."""
    _check_detach("run", ray, detach, supervisor_on)
    if ray is None:
        if cpus is not None or gpus is not None:
            raise BadInput("--cpus and --gpus place sessions on a Ray cluster; add --ray [ADDRESS]")
        return None
    from rlrun.training.ray import ray_executor

    return ray_executor(ray or None, cpus=cpus, gpus=gpus, stop=stop, detach=detach, supervisor_on=supervisor_on)


def _check_detach(what: str, ray: str | None, detach: bool, supervisor_on: str | None) -> None:
    """`--supervisor-on` only with `--detach`, and `--detach` only with `--ray`: for a "run" (its
    supervisor) or a "search" (its driver)."""
    holder = "supervisor" if what == "run" else "driver"
    if supervisor_on is not None and not detach:
        raise BadInput(f"--supervisor-on places a detached {what}'s {holder}; add --detach (and --ray [ADDRESS])")
    if detach and ray is None:
        raise BadInput(f"--detach hands the {what}'s {holder} to a Ray cluster; add --ray [ADDRESS]"
                       f" (a {what} on this machine lasts as long as its command)")


def _trial_executors(ray: str | None, cpus: float | None, gpus: float | None) -> Any:
    """What makes each search trial's executor from the stop its pruner requests: None (the local
    one) without --ray. The options are checked now, once."""
    if _executor(ray, cpus, gpus) is None:
        return None
    from rlrun.training.ray import RayTrials

    return RayTrials(ray or None, cpus=cpus, gpus=gpus)


def _console() -> Any:
    from rlrun.cli.display import stderr_console

    return stderr_console()


def _say(text: str) -> None:
    """A line for the person at the terminal (stderr: stdout is kept for --json)."""
    sys.stderr.write(text + "\n")


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def _help_if_bare(context: typer.Context) -> None:
    """`rlrun`, `rlrun db` or `rlrun spec` alone: the help, on stderr, and exit code 2 (a usage error)."""
    if context.invoked_subcommand is None:
        sys.stderr.write(context.get_help() + "\n")
        raise typer.Exit(2)


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rlrun {__version__}\n")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def rlrun(
    context: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True, expose_value=False, help="Show the version.")] = False,
) -> None:
    """rlrun: runs that survive the real world."""
    _help_if_bare(context)


# ---------------------------------------------------------------------------------------------
# train, resume, enjoy


@app.command(short_help="Train a run from a spec and record it.")
def train(
    spec: Annotated[str, typer.Argument(metavar="SPEC", show_default=False)],
    name: Annotated[str | None, typer.Option(metavar="TEXT", help="A unique name for the run.")] = None,
    frames: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Frame budget per session, e.g. 200k or 1.5M.")
    ] = None,
    sessions: Annotated[
        int | None, typer.Option(min=1, metavar="INTEGER RANGE", help="Sessions (seeds) to train in parallel.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, metavar="INTEGER RANGE", help="Base seed; session i uses seed + i.")
    ] = None,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", metavar="TEXT", help="Override a spec value: --set agent.optimizer.lr=0.01 (repeatable).")] = None,
    track: Track = None,
    ray: Ray = None,
    cpus: Cpus = None,
    gpus: Gpus = None,
    detach: Detach = False,
    supervisor_on: SupervisorOn = None,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Train a run from SPEC (a spec file, or a built-in spec: `rlrun spec list`) and record it."""
    from rlrun.cli.display import TrainingDisplay
    from rlrun.sizes import parse_size
    from rlrun.spec import load_spec
    from rlrun.training import train as train_run

    edits = list(overrides or ())
    if frames is not None:
        edits.append(f"meta.max_frame={parse_size(frames, what='--frames')}")
    if sessions is not None:
        edits.append(f"meta.sessions={sessions}")
    if seed is not None:
        edits.append(f"meta.seed={seed}")
    edits += _track_edit(track)
    executor = _executor(ray, cpus, gpus, detach=detach, supervisor_on=supervisor_on)
    loaded = load_spec(spec, edits)
    console = _console()

    def announce(run: Any) -> None:
        label = f" ({run.name})" if run.name else ""
        console.print(f"run {run.id}{label}: {loaded.name}, {loaded.agent.algorithm} on {loaded.env.id}, "
                      f"{run.num_sessions} session(s), {run.max_frame:,} frames each", highlight=False, markup=False)

    with TrainingDisplay(console) as display:
        result = train_run(loaded, home=home, name=name, on_event=display, on_start=announce, executor=executor)
    _conclude(result, console, as_json)


def _track_edit(track: list[str] | None) -> list[str]:
    """`--track` as the spec edit it is (`meta.track`: the run remembers its trackers)."""
    return [f"meta.track={json.dumps(list(dict.fromkeys(track)))}"] if track else []


def _conclude(result: Any, console: Any, as_json: bool) -> None:
    """Print the outcome and leave with its exit code: 0 done (or handed to a detached
    supervisor), 1 a session failed, 128 + the signal after a graceful stop."""
    if result.detached:
        console.print(f"run {result.run_id} detached: supervised by {result.detached}; follow it with"
                      f" `rlrun ls` or `rlrun show {result.run_id}`, stop it with `rlrun stop {result.run_id}`",
                      highlight=False, markup=False)
    if as_json:
        _print_json(result.to_json())
    if result.detached:
        return
    if result.outcome == "failed":
        raise TrainingFailed(f"run {result.run_id} failed: {result.error}; see `rlrun show {result.run_id}`")
    if result.outcome == "preempted":
        console.print(f"run {result.run_id} stopped by signal {result.signal} with a snapshot; continue it with"
                      f" `rlrun resume {result.run_id}`", highlight=False, markup=False)
        raise SystemExit(128 + result.signal)
    console.print(f"run {result.run_id} {result.status}: see `rlrun show {result.run_id}`", highlight=False,
                  markup=False)


@app.command(short_help="Continue a run (or a search) bit for bit.")
@filtered(*ONE_RUN_FILTERS)
def resume(
    reference: Annotated[str, _reference(
        "latest, latest~N, a row, an id, prefix or name, or a run folder; /sK for one session.")] = "latest",
    frames: Annotated[str | None, typer.Option(metavar="TEXT", help="New frame target per session, e.g. 20M.")] = None,
    more: Annotated[str | None, typer.Option(metavar="TEXT", help="Frames to add to the target, e.g. 500k.")] = None,
    spec_file: Annotated[Path | None, typer.Option("--spec", metavar="PATH", help="An edited spec file.")] = None,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", metavar="TEXT", help="Edit one spec value: --set meta.eval_frequency=5k (repeatable).")] = None,
    fork: Annotated[bool, typer.Option("--fork", help="Branch a new run from the snapshot instead.")] = False,
    *,
    filters: "RunFilter",
    ray: Ray = None,
    cpus: Cpus = None,
    gpus: Gpus = None,
    detach: Detach = False,
    supervisor_on: SupervisorOn = None,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Continue a run bit for bit from its newest snapshots, with an optional consistent spec edit;
    or a search (`search:latest`, `search:ID`): its trials as they would have been."""
    from rlrun.refs import SearchRef, parse_target

    target = parse_target(reference)
    if isinstance(target, SearchRef):
        hand_over = _search_hand_over(ray, cpus, gpus, detach, supervisor_on)
        given = {"--frames": frames, "--more": more, "--spec": spec_file, "--set": overrides, "--fork": fork,
                 filters.describe(): filters.narrows}  # the filters as typed: `--status finished --algo ppo`
        _resume_search(reference, home, as_json, given, _trial_executors(ray, cpus, gpus), hand_over)
        return
    from rlrun.cli.display import TrainingDisplay, resume_plan
    from rlrun.sizes import parse_size
    from rlrun.training import resume as resume_run

    executor = _executor(ray, cpus, gpus, detach=detach, supervisor_on=supervisor_on)
    console = _console()
    with TrainingDisplay(console) as display:
        result = resume_run(
            target, filters, home=home, frames=None if frames is None else parse_size(frames, what="--frames"),
            more=None if more is None else parse_size(more, what="--more"), spec=spec_file,
            overrides=list(overrides or ()), fork=fork, on_event=display,
            on_plan=lambda plan: console.print(resume_plan(plan, _label(reference, filters))), executor=executor,
        )
    if result.nothing_to_do:
        _nothing_to_do(result, console, as_json)
        return
    _conclude(result, console, as_json)


def _nothing_to_do(result: Any, console: Any, as_json: bool) -> None:
    """A run already at its target: say so and exit 0, so a scheduler may requeue `resume` safely."""
    if as_json:
        _print_json(result.to_json())
    trained = max(s.frame for s in result.sessions)
    console.print(f"nothing to do: run {result.run_id} has trained {trained:,} of its {result.max_frame:,} frames;"
                  " raise the target with --frames or --more", highlight=False, markup=False)


@app.command(short_help="Replay a checkpoint and score it.")
@filtered()
def enjoy(
    reference: Annotated[str, _reference(
        "the run, as for show; /sK picks a session, @best, @latest or @5M a checkpoint (or its folder).")] = "latest",
    episodes: Annotated[
        int, typer.Option(min=1, show_default=True, metavar="INTEGER RANGE", help="Episodes to play.")
    ] = 5,
    seed: Annotated[int | None, typer.Option(
        min=0, metavar="INTEGER RANGE", help="Seed of the episodes (default: the session's).")] = None,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions, not the greedy ones.")] = False,
    render: Annotated[bool, typer.Option("--render", help="Show the episodes in a window.")] = False,
    video: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Record the episodes to a .gif or .mp4 file (also sent to"
                                  " the run's trackers, its meta.track).")
    ] = None,
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Replay a checkpoint (the best by default) and score it, without touching the training records."""
    from rlrun.cli.display import enjoy_table, enjoy_target
    from rlrun.enjoy import enjoy as enjoy_run

    label = _label(reference, filters)
    console = _console()
    result = enjoy_run(_parse(reference), filters, home=home, episodes=episodes, seed=seed, stochastic=stochastic,
                       render=render, video=video,
                       on_target=lambda chosen: console.print(enjoy_target(chosen, label)))
    if as_json:
        _print_json(result.to_json())
    else:
        console.print(enjoy_table(result))
    for line in result.video_not_sent:  # a tracker never fails enjoy: said, exit 0
        console.print(f"warning: {line}", style="yellow", highlight=False, markup=False, soft_wrap=True)


def _parse(reference: str) -> Any:
    """The reference, parsed once here; the library resolves it (with the filters) once."""
    from rlrun.refs import parse_ref

    return parse_ref(reference)


def _label(reference: str, filters: Any) -> str:
    narrowed = filters.narrows or filters.sort != "started"
    return f"{reference} {filters.describe()}" if narrowed else reference


@app.command(short_help="Search hyper-parameters, a run per trial.")
def search(
    spec: Annotated[str, typer.Argument(metavar="SPEC", show_default=False)],
    trials: Annotated[int | None, typer.Option(
        min=1, metavar="INTEGER RANGE", help="Trials to run (default: every point of an all-grid space).")] = None,
    parallel: Annotated[int, typer.Option(
        min=1, metavar="INTEGER RANGE",
        help="Trials (PBT: members of a generation) at a time, each driven from a process of its own.")] = 1,
    name: Annotated[str | None, typer.Option(metavar="TEXT", help="A unique name for the search.")] = None,
    metric: Annotated[str | None, typer.Option(
        metavar="TEXT", help="Score: eval_mean (final evaluation; default) or best_eval, over sessions.")] = None,
    sampler: Annotated[str | None, typer.Option(
        metavar="TEXT", help="tpe (default), random, or grid (the default when every dimension is a grid).")] = None,
    pruner: Annotated[str | None, typer.Option(
        metavar="TEXT", help="Stop poor trials early: median (default), halving, or none.")] = None,
    prune_after: Annotated[int | None, typer.Option(
        min=0, metavar="INTEGER RANGE", help="Trials the median pruner waits for (default 5).")] = None,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", metavar="TEXT", help="Override a base spec value: --set meta.max_frame=50k (repeatable).")] = None,
    scheduler: Annotated[str, typer.Option(
        metavar="TEXT", help="trials (default: a run per trial) or pbt (population-based training).")] = "trials",
    population: Annotated[int | None, typer.Option(min=2, metavar="INTEGER RANGE", help="PBT: members.")] = None,
    interval: Annotated[str | None, typer.Option(
        metavar="TEXT", help="PBT: frames between exploits, e.g. 50k.")] = None,
    quantile: Annotated[float | None, typer.Option(
        metavar="FLOAT", help="PBT: the bottom fraction that copies the top one (default 0.25).")] = None,
    resample: Annotated[float | None, typer.Option(
        metavar="FLOAT", help="PBT: chance a value is drawn again rather than scaled (default 0.25).")] = None,
    factors: Annotated[str | None, typer.Option(
        metavar="TEXT", help="PBT: factors that scale an explored value (default 0.8,1.2).")] = None,
    track: Track = None,
    ray: Ray = None,
    cpus: Cpus = None,
    gpus: Gpus = None,
    detach: Detach = False,
    supervisor_on: SupervisorOn = None,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Search hyper-parameters: train a run per trial over the spec's `search` block, suggested by
    Optuna (seeded by the spec), scored on evaluations, poor trials pruned; `rlrun resume search:REF`
    continues it after a stop or a crash. `--scheduler pbt` trains a population instead, whose
    weaker members continue exact forks of stronger ones with explored values."""
    from rlrun.cli.display import TrainingDisplay
    from rlrun.search import run_search

    pbt_options = {"--population": population, "--interval": interval, "--quantile": quantile,
                   "--resample": resample, "--factors": factors}
    plan = _search_plan(spec, list(overrides or ()) + _track_edit(track), scheduler, pbt_options, trials=trials,
                        sampler=sampler, parallel=parallel, metric=metric, pruner=pruner, prune_after=prune_after)
    make_executor = _trial_executors(ray, cpus, gpus)
    hand_over = _search_hand_over(ray, cpus, gpus, detach, supervisor_on)
    console = _console()

    def announce(record: Any) -> None:
        label = f" ({record.name})" if record.name else ""
        settings = plan.settings
        how = (f"{settings.sampler} sampler, {settings.pruner} pruner" if scheduler == "trials" else
               f"{settings.population} members, an exploit every {settings.interval:,} frames")
        console.print(f"search {record.id}{label}: {settings.trials} trials of {plan.spec.name} over "
                      f"{', '.join(d.path for d in plan.dimensions)}; {how}, score {settings.metric}",
                      highlight=False, markup=False)

    with TrainingDisplay(console) as display:
        result = run_search(plan, home=home, name=name, on_event=display, on_start=announce,
                            on_trial=_trial_line(console), make_executor=make_executor, hand_over=hand_over)
    _conclude_search(result, console, as_json)


def _search_hand_over(ray: str | None, cpus: float | None, gpus: float | None, detach: bool,
                      supervisor_on: str | None) -> Any:  # fmt: skip
    """Where `--detach` hands a search's driving (None: it stays with this command)."""
    _check_detach("search", ray, detach, supervisor_on)
    if not detach:
        return None
    from rlrun.search.detached import RayHandOver

    return RayHandOver(ray or None, cpus=cpus, gpus=gpus, supervisor_on=supervisor_on)


def _search_plan(spec: str, overrides: list[str], scheduler: str, pbt_options: dict[str, Any], *,
                 trials: int | None, sampler: str | None, parallel: int, metric: str | None, pruner: str | None,
                 prune_after: int | None) -> Any:
    """The search the options ask for: trials suggested by Optuna, or a PBT population."""
    from rlrun.search import plan_search

    if scheduler not in ("trials", "pbt"):
        raise BadInput(f"--scheduler {scheduler!r} is not one of trials, pbt; use one of them")
    given: dict[str, Any] = {"metric": metric, "pruner": pruner, "prune_after": prune_after}  # None: its default
    if scheduler == "trials":
        extra = [option for option, value in pbt_options.items() if value is not None]
        if extra:
            raise BadInput(f"{', '.join(extra)} set up population-based training: add --scheduler pbt")
        return plan_search(spec, overrides, trials=trials, sampler=sampler, parallel=parallel,
                           **{key: value for key, value in given.items() if value is not None})
    from rlrun.search import pbt
    from rlrun.search.population import plan_pbt
    from rlrun.sizes import parse_size

    extra = [option for option, value in {"--trials": trials, "--sampler": sampler, "--pruner": pruner,
                                          "--prune-after": prune_after}.items() if value is not None]
    if extra:
        raise BadInput(f"{', '.join(extra)} belong to a search of trials; --scheduler pbt trains its population"
                       " generation by generation: drop them")
    if pbt_options["--population"] is None or pbt_options["--interval"] is None:
        raise BadInput("--scheduler pbt needs --population N and --interval FRAMES, e.g. --population 8"
                       " --interval 50k")
    defaults = {"--quantile": pbt.QUANTILE, "--resample": pbt.RESAMPLE_PROBABILITY}
    chosen = {option: defaults[option] if pbt_options[option] is None else pbt_options[option] for option in defaults}
    options = pbt.Options(
        population=pbt_options["--population"], interval=parse_size(pbt_options["--interval"], what="--interval"),
        quantile=chosen["--quantile"], resample_probability=chosen["--resample"],
        factors=pbt.FACTORS if pbt_options["--factors"] is None else _factors(pbt_options["--factors"]),
    )
    return plan_pbt(spec, overrides, options=options, metric=metric or "eval_mean", parallel=parallel)


def _factors(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise BadInput(f"--factors {text!r}: give numbers separated by commas, e.g. 0.8,1.2") from None


def _trial_line(console: Any) -> Any:
    def say(outcome: Any) -> None:
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={json.dumps(v)}"
                           for k, v in outcome.params.items())
        scored = f"{outcome.value:.1f}" if outcome.value is not None else "-"
        note = f" ({outcome.note})" if outcome.note else ""
        console.print(f"trial {outcome.number} {outcome.state} (run {outcome.run_id}): {scored}{note}  {params}",
                      highlight=False, markup=False)
    return say


def _conclude_search(result: Any, console: Any, as_json: bool) -> None:
    """The search's outcome and exit code: 0 done (or handed to a detached driver), 128 + the
    signal after a graceful stop."""
    if result.detached:
        console.print(f"search {result.search_id} detached: driven by {result.detached}; follow it with"
                      f" `rlrun ls --search search:{result.search_id}` or `rlrun show search:{result.search_id}`",
                      highlight=False, markup=False)
    if as_json:
        _print_json(result.to_json())
    if result.detached:
        return
    if result.nothing_to_do:
        console.print(f"nothing to do: search {result.search_id} has ended all its trials", highlight=False,
                      markup=False)
        return
    if result.signal > 0:
        console.print(f"search {result.search_id} stopped by signal {result.signal}; continue it with"
                      f" `rlrun resume search:{result.search_id}`", highlight=False, markup=False)
        raise SystemExit(128 + result.signal)
    if result.status in ("failed", "interrupted"):
        raise TrainingFailed(f"search {result.search_id} {result.status}: {result.error}; continue it with"
                             f" `rlrun resume search:{result.search_id}`")
    best = result.best
    found = f"; best: trial {best.number} (run {best.run_id}), {best.value:.1f}" if best else ""
    console.print(f"search {result.search_id} {result.status}{found}: see `rlrun show search:{result.search_id}`",
                  highlight=False, markup=False)


def _resume_search(reference: str, home: str | None, as_json: bool, given: dict[str, Any],
                   make_executor: Any, hand_over: Any) -> None:
    from rlrun.cli.display import TrainingDisplay
    from rlrun.search import resume_search

    extra = [option for option, value in given.items() if value]
    if extra:
        raise BadInput(f"{', '.join(extra)} edit a run; a search resumes as it was recorded: drop them")
    console = _console()
    with TrainingDisplay(console) as display:
        result = resume_search(reference, home=home, on_event=display, on_trial=_trial_line(console),
                               on_start=lambda record: _say(_views().resolved_search(record, reference)),
                               make_executor=make_executor, hand_over=hand_over)
    _conclude_search(result, console, as_json)


def _views() -> Any:
    from rlrun.cli import views

    return views


# ---------------------------------------------------------------------------------------------
# Registry commands (ls, show, plot, rm, gc, db): they read and write the registry and the run
# folders only, so they never import torch or gymnasium, and ls and show not even Rich.


@app.command("ls", short_help="List runs (or searches), newest first.")
@filtered()
def list_runs(
    limit: Annotated[int, typer.Option(
        "-n", "--limit", min=1, show_default=True, metavar="INTEGER RANGE", help="Show at most N runs.")] = 20,
    show_all: Annotated[bool, typer.Option("--all", help="Show every run.")] = False,
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print only CSV on stdout.")] = False,
    search_ref: Annotated[str | None, typer.Option(
        "--search", metavar="SEARCH", help="List a search's trials instead: --search search:latest.")] = None,
    searches: Annotated[bool, typer.Option("--searches", help="List the searches instead.")] = False,
) -> None:
    """List runs, newest first (or --sort best | frames); filters narrow the list and the row numbers."""
    from rlrun import catalog
    from rlrun.cli import views

    if as_json and as_csv:
        raise BadInput("choose --json or --csv, not both")
    if search_ref is not None or searches:
        _list_searches(search_ref, home, as_json, None if show_all else limit)
        return
    listing = catalog.list_runs(filters, home=home, limit=None if show_all else limit)
    if as_json:
        _print_json([run.to_json() for run in listing.runs])
    elif as_csv:
        sys.stdout.write(views.runs_csv(listing.runs))
    elif not listing.runs:
        _say(views.nothing_listed(listing))
    else:
        _say(views.runs_table(listing.runs, total=listing.total, filters=filters.describe(),
                              colour=views.colour_enabled()))


def _list_searches(reference: str | None, home: str | None, as_json: bool, limit: int | None) -> None:
    """`ls --searches` (the searches, newest first) or `ls --search REF` (one search's trials). Read-only."""
    from rlrun import catalog
    from rlrun.cli import views

    if reference is None:
        root = paths.resolve_home(home)
        found = catalog.list_searches(home=root, limit=limit)
        if as_json:
            _print_json([{**s.to_json(), "ended": ended, "best": best} for s, ended, best in found])
        else:
            _say(views.searches_table(found, colour=views.colour_enabled()) if found
                 else f"no searches in {root} yet; start one with `rlrun search SPEC`")
        return
    chosen = catalog.lookup_search(reference, home=home)
    _say(views.resolved_search(chosen.detail.search, chosen.reference))
    if as_json:
        _print_json([t.to_json() for t in chosen.detail.trials])
    else:
        _say(views.trials_table(chosen.detail, colour=views.colour_enabled()))


@app.command(short_help="Show a run: sessions, checkpoints, evals.")
@filtered()
def show(
    reference: Annotated[str, _reference(
        "latest, latest~N, a row of `rlrun ls`, an id, id prefix or name, or a run folder (anywhere).")] = "latest",
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
    metrics: Annotated[bool, typer.Option(
        "--metrics", help="Show the training metrics instead: latest values and sparklines.")] = False,
    spec_json: Annotated[bool, typer.Option(
        "--spec-json", help="Print the run's latest spec as JSON on stdout instead (to edit for resume --spec).")
    ] = False,
) -> None:
    """Show a run: sessions with sparklines of their evaluations, checkpoints, evaluations, spec
    revisions and their changes, attempts and lineage (the spec itself with --spec-json)."""
    from rlrun import catalog
    from rlrun.cli import views

    found = catalog.lookup(reference, filters, home=home)
    if isinstance(found, catalog.SearchLookup):
        _show_search(found, as_json)
        return
    _say(views.resolved(found.run, _label(reference, filters)))
    if found.checkpoint is not None:
        _say(f"checkpoint: session s{found.checkpoint.session.index}, frame {found.checkpoint.checkpoint.frame:,}")
    if metrics:
        _show_metrics(found.detail, found.home, as_json)
    elif spec_json:
        print(views.spec_document(found.detail))
    elif as_json:
        _print_json(found.to_json())
    else:
        _say(views.run_detail(found.detail, colour=views.colour_enabled()))
        for line in views.tracker_lines(found.run.id, found.trackers):
            _say(line)


@app.command(short_help="Send a run's history to MLflow or W&B.")
def track(
    reference: Annotated[str, _reference("latest, latest~N, a row of `rlrun ls`, an id, id prefix or name.")
                         ] = "latest",
    to: Annotated[list[str], typer.Option(
        "--to", metavar="TRACKER", help="mlflow or wandb (repeatable); where, from their own environment variables.")
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
    _say(views.resolved(found.run, reference))
    sent = track_run(found.run.id, to=list(dict.fromkeys(to)), home=found.home)
    if as_json:
        _print_json([{"session": index, **vars(delivered)} for index, delivered in sent])
    for index, delivered in sent:
        _say(f"s{index}: history sent to {delivered.tracker} (run {delivered.run})")


def _show_search(found: Any, as_json: bool) -> None:
    from rlrun.cli import views

    _say(views.resolved_search(found.detail.search, found.reference))
    if as_json:
        document = found.detail.to_json()
        if found.lineage:
            document["lineage"] = [line.to_json() for line in found.lineage]
        _print_json(document)
    else:
        _say(views.search_detail(found.detail, colour=views.colour_enabled()))
        if found.lineage:
            _say(views.lineage_tree(found.detail, found.lineage))


def _show_metrics(detail: Any, root: Path, as_json: bool) -> None:
    """`show --metrics`: each session's log, summarised (or, with --json, whole, as columns)."""
    from rlrun.cli import views
    from rlrun.session import metrics_log

    logs = metrics_log.session_logs(root, detail)
    if as_json:
        _print_json(metrics_log.gather(logs))
        return
    tables = [(f"s{log.session}", metrics_log.read(log.path) if log.path.exists() else {}) for log in logs]
    _say(views.metrics_summary(tables, colour=views.colour_enabled()))


@app.command(short_help="Plot evaluation return against frames.")
@filtered()
def plot(
    references: Annotated[list[str] | None, _references("the runs to draw (default: latest).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="PATH", help="Image file to write: .png, .svg or .pdf.")] = None,
    title: Annotated[str | None, typer.Option(metavar="TEXT", help="Title of the plot.")] = None,
    metric: Annotated[str | None, typer.Option(
        metavar="NAME", help="Draw this training metric (a metrics log column) instead of evaluation return.")] = None,
    *,
    filters: "RunFilter",
    home: Home = None,
) -> None:
    """Plot evaluation return against frames: mean ± std across each run's sessions, runs overlaid."""
    from rlrun import catalog
    from rlrun.cli import views
    from rlrun.cli.plot import check_output, draw, draw_population, draw_search

    if output is None:
        raise BadInput("rlrun plot needs an image to write: -o FILE.png")
    check_output(output)
    drawn = catalog.plot_data(references or ["latest"], filters, home=home, metric=metric)
    if isinstance(drawn, catalog.PopulationCurves):  # each member's curve, its exploits marked
        _say(views.resolved_search(drawn.search.search, drawn.reference))
        _say(f"wrote {draw_population(drawn, output, title=title)}")
        return
    if isinstance(drawn, catalog.SearchLookup):  # score against trial, with the best so far
        _say(views.resolved_search(drawn.detail.search, drawn.reference))
        _say(f"wrote {draw_search(drawn.detail, output, title=title)}")
        return
    for reference, run in drawn.named:
        _say(views.resolved(run, _label(reference, filters)))
    _say(f"wrote {draw(drawn.curves, output, title=title, metric=metric)}")


@app.command(short_help="Export runs' records or metrics as CSV.")
def export(
    references: Annotated[list[str] | None, _references("the runs to export (default: latest).")] = None,
    metrics: Annotated[bool, typer.Option("--metrics", help="Export the training metrics logs.")] = False,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="PATH", help="CSV file to write (default: standard output).")] = None,
    home: Home = None,
) -> None:
    """Export runs' records as CSV: with --metrics, every session's training metrics, with run and
    session columns. Read-only."""
    from rlrun import catalog
    from rlrun.cli import views
    from rlrun.session import metrics_log

    if not metrics:
        raise BadInput("say what to export: rlrun export REFERENCE --metrics -o metrics.csv")
    if output is not None and not output.parent.is_dir():
        raise BadInput(f"-o {output}: folder {output.parent} does not exist; create it or write elsewhere")
    exported = catalog.export_metrics(references or ["latest"], home=home)
    for reference, run in exported.named:
        _say(views.resolved(run, reference))
    text = metrics_log.to_csv(exported.table)
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    _say(f"wrote {output} ({text.count(chr(10)) - 1} rows)")


@app.command(short_help="Stop a running run (or search) with snapshots.")
@filtered(*ONE_RUN_FILTERS)
def stop(
    reference: Annotated[str, _reference(
        "latest, latest~N, a row, an id, prefix or name, or a run folder; or search:latest, search:ID.")] = "latest",
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Stop a running run, wherever it runs (this machine, a Ray cluster, detached): every session
    stops at its next heartbeat with a snapshot, and `rlrun resume` continues it bit for bit. Or a
    search (`search:latest`, `search:ID`): it starts no more trials, and its trials in flight stop
    with snapshots. Safe to repeat; a run or search that has ended has nothing to stop (exit 0)."""
    from rlrun.cli import views
    from rlrun.refs import SearchRef, parse_target
    from rlrun.training.control import stop as stop_run

    target = parse_target(reference)
    if isinstance(target, SearchRef):
        _stop_search(target, filters, home, as_json)
        return
    outcome = stop_run(target, filters, home=home)
    _say(views.resolved(outcome.run, _label(reference, filters)))
    if as_json:
        _print_json(outcome.to_json())
    run = outcome.run
    if not outcome.stopping:
        advice = f"; continue it with `rlrun resume {run.id}`" if run.status in ("crashed", "preempted") else ""
        _say(f"run {run.id} is {run.status}: nothing to stop{advice}")
    elif outcome.repeated:
        _say(f"run {run.id}: a stop was already requested {views.when(outcome.requested_at)}; its sessions stop at"
             " their next heartbeat with a snapshot (`rlrun ls` says preempted once they have)")
    else:
        _say(f"run {run.id}: stop requested; its sessions stop at their next heartbeat with a snapshot"
             f" (`rlrun ls` says preempted once they have); continue it with `rlrun resume {run.id}`")


def _stop_search(target: Any, filters: "RunFilter", home: str | None, as_json: bool) -> None:
    from rlrun.cli import views
    from rlrun.training.control import stop_search

    if filters.narrows:
        raise BadInput(f"{filters.describe()} narrow runs; a search is named by its reference alone: drop them")
    outcome = stop_search(target.ref, home=home)
    search = outcome.search
    _say(views.resolved_search(search, target.text))
    if as_json:
        _print_json(outcome.to_json())
    if not outcome.stopping:
        advice = f"; continue it with `rlrun resume search:{search.id}`" if search.status in (
            "crashed", "preempted", "interrupted") else ""
        _say(f"search {search.id} is {search.status}: nothing to stop{advice}")
    elif outcome.repeated:
        _say(f"search {search.id}: a stop was already requested {views.when(outcome.requested_at)}; it starts no"
             " more trials and its trials in flight stop with snapshots (`rlrun ls --searches` says preempted"
             " once they have)")
    else:
        _say(f"search {search.id}: stop requested; it starts no more trials and its trials in flight stop with"
             f" snapshots (`rlrun ls --searches` says preempted once they have); continue it with"
             f" `rlrun resume search:{search.id}`")


@app.command(short_help="Delete runs, their folders included.")
@filtered()
def rm(
    references: Annotated[list[str] | None, _references("the runs to delete, as for show.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    *,
    filters: "RunFilter",
    home: Home = None,
) -> None:
    """Delete runs: their registry rows, then their folders (snapshots included). Asks first."""
    from rlrun.cli import views
    from rlrun.home.maintenance import plan_removal, remove

    if not references:
        raise BadInput("name the runs to delete, e.g. `rlrun rm latest` or `rlrun rm RUN_ID`")
    plan = plan_removal(references, filters, home=home)
    plan.check()
    for reference, run in plan.named:
        _say(views.resolved(run, _label(reference, filters)))
    count = len(plan.named)
    what = f"{count} run{'s' if count != 1 else ''} and {views.format_bytes(plan.bytes_freed)} of files"
    if not yes and not _confirm(f"delete {what}? [y/N] "):
        _say("nothing deleted")
        raise SystemExit(1)
    remove(plan)
    _say(f"deleted {what}")


def _confirm(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\n(no answer on stdin; pass --yes to delete without asking)\n")
    return answer.strip().lower() in ("y", "yes")


@app.command(short_help="Remove folders the registry does not list.")
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Remove snapshot folders the registry does not list, unfinished snapshot writes, and the
    snapshots each run's retention setting (meta.keep_checkpoints) no longer keeps."""
    from rlrun.cli import views
    from rlrun.home.maintenance import collect_garbage
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        report = collect_garbage(registry, dry_run=dry_run)
    if as_json:
        _print_json(report.to_json())
    else:
        _say(views.garbage_report(report, paths.home_address(root)))


@app.command("import", short_help="Add run folders copied from elsewhere.")
def import_(
    folders: Annotated[list[Path] | None, typer.Argument(
        metavar="PATH...", show_default=False, help="Run folders (each with its run.json) to add to the home.")] = None,
    move: Annotated[bool, typer.Option("--move", help="Move the folders into the home, not copy them.")] = False,
    home: Home = None,
) -> None:
    """Add runs copied from elsewhere (a cluster, a colleague) to the home: each folder is checked
    (every snapshot against its MANIFEST.json), copied (or moved) in and registered."""
    from rlrun.home.maintenance import check_imports, import_runs
    from rlrun.registry import Registry

    if not folders:
        raise BadInput("name the run folders to import, e.g. `rlrun import ~/Downloads/k3ab9x2m`")
    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:  # checked before anything is written
        checked = check_imports(registry, folders)
    with Registry.open(root) as registry:
        imported = import_runs(registry, checked, move=move)
    for run in imported:
        _say(f"imported run {run.id}{f' ({run.name})' if run.name else ''}, {run.spec_name}, {run.status}:"
             f" see `rlrun show {run.id}`")


# ---------------------------------------------------------------------------------------------
# db


@db_app.callback(invoke_without_command=True)
def db(context: typer.Context) -> None:
    """The registry database: schema revision, upgrade, rebuild from run folders."""
    _help_if_bare(context)


@db_app.command("current", short_help="Print the schema revision, and the needed one.")
def db_current(home: Home = None, as_json: AsJson = False) -> None:
    """Print the registry's schema revision and the one this rlrun needs."""
    from rlrun.registry import schema_state

    state = schema_state(paths.resolve_home(home))
    if as_json:
        _print_json({"database": state.label, "revision": state.revision, "head": state.head,
                     "exists": state.exists, "up_to_date": state.up_to_date})  # fmt: skip
        return
    if not state.exists:
        verdict = "no registry yet (created by `rlrun train`)"
    elif state.up_to_date:
        verdict = f"schema {state.revision} (head, up to date)"
    else:
        verdict = f"schema {state.revision or 'none'}, this rlrun needs {state.head}; run `rlrun db upgrade`"
    sys.stdout.write(f"{state.label}: {verdict}\n")


@db_app.command("upgrade", short_help="Upgrade the registry's schema.")
def db_upgrade(home: Home = None) -> None:
    """Upgrade the registry's schema to this rlrun's (a SQLite file is copied first)."""
    from rlrun.registry import SCHEMA_HEAD, upgrade_registry

    done = upgrade_registry(paths.resolve_home(home))
    if done is None:
        sys.stdout.write(f"registry already at schema {SCHEMA_HEAD}\n")
        return
    kept = f"; the old file is kept at {done.backup}" if done.backup else ""
    sys.stdout.write(f"upgraded {done.label} from schema {done.before or 'none'} to {done.after}{kept}\n")


@db_app.command("rebuild", short_help="Restore the registry from the run folders.")
def db_rebuild(home: Home = None, as_json: AsJson = False) -> None:
    """Restore the registry from the run folders (their run.json manifests and snapshots) and the
    searches' manifests (searches/<id>.json): every run and search it does not list yet is added back."""
    from rlrun.home.maintenance import rebuild
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root) as registry:
        report = rebuild(registry)
    if as_json:
        _print_json(report.to_json())
        return
    for problem in report.problems:
        _say(f"skipped {problem}")
    _say(f"restored {len(report.restored)} runs ({report.sessions} sessions, {report.checkpoints} checkpoints,"
         f" {report.evaluations} evaluations) and {len(report.searches)} searches from {paths.home_address(root)};"
         f" {len(report.already_known)} were already in the registry")


# ---------------------------------------------------------------------------------------------
# spec


@spec_app.callback(invoke_without_command=True)
def spec(context: typer.Context) -> None:
    """Built-in specs and the spec schema."""
    _help_if_bare(context)


@spec_app.command("list")
def spec_list() -> None:
    """List the built-in specs."""
    from rlrun.cli.views import table
    from rlrun.spec import builtin_document, builtin_names

    rows = [[name, (document := builtin_document(name))["agent"]["algorithm"], document["env"]["id"]]
            for name in builtin_names()]
    sys.stdout.write(table(("spec", "algorithm", "env"), rows) + "\n")


@spec_app.command("show", short_help="Print a built-in spec as JSON.")
def spec_show(name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)]) -> None:
    """Print a built-in spec as JSON, ready to save and edit."""
    from rlrun.spec import builtin_document

    _print_json(builtin_document(name))


@spec_app.command("schema", short_help="Print the spec's JSON Schema (for editors).")
def spec_schema() -> None:
    """Print the JSON Schema of a spec (for editors)."""
    from rlrun.spec import json_schema

    _print_json(json_schema())


# ---------------------------------------------------------------------------------------------


def main() -> None:
    """Entry point of the `rlrun` command: `run` with the process's arguments, its result as the exit status."""
    # First thing, before the heavy imports of start-up: a SIGTERM from now on stops a training
    # command gracefully (128 + signal, nothing or a consistent record written), never kills it.
    from rlrun.session.stopping import TRAINING_COMMANDS, close_to_signals, defer_signals_for

    defer_signals_for(sys.argv[1:])
    trains = bool(sys.argv[1:2]) and sys.argv[1] in TRAINING_COMMANDS
    if trains:  # before torch loads: OpenMP reads it then
        from rlrun.spec.cores import let_idle_threads_sleep

        let_idle_threads_sleep(os.environ)
    code = run(sys.argv[1:])
    if trains:
        close_to_signals()
    if code:
        raise SystemExit(code)


def _bare_ray(argv: list[str]) -> list[str]:
    """`--ray` takes the next argument as its ADDRESS only when it reads as one (HOST:PORT, a
    ray:// URL, `auto` or `local`), so `rlrun resume --ray latest` resumes `latest` on the cluster
    that `auto` finds; otherwise it is `--ray=` (no address given)."""
    fixed = list(argv)
    for i, arg in enumerate(fixed):
        if arg == "--":
            break
        if arg == "--ray":
            following = fixed[i + 1] if i + 1 < len(fixed) else ""
            if not (_reads_as_address(following) or following in ("auto", "local")):
                fixed[i] = "--ray="
    return fixed


def _reads_as_address(text: str) -> bool:
    """HOST:PORT with a numeric port, or a ray:// URL (not a reference such as `search:abc`)."""
    host, sep, port = text.rpartition(":")
    return text.startswith("ray://") or bool(sep and host and port.isdigit())


def run(argv: list[str]) -> int:
    """Run the app on `argv` and return the exit code; the only error handler: domain errors and
    usage errors become one line on stderr and an exit code, never a traceback. In-process
    callers (tests, scripts) get exactly what the command line gets."""
    argv = _bare_ray(argv)
    try:
        # Not standalone: Typer hands usage errors to us instead of printing them its own way.
        code = app(args=argv, prog_name="rlrun", standalone_mode=False)
    except EditRefused as error:
        from rlrun.cli.display import refusal_table

        _console().print(refusal_table(error.changes))
        sys.stderr.write(f"error: {error}\n")
        return error.exit_code
    except SpecError as error:
        for problem in error.problems:
            sys.stderr.write(f"error: {problem}\n")
        return error.exit_code
    except RlrunError as error:
        sys.stderr.write(f"error: {error}\n")
        return error.exit_code
    except typer.TyperException as error:  # usage errors: unknown option or command, missing argument, bad value
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "rlrun"
        sys.stderr.write(f"error: {_usage_message(error)}; see `{command} --help`\n")
        return error.exit_code
    except typer.Abort:
        return 130
    except SystemExit as stop:  # a command's own status: 128+signal after a graceful stop, 1 when rm is declined
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        sys.stderr.write(f"{stop.code}\n")  # what Python itself does with a message
        return 1
    # typer.Exit (--version, help for a bare group, Ctrl-C) comes back as its code.
    return code if isinstance(code, int) else 0


def _usage_message(error: typer.TyperException) -> str:
    """A usage error in one phrase, without the final full stop. An unknown option reads as it
    did under Click (`No such option '--colour'. Did you mean '--color'?`), not as Typer's vendored
    Click words it (`No such option: --colour (Possible options: --color)`)."""
    if isinstance(error, NoSuchOption):
        close = ", ".join(repr(name) for name in sorted(error.possibilities or ()))
        return f"No such option {error.option_name!r}" + (f". Did you mean {close}?" if close else "")
    return error.format_message().rstrip(".")

"""The options several commands share, said once: aliases (`Home`, `AsJson`, …), the run filters
(`filtered`), reference arguments, and the `--ray` options as the executors they ask for."""

import functools
import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rlrun import paths
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.refs import RunFilter


def _home_given(context: typer.Context, parameter: typer.CallbackParam, value: str | None) -> str | None:
    """A --home typed on the command line goes into every command the command suggests
    (`rlrun.cli.hints`); one from $RLRUN_HOME does not need to: the next command reads it too."""
    source = context.get_parameter_source(parameter.name or "home")
    if value is not None and source is not None and source.name == "COMMANDLINE":
        from rlrun.cli import hints

        hints.given("--home", value)
    return value


# A string, not a Path: a home may be a URL (s3://bucket/runs), which Path would fold into s3:/bucket/runs.
Home = Annotated[
    str | None,
    typer.Option(
        callback=_home_given,
        envvar=paths.HOME_ENV,
        show_envvar=False,
        metavar="PATH|URL",
        help="Runs home: a folder (default ./runs, or $RLRUN_HOME) or s3://bucket/prefix (needs $RLRUN_DB).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print only JSON on stdout.")]
Track = Annotated[
    list[str] | None,
    typer.Option(
        "--track", metavar="TRACKER", help="Also log each session to mlflow or wandb (repeatable; sets meta.track)."
    ),
]

# The filter options: they narrow the runs a command considers, before `latest` and row numbers
# count them (`rlrun enjoy latest --algo ppo` is the newest PPO run).
Status = Annotated[
    str | None,
    typer.Option(metavar="TEXT", help="Only runs with this status: running, finished, failed, preempted, crashed."),
]
Algo = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs of this algorithm.")]
Env = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs on this env id.")]
SpecName = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs of this spec name (as --of).")]
Of = Annotated[
    str | None,
    typer.Option("--of", metavar="SPEC", help="Only runs of this spec name: `resume latest --of reinforce_cartpole`."),
]
Name = Annotated[str | None, typer.Option(metavar="TEXT", help="Only runs whose name matches this glob (* and ?).")]
Since = Annotated[
    str | None,
    typer.Option(metavar="TEXT", help="Only runs started since: 2d, 12h, 30m, 1w or a date such as 2025-05-01."),
]
Sort = Annotated[
    str | None,
    typer.Option(metavar="TEXT", help="Row order for row numbers: started (newest first, the default), best, frames."),
]
# Each filter option by its parameter name, in the order `--help` lists them.
FILTER_OPTIONS: dict[str, Any] = {
    "status": Status,
    "algo": Algo,
    "env": Env,
    "spec": SpecName,
    "of": Of,
    "name": Name,
    "since": Since,
    "sort": Sort,
}
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
            parameters += [
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=FILTER_OPTIONS[name])
                for name in chosen
            ]

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
Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="Run the sessions on a Ray cluster: ADDRESS, else $RLRUN_RAY_ADDRESS, else auto.",
    ),
]
Cpus = Annotated[
    float | None,
    typer.Option("--cpus", min=0, metavar="FLOAT", help="With --ray or --slurm: CPUs per session (default 1)."),
]
Gpus = Annotated[
    float | None,
    typer.Option("--gpus", min=0, metavar="FLOAT", help="With --ray or --slurm: GPUs per session (default 0)."),
]
Detach = Annotated[
    bool,
    typer.Option(
        "--detach", help="With --ray: return once the run is recorded; the cluster supervises it (see `rlrun stop`)."
    ),
]
SupervisorOn = Annotated[
    str | None,
    typer.Option(
        "--supervisor-on",
        metavar="RESOURCE",
        help="With --detach: place the run's supervisor only on nodes that offer this custom Ray resource"
        " (on-demand nodes, say, not spot ones).",
    ),
]


# `--slurm`: each session a SLURM job, submitted through submitit (`rlrun.training.slurm`). Its
# options are edits of the spec's `meta.slurm` section (`slurm_edits`), so a resume submits the same
# way unless told otherwise; named as submitit names them.
Slurm = Annotated[
    bool,
    typer.Option(
        "--slurm", help="Run each session as a SLURM job (submitit); the command returns once they are queued."
    ),
]
Partition = Annotated[
    str | None, typer.Option("--partition", metavar="TEXT", help="With --slurm: the partition (meta.slurm.partition).")
]
Time = Annotated[
    int | None,
    typer.Option("--time", min=1, metavar="MINUTES", help="With --slurm: each job's time limit (default 60)."),
]
Memory = Annotated[
    float | None, typer.Option("--memory", min=0, metavar="GB", help="With --slurm: memory per job, in GB.")
]
Account = Annotated[str | None, typer.Option("--account", metavar="TEXT", help="With --slurm: the account to charge.")]
Qos = Annotated[str | None, typer.Option("--qos", metavar="TEXT", help="With --slurm: the quality of service.")]
Sbatch = Annotated[
    list[str] | None,
    typer.Option(
        "--sbatch", metavar="KEY=VALUE", help="With --slurm: a further #SBATCH option: constraint=a100 (repeatable)."
    ),
]
Wait = Annotated[
    bool,
    typer.Option("--wait", help="With --slurm: wait for the jobs to end (requeues included) instead of returning."),
]


def check_slurm_alone(what: str, ray: str | None, detach: bool) -> None:
    """--slurm with neither --ray nor --detach: its jobs (`what` they are) outlive the command."""
    if ray is not None or detach:
        raise BadInput(f"--slurm {what} the command; drop --ray and --detach")


def slurm_edits(
    slurm: bool,
    *,
    cpus: float | None = None,
    gpus: float | None = None,
    partition: str | None = None,
    time: int | None = None,
    memory: float | None = None,
    account: str | None = None,
    qos: str | None = None,
    sbatch: list[str] | None = None,
    wait: bool = False,
) -> list[str]:
    """The `--slurm` options as the spec edits they are (`meta.slurm.KEY=VALUE`); BadInput for one
    given without --slurm, or a count that is not whole."""
    given = {"partition": partition, "time": time, "memory": memory, "account": account, "qos": qos}
    if not slurm:
        named = [f"--{key}" for key, value in given.items() if value is not None]
        named += ["--sbatch"] if sbatch else []
        named += ["--wait"] if wait else []
        if named:
            raise BadInput(f"{', '.join(named)} submit{'s' if len(named) == 1 else ''} SLURM jobs; add --slurm")
        return []
    for flag, count in (("--cpus", cpus), ("--gpus", gpus)):
        if count is not None and not float(count).is_integer():
            raise BadInput(f"{flag} {count:g}: SLURM allocates whole {flag[2:].upper()}s; give a whole number")
        given[flag[2:]] = None if count is None else int(count)
    edits = [f"meta.slurm.{key}={json.dumps(value)}" for key, value in given.items() if value is not None]
    for line in sbatch or ():
        key, equals, value = line.partition("=")
        if not equals or not key.strip() or key.startswith("-"):
            raise BadInput(f"--sbatch {line!r}: give KEY=VALUE, an sbatch option without its dashes (constraint=a100)")
        edits.append(f"meta.slurm.sbatch.{key.strip()}={json.dumps(value)}")
    return edits


def reference_argument(text: str) -> Any:
    """The REFERENCE argument (default `latest`), with the forms this command accepts as its help."""
    return typer.Argument(metavar="REFERENCE", show_default=False, help=text)


def references_argument(text: str) -> Any:
    """The REFERENCES... arguments (any number), with `text` as their help."""
    return typer.Argument(metavar="[REFERENCES]...", show_default=False, help=text)


def _filters(
    status: str | None = None,
    algo: str | None = None,
    env: str | None = None,
    spec: str | None = None,
    name: str | None = None,
    since: str | None = None,
    sort: str | None = None,
    of: str | None = None,
) -> "RunFilter":
    from rlrun.refs import RunFilter

    return RunFilter.of(status=status, algorithm=algo, env=env, spec=spec, name=name, since=since, sort=sort, of=of)


def reference_label(reference: str, filters: Any) -> str:
    narrowed = filters.narrows or filters.sort != "started"
    return f"{reference} {filters.describe()}" if narrowed else reference


def track_edit(track: list[str] | None) -> list[str]:
    """`--track` as the spec edit it is (`meta.track`: the run remembers its trackers)."""
    return [f"meta.track={json.dumps(list(dict.fromkeys(track)))}"] if track else []


def session_executor(
    ray: str | None,
    cpus: float | None,
    gpus: float | None,
    stop: Any = None,
    detach: bool = False,
    supervisor_on: str | None = None,
    slurm: bool = False,
    wait: bool = False,
) -> Any:
    """The executor the options ask for: None (the local one) without --ray or --slurm. With
    --slurm, --cpus and --gpus are `slurm_edits`' (the caller's), not Ray's."""
    if slurm:
        check_slurm_alone("submits SLURM jobs, which outlive", ray, detach)
        from rlrun.training.slurm import SlurmExecutor

        return SlurmExecutor(wait=wait)
    check_detach("run", ray, detach, supervisor_on)
    if ray is None:
        if cpus is not None or gpus is not None:
            raise BadInput("--cpus and --gpus place sessions on a Ray cluster; add --ray [ADDRESS]")
        return None
    from rlrun.training.ray import ray_executor

    return ray_executor(ray or None, cpus=cpus, gpus=gpus, stop=stop, detach=detach, supervisor_on=supervisor_on)


def check_detach(what: str, ray: str | None, detach: bool, supervisor_on: str | None) -> None:
    """`--supervisor-on` only with `--detach`, and `--detach` only with `--ray`: for a "run" (its
    supervisor) or a "search" (its driver)."""
    holder = "supervisor" if what == "run" else "driver"
    if supervisor_on is not None and not detach:
        raise BadInput(f"--supervisor-on places a detached {what}'s {holder}; add --detach (and --ray [ADDRESS])")
    if detach and ray is None:
        raise BadInput(
            f"--detach hands the {what}'s {holder} to a Ray cluster; add --ray [ADDRESS]"
            f" (a {what} on this machine lasts as long as its command)"
        )


def trial_executors(
    ray: str | None,
    cpus: float | None,
    gpus: float | None,
    *,
    slurm: bool = False,
    wait: bool = False,
    slurm_spec: Any = None,
) -> Any:
    """What makes each search trial's executor from the stop its pruner requests: None (the local
    one) without --ray, and with --slurm alone (the driver's job trains them); with --slurm --wait,
    each trial's sessions as SLURM jobs that this command waits for. The options are checked now, once."""
    if slurm:
        session_executor(ray, None, None, slurm=True)  # --ray refused as for a run
        if not wait:
            return None
        from rlrun.training.slurm import SlurmTrials

        return SlurmTrials(slurm_spec)
    if session_executor(ray, cpus, gpus) is None:
        return None
    from rlrun.training.ray import RayTrials

    return RayTrials(ray or None, cpus=cpus, gpus=gpus)

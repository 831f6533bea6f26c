"""`rlrun import sb3 PATH`: RL Zoo log folders read into foreign runs.

The zoo (rl-baselines3-zoo, `python -m rl_zoo3.train`) writes one folder per run,
`<log>/<algo>/<EnvId>_<n>/`, holding `evaluations.npz` (SB3's EvalCallback: `timesteps`, the frames
each evaluation came at, and `results`, one row of episode returns per evaluation), Monitor files
(`*.monitor.csv`, one per env copy: the training episodes) and `<EnvId>/config.yml` (the
hyper-parameters) beside `<EnvId>/args.yml` (the command's arguments: algorithm, env id, seed).
PATH is such a folder or any folder above them (a log root, an algorithm's folder).

Each run becomes one finished foreign run (`runs.origin = "sb3"`) of one session (its seed) whose
evaluations are the zoo's, so `compare` scores it as it scores rlrun's. Its name ends in the first
characters of its content's hash (the evaluations, the config and the arguments), so importing a
folder again finds it there: nothing to do. Every folder is read and checked before anything is
written: bad input names the file and the fix, and leaves the registry as it was.

The zoo writes its YAML files with `yaml.dump` of OrderedDicts (a `python/object/apply` tag); they
are read with a safe loader that knows that one tag (and tuples), never with a loader that could
run code.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rlrun import ids, paths
from rlrun.errors import BadInput, install_hint
from rlrun.registry import Registry, RunRecord
from rlrun.registry.records import RestoredRun

ORIGIN = "sb3"
EVALUATIONS = "evaluations.npz"
CONFIG = "config.yml"
ARGS = "args.yml"
HASH_CHARS = 10
ZOO_ENV_IDS = {
    "CartPoleNoVel-v1": "CartPole-v1",
    "PendulumNoVel-v1": "Pendulum-v1",
    "LunarLanderNoVel-v3": "LunarLander-v3",
}
"""The zoo's partially observed envs as rlrun records them: the base env's id, with
`rlrun.envs.pomdp:HideVelocities` (the zoo's MaskVelocityWrapper) among the spec's wrappers, so
`compare` sees one task on both sides."""


class ZooRun(NamedTuple):
    """One zoo run folder, read."""

    folder: Path
    algorithm: str
    env_id: str  # as rlrun records the task (ZOO_ENV_IDS)
    zoo_env_id: str  # as the zoo named it
    seed: int
    max_frame: int
    hyperparams: dict[str, Any]
    args: dict[str, Any]
    frames: list[int]
    returns: list[list[float]]  # per evaluation, its episodes' returns
    episodes: int  # training episodes the Monitor files hold
    started_at: float | None
    ended_at: float | None
    sha256: str

    @property
    def name(self) -> str:
        """The foreign run's name: library, algorithm, the zoo's folder, the content's hash."""
        return f"{ORIGIN}-{self.algorithm}-{self.folder.name}-{self.sha256[:HASH_CHARS]}"


class ImportReport(NamedTuple):
    imported: list[RunRecord]
    already: list[str]  # names of runs found in the registry already: nothing to do for them

    def to_json(self) -> dict[str, Any]:
        return {"imported": [run.to_json() for run in self.imported], "already": self.already}


def import_sb3(sources: Sequence[Path | str], *, home: Path | str | None = None) -> ImportReport:
    """Import the RL Zoo runs found under `sources` as foreign runs of the home's registry.

    Args:
        sources: Zoo run folders, or folders above them (a log root, an algorithm's folder).
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        The runs imported, and the names of those the registry already held (nothing done).

    Raises:
        BadInput: a source holds no zoo run, or one cannot be read; nothing is written then.
    """
    runs = [read_zoo_run(folder) for source in sources for folder in zoo_run_folders(Path(source))]
    check_env_ids(runs)
    root = paths.resolve_home(home)
    imported: list[RunRecord] = []
    already: list[str] = []
    with Registry.open(root) as registry:
        for run in runs:
            if registry.name_exists(run.name) is not None or run.name in [r.name for r in imported]:
                already.append(run.name)
                continue
            run_id = registry.restore_run(restored_run(run, time.time()), fresh_id=True)
            imported.append(registry.resolve(run_id))
    return ImportReport(imported, already)


# -- finding and reading -------------------------------------------------------------------------


def zoo_run_folders(source: Path) -> list[Path]:
    """The zoo run folders `source` is or holds, in name order: itself, its children (an
    algorithm's folder) or its grandchildren (the zoo's `-f` log folder); nothing deeper is walked."""
    if not source.is_dir():
        raise BadInput(f"{source}: no such folder; name an RL Zoo log folder (`<log>/<algo>/<EnvId>_<n>` or above)")
    if _is_run_folder(source):
        return [source]
    for pattern in ("*", "*/*"):
        found = sorted(folder for folder in source.glob(pattern) if _is_run_folder(folder))
        if found:
            return found
    raise BadInput(
        f"{source}: not an RL Zoo log folder (no {EVALUATIONS} nor <EnvId>/{ARGS} in it, its folders or theirs);"
        " name the zoo's log folder (`-f`), an algorithm's folder in it or one run's `<EnvId>_<n>` folder"
    )


def _is_run_folder(folder: Path) -> bool:
    """A zoo run folder: its evaluations, or (evaluations missing, to be named) its `<EnvId>/args.yml`."""
    return folder.is_dir() and ((folder / EVALUATIONS).is_file() or any(folder.glob(f"*/{ARGS}")))


def read_zoo_run(folder: Path) -> ZooRun:
    """One zoo run folder, checked: BadInput naming the file and the fix when a piece is missing."""
    evaluations = folder / EVALUATIONS
    if not evaluations.is_file():
        raise BadInput(
            f"{evaluations}: missing; the zoo writes it when it evaluates (train with --eval-freq N below"
            " the run's timesteps), so this run has nothing to compare by"
        )
    params = _params_folder(folder)
    args = _read_yaml(params / ARGS)
    hyperparams = _read_yaml(params / CONFIG) if (params / CONFIG).is_file() else {}
    zoo_env_id = str(args.get("env") or params.name)
    algorithm = str(args.get("algo") or folder.parent.name).lower()
    frames, returns = _read_evaluations(evaluations)
    started, ended, episodes = _read_monitors(folder)
    return ZooRun(
        folder=folder,
        algorithm=algorithm,
        env_id=ZOO_ENV_IDS.get(zoo_env_id, zoo_env_id),
        zoo_env_id=zoo_env_id,
        seed=int(args.get("seed") or 0),
        max_frame=_budget(args, hyperparams, frames[-1]),
        hyperparams=hyperparams,
        args=args,
        frames=frames,
        returns=returns,
        episodes=episodes,
        started_at=started,
        ended_at=ended,
        sha256=_content_hash([evaluations, params / ARGS, params / CONFIG]),
    )


def _budget(args: dict[str, Any], hyperparams: dict[str, Any], last_frame: int) -> int:
    """The run's frames: `-n` when given (the zoo's -1: not given), else the config's n_timesteps."""
    for given in (args.get("n_timesteps"), hyperparams.get("n_timesteps")):
        if isinstance(given, int | float) and given > 0:
            return int(given)
    return last_frame


def _params_folder(folder: Path) -> Path:
    """`<EnvId>/`, the folder of config.yml and args.yml."""
    found = sorted(args.parent for args in folder.glob(f"*/{ARGS}"))
    if not found:
        raise BadInput(
            f"{folder}: no <EnvId>/{ARGS} in it (the zoo writes the env id, algorithm and seed there); import"
            " the zoo's whole run folder"
        )
    return found[0]


def _read_yaml(file: Path) -> dict[str, Any]:
    try:
        import yaml
    except ImportError:
        raise BadInput(f"reading {file} needs PyYAML; {install_hint('sb3')}") from None
    try:
        document = yaml.load(file.read_text(encoding="utf-8"), Loader=_zoo_loader(yaml))  # a SafeLoader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        why = f"{type(error).__name__}: {_first_line(error)}"
        raise BadInput(f"{file}: not readable as the zoo's YAML ({why}); import the folder the zoo wrote") from None
    if not isinstance(document, dict):
        raise BadInput(f"{file}: holds {type(document).__name__}, not the zoo's mapping of names to values")
    return document


def _zoo_loader(yaml: Any) -> Any:
    """A SafeLoader that also reads the tags `yaml.dump` gives an OrderedDict and a tuple."""

    class ZooLoader(yaml.SafeLoader):
        pass

    def ordered_dict(loader: Any, node: Any) -> dict[str, Any]:
        (pairs,) = loader.construct_sequence(node, deep=True)
        return {key: value for key, value in pairs}

    ZooLoader.add_constructor("tag:yaml.org,2002:python/object/apply:collections.OrderedDict", ordered_dict)
    ZooLoader.add_constructor(
        "tag:yaml.org,2002:python/tuple", lambda loader, node: loader.construct_sequence(node, deep=True)
    )
    return ZooLoader


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else ""


def _read_evaluations(file: Path) -> tuple[list[int], list[list[float]]]:
    try:
        with np.load(file, allow_pickle=False) as data:
            frames, results = np.asarray(data["timesteps"]), np.asarray(data["results"], dtype=np.float64)
    except (OSError, ValueError, KeyError) as error:
        raise BadInput(
            f"{file}: not SB3's EvalCallback file (timesteps, results): {type(error).__name__}: {_first_line(error)}"
        ) from None
    if frames.ndim != 1 or results.ndim != 2 or len(frames) != len(results) or not len(frames):
        raise BadInput(f"{file}: holds no evaluation (timesteps {frames.shape}, results {results.shape})")
    if not np.isfinite(results).all():
        raise BadInput(f"{file}: holds a return that is not a finite number; it cannot be scored")
    return [int(f) for f in frames], results.tolist()


def _read_monitors(folder: Path) -> tuple[float | None, float | None, int]:
    """When training started and ended, and its episodes, from SB3's Monitor files (none: unknown)."""
    starts, ends, episodes = [], [], 0
    for file in sorted(folder.glob("*monitor.csv")):
        lines = file.read_text(encoding="utf-8").splitlines()
        try:
            start = float(json.loads(lines[0].lstrip("#"))["t_start"])
        except (IndexError, ValueError, KeyError, TypeError):
            continue  # a Monitor file cut short: the evaluations are what is imported
        rows = [line.split(",") for line in lines[2:] if line]
        starts.append(start)
        ends.append(start + max((float(row[2]) for row in rows), default=0.0))
        episodes += len(rows)
    return (min(starts) if starts else None), (max(ends) if ends else None), episodes


def _content_hash(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        digest.update(file.read_bytes() if file.is_file() else b"")
    return digest.hexdigest()


def check_env_ids(runs: list[ZooRun]) -> None:
    """BadInput for a run whose env Gymnasium does not know here (a zoo env from a package not
    installed, or a folder that names none)."""
    if not runs:
        return
    import gymnasium

    from rlrun.spec import did_you_mean

    known = list(gymnasium.envs.registry.keys())
    for run in runs:
        if run.env_id not in known:
            hint = did_you_mean(run.env_id, known) or " install the package that registers it, then import again"
            raise BadInput(f"{run.folder}: env {run.zoo_env_id!r} is not a Gymnasium environment known here;{hint}")


# -- the foreign run -----------------------------------------------------------------------------


def restored_run(run: ZooRun, now: float) -> RestoredRun:
    """The zoo run as the registry's rows: one finished session, its evaluations, the zoo's
    hyper-parameters and arguments as revision 0's spec."""
    means = [float(np.mean(r)) for r in run.returns]
    record = RunRecord(
        id=ids.new_run_id(now),
        name=run.name,
        spec_name=f"{ORIGIN}:{run.algorithm}",
        algorithm=run.algorithm,
        env_id=run.env_id,
        status="finished",
        max_frame=run.max_frame,
        num_sessions=1,
        seed=run.seed,
        parent_id=None,
        host=None,
        pid=None,
        error=None,
        created_at=now,
        finished_at=now,
        origin=ORIGIN,
    )
    session = {
        "session_index": 0,
        "seed": run.seed,
        "status": "finished",
        "frame": run.frames[-1],
        "episode": run.episodes,
        "opt_step": 0,
        "best_eval": max(means),
        "last_eval": means[-1],
        "started_at": run.started_at,
        "finished_at": run.ended_at,
        "lease": 0,
    }
    spec = {
        "name": record.spec_name,
        "origin": ORIGIN,
        "agent": {"algorithm": run.algorithm, **run.hyperparams},
        "env": {"id": run.env_id, "zoo_id": run.zoo_env_id},
        "meta": {"max_frame": run.max_frame},
        "imported": {"folder": str(run.folder.resolve()), "sha256": run.sha256, "args": run.args},
    }
    return RestoredRun(
        run=record,
        sessions=[session],
        spec_revisions=[{"revision": 0, "frame": 0, "spec_json": json.dumps(spec, default=str), "created_at": now}],
        attempts=[],
        checkpoints=[],
        evaluations=[_evaluation(frame, returns, now) for frame, returns in zip(run.frames, run.returns, strict=True)],
    )


def _evaluation(frame: int, returns: list[float], now: float) -> dict[str, Any]:
    scores = np.asarray(returns, dtype=np.float64)
    return {
        "session_index": 0,
        "frame": frame,
        "kind": "train",
        "mean": float(scores.mean()),
        "std": float(scores.std()),
        "min": float(scores.min()),
        "max": float(scores.max()),
        "episodes": len(returns),
        "created_at": now,
    }

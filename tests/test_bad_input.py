"""Bad input, case by case (issue 16): every mistake a user can make on the command line ends with
exit 2, exactly one `error:` line that names the problem and says what to do, no traceback, and
nothing written: the home's files and registry rows are as they were, and a fresh home does not
appear.

Cases run in-process (`rlrun.cli.run`, the command line's own error handler) against a fresh home
or a private copy of the session's trained home. Cases that fail today are strict xfails naming
what is wrong, to be fixed under issue 16.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from helpers import Result, invoke

from rlrun.errors import install_hint
from rlrun.spec import builtin_document

RC = "reinforce_cartpole"


class Case(NamedTuple):
    args: tuple[str, ...]
    hint: str  # a distinctive piece of the one error line: the problem and its fix
    trained: bool = False  # run against a copy of the trained home (else a fresh one)
    env: dict[str, str] = {}  # noqa: RUF012  # NamedTuple default, never mutated
    prepare: Callable[[Path, Path], None] | None = None  # (home, scratch folder), before the "before" snapshot
    missing: tuple[str, ...] = ()  # modules that cannot be imported during the command (a missing extra)
    code: int = 2  # 3: not bad input but a service that does not answer (a Ray cluster, a store)


# -- specs written to files ----------------------------------------------------------------------------


def document(**edits: Any) -> dict[str, Any]:
    """The reinforce_cartpole spec with `edits` at dotted paths (None deletes)."""
    doc = builtin_document(RC)
    for path, value in edits.items():
        *parents, last = path.split("__")
        node = doc
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return doc


SPEC_FILES: dict[str, bytes] = {
    "truncated.json": b'{"name": "x", "agent": {',
    "latin1.json": b'{"name": "caf\xe9"}',
    "array.json": b"[1, 2, 3]",
    "empty.json": b"",
    "typo.json": json.dumps(document(meta__max_frames="10k")).encode(),
    "type.json": json.dumps(document(meta__sessions="two")).encode(),
    "zero_sessions.json": json.dumps(document(meta__sessions=0)).encode(),
    "negative_lr.json": json.dumps(document(agent__optimizer__lr=-0.01)).encode(),
    "algorithm.json": json.dumps(document(agent__algorithm="reinforcee")).encode(),
    "env.json": json.dumps(document(env__id="CartPol-v1")).encode(),
    "no_env.json": json.dumps(document(env=None)).encode(),
    "gamma.json": json.dumps(document(agent__gamma=1.5)).encode(),
    "no_envs.json": json.dumps(document(env__num_envs=0)).encode(),
    "ale_game.json": json.dumps(document(env__id="ALE/Pongg-v5")).encode(),
    "atari_on_cartpole.json": json.dumps(document(env__atari={})).encode(),
    "cnn_on_vector.json": json.dumps(
        {
            **builtin_document("dqn_cartpole"),
            "agent": {**builtin_document("dqn_cartpole")["agent"], "network": {"kind": "nature_cnn"}},
        }
    ).encode(),
    # search blocks (issue 15)
    "searched.json": json.dumps(document(search={"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}})).encode(),
    "search_path.json": json.dumps(document(search={"agent.optimizer.lrr": {"uniform": [0.1, 0.2]}})).encode(),
    "search_kind.json": json.dumps(document(search={"agent.gamma": {"unifrom": [0.9, 0.99]}})).encode(),
    "search_bound.json": json.dumps(document(search={"agent.gamma": {"uniform": [0.9, 1.5]}})).encode(),
    "search_int.json": json.dumps(document(search={"agent.episodes_per_update": {"uniform": [2, 8]}})).encode(),
    "search_log.json": json.dumps(document(search={"agent.optimizer.lr": {"loguniform": [0, 0.1]}})).encode(),
    "search_choice.json": json.dumps(document(search={"agent.baseline": {"choice": ["mean", "avg"]}})).encode(),
    "search_leaf.json": json.dumps(document(search={"agent.optimizer.lr.start": {"uniform": [0.1, 0.2]}})).encode(),
    "search_grid.json": json.dumps(document(search={"agent.baseline": {"grid": ["mean", "value"]}})).encode(),
    "search_empty.json": json.dumps(document(search={})).encode(),
    # the user's own envs (tests/userenvs, on sys.path for these cases)
    "user_module.json": json.dumps(document(env__id="my_robot.nowhere:Reach-v0")).encode(),
    "user_broken.json": json.dumps(document(env__id="bad_robot.broken:Arm-v0")).encode(),
    "user_unregistered.json": json.dumps(document(env__id="my_robot.envs:Reach-v9")).encode(),
    "user_not_env.json": json.dumps(document(env__id="bad_robot.others:Robot-v0")).encode(),
    "user_factory.json": json.dumps(document(env__id="bad_robot.others:RobotFactory-v0")).encode(),
    "user_package.json": json.dumps(document(env__id="Reach-v0", env__packages=["my_robott"])).encode(),
    "user_text_obs.json": json.dumps(document(env__id="bad_robot.others:Sensors-v0")).encode(),
    "user_tuple_actions.json": json.dumps(document(env__id="bad_robot.others:Joints-v0")).encode(),
    "user_two_colons.json": json.dumps(document(env__id="my_robot:envs:Reach-v0")).encode(),
}


def spec_file(name: str) -> str:
    return f"SPECS/{name}"


# -- preparations of a home or the scratch folder ------------------------------------------------------


def a_file(home: Path, scratch: Path) -> None:
    (scratch / "a_file").write_text("not a folder\n")


def twin_run(home: Path, scratch: Path) -> None:
    """A second registry row whose id shares all but the last character with the trained run's."""
    with closing(sqlite3.connect(home / "registry.sqlite")) as db, db:  # closed: no WAL left behind
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM runs").fetchone())
        row["id"] = row["id"][:-1] + ("x" if row["id"][-1] != "x" else "y")
        row["name"] = None
        db.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def tampered(home: Path, scratch: Path) -> None:
    for state in home.rglob("state.pt"):
        data = bytearray(state.read_bytes())
        data[len(data) // 2] ^= 0xFF
        state.write_bytes(bytes(data))


def user_envs(home: Path, scratch: Path) -> None:
    """Register the envs with the spaces users bring (tests/usernets/my_envs.py) in this process."""
    import usernets.my_envs  # noqa: F401


TINY_TRAIN = ("--frames", "1000")
USER_NET = "agent.network.kind=usernets.my_nets"
LONG_NAME = "x" * 300
UNREACHABLE_STORE = {
    "RLRUN_DB": "sqlite:///SCRATCH/store-registry.sqlite",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
    "AWS_ACCESS_KEY_ID": "rlrun",
    "AWS_SECRET_ACCESS_KEY": "rlrun",
    "AWS_MAX_ATTEMPTS": "1",
}
"""An S3 home whose endpoint refuses connections (one attempt: botocore would retry for seconds)."""
BOGUS_DB = "registry URL bogus://nowhere ($RLRUN_DB): unknown database 'bogus'; use sqlite:///"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def case(*args: str, hint: str, xfail: str = "", **fields: Any) -> Any:
    """One row of the table; `xfail` says what is wrong today (issue 16)."""
    marks = [pytest.mark.xfail(strict=True, reason=f"issue 16: {xfail}")] if xfail else []
    if fields.get("trained"):
        marks.append(pytest.mark.slow)  # the session's trained home trains once
    words = [*(f"{k}={v}" for k, v in fields.get("env", {}).items()), *args]
    return pytest.param(Case(tuple(args), hint, **fields), marks=marks, id=" ".join(words)[:80])


CASES = [
    # specs
    case("train", spec_file("truncated.json"), hint="not valid JSON (line 1, column 25"),
    # the user's own envs
    case(
        "train",
        spec_file("user_module.json"),
        hint='env.id = "my_robot.nowhere:Reach-v0": cannot import'
        " my_robot.nowhere (ModuleNotFoundError: No module named 'my_robot.nowhere'); install it, or run rlrun from"
        " the folder that holds it, or add that folder to PYTHONPATH",
    ),
    case(
        "train",
        spec_file("user_broken.json"),
        hint="cannot import bad_robot.broken (ModuleNotFoundError: No module"
        " named 'servo_driver'); fix the module, or install what it imports",
    ),
    case(
        "train",
        spec_file("user_unregistered.json"),
        hint='importing my_robot.envs registers no Reach-v9 (it registers Reach-v0, Push-v0); did you mean "Reach-v0"?',
    ),
    case(
        "train",
        spec_file("user_not_env.json"),
        hint="its entry point gives bad_robot.others.Robot, not a"
        " gymnasium.Env; make the class inherit from gymnasium.Env",
    ),
    case(
        "train",
        spec_file("user_factory.json"),
        hint="its entry point gives bad_robot.others.Robot, not a gymnasium.Env",
    ),
    case(
        "train",
        spec_file("user_package.json"),
        hint='env.packages[0] = "my_robott": cannot import my_robott'
        " (ModuleNotFoundError: No module named 'my_robott'); install it, or run rlrun from the folder",
    ),
    case(
        "train",
        spec_file("user_text_obs.json"),
        hint="bad_robot.others:Sensors-v0 observes Text(",
    ),
    case(
        "train",
        spec_file("user_tuple_actions.json"),
        hint="reinforce cannot train on bad_robot.others:Joints-v0: it acts in",
    ),
    case("train", spec_file("user_two_colons.json"), hint="one colon at most, as module:EnvId"),
    case("train", spec_file("latin1.json"), hint="not UTF-8 text (byte 0xe9 on line 1, column 14); save it as UTF-8"),
    case("train", spec_file("array.json"), hint="a spec is a JSON object {...}, got list"),
    case("train", spec_file("empty.json"), hint="not valid JSON (line 1, column 1"),
    case("train", spec_file("typo.json"), hint='did you mean "max_frame"'),
    case("train", spec_file("type.json"), hint='meta.sessions = "two": input should be a valid integer'),
    case("train", spec_file("zero_sessions.json"), hint="meta.sessions = 0: input should be greater than 0"),
    case("train", spec_file("negative_lr.json"), hint="agent.optimizer.lr = -0.01: must be greater than 0"),
    case("train", spec_file("algorithm.json"), hint='"reinforcee": unknown algorithm; did you mean "reinforce"'),
    case("train", spec_file("env.json"), hint='unknown Gymnasium environment; did you mean "CartPole-v1"'),
    case("train", spec_file("no_env.json"), hint="env: required key is missing; add it"),
    case("train", spec_file("gamma.json"), hint="agent.gamma = 1.5: input should be less than or equal to 1"),
    case("train", spec_file("no_envs.json"), hint="env.num_envs = 0: input should be greater than 0"),
    case("train", spec_file("ale_game.json"), hint='unknown Gymnasium environment; did you mean "ALE/Pong-v5"'),
    case("train", spec_file("atari_on_cartpole.json"), hint="env.atari = {}: preprocesses ALE games only"),
    case("train", spec_file("cnn_on_vector.json"), hint="the nature_cnn network needs image observations"),
    case(
        "train", "dqn_pong", *TINY_TRAIN, hint="ALE/Pong-v5 needs a package that is not installed", missing=("ale_py",)
    ),
    case("train", "ppo_breakout", *TINY_TRAIN, hint=install_hint("atari"), missing=("ale_py",)),
    case(
        "train",
        "dqn_pong",
        *TINY_TRAIN,
        "--set",
        "env.kwargs.frameskip=4",
        hint="env.atari.frame_skip repeats the actions; remove env.kwargs.frameskip",
    ),
    case("train", "SCRATCH", hint="is a folder, not a spec file; give a .json file or a built-in name"),
    case("train", "SPECS/does_not_exist.json", hint='does_not_exist.json" does not exist; give a path or a built-in'),
    case("train", "reinforce_cartpol", hint='no such file or built-in spec; did you mean "reinforce_cartpole"'),
    case(
        "train",
        RC,
        "--frames",
        "20m",
        hint="'20m' has a lowercase m, which rlrun reads as minutes elsewhere; write 20M for millions of frames",
    ),
    # search blocks: refused by train, checked by search before anything is written (issue 15)
    case("train", spec_file("searched.json"), hint="this spec is a search space; run it with `rlrun search SPEC`"),
    case("search", RC, hint="has no search block; add one"),
    case(
        "search",
        spec_file("search_path.json"),
        hint='search.agent.optimizer.lrr: not a setting of this spec; did you mean "agent.optimizer.lr"',
    ),
    case("search", spec_file("search_kind.json"), hint='unknown distribution "unifrom"; did you mean "uniform"'),
    case("search", spec_file("search_bound.json"), hint="1.5 does not fit (agent.gamma = 1.5: input should be less"),
    case("search", spec_file("search_int.json"), hint="agent.episodes_per_update takes whole numbers; use randint"),
    case("search", spec_file("search_log.json"), hint="loguniform needs low > 0"),
    case("search", spec_file("search_choice.json"), hint='"avg" does not fit (agent.baseline = "avg": not an'),
    case("search", spec_file("search_leaf.json"), hint="agent.optimizer.lr is 0.002, not an object with keys"),
    case("search", spec_file("search_empty.json"), hint="search = {}: not a search space"),
    case("search", spec_file("searched.json"), hint="say how many trials to run: --trials N"),
    case("search", spec_file("search_grid.json"), "--trials", "3", hint="--trials 3 is more than the grid's 2 points"),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--pruner",
        "medain",
        hint="--pruner 'medain' is not one of median, halving, none; did you mean \"median\"",
    ),
    case("search", spec_file("searched.json"), "--trials", "2", "--parallel", "0", hint="'--parallel': 0 is not in"),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        hint="searching needs Optuna: pip install",
        missing=("optuna",),
    ),
    # experiment trackers (issue 25): a missing package, an unknown tracker, `rlrun track` without a place
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--track",
        "mlflow",
        hint="tracking with mlflow needs the mlflow package",
        missing=("mlflow",),
    ),
    case("train", RC, *TINY_TRAIN, "--track", "wandb", hint=install_hint("wandb"), missing=("wandb",)),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--track",
        "comet",
        hint='meta.track.0 = "comet": not an accepted value; use one of mlflow, wandb',
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--track",
        "wandb",
        hint="tracking with wandb needs the wandb package",
        missing=("wandb",),
    ),
    case("track", "latest", "--to", "comet", hint="no tracker 'comet'; use --to mlflow or --to wandb", trained=True),
    case("track", "latest", hint="say where with --to mlflow or --to wandb", trained=True),
    case("track", "latest", "--to", "mlflow", hint=install_hint("mlflow"), missing=("mlflow",), trained=True),
    case("show", "search:latest", hint="no searches in"),
    case("show", "search:", hint="bad search reference 'search:': no search named after 'search:'"),
    case("resume", "search:latest", "--more", "1k", hint="--more edit a run; a search resumes as it was recorded"),
    case("ls", "--search", "search:nope", hint="no searches in"),
    # sizes
    case("train", RC, "--frames", "1e99", hint="--frames: '1e99' is more than 1e15, the largest count rlrun takes"),
    case("train", RC, "--frames", "-5", hint="--frames: '-5' is not a size; use a count like 20M"),
    case("train", RC, "--frames", "abc", hint="use a count like 20M"),
    case("train", RC, "--frames", "1.5", hint="use a count like 20M"),
    case("train", RC, "--frames", "0", hint="meta.max_frame = 0: input should be greater than 0"),
    case("train", RC, "--sessions", "0", hint="'--sessions': 0 is not in the range x>=1"),
    case("train", RC, "--seed", "-1", hint="'--seed': -1 is not in the range x>=0"),
    # --set
    case("train", RC, "--set", "noequals", hint="expected dotted.key=value, e.g. --set meta.max_frame=200k"),
    case("train", RC, "--set", "=5", hint="key=value"),
    case("train", RC, "--set", "meta.bogus=1", hint="meta.bogus: unknown key; allowed keys: max_frame"),
    case("train", RC, "--set", "agent.network.hiden=[8]", hint='did you mean "hidden"'),
    case("train", RC, "--set", "agent.network.hidden=[64,", hint="agent.network.hidden"),
    case("train", RC, "--set", "agent.gamma=abc", hint="agent.gamma"),
    case(
        "train",
        RC,
        "--set",
        'env.kwargs={"bogus_kw":1}',
        hint="env.kwargs.bogus_kw: CartPole-v1 has no such keyword argument; it takes sutton_barto_reward",
    ),
    # env.wrappers and env.normalize (issue 28): the wrapper named by its place and path
    case(
        "train",
        RC,
        "--set",
        'env.wrappers=["no_such_module_28:Wrap"]',
        hint="env.wrappers[0].class = 'no_such_module_28:Wrap': cannot import no_such_module_28",
    ),
    case(
        "train",
        RC,
        "--set",
        'env.wrappers=["gymnasium.wrappers:ClipAction"]',
        hint="env.wrappers[0].class = 'gymnasium.wrappers:ClipAction': it does not fit CartPole-v1 (ClipAction",
    ),
    case(
        "train",
        RC,
        "--set",
        'env.wrappers=["gymnasium.wrappers:RecordEpisodeStatistics", "gymnasium.wrappers:NoSuchWrapper"]',
        hint="env.wrappers[1].class = 'gymnasium.wrappers:NoSuchWrapper': module gymnasium.wrappers has no",
    ),
    case(
        "train",
        RC,
        "--set",
        'env.wrappers=["gymnasium.spaces:Box"]',
        hint="Box is not a gymnasium.Wrapper; name a subclass of gymnasium.Wrapper",
    ),
    case(
        "train",
        RC,
        "--set",
        'env.wrappers=[{"class": "gymnasium.wrappers:TimeAwareObservation", "kwargs": {"flat": true}}]',
        hint='env.wrappers[0].kwargs = {"flat": true}: gymnasium.wrappers:TimeAwareObservation'
        " refused them (got an unexpected keyword argument 'flat'); its constructor takes flatten, normalize_time",
    ),
    case("train", RC, "--set", 'env.wrappers=["gymnasium.wrappers"]', hint="env.wrappers.0.class"),
    case(
        "train",
        RC,
        "--set",
        "env.id=FrozenLake-v1",
        "--set",
        "env.normalize={}",
        hint="env.normalize.observation: normalises Box observations, and this env's are Discrete; set it to false",
    ),
    case("train", RC, "--set", 'env.normalize={"gamma": 2}', hint="env.normalize.gamma = 2: input should be less"),
    case("train", RC, "--set", "agent.optimizer.lr=-0.01", hint="agent.optimizer.lr = -0.01: must be greater than 0"),
    case(
        "train",
        RC,
        "--set",
        "meta.max_frame=1e99",
        hint="meta.max_frame = 1e+99: 1e+99 is more than 1e15, the largest count rlrun takes; use a count like 20M",
    ),
    case("train", RC, "--set", "env.num_envs=0", hint="env.num_envs"),
    # many cores for one session (issue 26)
    case(
        "train",
        RC,
        "--set",
        "env.num_envs=2",
        "--set",
        "env.workers=3",
        hint='env.workers = 3: more worker processes than the 2 copies (env.num_envs); use at most 2, or "auto"',
    ),
    case("train", RC, "--set", "env.workers=0", hint='env.workers = 0: use a whole number from 1 to 1024, or "auto"'),
    case(
        "train",
        RC,
        "--set",
        "env.workers=many",
        hint='env.workers = "many": use a whole number from 1 to 1024, or "auto"',
    ),
    case(
        "train",
        RC,
        "--set",
        "env.num_envs=2",
        "--set",
        "env.workers=2",
        "--set",
        "env.vectorization=async",
        hint='"async" already gives each copy its own process; use "sync" with workers, or leave workers at 1',
    ),
    case(
        "train",
        RC,
        "--set",
        "meta.torch_threads=many",
        hint='meta.torch_threads = "many": use a whole number from 1 to 256, or "auto"',
    ),
    case(
        "train",
        RC,
        "--set",
        'agent.optimizer.lr={"kind": "linear", "start": 1e-3, "end": -0.1}',
        hint='agent.optimizer.lr = {"kind": "linear", "start": 0.001, "end": -0.1}: end is -0.1; it must be',
    ),
    case("train", RC, "--set", "meta.max_frame=1.5", hint="1.5 is not a whole number of frames; use a count like 20M"),
    case("train", RC, "--set", "env.max_episode_steps=0", hint="env.max_episode_steps = 0: input should be greater"),
    # devices: the spec's forms, then a GPU this machine lacks (refused before the run is recorded)
    case("train", RC, "--set", "meta.device=gpu", hint='meta.device = "gpu": not a device; use "auto", "cpu", "cuda"'),
    case("train", RC, *TINY_TRAIN, "--set", "meta.device=cuda:99", hint='meta.device = "cuda:99": '),
    *(
        []
        if cuda_available()
        else [
            case("train", RC, *TINY_TRAIN, "--set", "meta.device=cuda", hint="run here with --set meta.device=cpu"),
            case(
                "resume",
                "tiny",
                "--more",
                "1k",
                "--set",
                "meta.device=cuda",
                trained=True,
                hint="run here with --set meta.device=cpu (or auto), or on a machine with a GPU",
            ),
        ]
    ),
    # spaces an algorithm cannot take, networks from the user's code (issue 28)
    case(
        "train",
        "dqn_cartpole",
        *TINY_TRAIN,
        "--set",
        "env.id=MultiDiscreteActions-v0",
        prepare=user_envs,
        hint="dqn cannot train on MultiDiscreteActions-v0: it acts in Discrete action spaces, not MultiDiscrete(",
    ),
    case(
        "train",
        "sac_pendulum",
        *TINY_TRAIN,
        "--set",
        "env.id=MultiBinaryActions-v0",
        prepare=user_envs,
        hint="not MultiBinary(3); use a2c, ppo or reinforce",
    ),
    case(
        "train",
        "ppo_cartpole",
        *TINY_TRAIN,
        "--set",
        "env.id=TextObs-v0",
        prepare=user_envs,
        hint="TextObs-v0 observes Text(1, 8, ",
    ),
    case("train", RC, "--set", "agent.network.kind=cnn", hint='not a network; use "mlp", "nature_cnn", or "module:'),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--set",
        "agent.network.kind=no_such_module_xyz:Net",
        hint="cannot import no_such_module_xyz (ModuleNotFoundError",
    ),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--set",
        f"{USER_NET}:small_mpl",
        hint='has no small_mpl; did you mean "usernets.my_nets:small_mlp"',
    ),
    case(
        "train", RC, *TINY_TRAIN, "--set", f"{USER_NET}:NotANetwork", hint="made a NotANetwork, not a torch nn.Module"
    ),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--set",
        f"{USER_NET}:one_too_many",
        hint="returned a tensor of shape (2, 3) (torch.float32); it must return a float tensor of shape (2, 2)",
    ),
    # usage
    case("train", RC, "--colour", hint="No such option '--colour'"),
    case("trian", hint="No such command 'trian'"),
    case("train", hint="Missing argument"),
    case("train", RC, "--name", "latest", *TINY_TRAIN, hint="cannot be used"),
    case("train", RC, "--name", "a/b", *TINY_TRAIN, hint="cannot be used"),
    case("train", RC, "--name", "42", *TINY_TRAIN, hint="cannot be used"),
    case("spec", "show", "nope", hint='spec "nope": no such file or built-in spec; built-ins: a2c_cartpole'),
    case("ls", "--status", "done", hint="is not a run status"),
    case("ls", "--sort", "speed", hint="use one of started, best, frames"),
    case("ls", "--since", "yesterday", hint="is not a time"),
    case("ls", "--json", "--csv", hint="choose --json or --csv"),
    case("rm", hint="name the runs to delete, e.g. `rlrun rm latest`"),
    case("plot", "latest", hint="start one with `rlrun train"),
    case("enjoy", "--episodes", "0", hint="'--episodes': 0 is not in the range x>=1"),
    case("enjoy", "--episodes", "99999999", hint="--episodes 99999999: play from 1 to 10,000 episodes at a time"),
    case("enjoy", "--render", "--video", "SCRATCH/v.gif", hint="choose --render (a window) or --video (a file)"),
    case("db", "upgrade", hint="no registry at"),
    # a fresh home: nothing to name
    case("show", "latest", hint="start one with `rlrun train"),
    case("enjoy", "latest", hint="start one with `rlrun train"),
    case("resume", "latest", hint="start one with `rlrun train"),
    # homes
    case("ls", "--home", "SCRATCH/a_file", hint="a_file is a file, not a folder; give a folder", prepare=a_file),
    case("train", RC, *TINY_TRAIN, "--home", "SCRATCH/a_file", hint="a_file is a file, not a folder", prepare=a_file),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--home",
        "SCRATCH/a_file/runs",
        prepare=a_file,
        hint="a_file/runs: SCRATCH/a_file is a file, not a folder; give a folder",
    ),
    case("ls", "--home", f"SCRATCH/{LONG_NAME}", hint="too long for the file system; give a shorter one"),
    case("train", RC, *TINY_TRAIN, "--home", f"SCRATCH/{LONG_NAME}", hint="too long for the file system"),
    # database URLs
    case("ls", hint=BOGUS_DB, env={"RLRUN_DB": "bogus://nowhere"}),
    case("train", RC, *TINY_TRAIN, hint=BOGUS_DB, env={"RLRUN_DB": "bogus://nowhere"}),
    case(
        "ls",
        hint="registry URL postgres://me:***@host/db ($RLRUN_DB): unknown database 'postgres'; use",
        env={"RLRUN_DB": "postgres://me:secret@host/db"},
    ),
    case("ls", hint="registry URL nowhere ($RLRUN_DB): not a URL; use sqlite:///", env={"RLRUN_DB": "nowhere"}),
    # a home in object storage whose store cannot be reached: said before the registry is even created
    case(
        "train",
        RC,
        *TINY_TRAIN,
        "--home",
        "s3://nobucket/runs",
        env=UNREACHABLE_STORE,
        hint="--home s3://nobucket/runs cannot be reached (Could not connect to the endpoint URL",
        code=3,
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--home",
        "s3://nobucket/runs",
        env=UNREACHABLE_STORE,
        hint="--home s3://nobucket/runs cannot be reached (Could not connect to the endpoint URL",
        code=3,
    ),
    case(
        "ls",
        hint="$RLRUN_DB_RETRY_SECONDS='soon' is not a number of seconds >= 0; unset it for the default (60 s)",
        env={"RLRUN_DB_RETRY_SECONDS": "soon"},
    ),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        hint="$RLRUN_DB_RETRY_SECONDS='-1' is not a number",
        env={"RLRUN_DB_RETRY_SECONDS": "-1"},
    ),
    case(
        "train",
        RC,
        *TINY_TRAIN,
        hint="folder SCRATCH/a_file is a file, not a folder; give a folder",
        env={"RLRUN_DB": "sqlite:///SCRATCH/a_file/registry.sqlite"},
        prepare=a_file,
    ),
    # references on a trained home
    case("show", "nosuchrun", hint="no run matches 'nosuchrun'; see `rlrun ls`", trained=True),
    case("show", "TWIN_PREFIX", hint="type more of the id", trained=True, prepare=twin_run),
    case("show", "5", hint="only 1 run", trained=True),
    case("show", "latest~3", hint="only 1 run", trained=True),
    case("show", "latest~99999999999999999999", hint="only 1 run", trained=True),
    case("show", "99999999999999999999", hint="99999999999999999999: only 1 run", trained=True),
    case("show", "latest@worst", hint="is not @best, @latest or a frame count", trained=True),
    case("show", "latest/x1", hint="is not /s0, /s1", trained=True),
    case("show", "latest/s3", hint="has 1 session, s0; name it as latest/s0 or leave out /s3", trained=True),
    case("show", "latest@999k", hint="no checkpoint at frame 999,000; it has 1,000, 2,000, 3,000", trained=True),
    case("enjoy", "latest@999k", hint="no checkpoint at frame 999,000", trained=True),
    case("enjoy", "latest@1500", hint="no checkpoint at frame 1,500", trained=True),
    case("resume", "nosuchrun", hint="no run matches 'nosuchrun'", trained=True),
    case("enjoy", "tinny", hint="no run matches 'tinny' (did you mean 'tiny'?); see `rlrun ls`", trained=True),
    case("rm", "nosuchrun", "--yes", hint="no run matches 'nosuchrun'", trained=True),
    case(
        "rm",
        "tiny@1k",
        "--yes",
        trained=True,
        hint="`rlrun rm` takes whole runs, not a session or a checkpoint; name the run alone (tiny)",
    ),
    case("plot", "tiny/s0", "-o", "SCRATCH/p.png", hint="`rlrun plot` takes whole runs", trained=True),
    case("show", "tiny", "--algo", "ppo", hint="with --algo ppo", trained=True),
    # refused edits and bad resumes
    case(
        "resume", "tiny", "--set", "agent.gamma=0.5", "--frames", "5000", hint="edit refused: agent.gamma", trained=True
    ),
    case(
        "resume",
        "tiny",
        "--set",
        "env.num_envs=2",
        "--fork",
        hint="a fork continues the parent's snapshot",
        trained=True,
    ),
    case("resume", "tiny", "--frames", "2000", hint="edit refused: meta.max_frame", trained=True),
    case(
        "resume",
        "tiny",
        "--set",
        'env.wrappers=["gymnasium.wrappers:RecordEpisodeStatistics"]',
        "--frames",
        "5000",
        hint="edit refused: env.wrappers",
        trained=True,
    ),
    case(
        "resume",
        "tiny",
        "--set",
        "env.normalize={}",
        "--frames",
        "5000",
        hint="edit refused: env.normalize",
        trained=True,
    ),
    case(
        "resume",
        "tiny",
        "--set",
        "env.normalize={}",
        "--fork",
        hint="a fork continues the parent's snapshot",
        trained=True,
    ),
    case(
        "resume",
        "tiny",
        "--frames",
        "5000",
        "--more",
        "1000",
        trained=True,
        hint="--frames (the new target) or --more (added to it), not both",
    ),
    case("resume", "tiny", "--more", "abc", hint="--more: 'abc' is not a size; use a count like 20M", trained=True),
    case("resume", "tiny", "--more", "1e99", hint="--more: '1e99' is more than 1e15, the largest count", trained=True),
    case("resume", "tiny", "--spec", "SCRATCH", "--more", "1k", hint="is a folder, not a spec file", trained=True),
    # damaged files, missing extras
    case(
        "enjoy",
        "tiny",
        "--episodes",
        "1",
        trained=True,
        prepare=tampered,
        hint="state.pt is missing or altered; use another checkpoint",
    ),
    case("plot", "tiny", "-o", "SCRATCH/p.png", hint=install_hint("plot"), trained=True, missing=("matplotlib",)),
    case(
        "enjoy",
        "tiny",
        "--episodes",
        "1",
        "--video",
        "SCRATCH/v.gif",
        hint=install_hint("video"),
        trained=True,
        missing=("imageio", "imageio_ffmpeg"),
    ),
    case("enjoy", "tiny", "--video", "SCRATCH/v.txt", hint="write a .gif or an .mp4", trained=True),
    # sessions on a Ray cluster (tests/test_ray.py runs a real one)
    case(
        "train",
        RC,
        "--ray",
        hint=f"--ray needs Ray, an optional extra that is not installed: {install_hint('ray')}",
        missing=("ray",),
    ),
    case("resume", "tiny", "--ray", "127.0.0.1:7000", hint=install_hint("ray"), trained=True, missing=("ray",)),
    case("train", RC, "--ray", "127.0.0.1:1", hint="no Ray cluster at --ray 127.0.0.1:1: Connection refused", code=3),
    # no cluster to find: rlrun's line, without Ray's own advice about --address after it
    case(
        "train",
        RC,
        "--ray",
        env={"RAY_TMPDIR": "SCRATCH/ray", "RAY_ADDRESS": ""},
        hint="no Ray cluster at --ray auto: Could not find any running Ray instance; start one with `ray start",
        code=3,
    ),
    case("train", RC, "--cpus", "2", hint="--cpus and --gpus place sessions on a Ray cluster; add --ray [ADDRESS]"),
    case("train", RC, "--detach", hint="--detach hands the run's supervisor to a Ray cluster; add --ray [ADDRESS]"),
    case(
        "resume",
        "tiny",
        "--detach",
        hint="--detach hands the run's supervisor to a Ray cluster; add --ray",
        trained=True,
    ),
    case("resume", "search:latest", "--detach", "--ray", "127.0.0.1:1", hint="no searches in"),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--detach",
        hint="--detach hands the search's driver to a Ray cluster; add --ray [ADDRESS]",
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--supervisor-on",
        "on_demand",
        hint="--supervisor-on places a detached search's driver; add --detach",
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--parallel",
        "2",
        "--detach",
        "--ray",
        "127.0.0.1:1",
        hint="a detached search drives one trial at a time, but this search runs 2 at a time (--parallel 2,",
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--detach",
        "--ray",
        "127.0.0.1:1",
        hint="no Ray cluster at --ray 127.0.0.1:1: Connection refused",
        code=3,
    ),
    case(
        "train",
        RC,
        "--ray",
        "127.0.0.1:1",
        "--supervisor-on",
        "on_demand",
        hint="--supervisor-on places a detached run's supervisor; add --detach",
    ),
    case(
        "resume",
        "tiny",
        "--supervisor-on",
        "on_demand",
        trained=True,
        hint="--supervisor-on places a detached run's supervisor; add --detach",
    ),
    case("stop", "nosuchrun", hint="no run matches 'nosuchrun'", trained=True),
    case("stop", "search:latest", hint="no searches in"),
    case(
        "stop",
        "search:latest",
        "--status",
        "finished",
        hint="--status finished narrow runs; a search is named by its reference alone: drop them",
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--parallel",
        "2",
        "--ray",
        "127.0.0.1:1",
        hint="no Ray cluster at --ray 127.0.0.1:1: Connection refused",
        code=3,
    ),
    case(
        "search",
        spec_file("searched.json"),
        "--trials",
        "2",
        "--ray",
        "127.0.0.1:1",
        hint="no Ray cluster at --ray 127.0.0.1:1: Connection refused",
        code=3,
    ),
    case("plot", "tiny", "-o", "SCRATCH/p.txt", hint="cannot write a .txt", trained=True),
    # training metrics
    case("plot", "tiny", "--metric", "entropi", "-o", "SCRATCH/p.png", hint="did you mean 'entropy'?", trained=True),
    case("export", "tiny", "-o", "SCRATCH/m.csv", hint="rlrun export REFERENCE --metrics", trained=True),
    case("export", "tiny", "--metrics", "-o", "SCRATCH/no/m.csv", hint="folder", trained=True),
]


# -- what "nothing changed" means ---------------------------------------------------------------------


def tree(root: Path) -> list[tuple[str, int, int]]:
    """Every file under `root` with its size and modification time, and every folder."""
    if not root.exists():
        return []
    return sorted(
        (str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1, p.stat().st_mtime_ns if p.is_file() else 0)
        for p in root.rglob("*")
    )


def registry_rows(home: Path) -> dict[str, list[Any]]:
    database = home / "registry.sqlite"
    if not database.is_file():
        return {}
    # Read-write, though it only reads: the last connection to close removes the WAL files, which a
    # read-only one would leave behind for the file-tree comparison to see.
    with closing(sqlite3.connect(database)) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in tables}


@contextmanager
def unimportable(modules: tuple[str, ...]) -> Iterator[None]:
    """`import module` (and its submodules) raises ImportError for each of `modules`, as when the
    extra is not installed, even if an earlier test imported them."""
    hidden = [name for name in sys.modules if name in modules or name.startswith(tuple(f"{m}." for m in modules))]
    saved = {name: sys.modules[name] for name in hidden}
    try:
        for name in {*modules, *hidden}:
            sys.modules[name] = None  # type: ignore[assignment]  # Python's own "not importable" marker
        yield
    finally:
        for name in {*modules, *hidden}:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def resolve(args: tuple[str, ...], specs: Path, scratch: Path, home: Path) -> list[str]:
    """The arguments (or environment values, or a hint) with the placeholders filled in."""
    twin = ""
    if "TWIN_PREFIX" in args:
        with closing(sqlite3.connect(home / "registry.sqlite")) as db:
            twin = db.execute("SELECT id FROM runs ORDER BY id").fetchone()[0][:-1]
    return [a.replace("SPECS", str(specs)).replace("SCRATCH", str(scratch)).replace("TWIN_PREFIX", twin) for a in args]


@pytest.fixture
def prepared(tmp_path: Path) -> tuple[Path, Path]:
    specs, scratch = tmp_path / "specs", tmp_path / "scratch"
    specs.mkdir()
    scratch.mkdir()
    for name, content in SPEC_FILES.items():
        (specs / name).write_bytes(content)
    return specs, scratch


def assert_one_error_line(result: Result, hint: str, code: int = 2) -> None:
    assert result.code == code, (result.code, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert hint in errors[0], errors[0]


@pytest.mark.parametrize("bad", CASES)
def test_bad_input_or_a_silent_service_is_one_line_and_changes_nothing(
    bad: Case, prepared: tuple[Path, Path], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs, scratch = prepared
    if bad.env.get("RAY_ADDRESS") == "" and _ray_cluster_runs_here():
        pytest.skip("a Ray cluster of another test runs on this machine: `--ray auto` finds it by its processes")
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "userenvs"))  # the user's own envs
    home = request.getfixturevalue("trained_copy") if bad.trained else scratch.parent / "fresh"
    if bad.prepare is not None:
        bad.prepare(home, scratch)
    before = (tree(scratch.parent), registry_rows(home))
    env = dict(zip(bad.env, resolve(tuple(bad.env.values()), specs, scratch, home), strict=True))
    with unimportable(bad.missing):
        result = invoke(home, *resolve(bad.args, specs, scratch, home), env=env)
    assert_one_error_line(result, resolve((bad.hint,), specs, scratch, home)[0], bad.code)
    after = (tree(scratch.parent), registry_rows(home))
    assert after == before
    if not bad.trained:
        assert not home.exists()


def _ray_cluster_runs_here() -> bool:
    """Whether a Ray cluster's control store (gcs_server) runs on this machine: `--ray auto` finds
    one by its processes when no address file names it (tests/test_ray.py's, the one-machine
    cluster script's, while another pytest-xdist worker runs them)."""
    names = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            names.append(comm.read_text().strip())
    return "gcs_server" in names

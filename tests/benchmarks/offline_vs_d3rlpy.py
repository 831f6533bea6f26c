"""rlrun's offline algorithms against d3rlpy 2.8 on the same Minari dataset, the same budget of
gradient steps and the same hyper-parameters, over seeds, both sides in the same run: each seed's
final return, IQM with its 95% stratified-bootstrap interval and P(rlrun > d3rlpy) (both from
`rlrun.compare.statistics`, rliable's), and gradient steps per CPU-second with their ratio.

    pip install "d3rlpy==2.8.*"        # a peer, for this benchmark only (see the note below)
    pip install "gymnasium==1.4.0"     # d3rlpy 2.8 pins gymnasium==1.0.0: put rlrun's back after it
    python tests/benchmarks/offline_vs_d3rlpy.py [--tasks iql_pendulum td3bc_pendulum bc_cartpole
        cql_cartpole] [--seeds 0 1 2 3] [--steps 100k] [--sides d3rlpy rlrun] [--dataset TASK=ID ...]
        [--source-frames 20k] [--home runs-offline] [--out results.jsonl] [--report results.jsonl ...]

The data. Each task learns from a "medium" dataset as D4RL made them: a policy trained part way,
played with exploration. Unless `--dataset TASK=ID` names one already in `MINARI_DATASETS_PATH`,
the script trains the source run once per env (`dqn_cartpole`, `sac_pendulum`, `--source-frames`
frames) in `--home` and records `--source-episodes` episodes of it with `rlrun record --epsilon 0.3`
(CartPole) or `--noise 0.3` (Pendulum) as `rlrun-bench/<env>-medium-v0`; a dataset of that id
already there is reused, so every side and seed reads the same bytes.

The sides, each seed in a fresh process with one torch thread:
- d3rlpy: `IQL`, `TD3PlusBC`, `DiscreteBC`, `DiscreteCQL` built from `HYPER` below, fitted for
  `--steps` gradient steps on an `MDPDataset` made from the Minari episodes' arrays (observations,
  actions, rewards, terminations as terminals, truncations as timeouts: what `get_minari` does,
  without its download step), continuous actions scaled from the env's bounds to its tanh's
  [-1, 1] (`MinMaxActionScaler`, as rlrun learns them), then 10 greedy episodes on the env
  seeded apart from training.
- rlrun: `rlrun train TASK` (a built-in) with `data.dataset=ID`, `meta.offline_updates=STEPS`, no
  online frames (`meta.max_frame` equal to the offline updates), the shared hyper-parameters of
  `HYPER` set on its spec where it has the key, one evaluation at the end (10 greedy episodes, as
  d3rlpy's side; the built-in's snapshots kept: they are what makes a run resumable) read from the
  registry. A task whose built-in does not exist in this rlrun is skipped, saying so (bc lands
  first; IQL, TD3+BC and CQL follow with issue 54); the d3rlpy side still runs.

Speed: gradient steps per CPU-second of the whole worker process (imports, dataset loading and the
final evaluation included, alike on both sides; at 100k steps they are under 2% of either), and the
ratio rlrun / d3rlpy (median over seeds). The rlrun runs stay in `--home`: `rlrun compare` reads
them. d3rlpy's scores are printed, appended to `--out` as JSON lines, and summarised here with the
statistics `rlrun compare` uses.

Note: d3rlpy 2.8.1 requires gymnasium==1.0.0 and `pip install d3rlpy` downgrades it; rlrun needs
>=1.2. d3rlpy's own code runs with 1.4 for what this script uses (fit, predict); reinstall 1.4.0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
EVAL_EPISODES = 10

TASKS: dict[str, dict[str, Any]] = {
    "iql_pendulum": {"env": "pendulum", "d3rlpy": "IQLConfig"},
    "td3bc_pendulum": {"env": "pendulum", "d3rlpy": "TD3PlusBCConfig"},
    "bc_cartpole": {"env": "cartpole", "d3rlpy": "DiscreteBCConfig"},
    "cql_cartpole": {"env": "cartpole", "d3rlpy": "DiscreteCQLConfig"},
    "cql_pendulum": {"env": "pendulum", "d3rlpy": "CQLConfig"},
}
SOURCES: dict[str, dict[str, Any]] = {
    # the env's source run and how its "medium" data is played
    "cartpole": {"env_id": "CartPole-v1", "spec": "dqn_cartpole", "explore": ["--epsilon", "0.3"]},
    "pendulum": {"env_id": "Pendulum-v1", "spec": "sac_pendulum", "explore": ["--noise", "0.3"]},
}
HYPER: dict[str, dict[str, Any]] = {
    # One set per task, given to both sides: CORL's defaults (d3rlpy's where CORL has none);
    # `learning_rate` is both the actor's and the critic's. RLRUN_KEYS names each one's rlrun key.
    "iql_pendulum": {
        "batch_size": 256,
        "gamma": 0.99,
        "hidden": [256, 256],
        "learning_rate": 3e-4,
        "tau": 0.005,
        "expectile": 0.7,
        "weight_temp": 3.0,
    },
    "td3bc_pendulum": {
        "batch_size": 256,
        "gamma": 0.99,
        "hidden": [256, 256],
        "learning_rate": 3e-4,
        "tau": 0.005,
        "alpha": 2.5,
    },
    "bc_cartpole": {"batch_size": 256, "gamma": 0.99, "hidden": [256, 256], "learning_rate": 1e-3},
    "cql_cartpole": {
        "batch_size": 256,
        "gamma": 0.99,
        "hidden": [256, 256],
        "learning_rate": 3e-4,
        "alpha": 1.0,
        "target_update_interval": 1000,
    },
    "cql_pendulum": {
        # d3rlpy's CQL tunes its penalty's weight by Lagrange unless alpha's learning rate is 0:
        # fixed at initial_alpha 1, its penalty is conservative_weight times the gap, as rlrun's
        "batch_size": 256,
        "gamma": 0.99,
        "hidden": [256, 256],
        "learning_rate": 3e-4,
        "temp_learning_rate": 3e-4,
        "tau": 0.005,
        "conservative_weight": 5.0,
        "n_action_samples": 10,
        "alpha_learning_rate": 0.0,
        "initial_alpha": 1.0,
    },
}
RLRUN_KEYS = {
    # the rlrun spec key of each shared hyper-parameter (issue 54's `agent` keys)
    "batch_size": "agent.batch_size",
    "gamma": "agent.gamma",
    "hidden": "agent.network.hidden",
    "learning_rate": "agent.optimizer.lr",
    "tau": "agent.tau",
    "expectile": "agent.expectile",
    "weight_temp": "agent.beta",
    "alpha": "agent.alpha",
    "target_update_interval": "agent.target_update_frequency",
    "conservative_weight": "agent.conservative_weight",
    "n_action_samples": "agent.n_action_samples",
}

D3RLPY_WORKER = r"""
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
import d3rlpy, gymnasium as gym, minari

dataset_id, config_name, steps, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
hyper, episodes = json.loads(sys.argv[5]), int(sys.argv[6])
d3rlpy.seed(seed)
data = minari.load_dataset(dataset_id)
parts = {key: [] for key in ("observations", "actions", "rewards", "terminals", "timeouts")}
for episode in data.iterate_episodes():
    parts["observations"].append(episode.observations[:-1])
    parts["actions"].append(episode.actions)
    parts["rewards"].append(episode.rewards)
    parts["terminals"].append(episode.terminations)
    parts["timeouts"].append(episode.truncations)
arrays = {key: np.concatenate(value) for key, value in parts.items()}
discrete = isinstance(data.action_space, gym.spaces.Discrete)
dataset = d3rlpy.dataset.MDPDataset(
    observations=arrays["observations"].astype(np.float32),
    actions=arrays["actions"].astype(np.int64 if discrete else np.float32),
    rewards=arrays["rewards"].astype(np.float32),
    terminals=arrays["terminals"].astype(np.float32),
    timeouts=arrays["timeouts"].astype(np.float32),
    action_space=d3rlpy.ActionSpace.DISCRETE if discrete else d3rlpy.ActionSpace.CONTINUOUS,
    action_size=int(data.action_space.n) if discrete else int(np.prod(data.action_space.shape)),
)
hidden = d3rlpy.models.VectorEncoderFactory(hidden_units=hyper.pop("hidden"))
encoders = {"encoder_factory": hidden} if config_name.startswith("Discrete") else {
    "actor_encoder_factory": hidden, "critic_encoder_factory": hidden,
    **({"value_encoder_factory": hidden} if config_name == "IQLConfig" else {})}
# d3rlpy's continuous actors end in tanh, [-1, 1]: without an action scaler its targets would be the
# dataset's raw actions and its policy's torque half of Pendulum's. rlrun learns actions scaled from
# the env's bounds; so does d3rlpy here, with the same bounds.
scaling = {} if discrete else {"action_scaler": d3rlpy.preprocessing.MinMaxActionScaler(
    minimum=np.asarray(data.action_space.low, dtype=np.float32),
    maximum=np.asarray(data.action_space.high, dtype=np.float32))}
algo = getattr(d3rlpy.algos, config_name)(**hyper, **encoders, **scaling).create(device="cpu:0")
started = time.process_time()
algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, show_progress=False, save_interval=steps + 1,
         logger_adapter=d3rlpy.logging.NoopAdapterFactory())
fit_cpu = time.process_time() - started
env = gym.make(sys.argv[7])
returns = []
for k in range(episodes):
    obs, _ = env.reset(seed=seed * 1000 + k + 1)
    total, done = 0.0, False
    while not done:
        action = algo.predict(np.asarray(obs, dtype=np.float32)[None])[0]
        obs, reward, terminated, truncated, _ = env.step(int(action) if discrete else action)
        total += float(reward)
        done = terminated or truncated
    returns.append(total)
print(json.dumps({"steps": steps, "fit_cpu": fit_cpu, "mean": float(np.mean(returns)),
                  "std": float(np.std(returns)), "returns": returns}))
"""

RLRUN_WORKER = r"""
import json, sys
from rlrun.registry import Registry
from rlrun.spec import load_spec
from rlrun.training import train

name, edits, home = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spec = load_spec(name, edits)
train(spec, home=home)
with Registry.open(home, create=False) as registry:
    detail = registry.get_run(registry.resolve("latest").id)
evaluation = max((e for e in detail.evaluations if e.kind == "train"), key=lambda e: e.frame)  # the final one
print(json.dumps({"run_id": detail.run.id, **{key: getattr(evaluation, key) for key in ("mean", "std", "episodes")}}))
"""


def timed(worker: str, *args: str, env: dict[str, str] | None = None, python: str = sys.executable) -> dict[str, Any]:
    """The worker's JSON result and the CPU seconds its process took (user + system, children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [python, "-c", worker, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **SINGLE_THREAD, **(env or {})},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def rlrun_cli(home: Path, *args: str) -> str:
    """`rlrun ARGS` against `home`; its stdout. Exits with rlrun's error on a failure."""
    done = subprocess.run(
        [sys.executable, "-m", "rlrun", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "RLRUN_HOME": str(home)},
    )
    if done.returncode != 0:
        raise SystemExit(f"rlrun {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def medium_dataset(env: str, home: Path, frames: str, episodes: int) -> str:
    """The id of `env`'s medium dataset: recorded from a source run trained here the first time,
    reused after (the same id, the same bytes for every side and seed)."""
    import minari

    dataset_id = f"rlrun-bench/{env}-medium-v0"
    if dataset_id in minari.list_local_datasets():
        return dataset_id
    source = SOURCES[env]
    name = f"{env}-source"
    print(f"training the source run {name} ({source['spec']}, {frames} frames) in {home}", file=sys.stderr)
    rlrun_cli(home, "train", source["spec"], "--name", name, "--frames", frames)
    rlrun_cli(
        home, "record", name, "--minari", dataset_id, "--episodes", str(episodes), "--checkpoint", "latest",
        *source["explore"],
    )  # fmt: skip
    return dataset_id


def known_spec(task: str) -> bool:
    from rlrun.spec import builtin_names

    return task in builtin_names()


def rlrun_edits(task: str, dataset_id: str, steps: int, seed: int) -> list[str]:
    """The built-in's `--set` values: the dataset, the budget, the seed, one final evaluation, and
    each shared hyper-parameter its spec has (a key the algorithm lacks is left out, said once)."""
    from rlrun.spec import builtin_document

    agent = builtin_document(task)["agent"]
    edits = [
        f"data.dataset={dataset_id}",
        f"meta.offline_updates={steps}",
        f"meta.max_frame={steps}",  # offline steps count as frames: no online frame after them
        f"meta.seed={seed}",
        "meta.sessions=1",
        f"meta.eval_frequency={steps}",  # one evaluation, at the end, as d3rlpy's side makes
        f"meta.num_eval_episodes={EVAL_EPISODES}",
        "meta.eval_deterministic=true",
    ]
    for name, value in HYPER[task].items():
        key = RLRUN_KEYS.get(name)
        if key is not None and _has(agent, key.removeprefix("agent.")):
            edits.append(f"{key}={json.dumps(value)}")
    return edits


def _has(section: dict[str, Any], dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if head not in section:
        return False
    return not rest or (isinstance(section[head], dict) and _has(section[head], rest))


def measure(
    side: str, task: str, dataset_id: str, steps: int, seed: int, home: Path, d3rlpy_python: str = sys.executable
) -> dict[str, Any] | None:
    """One side's result on one task and seed; None when rlrun has no built-in for the task."""
    if side == "d3rlpy":
        hyper = dict(HYPER[task])
        if "learning_rate" in hyper and not TASKS[task]["d3rlpy"].startswith("Discrete"):
            hyper["actor_learning_rate"] = hyper["critic_learning_rate"] = hyper.pop("learning_rate")
        env_id = SOURCES[TASKS[task]["env"]]["env_id"]
        result = timed(
            D3RLPY_WORKER,
            dataset_id,
            TASKS[task]["d3rlpy"],
            str(steps),
            str(seed),
            json.dumps(hyper),
            str(EVAL_EPISODES),
            env_id,
            python=d3rlpy_python,
        )
    else:
        if not known_spec(task):
            return None
        result = timed(RLRUN_WORKER, task, json.dumps(rlrun_edits(task, dataset_id, steps, seed)), str(home))
    speed = steps / result["cpu"]
    return {"side": side, "task": task, "dataset": dataset_id, "steps": steps, "seed": seed, "cpu_sps": speed, **result}


def report(results: list[dict[str, Any]], *, reps: int) -> None:
    """Per task: each side's final return per seed, IQM [95% CI], gradient steps per CPU-second
    of the whole process (median over seeds) and rlrun's ratio to d3rlpy's, and d3rlpy's per
    CPU-second of `fit` alone; then P(rlrun > d3rlpy) over the tasks both ran."""
    from rlrun.compare.statistics import aggregates, improvements

    sides = ("d3rlpy", "rlrun")
    for task, steps in sorted({(r["task"], r["steps"]) for r in results}):
        rows = [r for r in results if r["task"] == task and r["steps"] == steps]
        seeds = sorted({r["seed"] for r in rows})
        print(
            f"\n{task}, {steps:,} gradient steps on {rows[0]['dataset']}:"
            f" final return ({EVAL_EPISODES} greedy episodes)"
        )
        print(
            f"{'side':<8}"
            + "".join(f"{'seed ' + str(s):>10}" for s in seeds)
            + f"{'IQM [95% CI]':>30}{'steps/cpu-s':>13}{'vs d3rlpy':>10}{'fit only':>10}"
        )
        speed = {
            s: statistics.median(r["cpu_sps"] for r in rows if r["side"] == s)
            for s in sides
            if any(r["side"] == s for r in rows)
        }
        for side in speed:
            mine = {r["seed"]: r["mean"] for r in rows if r["side"] == side}
            iqm = aggregates({side: np.array([[mine[s]] for s in sorted(mine)])}, reps=reps, seed=0)[side]["iqm"]
            cells = "".join(f"{mine[s]:>10.1f}" if s in mine else f"{'-':>10}" for s in seeds)
            ratio = f"{speed[side] / speed['d3rlpy']:>9.2f}x" if "d3rlpy" in speed else f"{'-':>10}"
            interval = f"{iqm.point:.1f} [{iqm.low:.1f}, {iqm.high:.1f}]"
            fits = [steps / r["fit_cpu"] for r in rows if r["side"] == side and "fit_cpu" in r]
            fit = f"{statistics.median(fits):>10.0f}" if fits else f"{'-':>10}"
            print(f"{side:<8}{cells}{interval:>30}{speed[side]:>13.0f}{ratio}{fit}")
    both = sorted(
        {r["task"] for r in results if r["side"] == "rlrun"} & {r["task"] for r in results if r["side"] == "d3rlpy"}
    )
    if not both:
        print("\nP(rlrun > d3rlpy): pending, no task has both sides")
        return
    matrix = {side: _matrix(results, side, both) for side in sides}
    p = improvements({"rlrun > d3rlpy": (matrix["rlrun"], matrix["d3rlpy"])}, reps=reps, seed=0)["rlrun > d3rlpy"]
    print(
        f"\nP(rlrun > d3rlpy) over {', '.join(both)}: {p.point:.2f} [{p.low:.2f}, {p.high:.2f}]"
        " (done when the interval reaches 0.5 or lies above it)"
    )


def _matrix(results: list[dict[str, Any]], side: str, tasks: list[str]) -> np.ndarray:
    """Scores as rliable takes them: seeds x tasks (the seeds both sides ran)."""
    seeds = sorted(
        set.intersection(*({r["seed"] for r in results if r["task"] == t and r["side"] == side} for t in tasks))
    )
    by = {(r["task"], r["seed"]): r["mean"] for r in results if r["side"] == side}
    return np.array([[by[(t, s)] for t in tasks] for s in seeds])


def main() -> None:
    from speed_vs_sb3 import frames  # run as a script: its folder is on the path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=frames, default=100_000, help="gradient steps per run, e.g. 100k")
    parser.add_argument("--sides", nargs="+", default=["d3rlpy", "rlrun"], choices=["d3rlpy", "rlrun"])
    parser.add_argument(
        "--dataset", nargs="+", default=[], metavar="TASK=ID", help="a Minari dataset to use for a task"
    )
    parser.add_argument("--source-frames", default="20k", help="frames of each env's source run (a 'medium' policy)")
    parser.add_argument("--source-episodes", type=int, default=100, help="episodes recorded from the source run")
    parser.add_argument(
        "--d3rlpy-python", default=sys.executable, help="the interpreter of a venv with d3rlpy (default: this one)"
    )
    parser.add_argument("--home", type=Path, default=Path("runs-offline"), help="where the rlrun runs stay")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap repetitions")
    parser.add_argument("--out", type=Path, help="append each result to this file as a JSON line")
    parser.add_argument("--report", nargs="+", type=Path, help="print the tables from these files; train nothing")
    args = parser.parse_args()
    if args.report:
        report(
            [json.loads(line) for path in args.report for line in path.read_text().splitlines() if line], reps=args.reps
        )
        return
    given = dict(item.split("=", 1) for item in args.dataset)
    results = []
    for task in args.tasks:
        if "rlrun" in args.sides and not known_spec(task):
            print(
                f"rlrun side of {task}: skipped, this rlrun has no built-in spec {task!r} (issue 54's core)",
                file=sys.stderr,
            )
        dataset_id = given.get(task) or medium_dataset(
            TASKS[task]["env"], args.home, args.source_frames, args.source_episodes
        )
        for seed in args.seeds:
            for side in args.sides:
                result = measure(side, task, dataset_id, args.steps, seed, args.home, args.d3rlpy_python)
                if result is None:
                    continue
                print(json.dumps(result), flush=True)
                results.append(result)
                if args.out is not None:
                    with args.out.open("a") as out:
                        out.write(json.dumps(result) + "\n")
    report(results, reps=args.reps)


if __name__ == "__main__":
    main()

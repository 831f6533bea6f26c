"""The learning table (issue 55): rlrun's built-ins against Stable-Baselines3 2.9 / sb3-contrib with
the RL Zoo's hyper-parameters, task by task, read through `rlrun compare`; each task a row appended to
docs/benchmarks/learning.md, so the table builds across sessions.

    pip install 'rl_zoo3>=2.9,<3'          # the zoo's trainer and hyper-parameters (CPU torch kept)
    nice -n 10 python tests/benchmarks/learning_table.py [--tasks CartPole Acrobot ...] [--seeds 4]
        [--fraction F] [--work DIR] [--no-append]

With no --tasks, every task of TASKS in turn: that is the one command that regenerates the whole table.

Per task, the same budget on both sides: the zoo's n_timesteps for the task (its hyper-parameter file,
`rl_zoo3/hyperparams/<algo>.yml`) times the task's FRACTION below, the share that fits one seed in
about 5 minutes of one core of this machine (1.0: the zoo's whole budget), or times --fraction for a
cheap run; the row says where a budget was cut and by how much. Per side, --seeds seeds (4):
- SB3: the zoo itself, `python -m rl_zoo3.train --algo A --env E -n BUDGET --eval-freq BUDGET/5
  --eval-episodes 10 --seed S` in a process of its own per seed, one torch thread, CPU device. Its
  entry is passed as a --conf-file under the env id rlrun trains (the zoo's Hopper-v4 entry for rlrun's
  Hopper-v5: the zoo has none for v5). It writes the zoo's log folders, which are then imported with
  `rlrun import sb3`, as a user would import theirs.
- rlrun: the task's built-in (SPECS below; a task whose built-in this checkout lacks is skipped, and
  said so), `rlrun train SPEC --frames BUDGET --sessions SEEDS` with an evaluation every BUDGET/5 of 10
  episodes. The built-ins' schedules end at their own frame, the zoo's (`lin_`) at the budget; but
  DQN's exploration, which the zoo ends at `exploration_fraction` of the budget, is moved there on
  rlrun's side too (`agent.epsilon.to_frame`: the same frame as the built-in's at the zoo's budget).
Both sides score a seed by its last evaluation; `rlrun compare --json` gives each side's IQM with its
95% stratified-bootstrap interval and P(rlrun > SB3) with its interval. Frames per CPU-second: the
frames trained (budget x seeds) over the CPU time of the training processes (`RUSAGE_CHILDREN`),
start-up and evaluations included alike on both sides.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "benchmarks" / "learning.md"
COMMAND = "nice -n 10 python tests/benchmarks/learning_table.py"


class Task(NamedTuple):
    zoo_algo: str  # rl_zoo3's --algo (its hyper-parameter file)
    zoo_env: str  # the zoo's entry in that file
    env: str  # the env both sides train (rlrun's id; the zoo's NoVel ids for the NoVel tasks)
    spec: str  # rlrun's built-in
    fraction: float  # of the zoo's budget: what fits one seed in ~5 minutes of one core here


TASKS: dict[str, Task] = {
    "CartPole": Task("ppo", "CartPole-v1", "CartPole-v1", "ppo_cartpole", 1.0),
    "Acrobot": Task("ppo", "Acrobot-v1", "Acrobot-v1", "ppo_acrobot", 0.5),
    "MountainCar": Task("dqn", "MountainCar-v0", "MountainCar-v0", "dqn_mountaincar", 1.0),  # SB3 ~1,000 f/cpu-s
    "MountainCarContinuous": Task(
        "sac", "MountainCarContinuous-v0", "MountainCarContinuous-v0", "sac_mountaincar_continuous", 0.5
    ),
    "Pendulum": Task("sac", "Pendulum-v1", "Pendulum-v1", "sac_pendulum", 1.0),
    "LunarLander": Task("ppo", "LunarLander-v3", "LunarLander-v3", "ppo_lunarlander", 1.0),  # SB3 ~3,300 f/cpu-s
    "LunarLanderContinuous": Task(
        "sac", "LunarLanderContinuous-v3", "LunarLanderContinuous-v3", "sac_lunarlander_continuous", 0.03
    ),
    "BipedalWalker": Task("sac", "BipedalWalker-v3", "BipedalWalker-v3", "sac_bipedalwalker", 0.03),
    "CartPoleNoVel": Task("ppo_lstm", "CartPoleNoVel-v1", "CartPoleNoVel-v1", "ppo_lstm_cartpole_novel", 1.0),
    "PendulumNoVel": Task("ppo_lstm", "PendulumNoVel-v1", "PendulumNoVel-v1", "ppo_lstm_pendulum_novel", 1.0),
    "Hopper": Task("ppo", "Hopper-v4", "Hopper-v5", "ppo_hopper", 0.2),
    "HalfCheetah": Task("sac", "HalfCheetah-v4", "HalfCheetah-v5", "sac_halfcheetah", 0.03),
}
"""Task -> the zoo's entry and rlrun's built-in. The fractions are estimates from each side's frames
per CPU-second here (docs/benchmarks/speed.md); a row states the one it ran with. SAC with the
zoo's 400-300 networks and a gradient step a frame (LunarLanderContinuous, BipedalWalker): about 50
frames per CPU-second for SB3 (68 with 256-256 networks, `sac_pendulum`), so 15k frames in 5
minutes, of which the zoo's `learning_starts` takes 10k: rows that say little until a longer budget
is afforded (--fraction)."""

HEADER = (
    "| task | budget (frames/seed) | rlrun built-in | rlrun IQM [95% CI] | SB3 (zoo) | SB3 IQM [95% CI]"
    " | P(rlrun > SB3) [95% CI] | frames/CPU-s rlrun · SB3 | seeds | date |"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--fraction", type=float, help="of the zoo's budget, for every task (a cheap run)")
    parser.add_argument("--work", type=Path, default=Path("learning-table"), help="the zoo's logs and rlrun's home")
    parser.add_argument("--no-append", action="store_true", help="print the rows, leave the table alone")
    args = parser.parse_args(argv)
    from rlrun.spec import builtin_names

    known = set(builtin_names())
    for name in args.tasks:
        task = TASKS[name]
        if task.spec not in known:
            print(f"{name}: skipped, no built-in {task.spec} in this checkout (add one, run again)", file=sys.stderr)
            continue
        row = measure(name, task, args.seeds, args.fraction, args.work.resolve())
        print(row)
        if not args.no_append:
            append(row)
    return 0


def zoo_entry(task: Task) -> dict[str, Any]:
    """The zoo's hyper-parameters for the task, as its file holds them (plain YAML)."""
    import rl_zoo3
    import yaml

    file = Path(rl_zoo3.__file__).parent / "hyperparams" / f"{task.zoo_algo}.yml"
    return dict(yaml.safe_load(file.read_text())[task.zoo_env])


def measure(name: str, task: Task, seeds: int, fraction: float | None, work: Path) -> str:
    entry = zoo_entry(task)
    share = fraction if fraction is not None else task.fraction
    budget = int(float(entry["n_timesteps"]) * share)
    folder = work / name
    logs, home = folder / "logs", folder / "runs"
    conf = folder / "zoo.yml"
    folder.mkdir(parents=True, exist_ok=True)
    import yaml

    conf.write_text(yaml.safe_dump({task.env: entry}))
    sb3_cpu = sum(_zoo_seed(task, conf, budget, seed, logs) for seed in range(seeds))
    rlrun_cpu = _rlrun(task, budget, seeds, home, name, _budget_edits(entry, budget))
    _cli(home, "import", "sb3", str(logs / task.zoo_algo))
    names = [run["name"] for run in json.loads(_cli(home, "ls", "--all", "--json")) if run.get("origin") == "sb3"]
    result = json.loads(_cli(home, "compare", name, *names, "--json", "--reps", "2000"))
    groups = {group["name"]: group for group in result["groups"]}
    ours, theirs = groups[task.spec], groups[f"sb3:{task.zoo_algo}"]
    (improvement,) = result["improvement"]
    p, (low, high) = improvement["probability"], improvement["ci"]
    if improvement["a"] != task.spec:  # P(SB3 > rlrun): rliable counts ties as halves, so 1 - it
        p, low, high = 1 - p, 1 - high, 1 - low
    cut = "" if share == 1.0 else f" (cut: {share:g} of the zoo's {float(entry['n_timesteps']):.3g})"
    frames = budget * seeds
    speeds = f"{frames / rlrun_cpu:,.0f} · {frames / sb3_cpu:,.0f}"
    return (
        f"| {name} | {budget:,}{cut} | {task.spec} | {_estimate(ours)} | {task.zoo_algo} {task.zoo_env}"
        f" | {_estimate(theirs)} | {p:.2f} [{low:.2f}, {high:.2f}] | {speeds}"
        f" | {seeds} + {seeds} | {datetime.date.today().isoformat()} |"
    )


def _estimate(group: dict[str, Any]) -> str:
    low, high = group["iqm_ci"]
    return f"{group['iqm']:.1f} [{low:.1f}, {high:.1f}]"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _zoo_seed(task: Task, conf: Path, budget: int, seed: int, logs: Path) -> float:
    """One seed of the zoo's training, in a process of its own; its CPU seconds."""
    before = _children_cpu()
    command = [sys.executable, "-m", "rl_zoo3.train", "--algo", task.zoo_algo, "--env", task.env, "-n", str(budget)]
    command += ["--eval-freq", str(budget // 5), "--eval-episodes", "10", "--n-eval-envs", "1", "--seed", str(seed)]
    command += ["-f", str(logs), "--conf-file", str(conf), "--device", "cpu", "--num-threads", "1"]
    command += ["--verbose", "0", "--log-interval", "-1"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return _children_cpu() - before


def _budget_edits(entry: dict[str, Any], budget: int) -> list[str]:
    """What the zoo ties to the budget and a built-in to a frame of its own: DQN's exploration,
    which the zoo anneals over `exploration_fraction` of the frames it trains (SB3's
    `exploration_fraction`), moved to that frame on rlrun's side (the built-in's own at the zoo's
    whole budget)."""
    if "exploration_fraction" in entry:
        return [f"agent.epsilon.to_frame={int(float(entry['exploration_fraction']) * budget)}"]
    return []


def _rlrun(task: Task, budget: int, seeds: int, home: Path, name: str, edits: list[str]) -> float:
    """rlrun's built-in for the task, `seeds` sessions, with `edits` (`--set`); the CPU seconds of the training."""
    before = _children_cpu()
    every = str(budget // 5)
    _cli(home, "train", task.spec, "--name", name, "--frames", str(budget), "--sessions", str(seeds),
         "--set", f"meta.eval_frequency={every}", "--set", "meta.num_eval_episodes=10",
         "--set", f"meta.checkpoint_frequency={every}", "--set", f"meta.log_frequency={every}",
         *(arg for edit in edits for arg in ("--set", edit)))  # fmt: skip
    return _children_cpu() - before


def _cli(home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rlrun", *args],
        env={**os.environ, "RLRUN_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"rlrun {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def append(row: str) -> None:
    """The row at the end of the table (the page ends with it), the page's header written first if new."""
    text = TABLE.read_text(encoding="utf-8") if TABLE.is_file() else ""
    if HEADER not in text:
        raise SystemExit(f"{TABLE} has no table header; restore it from git")
    TABLE.write_text(text.rstrip("\n") + "\n" + row + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())

"""rlrun against Stable-Baselines3 on every classic-control built-in with an SB3 peer, with the
spec's hyper-parameters on both sides, single-threaded, in the same run, in frames per CPU-second.

    python tests/benchmarks/speed_vs_sb3.py [--specs ppo_cartpole sac_pendulum ...] [--algorithms ppo]
        [--frames 30k] [--budget-scale 1] [--seeds 0] [--rounds 1] [--baseline DIR]

The built-ins (default: all of them): ppo_cartpole, a2c_cartpole, dqn_cartpole, ddqn_cartpole,
ppo_acrobot, dqn_acrobot, ppo_pendulum, sac_pendulum; `--algorithms ppo dqn` picks those of theirs
trained by the named algorithms. The SB3 side reads env id, env copies and every hyper-parameter
from the spec as rlrun resolves it (defaults filled in): network widths and activation (separate
actor and critic for PPO and A2C, and for SAC), optimiser eps, gradient clipping (none: no clip),
learning-rate, clip-range and epsilon schedules (constant or linear, over the same frames), PPO's
log_std_init for continuous actions, SAC's buffer, learning_starts, batch, tau, gamma, train
frequency, gradient steps and entropy coefficient ("auto" starts at alpha_init, aiming at
target_entropy). Two built-ins have no exact peer:
- ddqn_cartpole (double DQN): SB3's DQN has no double variant, so it runs against plain SB3 DQN
  with the same settings (the double target costs rlrun one more forward pass per gradient step).
- reinforce_cartpole: SB3 has no REINFORCE; it is not measured.

Stable-Baselines3 runs from this interpreter when it has SB3 2.9, else from this benchmark's own
virtual environment (~/.cache/rlrun-bench/sb3, made on first use; it sees this interpreter's torch
and gymnasium), never installed into rlrun's. Each side trains in its own fresh process with one
torch thread, and is timed from the first tenth of the budget to its end (so start-up, imports and
the first evaluation are left out alike), in process CPU time and in wall time:
- SB3: `model.learn(budget)`, then `evaluate_policy` (the spec's `meta.num_eval_episodes` greedy
  episodes); `env.normalize` becomes `VecNormalize` with the spec's settings (frozen to evaluate).
- rlrun: `rlrun.training.train` of one session (its progress events mark the frames), and the final
  evaluation the run recorded (as many greedy episodes).
`sb3_per_cpu.py` measures the MuJoCo built-ins with this worker.
`--frames` (or `--budget-scale`) shortens every budget: schedules that end at a fixed frame keep
that frame on both sides. `--baseline DIR` also trains with the rlrun found in DIR (a checkout:
`git archive REV | tar -x -C DIR`), interleaved with this one, to measure a change on a busy
machine: read the ratios. It also prints rlrun's frames/s as a fraction of a random policy
stepping the same (vector) env.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

SB3_VERSION = "2.9.2"
SB3_ENV = Path.home() / ".cache" / "rlrun-bench" / "sb3"
SPECS = (
    "ppo_cartpole",
    "a2c_cartpole",
    "dqn_cartpole",
    "ddqn_cartpole",
    "ppo_acrobot",
    "dqn_acrobot",
    "ppo_pendulum",
    "sac_pendulum",
)
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

SB3_LEARN_TIMED = r"""class Stopwatch(BaseCallback):
    def _on_step(self):
        if self.num_timesteps >= budget // 10 and not hasattr(self, "started"):
            self.started = (self.num_timesteps, time.perf_counter(), time.process_time())
        return True


watch = Stopwatch()
model.learn(budget, callback=watch)
frames = model.num_timesteps - watch.started[0]
wall, cpu = time.perf_counter() - watch.started[1], time.process_time() - watch.started[2]"""
"""An SB3 worker's training of `model` for `budget` frames, timed from the first tenth of the
budget to its end (wall and CPU), as each SB3-side worker script measures it."""

SB3_WORKER = (
    r'''
import json, math, sys, time
import torch
torch.set_num_threads(1)
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

budget, seed, spec = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
agent, env_id, envs = spec["agent"], spec["env"]["id"], spec["env"]["num_envs"]
algorithm, optimizer, normalize = agent["algorithm"], agent["optimizer"], spec["env"]["normalize"]


def normalized(env, training=True):
    """`env.normalize` as SB3's VecNormalize with the same settings (evaluation: the statistics frozen)."""
    if not normalize:
        return env
    return VecNormalize(env, training=training, norm_obs=normalize["observation"],
                        norm_reward=normalize["reward"] and training, clip_obs=normalize["clip_obs"],
                        clip_reward=normalize["clip_reward"], gamma=normalize["gamma"], epsilon=normalize["epsilon"])


env = normalized(make_vec_env(env_id, n_envs=envs, seed=seed))
activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU, "gelu": torch.nn.GELU}
hidden = agent["network"]["hidden"]
net = dict(activation_fn=activation[agent["network"]["activation"]], optimizer_kwargs=dict(eps=optimizer["eps"]))
grad_clip = optimizer["grad_clip"] if optimizer["grad_clip"] is not None else math.inf


def at(schedule, frame):
    """rlrun's schedule (a number, constant or linear) at `frame`."""
    if not isinstance(schedule, dict):
        return schedule
    if schedule["kind"] == "constant":
        return schedule["value"]
    assert schedule["kind"] == "linear", f"no SB3 equivalent written for a {schedule['kind']} schedule"
    begin, finish = (budget if f == "max_frame" else f for f in (schedule["from_frame"], schedule["to_frame"]))
    if frame >= finish:
        return schedule["end"]
    if frame <= begin:
        return schedule["start"]
    return schedule["start"] + (schedule["end"] - schedule["start"]) * (frame - begin) / (finish - begin)


def sb3_schedule(schedule):
    """The same schedule as SB3 takes it: a number, or a function of the progress remaining."""
    if not isinstance(schedule, dict) or schedule["kind"] == "constant":
        return at(schedule, 0)
    return lambda remaining: at(schedule, (1 - remaining) * budget)


lr = sb3_schedule(optimizer["lr"])
if algorithm == "ppo":
    model = PPO("MlpPolicy", env, n_steps=agent["n_steps"], batch_size=agent["batch_size"], n_epochs=agent["n_epochs"],
                gamma=agent["gamma"], gae_lambda=agent["gae_lambda"], ent_coef=at(agent["entropy_coef"], 0),
                vf_coef=agent["value_coef"], max_grad_norm=grad_clip, learning_rate=lr,
                clip_range=sb3_schedule(agent["clip_range"]), clip_range_vf=agent["clip_range_vf"],
                normalize_advantage=agent["normalize_advantages"],
                policy_kwargs=dict(net, net_arch=dict(pi=hidden, vf=hidden), log_std_init=agent["log_std_init"]),
                seed=seed, device="cpu")
elif algorithm == "a2c":
    model = A2C("MlpPolicy", env, n_steps=agent["n_steps"], gamma=agent["gamma"], gae_lambda=agent["gae_lambda"],
                ent_coef=at(agent["entropy_coef"], 0), vf_coef=agent["value_coef"], max_grad_norm=grad_clip,
                learning_rate=lr, rms_prop_eps=optimizer["eps"], use_rms_prop=optimizer["name"] == "rmsprop",
                normalize_advantage=agent["normalize_advantages"],
                policy_kwargs=dict(activation_fn=net["activation_fn"], net_arch=dict(pi=hidden, vf=hidden),
                                   log_std_init=agent["log_std_init"]), seed=seed, device="cpu")
elif algorithm == "dqn":  # double or not: SB3's DQN has no double variant
    epsilon = agent["epsilon"]
    model = DQN("MlpPolicy", env, learning_rate=lr, batch_size=agent["batch_size"],
                buffer_size=agent["memory"]["capacity"], learning_starts=agent["learning_starts"], gamma=agent["gamma"],
                target_update_interval=agent["target_update_frequency"] if agent["target_update"] == "hard" else 1,
                tau=1.0 if agent["target_update"] == "hard" else agent["tau"], train_freq=agent["train_frequency"],
                gradient_steps=agent["gradient_steps"], exploration_initial_eps=epsilon["start"],
                exploration_final_eps=epsilon["end"], exploration_fraction=epsilon["to_frame"] / budget,
                max_grad_norm=grad_clip, policy_kwargs=dict(net, net_arch=hidden), seed=seed, device="cpu")
else:
    alpha = agent["alpha"] if agent["alpha"] != "auto" else f"auto_{agent['alpha_init']}"
    model = SAC("MlpPolicy", env, learning_rate=lr, buffer_size=agent["memory"]["capacity"],
                learning_starts=agent["learning_starts"], batch_size=agent["batch_size"], tau=agent["tau"],
                gamma=agent["gamma"], train_freq=agent["train_frequency"], gradient_steps=agent["gradient_steps"],
                ent_coef=alpha, target_entropy=agent["target_entropy"], policy_kwargs=dict(net, net_arch=hidden),
                seed=seed, device="cpu")


'''
    + SB3_LEARN_TIMED
    + r"""
evaluation_env = normalized(make_vec_env(env_id, n_envs=1, seed=seed + 1000), training=False)
if normalize:
    evaluation_env.obs_rms = env.obs_rms
mean, std = evaluate_policy(model, evaluation_env, n_eval_episodes=spec["meta"]["num_eval_episodes"],
                            deterministic=True)
print(json.dumps({"fps": frames / wall, "cpu_fps": frames / cpu, "mean": float(mean), "std": float(std)}))
"""
)

RLRUN_WORKER = r"""
import json, sys, tempfile, time
from rlrun.session import events
from rlrun.spec import load_spec
from rlrun.training import train

name, overrides, budget = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
marks = []


def on_event(event):
    if isinstance(event, events.Progress) and (not marks or event.frame >= budget):
        marks.append((event.frame, time.perf_counter(), time.process_time()))


with tempfile.TemporaryDirectory() as home:
    result = train(load_spec(name, overrides), home=home, on_event=on_event)
    from rlrun.registry import Registry

    with Registry.open(home, create=False) as registry:
        evaluation = registry.get_run(registry.resolve("latest").id).evaluations[-1]
(f0, w0, c0), (f1, w1, c1) = marks[0], marks[-1]
print(json.dumps({"fps": (f1 - f0) / (w1 - w0), "cpu_fps": (f1 - f0) / (c1 - c0), "mean": evaluation.mean,
                  "std": evaluation.std}))
"""


def sb3_python() -> Path:
    probe = f"import stable_baselines3 as s; assert s.__version__ == '{SB3_VERSION}'"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return Path(sys.executable)
    python = SB3_ENV / "bin" / "python"
    if not python.exists():
        venv.create(SB3_ENV, system_site_packages=True, with_pip=True)
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
        pin = f"stable-baselines3=={SB3_VERSION}"
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", pin], check=True)
    return python


def run_sb3(python: Path, spec: dict, budget: int, seed: int) -> dict:
    done = subprocess.run(
        [str(python), "-c", SB3_WORKER, str(budget), str(seed), json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, **SINGLE_THREAD},
    )
    if done.returncode != 0:
        raise SystemExit(f"SB3 worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rlrun(
    name: str, budget: int, seed: int, *edits: str, source: str | None = None, timeout: float | None = None
) -> dict:
    """Train one session of `name` (with `edits`, `--set` values) with the rlrun in `source` (None:
    this one); frames per second and per CPU-second of its loop, and its final evaluation."""
    quiet = [
        f"meta.max_frame={budget}",
        f"meta.eval_frequency={budget}",
        f"meta.checkpoint_frequency={budget}",
        f"meta.log_frequency={max(budget // 10, 1)}",
        f"meta.seed={seed}",
        "meta.sessions=1",
        *edits,
    ]
    env = {**os.environ, **SINGLE_THREAD}
    if source is not None:
        env["PYTHONPATH"] = source
    # `python -c` puts its working directory first on sys.path, before PYTHONPATH: run from the
    # checkout timed, or a baseline run from this checkout's root would import this rlrun
    done = subprocess.run(
        [sys.executable, "-c", RLRUN_WORKER, name, json.dumps(quiet), str(budget)],
        capture_output=True,
        text=True,
        env=env,
        cwd=source,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise SystemExit(f"rlrun worker failed:\n{done.stderr[-3000:]}")
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def random_policy_fps(env_id: str, num_envs: int, steps: int = 20_000) -> float:
    from rlrun.envs import make_vector_env
    from rlrun.spec import EnvSpec

    env = make_vector_env(EnvSpec(id=env_id, num_envs=num_envs))
    env.reset(seed=0)
    env.action_space.seed(0)
    started = time.perf_counter()
    for _ in range(steps // num_envs):
        env.step(env.action_space.sample())
    return steps // num_envs * num_envs / (time.perf_counter() - started)


def frames(text: str) -> int:
    """A frame count as specs write it: 30000, 30k, 1.5M."""
    from rlrun.spec import load_spec

    return int(load_spec("ppo_cartpole", [f"meta.max_frame={text}"]).meta.max_frame)


def chosen_specs(specs: list[str], algorithms: list[str] | None) -> list[str]:
    from rlrun.spec import load_spec

    if algorithms is None:
        return specs
    return [name for name in specs if load_spec(name).agent.algorithm in algorithms]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--specs",
        nargs="+",
        default=list(SPECS),
        choices=SPECS,
        metavar="SPEC",
        help=f"built-ins to measure (default: all of {', '.join(SPECS)})",
    )
    parser.add_argument(
        "--algorithms",
        nargs="+",
        choices=("ppo", "a2c", "dqn", "sac"),
        help="only the chosen specs trained by these algorithms",
    )
    parser.add_argument("--frames", type=frames, help="every budget, e.g. 30k (default: each spec's max_frame)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--rounds", type=int, default=1, help="repeat each measure, alternating the sides")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="fraction of each spec's frame budget")
    parser.add_argument("--baseline", help="a checkout of another rlrun to time beside this one")
    args = parser.parse_args()
    from rlrun.spec import load_spec

    python = sb3_python()
    before = "   before f/cpu-s  after/before" if args.baseline else ""
    print("frames per CPU-second (one torch thread each; wall-clock ratio in brackets)")
    print(
        f"{'spec':<14} {'seed':>4} {'frames':>8} {'SB3 f/cpu-s':>12} {'rlrun f/cpu-s':>14} {'ratio':>6} "
        f"{'(wall)':>7} {'SB3 return':>16} {'rlrun return':>16} {'rlrun/random':>13}{before}"
    )
    for name in chosen_specs(args.specs, args.algorithms):
        spec = load_spec(name)
        budget = args.frames or int(spec.meta.max_frame * args.budget_scale)
        sb3_spec = load_spec(name, [f"meta.max_frame={budget}"]).to_json()
        ceiling = random_policy_fps(spec.env.id, spec.env.num_envs)
        for seed in args.seeds:
            for _ in range(args.rounds):
                theirs = run_sb3(python, sb3_spec, budget, seed)
                ours = run_rlrun(name, budget, seed)
                old = run_rlrun(name, budget, seed, source=args.baseline) if args.baseline else None
                line = (
                    f"{name:<14} {seed:>4} {budget:>8} {theirs['cpu_fps']:>12.0f} {ours['cpu_fps']:>14.0f} "
                    f"{ours['cpu_fps'] / theirs['cpu_fps']:>6.2f} ({ours['fps'] / theirs['fps']:>5.2f}) "
                    f"{theirs['mean']:>8.1f} ± {theirs['std']:<6.1f}{ours['mean']:>8.1f} ± {ours['std']:<6.1f}"
                    f" {ours['fps'] / ceiling:>12.1%}"
                )
                if old is not None:
                    line += f" {old['cpu_fps']:>16.0f} {ours['cpu_fps'] / old['cpu_fps']:>13.2f}"
                print(line, flush=True)
        copies = "copy" if spec.env.num_envs == 1 else "copies"
        print(f"{'':<14} random policy on {spec.env.num_envs} {spec.env.id} {copies}: {ceiling:,.0f} f/s", flush=True)


if __name__ == "__main__":
    main()

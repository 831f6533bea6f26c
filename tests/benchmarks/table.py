"""The speed table of the docs (docs/benchmarks/speed.md), rerun: every built-in against Stable-Baselines3
2.9 and CleanRL, frames per CPU-second, one torch thread each, printed as that table's markdown rows.

    python tests/benchmarks/table.py [--cleanrl-python VENV/bin/python --cleanrl-dir DIR]
        [--rows ppo_breakout dqn_pong ...] [--scale 1.0]

A thin driver over the benchmarks that own each measure: `speed_vs_sb3.py` (CartPole and Pendulum),
`sb3_per_cpu.py` (the MuJoCo built-ins), `atari_vs_sb3.py` (DQN on Pong, PPO on Breakout) and
`cleanrl_per_cpu.py` (CleanRL's own scripts in their own virtual
environment: without `--cleanrl-*` those rows are left out). Each row's two sides run in the same run,
one after the other; `--rows` keeps the rows of the built-ins named, `--scale` multiplies every budget
(the defaults keep each row to a few minutes on a busy 2-core machine). The budgets are in the command
column, so one row can be rerun alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import atari_vs_sb3  # this folder is the script's: on sys.path
import cleanrl_per_cpu
import sb3_per_cpu
import speed_vs_sb3


@dataclass(frozen=True)
class Row:
    builtin: str
    peer: str
    command: str  # the owning benchmark's command line: `{frames}` the budget, `{scale}` it over max_frame
    frames: int
    measure: Callable[[argparse.Namespace, int], tuple[float, float]]  # -> (peer f/cpu-s, rlrun f/cpu-s)
    step: int = 1  # the budget is a whole number of these

    def budget(self, scale: float) -> int:
        return max(int(self.frames * scale) // self.step, 1) * self.step

    def command_line(self, frames: int) -> str:
        from rlrun.spec import load_spec

        fraction = frames / load_spec(self.builtin).meta.max_frame if "{scale}" in self.command else 0.0
        return self.command.format(frames=frames, scale=f"{fraction:g}")


def classic(name: str) -> Callable[[argparse.Namespace, int], tuple[float, float]]:
    """A classic-control built-in against SB3, as `speed_vs_sb3.py --specs NAME --frames N` measures it."""

    def measure(args: argparse.Namespace, frames: int) -> tuple[float, float]:
        from rlrun.spec import load_spec

        sb3_spec = load_spec(name, [f"meta.max_frame={frames}"]).to_json()
        theirs = speed_vs_sb3.run_sb3(speed_vs_sb3.sb3_python(), sb3_spec, frames, 0)
        return theirs["cpu_fps"], speed_vs_sb3.run_rlrun(name, frames, 0)["cpu_fps"]

    return measure


def classic_command(name: str) -> str:
    return f"speed_vs_sb3.py --specs {name} --frames {{frames}}"


def atari(algorithm: str) -> Callable[[argparse.Namespace, int], tuple[float, float]]:
    """An Atari built-in against SB3, as `atari_vs_sb3.py --algorithms ALGORITHM` measures it."""

    def measure(args: argparse.Namespace, frames: int) -> tuple[float, float]:
        theirs, ours = atari_vs_sb3.measure(algorithm, frames)
        return theirs["cpu_fps"], ours["cpu_fps"]

    return measure


def atari_command(algorithm: str) -> str:
    return f"atari_vs_sb3.py --algorithms {algorithm} --{algorithm}-frames {{frames}}"


def mujoco(builtin: str) -> Callable[[argparse.Namespace, int], tuple[float, float]]:
    return lambda args, frames: sb3_per_cpu.measure(builtin, frames)


def mujoco_command(builtin: str) -> str:
    return f"sb3_per_cpu.py --builtins {builtin} --frames {{frames}}"


def cleanrl(pair: str) -> Callable[[argparse.Namespace, int], tuple[float, float]]:
    return lambda args, frames: cleanrl_per_cpu.measure(pair, args.cleanrl_python, args.cleanrl_dir, frames)


def cleanrl_command(pair: str) -> str:
    return f"cleanrl_per_cpu.py --pairs {pair} --frames {{frames}}"


ROWS = [
    Row("ppo_cartpole", "SB3 2.9", classic_command("ppo_cartpole"), 40_000, classic("ppo_cartpole")),
    Row("a2c_cartpole", "SB3 2.9", classic_command("a2c_cartpole"), 100_000, classic("a2c_cartpole")),
    Row("dqn_cartpole", "SB3 2.9", classic_command("dqn_cartpole"), 20_000, classic("dqn_cartpole")),
    Row("ppo_pendulum", "SB3 2.9", classic_command("ppo_pendulum"), 8192, classic("ppo_pendulum")),
    Row(
        "ppo_pendulum",
        "CleanRL `ppo_continuous_action`",
        cleanrl_command("ppo_continuous_action:ppo_pendulum"),
        4096,
        cleanrl("ppo_continuous_action:ppo_pendulum"),
    ),
    Row("sac_pendulum", "SB3 2.9", classic_command("sac_pendulum"), 4096, classic("sac_pendulum")),
    Row(
        "sac_pendulum",
        "CleanRL `sac_continuous_action`",
        cleanrl_command("sac_continuous_action:sac_pendulum"),
        2048,
        cleanrl("sac_continuous_action:sac_pendulum"),
    ),
    Row("ppo_hopper", "SB3 2.9", mujoco_command("ppo_hopper"), 8192, mujoco("ppo_hopper")),
    Row(
        "ppo_hopper",
        "CleanRL `ppo_continuous_action`",
        cleanrl_command("ppo_continuous_action"),
        4096,
        cleanrl("ppo_continuous_action"),
    ),
    Row("sac_halfcheetah", "SB3 2.9", mujoco_command("sac_halfcheetah"), 4096, mujoco("sac_halfcheetah")),
    Row(
        "sac_halfcheetah",
        "CleanRL `sac_continuous_action`",
        cleanrl_command("sac_continuous_action"),
        2048,
        cleanrl("sac_continuous_action"),
    ),
    Row("dqn_pong", "SB3 2.9", atari_command("dqn"), 10_000, atari("dqn"), step=10_000),
    Row("dqn_pong", "CleanRL `dqn_atari`", cleanrl_command("dqn_atari"), 2048, cleanrl("dqn_atari")),
    Row("ppo_breakout", "SB3 2.9", atari_command("ppo"), 10_240, atari("ppo"), step=10_240),
    Row("ppo_breakout", "CleanRL `ppo_atari`", cleanrl_command("ppo_atari"), 2048, cleanrl("ppo_atari")),
    Row(
        "ppo_breakout",
        "CleanRL `ppo_atari_envpool`",
        cleanrl_command("ppo_atari_envpool"),
        2048,
        cleanrl("ppo_atari_envpool"),
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl-python", help="python of CleanRL's virtual environment (cleanrl_per_cpu.py)")
    parser.add_argument("--cleanrl-dir", type=Path, help="the folder with CleanRL's scripts")
    parser.add_argument("--rows", nargs="+", help="only these built-ins' rows")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every row's budget")
    args = parser.parse_args()
    rows = [row for row in ROWS if not args.rows or row.builtin in args.rows]
    if not (args.cleanrl_python and args.cleanrl_dir):
        rows = [row for row in rows if not row.peer.startswith("CleanRL")]
        print("(no --cleanrl-python/--cleanrl-dir: CleanRL's rows left out)", file=sys.stderr)
    print(f"<!-- {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start -->")
    print("| built-in | peer | peer f/cpu-s | rlrun f/cpu-s | rlrun / peer | command |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        frames = row.budget(args.scale)
        theirs, ours = row.measure(args, frames)
        print(
            f"| `{row.builtin}` | {row.peer} | {theirs:,.0f} | {ours:,.0f} | {ours / theirs:.2f}× "
            f"| `{row.command_line(frames)}` |",
            flush=True,
        )


if __name__ == "__main__":
    main()

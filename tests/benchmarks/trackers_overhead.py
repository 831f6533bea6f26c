"""What the experiment trackers cost a training session, and what a tracker outage costs it.

    python tests/benchmarks/trackers_overhead.py [--spec reinforce_cartpole] [--frames 20k] [--log 100]
                                                 [--events 2000]

1. Per log event: `--events` metrics rows through a session's tracker relay, as the loop hands them
   over: the loop thread's cost per event (what training waits), and the CPU per event of the whole
   process (the delivery thread and, for W&B, its service), against writing the row to the metrics
   log alone (what every session does anyway).
2. A whole session (`--frames` of `--spec`, a log event every `--log` frames) trained with no tracker,
   MLflow (SQLite store), W&B (offline), MLflow down (a closed loopback port) and MLflow stalled (a
   server that accepts and never answers): wall seconds of `Session.run` (the tracker's import and
   start included; MLflow's tables are made beforehand, once), and the loop's longest wait between
   two log events. A tracker still unreachable at the end is waited for at most
   RLRUN_TRACKER_CLOSE_SECONDS (set to 3 here), which the outage rows include.

Every measurement is a fresh process (`--one`), so imports and the tracker's start are counted where
training would pay them; the variants run one after another, and ratios are against the no-tracker
row of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CLOSE_SECONDS = "3"


def row(frame: int) -> dict[str, Any]:
    return {
        "frame": frame,
        "episode": frame // 20,
        "opt_step": frame // 100,
        "wall_time": frame / 2000,
        "fps": 2000.0,
        "return_mean": 21.5,
        "length_mean": 21.5,
        "policy_loss": 0.01,
        "value_loss": 45.6,
        "entropy": 0.69,
        "approx_kl": 1e-4,
        "explained_variance": 0.1,
        "grad_norm": 8.5,
        "lr": 0.002,
    }


def per_event(tracker: str, events: int) -> dict[str, float]:
    from rlrun.session import metrics_log
    from rlrun.spec import builtin_document
    from rlrun.trackers import Identity
    from rlrun.trackers.delivery import Relay

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = [row(500 * (i + 1)) for i in range(events)]
        cpu, wall = time.process_time(), time.perf_counter()
        if tracker == "none (metrics log)":
            log = metrics_log.MetricsLog.create(folder / "metrics.csv", list(rows[0]))
            for one in rows:
                log.append(one)
                log.flush()
            log.close()
            loop = time.perf_counter() - wall
        else:
            relay = Relay(
                [tracker],
                Identity("bench", 0, 0, builtin_document("reinforce_cartpole")),
                folder,
                rewind=False,
                backlog=[],
                wall_time=0.0,
            )
            for one in rows:
                relay.add(one)
            loop = time.perf_counter() - wall
            (report,) = relay.close("finished", None)
            assert report.undelivered == 0, report
        return {
            "loop_us": loop / events * 1e6,
            "cpu_us": (time.process_time() - cpu) / events * 1e6,
            "wall_us": (time.perf_counter() - wall) / events * 1e6,
        }


def session(spec_name: str, frames: int, log: int, track: list[str]) -> dict[str, float]:
    from rlrun.registry import Registry
    from rlrun.session import events
    from rlrun.session.loop import Session
    from rlrun.session.stopping import StopRequest
    from rlrun.spec import load_spec
    from rlrun.training.api import _task

    quiet = ["meta.eval_frequency=1000000000", "meta.num_eval_episodes=1", "meta.checkpoint_frequency=1000000000"]
    spec = load_spec(
        spec_name, [f"meta.max_frame={frames}", f"meta.log_frequency={log}", *quiet, f"meta.track={json.dumps(track)}"]
    )
    gaps: list[float] = []
    last = [time.perf_counter()]

    def on_event(event: Any) -> None:
        if isinstance(event, events.Progress):
            now = time.perf_counter()
            gaps.append(now - last[0])
            last[0] = now

    with tempfile.TemporaryDirectory() as tmp, Registry.open(Path(tmp)) as registry:
        run = registry.create_run(
            run_id="bench",
            name=None,
            spec_name=spec_name,
            algorithm=spec.agent.algorithm,
            env_id=spec.env.id,
            max_frame=frames,
            seed=0,
            num_sessions=1,
            spec_json=spec.model_dump_json(),
            host="bench",
            pid=0,
        )
        (record,) = registry.get_run(run.id).sessions
        runner = Session(_task(Path(tmp), registry.url, run.id, record, spec, "train", None), registry, on_event)
        started = time.perf_counter()
        runner.run(StopRequest())
        return {
            "wall_s": time.perf_counter() - started,
            "longest_gap_ms": max(gaps[1:-1] or [0.0]) * 1000,
            "median_gap_ms": sorted(gaps)[len(gaps) // 2] * 1000,
        }


class Stalling:
    """A loopback server that accepts connections and never answers (a hung tracker)."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.server.accept()[0])
            except OSError:
                return


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child(args: list[str], env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(args)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="reinforce_cartpole")
    parser.add_argument("--frames", default="20000")
    parser.add_argument("--log", type=int, default=100)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        kind, *rest = json.loads(options.one)
        result = (
            per_event(rest[0], int(rest[1]))
            if kind == "event"
            else session(rest[0], int(rest[1]), int(rest[2]), rest[3])
        )
        print(json.dumps(result))
        return
    from rlrun.sizes import parse_size

    frames = parse_size(options.frames)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "wandb").mkdir()
        env = {
            "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(home / "wandb"),
            "WANDB_SILENT": "true",
            "RLRUN_TENSORBOARD": "0",
        }
        os.chdir(home)
        from mlflow import MlflowClient

        MlflowClient(env["MLFLOW_TRACKING_URI"]).search_experiments()  # its tables made once, not in each variant
        print(f"per log event ({options.events} events; µs)")
        print(f"  {'':20} {'loop thread':>12} {'CPU, all threads':>17} {'wall, delivered':>16}")
        base = None
        for tracker in ("none (metrics log)", "mlflow", "wandb"):
            result = child(["event", tracker, str(options.events)], {**env, "RLRUN_TRACKER_CLOSE_SECONDS": "600"})
            base = base or result
            print(f"  {tracker:20} {result['loop_us']:12.1f} {result['cpu_us']:17.1f} {result['wall_us']:16.1f}")
        stalled = Stalling()
        print(f"\nsession: {options.spec}, {frames:,} frames, a log event every {options.log} frames")
        print(f"  {'':20} {'wall s':>8} {'vs none':>8} {'longest gap ms':>15} {'median gap ms':>14}")
        variants = {
            "none": ([], {}),
            "mlflow (sqlite)": (["mlflow"], {}),
            "wandb (offline)": (["wandb"], {}),
            "mlflow down": (["mlflow"], {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{closed_port()}"}),
            "mlflow stalled": (["mlflow"], {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{stalled.port}"}),
        }
        first = None
        for label, (track, extra) in variants.items():
            wait = CLOSE_SECONDS if extra else "600"  # a reachable tracker is waited for: it is measured whole
            result = child(
                ["session", options.spec, str(frames), str(options.log), track],
                {**env, **extra, "RLRUN_TRACKER_CLOSE_SECONDS": wait},
            )
            first = first or result["wall_s"]
            print(
                f"  {label:20} {result['wall_s']:8.2f} {result['wall_s'] / first:8.2f}"
                f" {result['longest_gap_ms']:15.1f} {result['median_gap_ms']:14.1f}"
            )


if __name__ == "__main__":
    main()

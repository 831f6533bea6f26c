"""A hung object store costs the runs nothing: two runs train on one registry, one with its home in
S3 and one on a local disk, while the S3 server is stopped (SIGSTOP) for 20 s. Both keep training
through the outage (their metrics logs grow), neither fails, `rlrun show` of the S3 run says in one
line that the store does not answer (exit 3), and once the store is back both end bit for bit as
their uninterrupted twin (trained in this process, on a local disk, meanwhile).

The S3 server is moto's, in a process of its own on loopback (the session's `s3_bucket` server runs
inside the test process, which cannot be stopped).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zygote
from helpers import builtin_for, environment, fast, store_home
from same_run import assert_same_run, final_state, train_here

from rlrun.session import metrics_log

pytestmark = pytest.mark.slow  # real trainings in subprocesses, against a real S3 server that is stopped for 20 s

OUTAGE = 20.0
SPEC = builtin_for("reinforce")
FRAMES, CHECKPOINT = 8000, 2000
ARGV = ["--frames", str(FRAMES), "--set", f"meta.checkpoint_frequency={CHECKPOINT}", "--set",
        f"meta.eval_frequency={CHECKPOINT}", "--set", "meta.log_frequency=250", "--set", "meta.num_eval_episodes=2",
        *fast(SPEC)]
"""Snapshots every 2k frames: the three due after the outage starts fit in the uploader's queue."""


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """moto's S3 server as a process of its own, with a bucket, and the settings that point a
    process at it."""
    pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    pytest.importorskip("s3fs", reason="a home in S3 needs the s3 extra")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "moto.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    settings = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        import boto3

        client = boto3.client("s3", endpoint_url=settings["AWS_ENDPOINT_URL"], aws_access_key_id="test",
                              aws_secret_access_key="test", region_name="us-east-1")
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket="outage")
                break
            except Exception:
                assert server.poll() is None and time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.2)
        yield server, settings
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_a_hung_store_stalls_neither_its_run_nor_another_on_the_same_registry(
        tmp_path: Path, s3_server: tuple[subprocess.Popen[bytes], dict[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    server, settings = s3_server
    for key, value in settings.items():  # this process reads the store too (`final_state`)
        monkeypatch.setenv(key, value)
    url = f"s3://outage/{uuid.uuid4().hex[:8]}/runs"
    s3_home = store_home(url, tmp_path / "s3-runs")
    local_home = tmp_path / "local-runs"
    database = s3_home / "registry.sqlite"  # the one registry both runs share
    cache = tmp_path / "cache"  # the S3 run's working copy: not the one this process reads
    base = {k: v for k, v in os.environ.items() if not k.startswith("RLRUN_")}
    common = {**base, **settings, "RLRUN_DB": f"sqlite:///{database}", "RLRUN_TEST_HEARTBEAT_SECONDS": "0.5"}
    runs = {"s3": zygote.start(["train", SPEC, *ARGV], {**common, "RLRUN_HOME": url, "RLRUN_CACHE": str(cache)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            "local": zygote.start(["train", SPEC, *ARGV], {**common, "RLRUN_HOME": str(local_home)},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    logs = {"s3": lambda: next(cache.glob("homes/s3/outage/*/runs/*/s0/metrics.csv"), None),
            "local": lambda: next(local_home.glob("*/s0/metrics.csv"), None)}

    def frames() -> dict[str, int]:
        """How far each run's metrics log reaches (flushed at each heartbeat and snapshot)."""
        reached = {}
        for name, find in logs.items():
            log = find()
            rows = metrics_log.read_rows(log)[1] if log is not None else []
            reached[name] = max((int(row["frame"] or 0) for row in rows), default=-1)
        return reached

    deadline = time.monotonic() + 300
    while _sessions_with_a_snapshot(database) < 2:  # each run has reached its store (or disk) once
        ended = {name: p.communicate()[1] for name, p in runs.items() if p.poll() is not None}
        assert not ended, f"a run ended before the outage: {ended}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)

    server.send_signal(signal.SIGSTOP)
    stopped_at, before = time.monotonic(), frames()
    try:
        shown = zygote.start(["show", "latest", "--json"], {**common, "RLRUN_HOME": url, "RLRUN_STORE_TIMEOUT": "1",
                                                           "RLRUN_CACHE": str(tmp_path / "show-cache")},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with environment(None):  # the twin, on a local disk, while the store is stopped
            twin = tmp_path / "twin"
            done = train_here(twin, SPEC, ARGV)
            assert done.code == 0, done.stderr
            twin_state = final_state(twin)
        show_out, show_err = shown.communicate(timeout=max(1.0, stopped_at + OUTAGE - 2 - time.monotonic()))
        time.sleep(max(0.0, stopped_at + OUTAGE - time.monotonic()))
        during = frames()
    finally:
        server.send_signal(signal.SIGCONT)

    assert shown.returncode == 3, (show_out, show_err)
    said = [line for line in show_err.splitlines() if "does not answer" in line]
    assert len(said) == 1 and url in said[0], show_err
    outputs = {name: process.communicate(timeout=300) for name, process in runs.items()}
    for name, process in runs.items():
        assert process.returncode == 0, outputs[name][1]
    # Two snapshot periods or more while the store was stopped (or to the end of the budget): a run
    # held up at its next snapshot, or by the registry's lock, gets no further than one.
    assert all(during[name] >= min(before[name] + 2 * CHECKPOINT, FRAMES) and before[name] >= 0
               for name in runs), (before, during)

    local_run = next(local_home.glob("*/s0")).parent.name
    with sqlite3.connect(database) as db:
        (s3_run,) = db.execute("SELECT id FROM runs WHERE id <> ?", (local_run,)).fetchone()
    assert_same_run(twin_state, final_state(s3_home, s3_run))  # read from the store: a fresh working copy here
    with environment(None, {"RLRUN_DB": f"sqlite:///{database}"}):
        assert_same_run(twin_state, final_state(local_home, local_run))


def _sessions_with_a_snapshot(database: Path) -> int:
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(database) as db:
            (count,) = db.execute("SELECT COUNT(DISTINCT session_id) FROM checkpoints").fetchone()
    except sqlite3.OperationalError:  # the schema is still being created
        return 0
    return int(count)

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
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zygote
from helpers import GCS_SETTINGS, builtin_for, environment, fast, store_home
from same_run import assert_same_run, final_state, train_here

from rlrun.session import metrics_log, uploads
from rlrun.testhooks import HOLD_ENV

pytestmark = pytest.mark.slow  # real trainings in subprocesses, against a real S3 server that is stopped for 20 s

OUTAGE = 20.0
SPEC = builtin_for("reinforce")
FRAMES, CHECKPOINT = 8000, 2000
ARGV = [
    "--frames",
    str(FRAMES),
    "--set",
    f"meta.checkpoint_frequency={CHECKPOINT}",
    "--set",
    f"meta.eval_frequency={2 * CHECKPOINT}",
    "--set",
    "meta.log_frequency=250",
    "--set",
    "meta.num_eval_episodes=2",
    *fast(SPEC),
]
"""Snapshots every 2k frames, evaluations every 4k: during the outage the S3 run's queue (two
snapshots in flight, `IN_FLIGHT_ENV`) overflows, and a snapshot a newer one supersedes is dropped, not
waited for."""


@pytest.fixture
def s3_server() -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """moto's S3 server as a process of its own, with a bucket, and the settings that point a
    process at it."""
    pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    pytest.importorskip("s3fs", reason="a home in S3 needs the s3 extra")
    import boto3
    from benchmarks.object_store_snapshot import start_moto

    server, endpoint = start_moto()
    settings = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
        ).create_bucket(Bucket="outage")
        yield server, settings
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait(timeout=30)


def test_a_hung_store_stalls_neither_its_run_nor_another_on_the_same_registry(
    tmp_path: Path, s3_server: tuple[subprocess.Popen[bytes], dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
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
    s3_env = {**common, "RLRUN_HOME": url, "RLRUN_CACHE": str(cache), uploads.IN_FLIGHT_ENV: "2"}
    # The local run waits after its first snapshot until the store is stopped: trained at full
    # speed, it could end before the S3 run reaches its own first snapshot, and prove nothing.
    held = tmp_path / "local-held"
    local_env = {**common, "RLRUN_HOME": str(local_home), HOLD_ENV: f"{CHECKPOINT}@{held}"}
    runs = {
        name: zygote.start(["train", SPEC, *ARGV], env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, env in (("s3", s3_env), ("local", local_env))
    }
    logs = {
        "s3": lambda: next(cache.glob("homes/s3/outage/*/runs/*/s0/metrics.csv"), None),
        "local": lambda: next(local_home.glob("*/s0/metrics.csv"), None),
    }

    def frames() -> dict[str, int]:
        """How far each run's metrics log reaches (flushed at each heartbeat and snapshot)."""
        reached = {}
        for name, find in logs.items():
            log = find()
            rows = metrics_log.read_rows(log)[1] if log is not None else []
            reached[name] = max((int(row["frame"] or 0) for row in rows), default=-1)
        return reached

    deadline = time.monotonic() + 300
    while min(frames().values()) < CHECKPOINT or not held.exists():  # each run has taken its first snapshot
        ended = {name: p.communicate()[1] for name, p in runs.items() if p.poll() is not None}
        assert not ended, f"a run ended before the outage: {ended}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)

    server.send_signal(signal.SIGSTOP)
    stopped_at, before = time.monotonic(), frames()
    held.unlink()  # the local run goes on, during the outage
    try:
        s3_run = logs["s3"]().parents[1].name  # type: ignore[union-attr]  # it has its first rows
        shown = zygote.start(
            ["show", s3_run, "--json"],
            {**common, "RLRUN_HOME": url, "RLRUN_STORE_TIMEOUT": "1", "RLRUN_CACHE": str(tmp_path / "show-cache")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
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
    assert all(during[name] >= min(before[name] + 2 * CHECKPOINT, FRAMES) and before[name] >= 0 for name in runs), (
        before,
        during,
    )

    local_run = next(local_home.glob("*/s0")).parent.name
    assert_same_run(twin_state, final_state(s3_home, s3_run))  # read from the store: a fresh working copy here
    with environment(None, {"RLRUN_DB": f"sqlite:///{database}"}):
        assert_same_run(twin_state, final_state(local_home, local_run))


def test_a_store_that_does_not_answer_is_one_line_and_draws_nothing_from_the_training_random_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's libraries retry with jitter drawn from their own `random` stream, never from
    Python's global one, which a snapshot records (the uploader retries on a thread of its own while
    training goes on); a request the store never answers is StoreUnreachable, one line naming it."""
    pytest.importorskip("s3fs", reason="a home in S3 needs the s3 extra")
    import random

    from rlrun import storage
    from rlrun.errors import StoreUnreachable

    with socket.socket() as probe:  # a port on loopback that nothing listens on: refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for key, value in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    home = store_home(f"s3://nowhere/{uuid.uuid4().hex[:8]}/runs", tmp_path / "runs")
    mirror = storage.mirror_of(home)
    assert mirror is not None
    random.seed(7)
    drawn = random.getstate()
    with pytest.raises(StoreUnreachable) as refused:
        mirror.get_bytes(mirror.key(home / "run.json"))
    assert random.getstate() == drawn, "the store's retries drew from the training's random stream"
    said = str(refused.value)
    assert "does not answer" in said and mirror.url in said and "\n" not in said, said


def _skip_without(package: str, reason: str) -> None:
    """Skip unless `package` is installed, without importing it: gcsfs reads GCS_SETTINGS when imported
    (with its default settings it would ask the emulator for Storage Control over gRPC, in vain)."""
    import importlib.util

    if importlib.util.find_spec(package) is None:
        pytest.skip(reason)


def test_gcs_and_azure_libraries_retry_with_jitter_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """gcsfs's retries (its `retry_request`, here a real retry after a refused connection) and the
    stores' other jitter draw from a stream of their own once a home's file system is opened, in
    whatever form they import it (`import random`, `from random import uniform`); the global stream
    the snapshots record is left as it was."""
    _skip_without("gcsfs", "a home in GCS needs the gcs extra")
    import asyncio
    import random
    import sys
    import types

    import fsspec.config

    from rlrun import storage

    for key, value in {**GCS_SETTINGS, "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(key, value)
    import aiohttp
    import gcsfs.retry

    monkeypatch.setattr(fsspec.config, "conf", {})
    fsspec.config.set_conf_env(fsspec.config.conf)
    by_name = types.ModuleType("azure.rlrun_probe")  # a library module that imported the global stream's method
    by_name.uniform = random.uniform  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, by_name.__name__, by_name)
    storage.filesystem("gs://nowhere/runs")
    refused = [aiohttp.ClientConnectionError("refused")]

    @gcsfs.retry.retry_request(retries=2)
    async def answered_the_second_time() -> str:
        if refused:
            raise refused.pop()
        return "answered"

    random.seed(7)
    drawn = random.getstate()
    assert asyncio.run(answered_the_second_time()) == "answered" and not refused
    by_name.uniform(0, 1)  # type: ignore[attr-defined]
    assert random.getstate() == drawn, "a store's library drew from the training's random stream"
    assert gcsfs.retry.random.Random is random.Random, "the module's classes are left alone (azure makes its own)"


GCS_DOWN = 4.0
"""Seconds the GCS server is down: gcsfs's retries of a refused request wait 1, 2, 4, 8, 16 s (plus
jitter), so an upload caught by the outage comes through at its third or fourth try."""


def _gcs_server(port: int, data: Path, log: Path) -> subprocess.Popen[bytes]:
    """gcp-storage-emulator on loopback keeping its objects on disk under `data`, so that one started
    again after a kill serves what was uploaded before."""
    argv = ["start", "--host", "127.0.0.1", "--port", str(port), "--default-bucket", "outage", "--quiet"]
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", *argv],
            env={**os.environ, "STORAGE_BASE": str(data)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _answering(port: int, server: subprocess.Popen[bytes], seconds: float = 60) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/storage/v1/b/outage", timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "the GCS server did not start"
            time.sleep(0.1)


def test_a_gcs_server_killed_mid_upload_and_restarted_leaves_the_snapshots_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GCS server is killed while a run in GCS trains and uploads its snapshots, and started
    again on its disk GCS_DOWN s later: gcsfs retries the refused requests (with jitter from its own
    stream, not Python's global one that every snapshot records) and the run ends as its
    uninterrupted twin, bit for bit. Every wait here is bounded: a hang fails the test."""
    _skip_without("gcp_storage_emulator", "the GCS tests need gcp-storage-emulator")
    _skip_without("gcsfs", "a home in GCS needs the gcs extra")
    import fsspec.config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data, log = tmp_path / "gcs-data", tmp_path / "gcs.log"
    data.mkdir()
    settings = {**GCS_SETTINGS, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"}
    for key, value in settings.items():  # this process reads the store too (`final_state`)
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(fsspec.config, "conf", {})
    fsspec.config.set_conf_env(fsspec.config.conf)
    servers = [_gcs_server(port, data, log)]
    run = None
    try:
        _answering(port, servers[0])
        url = f"gs://outage/{uuid.uuid4().hex[:8]}/runs"
        home, cache = store_home(url, tmp_path / "gs-runs"), tmp_path / "cache"
        base = {k: v for k, v in os.environ.items() if not k.startswith("RLRUN_")}
        env = {**base, **settings, "RLRUN_HOME": url, "RLRUN_CACHE": str(cache), "RLRUN_STORE_TIMEOUT": "2",
               "RLRUN_DB": f"sqlite:///{home / 'registry.sqlite'}"}  # fmt: skip
        run = zygote.start(["train", SPEC, *ARGV], env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(cache.glob("homes/*/outage/*/runs/*/s0/checkpoints/f*")):  # its first snapshot
            assert run.poll() is None, f"the run ended before the outage: {run.communicate(timeout=30)[1]}"
            assert time.monotonic() < deadline, "no snapshot in 120 s"
            time.sleep(0.05)
        servers[0].kill()
        servers[0].wait(timeout=30)
        down_at = time.monotonic()
        with environment(None):  # the twin, on a local disk, while the store is down
            twin = tmp_path / "twin"
            done = train_here(twin, SPEC, ARGV)
            assert done.code == 0, done.stderr
            twin_state = final_state(twin)
        time.sleep(max(0.0, down_at + GCS_DOWN - time.monotonic()))
        servers.append(_gcs_server(port, data, log))
        _answering(port, servers[-1])
        err = run.communicate(timeout=240)[1]
        assert run.returncode == 0, err
        run_id = next(cache.glob("homes/*/outage/*/runs/*/s0")).parent.name
        assert_same_run(twin_state, final_state(home, run_id))  # read from the store: a fresh working copy
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.communicate(timeout=30)
        for server in servers:
            server.kill()
            server.wait(timeout=30)

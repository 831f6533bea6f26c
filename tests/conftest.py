"""Fixtures and hooks only (the helpers live in tests/helpers.py): every test's own home, the `cli`
fixture (`rlrun` in-process against it), one trained home per test session (and one replay-memory
run's final state), and the workers."""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import GCS_SETTINGS, TINY, Result, home_settings, invoke, store_home

UNIT = Path(__file__).resolve().parent / "unit"

# gcsfs picks its file system when first imported: one imported before the GCS fixtures set
# GCS_SETTINGS (a test that imports it, in a worker that then runs the GCS tests) would ask the
# emulator for Storage Control over gRPC, which it does not serve, for minutes on each upload.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", GCS_SETTINGS["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"])


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns "auto" into a number
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With pytest-xdist installed, the suite runs on two workers more than the cores, at most four
    (every test that trains starts its own processes), unless `-n` says otherwise: the spare workers
    fill the time the others wait (tests/test_ray.py holds one for ten minutes at a quarter of a
    core, waiting on its cluster: a node declared dead, a detached actor; with one spare, two cores
    were 1.41 busy on average over CI's run, 1,087 s); each file's tests on one
    worker (loadfile), so a module's fixtures are made once: tests/test_ray.py's Ray cluster (two
    at once would share two cores between a dozen raylets), a file's reference runs. (Not
    loadgroup: pytest-xdist 3.8 marks a group on the test's id in a way pytest 9 ignores.) The unit
    lane alone (`pytest tests/unit`) runs in this process: it takes seconds, less than starting
    workers."""
    if not config.pluginmanager.has_plugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    if option.numprocesses is None and not _unit_lane_only(config):
        option.numprocesses = min(len(os.sched_getaffinity(0)) + 2, 4)
    if option.numprocesses and option.dist == "no" and not option.distload:
        option.dist = "loadfile"
    if option.dist in ("loadfile", "loadscope"):
        # pytest-xdist otherwise hands out the files by their number of tests, most first (its
        # --loadscope-reorder, on by default), not in the order pytest_collection_modifyitems gives
        # them: tests/test_ray.py (33 tests) started ~150 s in, after files of many quick tests, and
        # ended last; the costliest files came last too, leaving one worker alone at the end.
        option.loadscopereorder = False


MINARI_ENV, MINARI_PREFIX = "MINARI_DATASETS_PATH", "rlrun-tests-minari-"


def pytest_configure(config: pytest.Config) -> None:
    """Every process the suite starts (a thousand `rlrun` commands, session workers, Ray workers)
    reads rlrun's compiled modules from __pycache__ rather than compiling them again, even where
    the environment says not to write bytecode (PYTHONDONTWRITEBYTECODE): half a second each."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    # The datasets the suite records (a built-in's recipe, bc_cartpole's) go to one folder for the
    # whole run, shared by the xdist workers (they inherit it) and removed after: never the user's
    # own Minari folder.
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[MINARI_ENV] = tempfile.mkdtemp(prefix=MINARI_PREFIX)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = os.environ.get(MINARI_ENV, "")
    if not os.environ.get("PYTEST_XDIST_WORKER") and Path(folder).name.startswith(MINARI_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)


def _unit_lane_only(config: pytest.Config) -> bool:
    """Whether every path selected lies in tests/unit (`tests/unit`, a file, a node id there)."""
    chosen = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(chosen) and all(path == UNIT or UNIT in path.parents for path in chosen)


HOME_KINDS = ("local", "s3")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `any_home` runs once per kind of home (`HOME_KINDS`): its `home` fixture is a
    local folder, then a home in an S3 bucket on a loopback server."""
    if metafunc.definition.get_closest_marker("any_home") and "home_kind" in metafunc.fixturenames:
        metafunc.parametrize("home_kind", HOME_KINDS, indirect=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test's lane in the JUnit report (.ci/timings.py sums them): unit, fast or slow."""
    unit = UNIT in Path(str(item.path)).parents
    item.user_properties.append(("lane", "unit" if unit else "slow" if item.get_closest_marker("slow") else "fast"))
    _yield_to_the_longest(item)


YIELDING_NICENESS = 10


def _yield_to_the_longest(item: pytest.Item) -> None:
    """Under pytest-xdist, a worker running any file but the longest ones (LONGEST_FIRST, started
    first) runs it, and every process it starts, at a lower priority: the longest file is the suite's
    critical path, and tests/test_ray.py's Ray cluster mostly waits, then needs a core at once (a
    node declared dead, an actor restarted); the other workers fill every core and took the cluster's
    turn, stretching that file from ~600 s to ~940 s. Niceness only ever goes up (no privilege
    needed), so a worker that has run another file runs a later longest one at the same level as
    the rest, as before."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or Path(str(item.path)).name in LONGEST_FIRST:
        return
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < YIELDING_NICENESS:
        os.setpriority(os.PRIO_PROCESS, 0, YIELDING_NICENESS)


CPU_AT_START = pytest.StashKey[float]()
STARTED_AT = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.stash[CPU_AT_START] = _cpu_seconds()
    item.stash[STARTED_AT] = time.time()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test's CPU seconds in the JUnit report, beside its wall time: what it costs the machine,
    whatever else shared the cores meanwhile (two workers on two cores stretch each other's wall time,
    not their CPU time). This process's and the children it awaited: the commands and session
    processes a test starts (those forked from tests/zygote.py through its own count); a Ray
    cluster's workers count when its module's fixture reaps them, and the session zygote this
    process keeps for its in-process runs (rlrun.training.zygote), with every worker it forked, in
    the test that stops it (one that runs `rlrun.cli.main`, or replaces it). Also the pytest-xdist worker that ran
    it and when it started: .ci/timings.py draws each worker's span from them (do they end together,
    how many cores the run kept busy)."""
    yield
    item.user_properties.append(("cpu", f"{_cpu_seconds() - item.stash[CPU_AT_START]:.2f}"))
    item.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))
    item.user_properties.append(("started", f"{item.stash[STARTED_AT]:.2f}"))


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + zygote.cpu_seconds()


MACHINE_AT_START = pytest.StashKey[tuple[float, tuple[int, int, int]]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the process that reports: pytest-xdist's controller
        session.config.stash[MACHINE_AT_START] = (time.monotonic(), _machine_ticks())


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """How busy the machine's cores were over the test session, every process on it counted (the
    tests' own CPU in the JUnit report misses what no test awaits: Ray's daemons, PostgreSQL, pytest's
    collection in each worker, other users): near the cores, one more pytest-xdist worker would only
    share them; well under, the workers wait and one more would fill the idle time."""
    if MACHINE_AT_START not in config.stash or not any(_machine_ticks()):
        return
    started, (busy, idle, waiting) = config.stash[MACHINE_AT_START]
    now_busy, now_idle, now_waiting = _machine_ticks()
    seconds, tick = time.monotonic() - started, os.sysconf("SC_CLK_TCK")
    terminalreporter.write_line(
        f"machine over the session ({seconds:.0f} s, {os.cpu_count()} cores): {(now_busy - busy) / tick / seconds:.2f}"
        f" cores busy, {(now_idle - idle) / tick / seconds:.2f} idle, {(now_waiting - waiting) / tick / seconds:.2f}"
        " waiting on I/O"
    )


def _machine_ticks() -> tuple[int, int, int]:
    """Linux's count of clock ticks all cores spent busy, idle and idle waiting on I/O (/proc/stat);
    zeros elsewhere."""
    try:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    except (OSError, ValueError):
        return 0, 0, 0
    return user + nice + system + irq + softirq + steal, idle, iowait


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`any_home(store_only={"straight": "dqn"})`: the home in object storage is tried only where the
    test's other parameters are those (one algorithm per path: the store's paths do not depend on the
    algorithm, and the local home runs them all); the other store variants are deselected."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("any_home")
        callspec = getattr(item, "callspec", None)
        only = marker.kwargs.get("store_only", {}) if marker else {}
        params = callspec.params if callspec else {}
        on_store = params.get("home_kind") not in (None, "local")
        (dropped if on_store and any(params.get(k) != v for k, v in only.items()) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    # pytest-xdist hands out the files in this order, each to the next idle worker: the longest
    # first, so that it does not start when the rest are nearly done, then the costliest, so that
    # the last files handed out are short ones and the workers end together (a stable sort: the
    # others keep their order, the same on every worker, as pytest-xdist requires).
    items.sort(key=_hand_out_order)


LONGEST_FIRST = {"test_ray.py"}
"""Files that take a worker far longer than any other (`.ci/run`'s timing report says which)."""

COSTLIEST = (
    "test_slurm.py",  # ~50-70 s of wall time, mostly waiting on SLURM: early, never the last file handed out
    "test_resume.py",
    "test_search.py",
    "test_pbt.py",
    "test_compare.py",
    "test_user_env.py",
    "test_trackers.py",
    "test_user_spaces_networks.py",
    "test_env_workers.py",
    "test_resume_edits.py",
    "test_resume_envs.py",
    "test_eval_overlap.py",
    "test_import_sb3.py",  # the RL Zoo's own training in a subprocess: ~50 s of wall in its fixture
    "test_publish.py",
    "test_offline.py",
    "test_offline_continuous.py",  # a tiny recipe, two trainings, two kill chains: ~15 CPU-s
    "test_quality.py",
    "test_crash_windows.py",
    "test_cli_registry.py",
    "test_sac_hand.py",
    "test_old_bits.py",
    "test_resume_normalize.py",
    "test_live_display.py",
    "test_object_store.py",
    "test_resume_atari.py",
    "test_registry.py",
    "test_rough_edges.py",
    "test_recurrent_dqn.py",
    "test_enjoy.py",
    "test_policy_export.py",
    "test_store_outage.py",
    "test_one_machine_cluster.py",
    "test_reliability.py",
    "test_cli_concurrency.py",
)
"""After LONGEST_FIRST, the files that hold a worker longest, longest first (each file's wall seconds
in `.ci/run`'s timing report: a worker is taken for a file's wall time, whatever its CPU time), so
that the files handed out last are the short ones and the workers end together; the rest follow in
collection order. test_quality.py where its mypy takes longest: a first run, without mypy's cache."""


def _hand_out_order(item: pytest.Item) -> int:
    name = Path(str(item.path)).name
    if name in LONGEST_FIRST:
        return 0
    return 1 + COSTLIEST.index(name) if name in COSTLIEST else 1 + len(COSTLIEST)


@pytest.fixture
def home_kind(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


@pytest.fixture
def home(tmp_path: Path, home_kind: str, request: pytest.FixtureRequest) -> Path:
    if home_kind == "local":
        return tmp_path / "runs"
    bucket = request.getfixturevalue("s3_bucket")
    return store_home(f"s3://{bucket}/{tmp_path.name}-{uuid.uuid4().hex[:8]}/runs", tmp_path / "runs")


@pytest.fixture(scope="session")
def s3_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bucket on an S3 server on loopback (moto's server mode, a real HTTP server in this process),
    for the whole test session; the AWS variables that point every rlrun process at it (the cloud
    tools' own way: AWS_ENDPOINT_URL and the access keys) stay set until the session ends."""
    server_module = pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    pytest.importorskip("s3fs", reason="a home in S3 needs the s3 extra")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    settings = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    import boto3

    boto3.client("s3").create_bucket(Bucket="rlrun-tests")
    try:
        yield "rlrun-tests"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture(scope="session")
def gcs_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bucket on a Google Cloud Storage server on loopback (gcp-storage-emulator, its own
    process), for the whole test session; the variables that point every rlrun process at it stay
    set until the session ends."""
    import importlib.util

    if importlib.util.find_spec("gcp_storage_emulator") is None:
        pytest.skip("the GCS tests need gcp-storage-emulator")
    if importlib.util.find_spec("gcsfs") is None:  # not imported: GCS_SETTINGS choose its file system
        pytest.skip("a home in GCS needs the gcs extra")
    port = _free_port()
    log = tmp_path_factory.mktemp("gcs-emulator") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gcp_storage_emulator",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--in-memory",
                "--default-bucket",
                "rlrun-tests",
                "--quiet",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    settings = {**GCS_SETTINGS, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    import fsspec.config

    fsspec.config.set_conf_env(fsspec.config.conf)  # this process read its configuration when it imported fsspec
    try:
        _wait_for(f"http://127.0.0.1:{port}/storage/v1/b/rlrun-tests", server, log)
        yield "rlrun-tests"
    finally:
        _restore(saved)
        fsspec.config.conf.get("gs", {}).pop("token", None)
        server.terminate()
        server.wait(timeout=30)


AZURITE_ACCOUNT = (
    "devstoreaccount1",
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
)
"""The account every Azurite server has, with its published development key (Azurite's README)."""


@pytest.fixture(scope="session")
def azure_container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A container on an Azure Blob Storage server on loopback (Azurite's blob service, its own
    process; an npm package: `azurite-blob` on PATH, which .ci/run installs), for the whole test
    session; the connection string that points every rlrun process at it (adlfs reads
    AZURE_STORAGE_CONNECTION_STRING, as Azure's own tools do) stays set until the session ends."""
    azurite = shutil.which("azurite-blob")
    if azurite is None:
        pytest.skip("the Azure Blob tests need Azurite (npm install azurite; its azurite-blob on PATH)")
    pytest.importorskip("adlfs", reason="a home in Azure Blob Storage needs the azure extra")
    port = _free_port()
    folder = tmp_path_factory.mktemp("azurite")
    with (folder / "server.log").open("wb") as out:
        # --skipApiVersionCheck: azure-storage-blob may speak a newer API version than this Azurite knows
        server = subprocess.Popen(
            [
                azurite,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
            ],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    name, secret = AZURITE_ACCOUNT
    settings = {
        "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=http;AccountName={name};"
        f"AccountKey={secret};BlobEndpoint=http://127.0.0.1:{port}/{name};"
    }
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        _wait_for(f"http://127.0.0.1:{port}/{name}?comp=list", server, folder / "server.log")
        import fsspec

        fsspec.filesystem("az", skip_instance_cache=True).mkdir("rlrun-tests")
        yield "rlrun-tests"
    finally:
        _restore(saved)
        server.terminate()
        server.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _restore(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _wait_for(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Until the server at `url` answers, whatever its answer (a fresh process: a second or so); its
    log in the error when it exits or stays silent for a minute."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {url} did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)


@pytest.fixture(autouse=True)
def _temporary_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs against its own home: in-process commands read RLRUN_HOME, and a database
    URL from the developer's shell never reaches a test. TensorBoard's event files are off (its import
    costs a training process about a second): the tests of the mirror turn them on."""
    monkeypatch.delenv("RLRUN_DB", raising=False)
    monkeypatch.setenv("RLRUN_TENSORBOARD", "0")
    for key, value in home_settings(home).items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def cli(home: Path) -> Callable[..., Result]:
    """`cli("ls", "--json")`: `rlrun ls --json` in-process against this test's home."""
    return lambda *args, **kwargs: invoke(home, *args, **kwargs)


@pytest.fixture(scope="session")
def trained_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny real training (reinforce_cartpole, TINY) per test session, named `tiny`, for the
    tests that only read a trained home (they are `slow`). A test that changes it works on
    `trained_copy`."""
    home = tmp_path_factory.mktemp("trained") / "runs"
    done = invoke(home, "train", "reinforce_cartpole", "--name", "tiny", *TINY)
    assert done.code == 0, done.stderr
    return home


@pytest.fixture(scope="session")
def wrapping_dqn_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The wrapping DQN run (tests/same_run.py) never interrupted, straight to WRAPPING_TARGET on a
    local disk: its final state, which each interrupted-and-resumed replay-memory run must equal.
    Trained once per test run (`built_once`), not once per pytest-xdist worker: its two files
    (test_replay_snapshots.py, test_object_store.py) usually run on different workers."""
    from same_run import WRAPPING_SETTINGS, WRAPPING_TARGET, built_once, final_state, train_wrapping_dqn  # torch

    def trained(folder: Path) -> None:
        done = train_wrapping_dqn(folder / "runs", WRAPPING_TARGET)
        assert done.code == 0, done.stderr

    key = ["wrapping-dqn", WRAPPING_TARGET, *WRAPPING_SETTINGS]
    return final_state(built_once(tmp_path_factory, key, trained) / "runs")


@pytest.fixture
def trained_copy(trained_home: Path, tmp_path: Path) -> Path:
    """A private copy of the session's trained home, free to change."""
    copy = tmp_path / "trained"
    shutil.copytree(trained_home, copy)
    return copy

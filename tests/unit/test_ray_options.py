"""`--ray [ADDRESS]` parsing and the storage check's verdicts, without a cluster (tests/test_ray.py
runs a real one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrun import storage
from rlrun.cli import _bare_ray
from rlrun.training.ray.preflight import _unreachable, find_markers
from rlrun.training.ray.runtime import forwarded_environment


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "x", "--ray"], ["train", "x", "--ray="]),
        (["train", "x", "--ray", "--frames", "1k"], ["train", "x", "--ray=", "--frames", "1k"]),
        (["resume", "--ray", "latest"], ["resume", "--ray=", "latest"]),
        (["resume", "--ray", "auto", "latest"], ["resume", "--ray", "auto", "latest"]),
        (["resume", "--ray", "search:abc"], ["resume", "--ray=", "search:abc"]),
        (["train", "x", "--ray", "10.0.0.5:6379"], ["train", "x", "--ray", "10.0.0.5:6379"]),
        (["train", "x", "--ray", "ray://head:10001"], ["train", "x", "--ray", "ray://head:10001"]),
        (["train", "x", "--ray=10.0.0.5:6379"], ["train", "x", "--ray=10.0.0.5:6379"]),
        (["train", "x", "--", "--ray"], ["train", "x", "--", "--ray"]),
    ],
)
def test_a_bare_ray_option_takes_no_address(argv: list[str], expected: list[str]) -> None:
    assert _bare_ray(argv) == expected


def test_a_node_reads_back_the_markers_it_can_see(tmp_path: Path) -> None:
    seen = tmp_path / ".rlrun-probe-a"
    seen.write_text("token")
    stale = tmp_path / ".rlrun-probe-b"
    stale.write_text("another run's token")
    markers = {"runs home": str(seen), "SQLite registry": str(tmp_path / "elsewhere" / ".rlrun-probe-a")}
    assert find_markers(markers, "token") == ["SQLite registry"]
    assert find_markers({"runs home": str(stale)}, "token") == ["runs home"]


def test_an_unreachable_place_names_the_node_the_path_and_the_fix(tmp_path: Path) -> None:
    node = {"NodeManagerAddress": "10.0.0.7", "NodeID": "ab" * 28}
    places = {"runs home": tmp_path / "runs", "SQLite registry": tmp_path / "db"}
    home = _unreachable(node, "runs home", places, sqlite=False)
    assert home.startswith(f"node 10.0.0.7 ({'ab' * 8}) cannot see the runs home {tmp_path / 'runs'}")
    assert "storage every node mounts" in home and "PostgreSQL" not in home
    registry = _unreachable(node, "SQLite registry", places, sqlite=True)
    assert f"cannot reach the SQLite registry in {tmp_path / 'db'}" in registry
    assert "PostgreSQL" in registry and "unsafe on NFS" in registry
    stored = storage.open_home("memory://unreached/runs", local=tmp_path / "copy")
    bucket = _unreachable(node, "runs home", {"runs home": stored}, sqlite=False)
    assert "cannot reach the runs home memory://unreached/runs in object storage" in bucket
    assert "fsspec's library for memory://" in bucket and "AWS_ENDPOINT_URL" not in bucket


def test_rlrun_settings_reach_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLRUN_TENSORBOARD", "0")
    monkeypatch.setenv("RLRUN_HOME", "/somewhere")
    monkeypatch.setenv("OTHER", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    forwarded = forwarded_environment()
    assert forwarded.get("RLRUN_TENSORBOARD") == "0" and forwarded.get("OMP_WAIT_POLICY") == "PASSIVE"
    assert "RLRUN_HOME" not in forwarded and "OTHER" not in forwarded

"""Homes given as URLs (`rlrun.storage`): what is refused before anything is written, and how a URL
names its working copy. No server here: tests/test_object_store.py trains against one."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import invoke

from rlrun import paths, storage


@pytest.mark.parametrize("command", [["ls"], ["train", "reinforce_cartpole", "--frames", "1000"], ["gc"]])
def test_a_url_home_without_a_registry_url_is_one_line_and_nothing_written(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    done = invoke(None, *command, "--home", "s3://bucket/runs")
    assert done.code == 2
    assert done.stderr.count("\n") == 1 and "RLRUN_DB" in done.stderr and "s3://bucket/runs" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == [], "something was written (before the fix: a folder s3:/bucket/runs)"


def test_rlrun_home_may_be_a_url_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(None, "ls", env={"RLRUN_HOME": "s3://bucket/runs"})
    assert done.code == 2 and "s3://bucket/runs" in done.stderr and "RLRUN_DB" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_scheme_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(None, "ls", "--home", "nosuchstore://bucket/runs", env={"RLRUN_DB": f"sqlite:///{tmp_path}/r.db"})
    assert done.code == 2 and "nosuchstore://" in done.stderr and done.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_urls_and_folders() -> None:
    assert storage.is_url("s3://bucket/runs") and storage.is_url("gs://b/p") and storage.is_url("az://c/p")
    assert not storage.is_url("runs") and not storage.is_url("/data/runs") and not storage.is_url("file:///data")


def test_each_url_has_its_own_working_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path))
    assert storage.working_copy("s3://bucket/runs") == tmp_path / "homes" / "s3" / "bucket" / "runs"
    assert storage.working_copy("s3://bucket/runs") != storage.working_copy("gs://bucket/runs")
    assert storage.working_copy("s3://bucket/../x") == tmp_path / "homes" / "s3" / "bucket" / "x"


def test_a_local_home_has_no_mirror_and_is_named_by_its_folder(tmp_path: Path) -> None:
    assert storage.mirror_of(tmp_path / "runs" / "abc") is None
    assert paths.home_address(tmp_path / "runs") == str(tmp_path / "runs")
    assert paths.task_home(str(tmp_path / "runs")) == tmp_path / "runs"

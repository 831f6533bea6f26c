"""SLM Lab habits (issue 17): a folder path is a reference, `--of SPEC` picks the latest run of a
spec on every command that takes a reference, a run folder copied from elsewhere is enjoyed and
shown where it is (verified, nothing written) or imported, and a run's own files given as a spec
say what they are."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import Result, invoke

pytestmark = pytest.mark.slow  # the session's trained home trains once

CHECKPOINT = "s0/checkpoints/f000000002000"


def _run_id(home: Path) -> str:
    return next(p.parent.name for p in home.glob("*/run.json"))


def _fingerprint(folder: Path) -> dict[str, str]:
    """Every file under a folder and its sha256: equal before and after means nothing was written."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _one_line_error(result: Result, *parts: str) -> None:
    assert result.code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    for part in parts:
        assert part in result.stderr, result.stderr


# ---- paths inside the home -------------------------------------------------------------------


@pytest.mark.parametrize(
    "relative", ["{id}", "{id}/run.json", "{id}/s0", f"{{id}}/{CHECKPOINT}", f"{{id}}/{CHECKPOINT}/meta.json"]
)
@pytest.mark.parametrize("form", ["relative", "dot", "absolute"])
def test_show_takes_every_path_form_inside_the_home(
    trained_home: Path, monkeypatch: pytest.MonkeyPatch, relative: str, form: str
) -> None:
    run_id = _run_id(trained_home)
    inside = relative.format(id=run_id)
    monkeypatch.chdir(trained_home.parent)
    text = {"relative": f"runs/{inside}", "dot": f"./runs/{inside}", "absolute": str(trained_home / inside)}[form]
    shown = invoke(trained_home, "show", text, "--json")
    assert shown.code == 0, shown.stderr
    assert shown.json()["run"]["id"] == run_id
    assert shown.stderr.startswith(f"{text} → run {run_id} (tiny), reinforce_cartpole, finished")


def test_a_checkpoint_folder_is_the_checkpoint_and_a_session_folder_the_session(trained_copy: Path) -> None:
    run_id = _run_id(trained_copy)
    enjoyed = invoke(trained_copy, "enjoy", str(trained_copy / run_id / CHECKPOINT), "--episodes", "1", "--json")
    assert enjoyed.code == 0, enjoyed.stderr
    assert (enjoyed.json()["session"], enjoyed.json()["checkpoint_frame"]) == (0, 2000)
    latest = invoke(trained_copy, "enjoy", f"{trained_copy / run_id / 's0'}@latest", "--episodes", "1", "--json")
    assert latest.code == 0, latest.stderr
    assert latest.json()["checkpoint_frame"] == 3000
    missing = invoke(trained_copy, "show", f"{trained_copy / run_id}/s3")
    _one_line_error(missing, "no file or folder")


def test_a_registered_path_resumes_and_an_unregistered_one_says_rebuild(trained_copy: Path) -> None:
    run_id = _run_id(trained_copy)
    again = invoke(trained_copy, "resume", str(trained_copy / run_id / "s0"))
    assert again.code == 0 and "nothing to do" in again.stderr, again.stderr
    (trained_copy / "registry.sqlite").unlink()
    shown = invoke(trained_copy, "show", str(trained_copy / run_id))
    _one_line_error(shown, "the registry of", "does not list", "rlrun db rebuild")


# ---- a run folder from elsewhere -------------------------------------------------------------


@pytest.fixture
def copied(trained_home: Path, tmp_path: Path) -> Path:
    """The trained run's folder alone, copied out of any home (as from a cluster)."""
    destination = tmp_path / "from-the-cluster" / _run_id(trained_home)
    shutil.copytree(trained_home / destination.name, destination)
    return destination


def test_a_copied_run_folder_is_shown_and_enjoyed_where_it_is(copied: Path, tmp_path: Path) -> None:
    home = tmp_path / "no-home-here"
    before = _fingerprint(copied)
    shown = invoke(home, "show", str(copied), "--json")
    assert shown.code == 0, shown.stderr
    assert shown.json()["run"]["id"] == copied.name and len(shown.json()["checkpoints"]) == 3
    enjoyed = invoke(home, "enjoy", f"{copied}/s0@2000", "--episodes", "2", "--json")
    assert enjoyed.code == 0, enjoyed.stderr
    assert (enjoyed.json()["run_id"], enjoyed.json()["checkpoint_frame"]) == (copied.name, 2000)
    plotted = invoke(home, "plot", str(copied), "-o", str(tmp_path / "curve.png"))
    assert plotted.code == 0 and (tmp_path / "curve.png").is_file(), plotted.stderr
    assert _fingerprint(copied) == before  # the folder is read, never written
    assert not home.exists()  # and no registry is touched


@pytest.mark.parametrize("tampered", [f"{CHECKPOINT}/state.pt", f"{CHECKPOINT}/meta.json"])
def test_a_tampered_file_in_a_copied_folder_is_refused(copied: Path, tmp_path: Path, tampered: str) -> None:
    with open(copied / tampered, "ab") as file:
        file.write(b" ")
    for command in (["show", str(copied)], ["enjoy", str(copied), "--episodes", "1"], ["import", str(copied)]):
        refused = invoke(tmp_path / "home", *command)
        _one_line_error(refused, f"{tampered.rpartition('/')[2]} is missing or altered")
    assert not (tmp_path / "home").exists()


def test_commands_that_change_a_run_send_an_outside_folder_to_import(copied: Path, trained_copy: Path) -> None:
    for command in (["resume", str(copied)], ["rm", str(copied), "--yes"]):
        refused = invoke(trained_copy, *command)
        _one_line_error(refused, "is a run folder outside the runs home", f"rlrun import {copied}")
    assert copied.is_dir()


def test_import_copies_then_a_second_import_is_refused(copied: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    before = _fingerprint(copied)
    done = invoke(home, "import", str(copied))
    assert done.code == 0, done.stderr
    assert done.stderr == (
        f"imported run {copied.name} (tiny), reinforce_cartpole, finished: see `rlrun show {copied.name}`\n"
    )
    assert _fingerprint(copied) == before and _fingerprint(home / copied.name) == before
    listed = invoke(home, "ls", "--json").json()
    assert [(r["id"], r["status"], r["frames_done"]) for r in listed] == [(copied.name, "finished", 3000)]
    shown = invoke(home, "show", copied.name, "--json").json()
    assert len(shown["checkpoints"]) == 3 and shown["sessions"][0]["best_eval"] is not None
    again = invoke(home, "import", str(copied))
    _one_line_error(again, f"run {copied.name} is already in {home}; nothing imported")
    assert invoke(home, "ls", "--json").json() == listed


def test_import_move_moves_the_folder(copied: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = invoke(home, "import", "--move", str(copied))
    assert done.code == 0, done.stderr
    assert not copied.exists() and (home / copied.name / "run.json").is_file()
    enjoyed = invoke(home, "enjoy", copied.name, "--episodes", "1")
    assert enjoyed.code == 0, enjoyed.stderr


def test_import_refuses_what_is_not_a_run_folder(copied: Path, tmp_path: Path) -> None:
    _one_line_error(invoke(tmp_path / "home", "import", str(copied / "s0")), "import the whole run folder")
    _one_line_error(invoke(tmp_path / "home", "import", str(tmp_path)), "is not a run folder")
    assert not (tmp_path / "home").exists()


# ---- --of SPEC: the latest run of a spec -----------------------------------------------------


@pytest.mark.parametrize(
    "command", [["show"], ["enjoy", "--episodes", "1"], ["resume"], ["rm", "--yes"], ["plot", "-o", "PLOT"]]
)
def test_of_picks_the_latest_run_of_a_spec_on_every_command(
    trained_copy: Path, tmp_path: Path, command: list[str]
) -> None:
    run_id = _run_id(trained_copy)
    args = [a.replace("PLOT", str(tmp_path / "p.png")) for a in command]
    other = invoke(trained_copy, args[0], "latest", *args[1:], "--of", "ppo_cartpole")
    _one_line_error(other, "no runs match --of ppo_cartpole", "there are reinforce_cartpole")
    chosen = invoke(trained_copy, args[0], "latest", *args[1:], "--of", "reinforce_cartpole")
    assert chosen.code == 0, chosen.stderr
    assert f"latest --of reinforce_cartpole → run {run_id} (tiny)" in chosen.stderr


def test_of_on_ls_and_beside_spec(trained_home: Path) -> None:
    assert len(invoke(trained_home, "ls", "--of", "reinforce_cartpole", "--json").json()) == 1
    assert invoke(trained_home, "ls", "--of", "ppo_cartpole", "--json").json() == []
    both = invoke(trained_home, "show", "--of", "reinforce_cartpole", "--spec", "ppo_cartpole")
    _one_line_error(both, "--of reinforce_cartpole and --spec ppo_cartpole name different specs")


# ---- a run's own files where a spec is expected ----------------------------------------------


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("{id}/run.json", "is run {id}'s manifest (run.json), not a spec; to continue that run: rlrun resume {id}"),
        (
            f"{{id}}/{CHECKPOINT}/meta.json",
            "is part of a snapshot of run {id} (session s0) at frame 2,000, not a"
            " spec; to replay it: rlrun enjoy {id}/s0@2000; to continue the run: rlrun resume {id}",
        ),
        (f"{{id}}/{CHECKPOINT}/MANIFEST.json", "is part of a snapshot of run {id} (session s0) at frame 2,000"),
    ],
)
def test_a_run_s_own_file_given_as_a_spec_says_what_it_is(
    trained_copy: Path, cli: Callable[..., Result], relative: str, message: str
) -> None:
    run_id = _run_id(trained_copy)
    path = trained_copy / relative.format(id=run_id)
    before = _fingerprint(trained_copy)
    for command in (["train", str(path)], ["resume", run_id, "--spec", str(path)]):
        refused = invoke(trained_copy, *command)
        _one_line_error(refused, f"{path} {message.format(id=run_id)}")
    assert _fingerprint(trained_copy) == before
    assert json.loads(invoke(trained_copy, "ls", "--json").stdout)[0]["id"] == run_id

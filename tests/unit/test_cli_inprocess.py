"""The command line in-process (`rlrun.cli.run`, through the same error handler as `rlrun`), on
this test's own empty home: what needs no training and no real process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import Result

from rlrun import __version__
from rlrun.cli import main
from rlrun.spec import builtin_document, builtin_names, builtin_search_names

Cli = Callable[..., Result]


def test_each_test_has_its_own_home(home: Path, cli: Cli) -> None:
    done = cli("ls")
    assert (done.code, done.stdout) == (0, "")
    assert done.stderr == f"no runs in {home} yet; start one with `rlrun train reinforce_cartpole`\n"
    assert not home.exists()


def test_version(cli: Cli) -> None:
    assert cli("--version") == Result(0, f"rlrun {__version__}\n", "")


def test_spec_list_and_show(cli: Cli) -> None:
    listed = cli("spec", "list")
    lines = listed.stdout.splitlines()
    assert listed.code == 0 and lines[0].split() == ["spec", "algorithm", "env", "for"]
    assert [line.split()[0] for line in lines[1:]] == [*builtin_names(), *builtin_search_names()]
    assert {line.split()[-1] for line in lines[1:]} == {"train", "search"}
    assert lines[1].split()[1:3] == [
        builtin_document(lines[1].split()[0])["agent"]["algorithm"],
        builtin_document(lines[1].split()[0])["env"]["id"],
    ]
    shown = cli("spec", "show", "ppo_cartpole")
    assert shown.code == 0 and json.loads(shown.stdout) == builtin_document("ppo_cartpole")


def test_spec_schema_is_json_schema(cli: Cli) -> None:
    schema = cli("spec", "schema").json()
    assert {"agent", "env", "meta"} <= set(schema["properties"])


def test_db_current_on_a_fresh_home_writes_nothing(home: Path, cli: Cli) -> None:
    done = cli("db", "current", "--json")
    assert done.code == 0 and not home.exists()
    assert done.json()["up_to_date"] is False


def test_a_usage_error_is_one_line_and_exit_2(cli: Cli) -> None:
    done = cli("ls", "--colour")
    assert done == Result(2, "", "error: No such option '--colour'; see `rlrun ls --help`\n")


def test_a_domain_error_is_one_line_and_exit_2(home: Path, cli: Cli) -> None:
    done = cli("show", "latest")
    assert done == Result(2, "", f"error: no runs in {home} yet; start one with `rlrun train reinforce_cartpole`\n")


@pytest.mark.parametrize(("argv", "code"), [(["--version"], None), (["ls", "--colour"], 2), (["show", "0"], 2)])
def test_main_exits_with_runs_code(
    argv: list[str], code: int | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["rlrun", *argv])
    if code is None:
        main()  # returns: exit status 0
    else:
        with pytest.raises(SystemExit) as stop:
            main()
        assert stop.value.code == code
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("group", [(), ("db",), ("spec",)])
@pytest.mark.parametrize("columns", ["60", "80"])
def test_help_summaries_are_whole_phrases(cli: Cli, group: tuple[str, ...], columns: str) -> None:
    """Click cuts a command's summary that does not fit with `...`: each has a short help that fits."""
    shown = cli(*group, "--help", env={"COLUMNS": columns})
    commands = shown.stdout.split("Commands:\n")[1].splitlines()
    assert shown.code == 0 and len(commands) >= 3
    for line in commands:
        assert not line.endswith("...") and line.rstrip().endswith((".", ")")), line


def test_install_hints_follow_how_rlrun_was_installed(tmp_path: Path) -> None:
    """Issue 27.8: a clone (an editable install) is told to install the clone's extra, as the
    README says; an install from the package index, the index's."""
    from rlrun.errors import install_command, install_hint

    clone = tmp_path / "rlrun"
    clone.mkdir()
    editable = {"url": clone.as_uri(), "dir_info": {"editable": True}}
    assert install_command("video", editable, str(clone)) == "pip install -e '.[video]'"
    assert install_command("video", editable, str(tmp_path)) == f"pip install -e '{clone}[video]'"
    built = {"url": clone.as_uri(), "dir_info": {}}
    assert install_command("ray", built, str(clone)) == install_command("ray", None, ".") == "pip install 'rlrun[ray]'"
    assert install_hint("plot").startswith("pip install") and install_hint("plot").endswith("[plot]'")


def test_plot_frame_ticks_are_sizes() -> None:
    """Issue 27.14: the frames axis reads 200k and 1.5M, as every command prints frames."""
    from rlrun.cli.plot import frame_tick

    assert [frame_tick(v) for v in (0.0, 50_000.0, 200_000.0, 1_500_000.0)] == ["0", "50k", "200k", "1.5M"]

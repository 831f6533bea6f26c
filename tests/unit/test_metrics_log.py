"""The metrics log's pure parts: columns, cells, cut-back, reading a torn file, gathering sessions."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlrun.session import metrics_log, tensorboard_log
from rlrun.session.metrics_log import MetricsLog, SessionLog
from rlrun.snapshot import SnapshotMeta
from rlrun.snapshot.layout import json_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot-meta"
NAMES = metrics_log.columns(["loss", "q_mean"])


def row(frame: int, **values: float | None) -> dict[str, float | int | None]:
    return {
        "frame": frame,
        "episode": frame // 100,
        "opt_step": frame // 10,
        "wall_time": frame / 1000,
        "fps": 1e3,
        "return_mean": frame / 7,
        "length_mean": 21.5,
        **values,
    }


def test_columns_are_the_clock_the_common_ones_then_the_algorithms_in_order() -> None:
    assert NAMES == ("frame", "episode", "opt_step", "wall_time", "fps", "return_mean", "length_mean", "loss", "q_mean")
    assert metrics_log.columns(["b", "a", "b", "frame"]) == (*metrics_log.CLOCK, *metrics_log.COMMON, "b", "a")
    assert metrics_log.training_columns(NAMES) == [n for n in NAMES if n not in ("wall_time", "fps")]


@pytest.mark.parametrize("value", [0.1, 1 / 3, -0.0, 1e-300, 1.7976931348623157e308, math.inf, -math.inf, 12, 0])
def test_a_cell_reads_back_to_the_same_value_and_the_same_text(value: float) -> None:
    column = "frame" if isinstance(value, int) else "loss"
    text = metrics_log.format_value(value)
    parsed = metrics_log.parse_value(column, text)
    assert parsed == value and type(parsed) is type(value) and metrics_log.format_value(parsed) == text


def test_empty_and_nan_cells() -> None:
    assert metrics_log.format_value(None) == "" and metrics_log.parse_value("loss", "") is None
    assert math.isnan(metrics_log.parse_value("loss", metrics_log.format_value(math.nan)) or 0.0)


def test_header_once_unknown_names_left_out_missing_ones_empty(tmp_path: Path) -> None:
    log = MetricsLog.create(tmp_path / "s0" / "metrics.csv", NAMES)
    log.append(row(500))  # before the first update: no loss yet
    log.append(row(1000, loss=0.25, q_mean=3.0, surprise=1.0))
    log.close()
    text = log.path.read_text()
    assert text.splitlines()[0] == ",".join(NAMES) and text.count("frame") == 1
    assert "surprise" not in text and text.splitlines()[1].endswith(",,")
    columns = metrics_log.read(log.path)
    assert list(columns) == list(NAMES)
    assert columns["frame"] == [500, 1000] and columns["loss"] == [None, 0.25]
    assert metrics_log.latest(columns["loss"]) == 0.25 and metrics_log.latest([1.0, math.nan, None]) == 1.0


def test_a_row_torn_by_a_kill_is_not_read(tmp_path: Path) -> None:
    log = MetricsLog.create(tmp_path / "metrics.csv", NAMES)
    log.append(row(500, loss=1.0))
    log.close()
    with open(log.path, "a") as file:
        file.write("12")  # the start of "1250,...": without its line end it must not read as frame 12
    assert [r["frame"] for r in metrics_log.read_rows(log.path)[1]] == [500]
    assert [r["frame"] for r in metrics_log.rows_up_to(log.path, 10_000)] == [500]


def test_cutting_back_keeps_exactly_the_bytes_up_to_the_snapshot_frame(tmp_path: Path) -> None:
    """What a resume does: keep the rows at or before the snapshot's frame, rewrite the file
    atomically; the kept part is byte for byte what was there."""
    file = tmp_path / "metrics.csv"
    log = MetricsLog.create(file, NAMES)
    for frame in range(500, 4001, 500):
        log.append(row(frame, loss=1 / frame, q_mean=-frame / 3 if frame % 1000 else None))
    log.close()
    original = file.read_bytes()
    kept = metrics_log.rows_up_to(file, 2345)
    MetricsLog.create(file, NAMES, kept).close()
    lines = original.splitlines(keepends=True)
    assert file.read_bytes() == b"".join(lines[:5])  # header + 500, 1000, 1500, 2000
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"], "a temporary file was left behind"
    assert metrics_log.rows_up_to(tmp_path / "missing.csv", 100) == []


def test_a_log_from_another_column_set_is_rewritten_under_the_new_header(tmp_path: Path) -> None:
    """A resume whose algorithm reports a scalar the old log lacks (an older rlrun): old rows keep
    their values by name, the new column is empty there."""
    file = tmp_path / "metrics.csv"
    MetricsLog.create(file, metrics_log.columns(["loss"]), [row(500, loss=0.5)]).close()
    MetricsLog.create(file, NAMES, metrics_log.rows_up_to(file, 500)).close()
    assert metrics_log.read(file)["loss"] == [0.5] and metrics_log.read(file)["q_mean"] == [None]


def test_gathering_sessions_adds_run_and_session_columns(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    MetricsLog.create(a, metrics_log.columns(["loss"]), [row(500, loss=0.5), row(1000, loss=0.25)]).close()
    MetricsLog.create(b, metrics_log.columns(["alpha"]), [row(500, alpha=0.9)]).close()
    table = metrics_log.gather([SessionLog("r1", 0, a), SessionLog("r2", 1, b), SessionLog("r2", 2, tmp_path / "x")])
    assert table["run"] == ["r1", "r1", "r2"] and table["session"] == [0, 0, 1]
    assert table["loss"] == [0.5, 0.25, None] and table["alpha"] == [None, None, 0.9]
    text = metrics_log.to_csv(table)
    assert text.splitlines()[0].startswith("run,session,frame,") and text.splitlines()[3].startswith("r2,1,500,")


def test_an_unknown_metric_is_named_with_the_closest_one() -> None:
    available = ["run", "session", "frame", "approx_kl", "clip_fraction"]
    assert metrics_log.unknown_metric("approx_kl", available) is None
    problem = metrics_log.unknown_metric("aprox_kl", available)
    assert problem is not None and "did you mean 'approx_kl'?" in problem and "\n" not in problem
    assert "no metrics logged yet" in (metrics_log.unknown_metric("loss", ["run", "session"]) or "")


def test_reading_the_log_imports_neither_torch_nor_sqlalchemy() -> None:
    code = (
        "import sys, rlrun.session.metrics_log, rlrun.session.tensorboard_log; "
        "print([m for m in ('torch', 'sqlalchemy', 'tensorboard') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_tensorboard_tags_and_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [tensorboard_log.tag(c) for c in ("return_mean", "fps", "approx_kl")] == [
        "rollout/return_mean",
        "time/fps",
        "train/approx_kl",
    ]
    monkeypatch.setenv(tensorboard_log.ENABLE_ENV, "0")
    assert not tensorboard_log.enabled()


# ---------------------------------------------------------------------------------------------
# meta.json no longer carries the history


def test_new_keys_are_left_out_when_absent_so_older_files_round_trip() -> None:
    data = json.loads((FIXTURES / "captured-mid-episode.json").read_bytes())
    assert isinstance(data["metrics"], list) and "recent_lengths" not in data  # written before the log existed
    current = {k: v for k, v in data.items() if k != "metrics"} | {"recent_lengths": [21, 30]}
    meta = SnapshotMeta.from_json(current)
    assert meta.metrics is None and meta.recent_lengths == [21, 30]
    assert json_bytes(meta.to_json()) == json_bytes(current) and "metrics" not in meta.to_json()

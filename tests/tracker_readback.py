"""Reading trackers back, as their users would see a session's history: MLflow through its client,
W&B offline through its run files (`run-<id>.wandb`: W&B's record log, parsed here with W&B's own
protocol buffers, and its rewinds applied as a sync applies them)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

History = dict[int, dict[str, float]]
"""step -> the values logged at it."""

_BLOCK, _HEADER = 32 * 1024, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(file: Path) -> list[Any]:
    """Every record of a W&B run file: a 7-byte file header (":W&B", magic, version), then records
    in 32 KiB blocks, each `crc32 | length (u16) | kind` then its bytes (LevelDB's log format)."""
    from wandb.proto import wandb_internal_pb2

    data = file.read_bytes()
    assert data[:4] == b":W&B", file
    records, pending, position = [], b"", _HEADER
    while position + _HEADER <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _HEADER:  # the block's tail is padding
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + _HEADER])
        if kind == 0 and length == 0:
            break
        if position + _HEADER + length > len(data):  # torn by a kill mid-write
            break
        chunk = data[position + _HEADER : position + _HEADER + length]
        position += _HEADER + length
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_history(wandb_dir: Path, run_id: str) -> History:
    """A W&B run's history as a sync would leave it: its offline run files in the order they were
    written, each rewind (`resume_from`, a run record's branch point on the same run) dropping the
    steps after its step. A step logged twice without a rewind between fails."""
    history: History = {}
    for folder in sorted((wandb_dir / "wandb").glob(f"offline-run-*-{run_id}")):
        file = folder / f"run-{run_id}.wandb"
        if not file.exists():  # a run still starting
            continue
        for record in wandb_records(file):
            kind = record.WhichOneof("record_type")
            if kind == "run" and record.run.HasField("branch_point") and record.run.branch_point.run == run_id:
                history = {step: values for step, values in history.items() if step <= record.run.branch_point.value}
            elif kind == "history":
                items = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
                }
                step = int(items.pop("_step"))
                assert step not in history, f"step {step} logged twice in W&B run {run_id}"
                history[step] = {k: v for k, v in items.items() if not k.startswith("_")}
    return history


def mlflow_history(tracking_uri: str, run_id: str, session: int = 0) -> tuple[History, Any]:
    """An MLflow session run's metric history (every point, by step), and the run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.`rlrun.run` = '{run_id}' and tags.`rlrun.session` = '{session}'",
    )
    assert len(runs) == 1, runs
    run = runs[0]
    history: History = {}
    for key in run.data.metrics:
        for metric in client.get_metric_history(run.info.run_id, key):
            assert key not in history.get(metric.step, {}), f"{key} logged twice at step {metric.step}"
            history.setdefault(metric.step, {})[key] = metric.value
    return history, run


def training_history(history: History) -> History:
    """Without the values that measure the machine (frames per second)."""
    return {step: {k: v for k, v in values.items() if k != "time/fps"} for step, values in history.items()}

"""MLflow: one MLflow run per session, in the experiment MLFLOW_EXPERIMENT_NAME (default "rlrun") of
the store MLFLOW_TRACKING_URI names (`sqlite:///mlflow.db`, a tracking server, ...).

A session's run is found again by its tags (`rlrun.run`, `rlrun.session`); a search's trials are
nested under one parent run tagged `rlrun.search`. Each point's step is its frame and its timestamp
the run's start plus the session's wall time then, so a re-sent point is the very point sent before.

Rewinding (a resume re-sends the history) deletes the run's metrics in the SQL store the client
talks to, since MLflow's API has no call that forgets a metric: a database URI (sqlite, postgresql,
mysql) rewinds exactly; a tracking server's metrics cannot be forgotten from here, so a resume sent
to one keeps the interrupted attempt's points past the snapshot (said in the run's tags).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlrun.trackers.points import BEST_EVAL, Identity, Point, flatten

EXPERIMENT_DEFAULT = "rlrun"
_PARAMS_PER_CALL, _METRICS_PER_CALL = 100, 1000
_PARAM_LENGTH = 500
"""MLflow's oldest stores hold parameter values up to 500 characters."""
_STATUS = {"finished": "FINISHED", "preempted": "KILLED", "failed": "FAILED"}


def set_defaults() -> None:
    """MLflow's settings as rlrun wants them unless the user set them; called before mlflow is
    imported (it reads its logging level then).

    MLflow retries a request to a server that does not answer for minutes before it raises, longer
    than a closing session waits: rlrun retries on its own (`Delivery`), so each call is tried
    twice, 10 s each, and a dead server is told at once. And MLflow logs its own progress at INFO on
    stderr ("Creating initial MLflow database tables..."), in the middle of rlrun's display:
    warnings only (MLFLOW_LOGGING_LEVEL=INFO brings its lines back)."""
    for name, value in (
        ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1"),
        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "10"),
        ("MLFLOW_LOGGING_LEVEL", "WARNING"),
    ):
        if not os.environ.get(name):  # set and empty is unset, to MLflow too
            os.environ[name] = value


class MlflowTracker:
    name = "mlflow"

    def __init__(self) -> None:
        set_defaults()
        self.client: Any = None
        self.run_id = ""
        self.start_ms = 0

    def start(self, identity: Identity, rewind: bool) -> str:
        from mlflow import MlflowClient

        self.client = client = MlflowClient()
        experiment = experiment_id(client)
        found = find_run(client, experiment, identity)
        if found is None:
            run = client.create_run(experiment, run_name=identity.name, tags=_tags(client, experiment, identity))
            self.run_id = run.info.run_id
            _log_spec(client, self.run_id, identity.spec)
        else:  # found again: rewound whatever `rewind` says (MLflow can look), its history is re-sent
            run = found
            self.run_id = run.info.run_id
            client.update_run(self.run_id, status="RUNNING")
            if not forget_metrics(client, self.run_id):
                client.set_tag(
                    self.run_id,
                    "rlrun.rewind",
                    "not possible on this store: points past a resume's snapshot may be an interrupted attempt's",
                )
        self.start_ms = int(run.info.start_time)
        return self.run_id

    def send(self, points: Sequence[Point]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(key, value, self.start_ms + round(point.wall_time * 1000), point.frame)
            for point in points
            for key, value in point.values.items()
        ]
        for first in range(0, len(metrics), _METRICS_PER_CALL):
            self.client.log_batch(self.run_id, metrics=metrics[first : first + _METRICS_PER_CALL])

    def send_file(self, path: Path, folder: str) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def finish(self, status: str, best: float | None) -> None:
        if best is not None:
            self.client.set_tag(self.run_id, BEST_EVAL, repr(best))
        self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FAILED"))


def experiment_id(client: Any) -> str:
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT_DEFAULT
    experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else client.create_experiment(name)


def find_run(client: Any, experiment: str, identity: Identity) -> Any:
    found = client.search_runs(
        [experiment],
        filter_string=f"tags.`rlrun.run` = '{identity.run_id}' and tags.`rlrun.session` = '{identity.index}'",
        max_results=1,
    )
    return found[0] if found else None


def _tags(client: Any, experiment: str, identity: Identity) -> dict[str, str]:
    tags = dict(identity.tags)
    if identity.group is not None:
        tags["mlflow.parentRunId"] = _parent(client, experiment, identity.group)
    return tags


def _parent(client: Any, experiment: str, search_id: str) -> str:
    """The search's parent run, made by the first of its trials' sessions to need it. Parallel
    trials may make one each at once: the oldest is the parent, and a trial deletes its own if it
    is not (so every trial settles on the same one)."""
    query = f"tags.`rlrun.search` = '{search_id}' and tags.`rlrun.parent` = 'search'"
    found = client.search_runs([experiment], filter_string=query)
    if not found:
        made = client.create_run(
            experiment, run_name=f"search:{search_id}", tags={"rlrun.search": search_id, "rlrun.parent": "search"}
        )
        found = client.search_runs([experiment], filter_string=query)
        oldest = min(found, key=lambda run: (run.info.start_time, run.info.run_id))
        if oldest.info.run_id != made.info.run_id:
            client.delete_run(made.info.run_id)
        found = [oldest]
    return str(min(found, key=lambda run: (run.info.start_time, run.info.run_id)).info.run_id)


def _log_spec(client: Any, run_id: str, spec: dict[str, Any]) -> None:
    from mlflow.entities import Param

    params = [
        Param(key, (value if isinstance(value, str) else json.dumps(value))[:_PARAM_LENGTH])
        for key, value in flatten(spec).items()
    ]
    for first in range(0, len(params), _PARAMS_PER_CALL):
        client.log_batch(run_id, params=params[first : first + _PARAMS_PER_CALL])
    client.log_text(run_id, json.dumps(spec, indent=2), "spec.json")


def forget_metrics(client: Any, run_id: str) -> bool:
    """Delete every metric of the run, in the SQL store behind the client; False when the client
    talks to something else (a tracking server), which cannot be told to."""
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = client._tracking_client.store
    if not isinstance(store, SqlAlchemyStore):
        return False
    with store.ManagedSessionMaker() as session:
        session.query(SqlMetric).filter(SqlMetric.run_uuid == run_id).delete()
        session.query(SqlLatestMetric).filter(SqlLatestMetric.run_uuid == run_id).delete()
    return True

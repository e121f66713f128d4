"""tracking/new_store.py: a new SQLite store copied from the cached empty one is the store MLflow would have built
(same tables, same schema version, its Default experiment its own); MLflow's migrations run once per MLflow
version; an existing store is never replaced; without a usable cache MLflow builds the store as before."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.tracking import StudyTracker
from raytune_fl.tracking.new_store import seed_new_store


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "raytune_fl"


def _schema(db: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Each table's definition as its sorted lines: MLflow's migrations write a table's constraints in an order
    that varies from one build to the next (two stores MLflow builds itself differ so)."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
        version = [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]
    tables = {name: sorted(line.strip().rstrip(",").strip() for line in sql.splitlines()) for name, sql in rows}
    return tables, version


def test_a_seeded_store_is_the_store_mlflow_builds(tmp_path, cache, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's Default experiment keeps its artifacts relative to here
    MlflowClient(f"sqlite:///{tmp_path / 'built.db'}").search_experiments()
    assert seed_new_store(f"sqlite:///{tmp_path / 'seeded.db'}")
    assert _schema(tmp_path / "seeded.db") == _schema(tmp_path / "built.db")
    built = MlflowClient(f"sqlite:///{tmp_path / 'built.db'}").get_experiment("0")
    seeded = MlflowClient(f"sqlite:///{tmp_path / 'seeded.db'}").get_experiment("0")
    assert (seeded.name, seeded.artifact_location) == (built.name, built.artifact_location)
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'seeded.db'}", "study")  # and it takes a study's runs
    run = tracker.client.create_run(tracker.experiment_id)
    tracker.client.log_metric(run.info.run_id, "val_acc", 0.5)
    assert tracker.client.get_run(run.info.run_id).data.metrics == {"val_acc": 0.5}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def migrations():
    """What MLflow's store builder says (on its own logger: MLflow's loggers do not propagate to pytest's)."""
    logger, records = logging.getLogger("mlflow.store.db.utils"), _Records()
    logger.addHandler(records)
    yield records.messages
    logger.removeHandler(records)


def test_mlflow_migrates_once_per_version_and_later_stores_are_copies(tmp_path, cache, migrations):
    StudyTracker(f"sqlite:///{tmp_path / 'first.db'}", "study")
    assert "Creating initial MLflow database tables..." in migrations  # the cached empty store, built once
    template = cache / next(p.name for p in cache.iterdir())
    built_at, migrations[:] = template.stat().st_mtime_ns, []
    for name in ("a.db", "b.db"):
        StudyTracker(f"sqlite:///{tmp_path / name}", "study")
    assert "Creating initial MLflow database tables..." not in migrations
    assert template.stat().st_mtime_ns == built_at and [p.name for p in cache.iterdir()] == [template.name]
    with sqlite3.connect(template) as connection:  # no experiment in it: MLflow adds Default to each copy
        assert connection.execute("SELECT COUNT(*) FROM experiments").fetchone() == (0,)


def test_an_existing_store_is_never_replaced(tmp_path, cache):
    StudyTracker(f"sqlite:///{tmp_path / 'm.db'}", "kept")
    assert not seed_new_store(f"sqlite:///{tmp_path / 'm.db'}")
    assert MlflowClient(f"sqlite:///{tmp_path / 'm.db'}").get_experiment_by_name("kept") is not None
    (tmp_path / "not-a-store").write_text("mine")
    assert not seed_new_store(f"sqlite:///{tmp_path / 'not-a-store'}")
    assert (tmp_path / "not-a-store").read_text() == "mine"


def test_without_a_usable_cache_mlflow_builds_the_store(tmp_path, monkeypatch, migrations):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # no directory can be made under a file
    assert not seed_new_store(f"sqlite:///{tmp_path / 'm.db'}")
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'm.db'}", "study")
    assert "Creating initial MLflow database tables..." in migrations
    assert tracker.client.get_experiment(tracker.experiment_id).name == "study"
    assert not seed_new_store(f"sqlite:///{tmp_path / 'missing' / 'm.db'}")  # MLflow's own error names the path
    assert not (tmp_path / "missing").exists()

"""A new SQLite tracking store, copied from a cached empty one instead of built by MLflow's migrations.

Why: MLflow builds a new store's schema by running each of its schema migrations in turn (~1.1 s on 2 cores),
on the path of every study that starts with a new store. A copy of an empty store already at the installed
MLflow's schema is the same file, in milliseconds.

The cached store (one per MLflow version, in $XDG_CACHE_HOME/raytune_fl, else ~/.cache/raytune_fl) holds the
tables and the schema version only, no experiment: MLflow adds its Default experiment when it opens the copy, with
an artifact location of the copy's own. It is built once by MLflow itself, checked, and put in place atomically.
Anything unexpected (no cache directory, no hard links, an MLflow whose internals moved) leaves the new store to
MLflow, as before. An existing store is never touched.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

SQLITE = "sqlite:///"


def seed_new_store(tracking_uri: str) -> bool:
    """Lay down an empty store where `tracking_uri` names a SQLite file that does not exist yet; True if it did."""
    if not tracking_uri.startswith(SQLITE):
        return False
    path = Path(tracking_uri.removeprefix(SQLITE))
    if path.exists() or not path.parent.is_dir():  # a missing directory: MLflow's own error names it
        return False
    try:
        template = cached_empty_store()
        staged = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        staged.write_bytes(template.read_bytes())
        try:
            os.link(staged, path)  # fails if the store appeared meanwhile (another study): that one is kept
        finally:
            staged.unlink()
    except Exception:  # MLflow builds the store, as it always did
        return False
    return True


def cache_directory() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "raytune_fl"


def cached_empty_store() -> Path:
    """The empty store for the installed MLflow, built (and checked) on first use."""
    import mlflow
    import sqlalchemy
    from mlflow.store.db import utils

    template = cache_directory() / f"mlflow-{mlflow.__version__}-empty.db"
    if template.is_file():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    staged = template.with_name(f".{template.name}.{uuid.uuid4().hex}")
    try:
        engine = sqlalchemy.create_engine(f"{SQLITE}{staged}")
        try:
            utils._initialize_tables(engine)
            utils._verify_schema(engine)  # at the head revision this MLflow expects
        finally:
            engine.dispose()
        os.replace(staged, template)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    return template

"""`--optuna-storage`: the Optuna RDB storage each searched variant's study persists to, for `optuna.load_study` and
`optuna-dashboard`.

Where: the `--optuna-storage` URL (any SQLAlchemy URL Optuna accepts: sqlite:///path, postgresql://..., mysql://...),
else `optuna.db` beside the MLflow SQLite file, else (an MLflow server or another backend) `<cwd>/optuna.db`. A
relative SQLite path is made absolute, so that the manifest, the MLflow tag and a resume name one file.

Study names: `<space name>-<variant>`. A fresh run (not `--resume`) that finds the name taken in the storage (the
same space run before) never adds its trials to that study (it would mix two runs in TPE's history and in the
comparison with MLflow): it takes `<space name>-<variant>-<YYYYmmdd-HHMMSS>`, the start time its Tune experiment
name carries (`-2`, `-3`, ... after that in the unlikely case that this is taken too). `--resume` reopens the name
recorded in the study manifest.
"""

from __future__ import annotations

import contextlib
import difflib
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from raytune_fl.config import ConfigError

OPTION = "--optuna-storage"
DEFAULT_FILE = "optuna.db"
DATABASES = ("sqlite", "postgresql", "mysql", "oracle", "mssql")  # SQLAlchemy's own dialects
FAIL_REASON = "still RUNNING when its Tune study ended (its driver was killed before Tune recorded the trial)"


def default_url(mlflow_uri: str, cwd: str | Path = ".") -> str:
    """`optuna.db` beside the MLflow SQLite file; for any other MLflow backend `<cwd>/optuna.db`."""
    if mlflow_uri.startswith("sqlite:"):
        try:
            database = make_url(mlflow_uri).database
        except ArgumentError:
            database = None
        if database and database != ":memory:":
            db = Path(database) if Path(database).is_absolute() else Path(cwd) / database
            return f"sqlite:///{(db.resolve().parent / DEFAULT_FILE)}"
    return f"sqlite:///{(Path(cwd) / DEFAULT_FILE).resolve()}"


def resolve_url(option: str | None, mlflow_uri: str, cwd: str | Path = ".") -> str:
    """The storage URL: the option's (checked to be a SQLAlchemy URL, SQLite paths made absolute) or the default."""
    if option is None:
        return default_url(mlflow_uri, cwd)
    text = option.strip()
    try:
        url = make_url(text) if "://" in text else None
    except ArgumentError:
        url = None
    if url is None:
        raise ConfigError(
            f"{OPTION} {masked(option)!r}: expected a SQLAlchemy URL, e.g. sqlite:///path/to/optuna.db or "
            "postgresql://user:password@host/database"
        )
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ConfigError(f"{OPTION} {masked(option)!r}: an in-memory SQLite database keeps nothing; name a file")
        if not Path(url.database).is_absolute():
            return url.set(database=str((Path(cwd) / url.database).resolve())).render_as_string(hide_password=False)
    return text


def check_form(url: str, *, given: bool = True) -> None:
    """Before anything is made: SQLAlchemy knows the URL's database kind and its driver is installed, and a SQLite
    file's folder exists. Opening and writing are `check`'s, once every check of the command passed."""
    where = "" if given else f" (the default; choose another with {OPTION} URL)"
    parsed = make_url(url)
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        kind = parsed.drivername.split("+", 1)[0]
        close = difflib.get_close_matches(kind, DATABASES, n=1)
        raise ConfigError(
            f"{OPTION} {masked(url)!r}: no database kind {kind!r}{where}; "
            + (f"did you mean {close[0]}://? " if close else "")
            + f"known: {', '.join(DATABASES)}, e.g. sqlite:///path/to/optuna.db or postgresql://user:password@host/db"
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError as error:
        raise ConfigError(
            f"{OPTION} {masked(url)!r}: its driver is not installed ({error}){where}; install it, or name another "
            "driver (e.g. postgresql+psycopg2://)"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        folder = Path(parsed.database).absolute().parent
        if not folder.is_dir():
            what = "is a file" if folder.exists() else "does not exist"
            raise ConfigError(f"{OPTION} {masked(url)!r}: the folder of the database, {folder}, {what}{where}")


def is_new_file(url: str) -> bool:
    """A SQLite database that does not exist yet: `check` would make it (so a command checks it last)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file()


def masked(url: str) -> str:
    """The URL as it may be printed, logged and recorded: the password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@", 1)[-1] if "@" in url else url


def dashboard_command(url: str) -> str:
    return f"optuna-dashboard {masked(url)}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in RDB" for the probe
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def check(url: str, *, given: bool = True) -> None:
    """Before Ray starts: the storage opens (tables made) and takes a write (a probe study, created and deleted).
    Errors are ConfigErrors naming `--optuna-storage`, the URL without its password and the database's reason."""
    storage = None
    try:
        with _quiet():
            storage = RDBStorage(url)
            probe = storage.create_new_study([StudyDirection.MAXIMIZE], f"raytune_fl-write-probe-{uuid.uuid4().hex}")
            storage.delete_study(probe)
    except Exception as error:  # each database driver fails with its own exception types
        where = "" if given else f" (the default; choose another with {OPTION} URL)"
        raise ConfigError(f"{OPTION}: cannot use {masked(url)}{where}: {_first_line(error)}") from None
    finally:
        if storage is not None:
            storage.engine.dispose()


def open_storage(url: str) -> RDBStorage:
    return RDBStorage(url)


def unused_study_name(storage: RDBStorage, base: str, stamp: str) -> str:
    """`base` if no study has that name yet, else `base-<stamp>` (then `-2`, `-3`, ...): a fresh run never joins
    an earlier run's study."""
    taken = {s.study_name for s in storage.get_all_studies()}
    if base not in taken:
        return base
    name, count = f"{base}-{stamp}", 1
    while name in taken:
        count += 1
        name = f"{base}-{stamp}-{count}"
    return name


def fail_running_trials(url: str, study_name: str) -> int:
    """Once a variant's Tune study has ended, no trial of its Optuna study can still be running: one left RUNNING
    was asked for by a driver killed before Tune's experiment checkpoint recorded it (the resumed searcher does
    not know it). Such trials are marked FAIL (with a `fail_reason`), so that the study does not show them running
    forever and TPE ignores them. Returns how many."""
    storage = open_storage(url)
    try:
        study_id = storage.get_study_id_from_name(study_name)
        running = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        for trial in running:
            storage.set_trial_system_attr(trial._trial_id, "fail_reason", FAIL_REASON)
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        return len(running)
    finally:
        storage.engine.dispose()


def record_search(storage: RDBStorage, study_name: str, attrs: dict[str, str]) -> None:
    """The study's user attributes say how it was searched (its sampler, its scheduler): optuna-dashboard shows
    them, and `optuna.load_study` users read them with study.user_attrs."""
    study_id = storage.get_study_id_from_name(study_name)
    for key, value in attrs.items():
        storage.set_study_user_attr(study_id, key, value)

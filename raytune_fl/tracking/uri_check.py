"""`--mlflow-uri` checked before anything starts or is written (standard library only; MLflow is not imported).

MLflow itself would accept a URI of an unknown scheme until its first request, make an SQLite file or a folder
where it cannot keep one, and retry an unreachable tracking server for minutes (urllib3's backoff, about 250 s
measured). Here: the scheme is one MLflow tracks to (or an installed plugin's); a SQLite file's folder exists; a
directory store's nearest existing parent is a directory; an http(s) server answers within a few seconds (any
HTTP status counts: the check is about reaching it, MLflow's own requests say what else is wrong).
"""

from __future__ import annotations

import difflib
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from importlib import metadata
from pathlib import Path

from raytune_fl.config import ConfigError

OPTION = "--mlflow-uri"
PROBE_TIMEOUT_S = 5.0
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # SQLAlchemy stores; a driver may follow, postgresql+psycopg2
# MLflow 3's tracking stores by scheme ("" and file: a directory; databricks-uc and uc: Unity Catalog)
SCHEMES = ("file", "http", "https", *DATABASES, "databricks", "databricks-uc", "uc")


def default_tracking_uri(directory: str | Path = ".") -> str:
    return f"sqlite:///{(Path(directory) / 'mlflow.db').resolve()}"


def plugin_schemes() -> list[str]:
    """Schemes installed MLflow plugins add (the `mlflow.tracking_store` entry points MLflow registers)."""
    try:
        return sorted({point.name for point in metadata.entry_points(group="mlflow.tracking_store")})
    except Exception:  # a broken distribution's metadata: only the built-in schemes
        return []


def check_tracking_uri(uri: str, option: str = OPTION) -> None:
    """Refuse, naming `option` first, a tracking URI MLflow cannot use; create nothing, log nothing."""
    if uri in ("databricks", "databricks-uc", "uc"):  # MLflow's names for the default Databricks profile
        return
    scheme = urllib.parse.urlparse(uri).scheme.lower() if "://" in uri or uri.startswith("file:") else ""
    if scheme == "" or scheme == "file":
        _check_directory(uri, option)
        return
    family = scheme.split("+", 1)[0]
    if family == "sqlite":
        _check_sqlite(uri, option)
    elif scheme in ("http", "https"):
        _check_server(uri, option)
    elif family not in SCHEMES and scheme not in plugin_schemes():
        known = [*SCHEMES, *plugin_schemes()]
        close = difflib.get_close_matches(scheme, known, n=1)
        hint = f"did you mean {close[0]}://? " if close else ""
        raise ConfigError(
            f"{option} {uri!r}: MLflow has no tracking store for scheme {scheme!r}; {hint}use a directory, "
            "file:, sqlite:///path.db, postgresql://, mysql://, mssql://, http(s)://host:port or databricks"
        )


def _check_directory(uri: str, option: str) -> None:
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path) if uri.startswith("file:") else uri)
    existing = path.absolute()
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{option} {uri!r}: {existing} is a file, not a directory MLflow can keep its runs in")


def _check_sqlite(uri: str, option: str) -> None:
    database = uri.split(":///", 1)[1].split("?", 1)[0] if ":///" in uri else ""
    if not database or database == ":memory:":
        return  # an in-memory store: MLflow's to take or refuse
    folder = Path(database).absolute().parent
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise ConfigError(f"{option} {uri!r}: the folder of the database, {folder}, {what}; create it first")


def _check_server(uri: str, option: str) -> None:
    context = None
    if uri.startswith("https:"):
        context = ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
        if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":  # as MLflow's own requests
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    parts = urllib.parse.urlsplit(uri)
    if "@" in parts.netloc:  # user:password@host: the probe needs no credentials, and the message shows none
        uri = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    request = urllib.request.Request(uri, method="GET", headers={"User-Agent": "raytune_fl-reachability-probe"})
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S, context=context):
            return
    except urllib.error.HTTPError:  # it answered: reachable (authentication, a path prefix: MLflow's to say)
        return
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            reason = f"no answer within {PROBE_TIMEOUT_S:g} s"
        elif isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror
        raise ConfigError(
            f"{option} {uri}: the tracking server does not answer ({reason}); start it "
            "(mlflow server --host 127.0.0.1 --port 5000) or give a sqlite:///path.db URI"
        ) from None

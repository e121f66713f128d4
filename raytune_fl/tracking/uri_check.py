"""`--mlflow-uri` checked before anything starts or is written (standard library only; MLflow is not imported).

MLflow itself would accept a URI of an unknown scheme until its first request, make an SQLite file or a folder
where it cannot keep one, and retry an unreachable tracking server for minutes (urllib3's backoff, about 250 s
measured). Here: the scheme is one MLflow tracks to (or an installed plugin's); a SQLite file's folder exists; a
directory (MLflow's file store, refused by MLflow 3.13+ at its first call) is refused with the sqlite:/// URI to
give instead, unless MLFLOW_ALLOW_FILE_STORE opts in; an http(s) server answers a real API request within a few
seconds. Any answer counts as reachable (authentication, a path prefix: MLflow's own requests say what is wrong)
but the 403 of MLflow 3.5+'s Host check, which only `/health` escapes: the server was started without the address
the clients use in its `--allowed-hosts`, and every call of the study would fail.
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
# a read every tracking server answers (a GET: the probe changes nothing); /health and /version skip the Host check
API_PROBE = "/api/2.0/mlflow/experiments/search?max_results=1"
HOST_REFUSED = "Invalid Host header"  # the body of MLflow's 403 (mlflow/server/security_utils.py, INVALID_HOST_MSG)
FILE_STORE_OPT_OUT = "MLFLOW_ALLOW_FILE_STORE"  # MLflow's own switch that keeps a folder store working
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # SQLAlchemy stores; a driver may follow, postgresql+psycopg2
# MLflow 3's tracking stores by scheme ("" and file: a directory; databricks-uc and uc: Unity Catalog)
SCHEMES = ("file", "http", "https", *DATABASES, "databricks", "databricks-uc", "uc")


def default_tracking_uri(directory: str | Path = ".") -> str:
    return f"sqlite:///{(Path(directory) / 'mlflow.db').resolve()}"


def mlflow_flag(name: str) -> bool:
    """An MLflow boolean environment variable as MLflow reads it: true or 1, any case (tracking/environment.py
    refuses values other than true/false/1/0 before this is reached)."""
    return os.environ.get(name, "").strip().lower() in ("true", "1")


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
    if mlflow_flag(FILE_STORE_OPT_OUT):
        return
    database = default_tracking_uri(path)
    create = "" if path.absolute().is_dir() else f" (create the folder first: mkdir -p {path.absolute()})"
    raise ConfigError(
        f"{option} {uri!r}: a folder is MLflow's file store, which MLflow 3.13+ refuses; give {database} instead"
        f"{create}, or set {FILE_STORE_OPT_OUT}=true to keep a folder store (mlflow migrate-filestore moves one)"
    )


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
        if mlflow_flag("MLFLOW_TRACKING_INSECURE_TLS"):  # as MLflow's own requests
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    parts = urllib.parse.urlsplit(uri)
    if "@" in parts.netloc:  # user:password@host: the probe needs no credentials, and the message shows none
        uri = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    probe = uri.split("?", 1)[0].rstrip("/") + API_PROBE  # MLflow's REST calls go under the URI's own path
    request = urllib.request.Request(probe, method="GET", headers={"User-Agent": "raytune_fl-reachability-probe"})
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S, context=context):
            return
    except urllib.error.HTTPError as error:  # it answered: reachable, unless its Host check refuses this address
        _check_host_allowed(uri, option, error)
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


def _check_host_allowed(uri: str, option: str, error: urllib.error.HTTPError) -> None:
    """A 403 whose body is MLflow's Host-check message: refused, naming the server option that admits this host."""
    if error.code != 403:
        return
    try:
        body = error.read(2000).decode("utf-8", "replace")
    except OSError:
        return
    if HOST_REFUSED not in body:
        return  # an authentication plugin's or a proxy's 403: MLflow's own requests say more
    host = urllib.parse.urlsplit(uri).netloc
    raise ConfigError(
        f"{option} {uri}: the tracking server answers 403 {HOST_REFUSED!r} (MLflow 3.5+ checks the Host header, "
        f"and {host} is not among its allowed hosts); restart it with --allowed-hosts {host} (or "
        "MLFLOW_SERVER_ALLOWED_HOSTS), listing every address the driver and the workers use"
    )

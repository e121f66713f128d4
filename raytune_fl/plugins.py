"""Plugins: the user's modules that register datasets, models and methods (raytune_fl.register), imported in the
driver and in every Ray worker.

A plugin is imported wherever a name may be looked up: in the driver before a search space is validated, and in
every Ray worker of the command's job (each trial's process, each client actor) before it runs anything.

A plugin is named by its module (`plugins: [my_lab.fl_ext]` in the YAML, `--plugin my_lab.fl_ext`), or installed as
an entry point of group `raytune_fl.plugins` (`[project.entry-points."raytune_fl.plugins"] my_ext = "my_lab.fl_ext"`),
which every process imports without being told.

How the workers get them: the job's Ray `runtime_env`, given where the command starts or joins Ray (`runtime_env`):

- `py_modules`: a plugin's code when it is not installed (its file, or its top-level package's folder, where it
  is not under a site-packages folder): Ray uploads it once to the cluster and unpacks it on every node that runs
  a worker of the job, so a module only the driver's PYTHONPATH (or working directory) names works on every node.
  An installed plugin is expected on every node, as raytune_fl itself is.
- `env_vars` RAYTUNE_FL_PLUGINS (the module names) and `worker_process_setup_hook` = `setup_worker`: Ray runs it in
  every new worker of the job before its first task, in processes this package does not write (Tune's) as in its
  own, so there is one place that imports plugins in workers rather than one per kind of process.

Its cost: Ray starts a worker with a runtime_env as a new process instead of taking one of the idle workers it
prestarts, about 0.5 s before the first trial (tune/tuner.py's trials_without_runtime_env). Without plugins nothing
changes: no runtime_env is set.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from raytune_fl.errors import RaytuneFLError

ENTRY_POINT_GROUP = "raytune_fl.plugins"
ENV_VAR = "RAYTUNE_FL_PLUGINS"  # the plugin modules a worker imports (comma-separated), set in the runtime_env
SETUP_HOOK = "raytune_fl.plugins.setup_worker"
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PluginError(ValueError, RaytuneFLError):
    """A plugin that cannot be imported, or whose import failed (a clash with a built-in name, a bad factory)."""


def import_plugin(module: str) -> ModuleType:
    """Import the plugin module `module`; a PluginError says why it cannot be used."""
    if not isinstance(module, str) or not _MODULE_NAME.fullmatch(module):
        raise PluginError(f"{module!r} is not a module name (dotted Python identifiers, e.g. my_lab.fl_ext)")
    if module in sys.modules:
        return sys.modules[module]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and module.startswith(error.name) and module[len(error.name) :][:1] in ("", "."):
            raise PluginError(
                f"no module named {module!r} (it must be importable: run from its folder, add that folder to "
                "PYTHONPATH, or pip install its package)"
            ) from None
        raise PluginError(f"importing {module!r} failed: {_last_line(error)}") from None
    except Exception as error:  # the plugin's own code failed: a refused registration, a syntax error, ...
        raise PluginError(f"importing {module!r} failed: {_last_line(error)}") from None


def _last_line(error: BaseException) -> str:
    """The error as one line, with where in the plugin's code it was raised."""
    where = error_location(error)
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return f"{text} ({where})" if where else text


_PACKAGE = Path(__file__).resolve().parent
_LIBRARIES = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib", "stdlib", "platstdlib")}


def error_location(error: BaseException) -> str:
    """Where the user's code raised `error`, as file:line ("" where no frame is theirs).

    The deepest frame in a file of the user's own: not raytune_fl's (its frames say less than the plugin's call),
    not `<frozen os>` or importlib's machinery, and not the standard library's or an installed package's (a KeyError
    from `os.environ[...]` is the plugin's line, not os's) unless only those are left. A SyntaxError points at its
    own file and line, which no frame holds."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"{Path(error.filename).name}:{error.lineno}"
    frames = [
        (frame, Path(frame.filename).resolve())
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<") and "importlib" not in frame.filename
    ]
    frames = [(frame, path) for frame, path in frames if not path.is_relative_to(_PACKAGE)]
    theirs = [(frame, path) for frame, path in frames if not any(path.is_relative_to(lib) for lib in _LIBRARIES)]
    found = (theirs or frames)[-1:]
    return f"{found[0][1].name}:{found[0][0].lineno}" if found else ""


def load_plugins(modules: Iterable[str], beside: str | Path | None = None) -> list[ModuleType]:
    """The installed entry-point plugins, then `modules`, imported in this process (each once). `beside`: a folder
    (the search-space file's) searched after sys.path, so a plugin next to its space needs no PYTHONPATH."""
    load_installed()
    modules = list(dict.fromkeys(modules))
    if modules and beside is not None and str(Path(beside).resolve()) not in sys.path:
        sys.path.append(str(Path(beside).resolve()))  # last: it never shadows an installed module
    return [import_plugin(module) for module in modules]


_installed: list[str] | None = None  # the entry-point plugins this process imported; None: not looked for yet


def load_installed() -> list[str]:
    """Import the `raytune_fl.plugins` entry points of the installed packages, once per process; their names."""
    global _installed
    if _installed is not None:
        return _installed
    _installed = []
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = entry.dist.name if entry.dist is not None else "?"
        try:
            loaded = entry.load()
        except Exception as error:
            raise PluginError(
                f"entry point {entry.name!r} ({entry.value}) of installed package {package!r} failed to import: "
                f"{_last_line(error)}"
            ) from None
        if callable(loaded) and not isinstance(loaded, ModuleType):  # "module:function": a registration function
            loaded()
        _installed.append(entry.value)
    return _installed


def setup_worker() -> None:
    """Ray's worker_process_setup_hook: the plugins the driver named (RAYTUNE_FL_PLUGINS), imported in this worker."""
    load_plugins(name for name in os.environ.get(ENV_VAR, "").split(",") if name)


def runtime_env(modules: Sequence[str]) -> dict[str, Any] | None:
    """The Ray job runtime_env that makes `modules` (imported in this process) and the installed entry-point
    plugins import in every worker; None when there is no plugin (workers start as they always do)."""
    modules = list(dict.fromkeys(modules))
    if not modules and not load_installed():
        return None
    env: dict[str, Any] = {"env_vars": {ENV_VAR: ",".join(modules)}, "worker_process_setup_hook": SETUP_HOOK}
    shipped = code_to_ship(modules)
    if shipped:
        env["py_modules"] = shipped
    return env


def code_to_ship(modules: Sequence[str]) -> list[str]:
    """What Ray uploads for `modules`: each one's top-level package folder (or single-file module) unless it is
    installed (under a site-packages folder or the standard library) or is this package."""
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    paths: dict[str, None] = {}
    for module in modules:
        top = module.partition(".")[0]
        if top == "raytune_fl":
            continue
        root = import_plugin(top)
        locations = list(getattr(root, "__path__", [])) or [root.__file__]
        if len(locations) != 1 or locations[0] is None:
            raise PluginError(f"{module!r}: its package {top!r} spans several folders; Ray can ship one folder")
        location = Path(locations[0]).resolve()
        if any(part in ("site-packages", "dist-packages") for part in location.parts) or any(
            location.is_relative_to(path) for path in installed
        ):
            continue
        paths[str(location)] = None
    return list(paths)

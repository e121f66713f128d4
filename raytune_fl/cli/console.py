"""`raytune-fl COMMAND ...`: the installed command line. Each command is the same code as its script:

    raytune-fl tune ...       = python scripts/tune.py ...
    raytune-fl ablate ...     = python scripts/ablate.py ...
    raytune-fl dashboard ...  = python dashboards/build.py ...
    raytune-fl reproduce ...  = python scripts/reproduce.py ...

A command's module is imported only when it is chosen, so `raytune-fl --help` answers at once. `raytune-fl reproduce`
writes the results page without the dashboard's PNG: drawing it takes Chromium, which the package does not drive
(scripts/reproduce.py passes tools/dashboard_png.py's screenshot).
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata

# command -> (module with main(argv), one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "tune": ("raytune_fl.cli.tune", "tune each ablation variant of a search-space file (Ray Tune + Optuna + ASHA)"),
    "ablate": ("raytune_fl.cli.ablate", "re-run each variant's tuned config over seeds x settings; table, dashboard"),
    "dashboard": ("raytune_fl.cli.dashboard", "build the self-contained HTML dashboard of a space's MLflow runs"),
    "reproduce": ("raytune_fl.cli.reproduce", "a paper-shaped table end to end, by name"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(
        [
            "usage: raytune-fl {" + ",".join(COMMANDS) + "} [options]   (raytune-fl COMMAND --help for its options)",
            "",
            "Hyperparameter search and ablation for federated learning on Ray Tune + Optuna, tracked in MLflow.",
            "",
            "commands:",
            *lines,
            "",
            "options:",
            "  -h, --help     show this message",
            "  --version      the installed version",
        ]
    )


def version() -> str:
    try:
        return metadata.version("raytune-fl")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"raytune-fl {version()}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        print(f"raytune-fl: unknown command {command!r}{hint}", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    from raytune_fl.cli.progress import plain_worker_lines

    plain_worker_lines()  # piped or NO_COLOR: no colour codes from Ray, even in lines printed as it starts
    sys.argv[0] = f"raytune-fl {command}"  # argparse's usage line names the command as typed
    return module.main(rest)


def run() -> None:
    """The console-script entry point."""
    from raytune_fl.cli.common import exit_now

    exit_now(main())

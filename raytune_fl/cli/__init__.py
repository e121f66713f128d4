"""The command lines: common.py (shared options and the checks before Ray starts) and one module per command.

The commands: tune.py (`scripts/tune.py`), ablate.py (`scripts/ablate.py`), dashboard.py (`dashboards/build.py`),
reproduce.py (`scripts/reproduce.py`); console.py is the installed `raytune-fl` console script over them, progress.py
the live console of a Tune run, stopping.py what a stopped command says and how it exits.

`raytune_fl.cli.main` is tune.py's. Ray is started only through `raytune_fl.runtime.cluster.start_ray`
(common.join_ray looks it up there at call time, so that a test can replace it).
"""

from raytune_fl.cli.common import check_data, join_ray, resolve_space
from raytune_fl.cli.tune import build_parser, main, print_summary

__all__ = ["build_parser", "check_data", "join_ray", "main", "print_summary", "resolve_space"]

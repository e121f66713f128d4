"""`dashboards/build.py`: the self-contained HTML dashboard of a search space's MLflow runs."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

from raytune_fl.cli import common
from raytune_fl.config import ConfigError, load_space


def build_parser() -> argparse.ArgumentParser:
    parser = common.command_parser(
        "build.py",
        "Build a self-contained HTML dashboard of a search space's MLflow runs.",
    )
    common.add_mlflow_uri(parser)
    parser.add_argument(
        "--out", type=common.expand_home, help="HTML file to write; default: reports/<space name>/dashboard.html"
    )
    parser.add_argument("--no-log", action="store_true", help="do not log the HTML back to MLflow")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        space = load_space(args.space, plugins=args.plugin)
        uri = common.check_mlflow_uri(args)
    except ConfigError as error:
        return common.fail(error)
    except (OSError, UnicodeDecodeError) as error:
        return common.fail(f"--space: cannot read {args.space}: {error}")
    from raytune_fl.report.dashboard import build_dashboard
    from raytune_fl.report.runs import DashboardError

    out = Path(args.out) if args.out else Path("reports") / re.sub(r"[^\w.-]", "_", space.name) / "dashboard.html"
    try:
        build_dashboard(uri, space, out, log_artifact=not args.no_log)
    except DashboardError as error:  # no store, or no experiment of the space's name, at the tracking URI
        return common.fail(f"--mlflow-uri: {error}")
    return 0

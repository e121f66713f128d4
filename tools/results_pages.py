"""Regenerate the results pages from their committed runs (raytune_fl/report/results_page.py).

python -m tools.results_pages --write   # rewrite docs/results/*.md and the index from <page>/page.yaml + runs.csv
python -m tools.results_pages --check   # exit 1, naming them, when a page differs from what its runs give
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from raytune_fl.report import results_page

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.results_pages", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite every page and the index")
    mode.add_argument("--check", action="store_true", help="fail when a page differs from what its runs give")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.write:
        changed = results_page.write(args.results)
        print("\n".join(f"wrote {path}" for path in changed) or "every page is up to date")
        return 0
    stale = results_page.stale(args.results)
    for path in stale:
        print(f"{path}: differs from what its runs give; run python -m tools.results_pages --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

"""Reproduce one paper-shaped table end to end: tune, ablate over seeds x alphas, write docs/results/NAME.md.

python scripts/reproduce.py feduv_table4        (also: univarfl_comparison, univarfl_paper, fedld_table2)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ (the dashboard PNG) lives beside the package

from raytune_fl.cli.common import exit_now  # noqa: E402
from raytune_fl.cli.reproduce import main  # noqa: E402
from tools.dashboard_png import screenshot  # noqa: E402

if __name__ == "__main__":
    exit_now(main(screenshot=screenshot))

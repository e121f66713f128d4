"""Reproduce one paper-shaped table end to end: tune, ablate over seeds x alphas, write docs/results/NAME.md.

python scripts/reproduce.py feduv_table4        (also: univarfl_comparison, fedld_table2)
"""

from raytune_fl.cli.common import exit_now
from raytune_fl.cli.reproduce import main

if __name__ == "__main__":
    exit_now(main())

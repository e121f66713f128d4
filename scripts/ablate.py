"""Re-run each variant's tuned configuration over seeds x settings; write the mean ± std table and the dashboard.

python scripts/ablate.py --space search_spaces/univarfl.yaml --seeds 3 --grid alpha=0.1,1.0
"""

from raytune_fl.cli.ablate import main
from raytune_fl.cli.common import exit_now

if __name__ == "__main__":
    exit_now(main())

#!/usr/bin/env python
"""Build the self-contained HTML dashboard of a search space's MLflow runs. See `python dashboards/build.py --help`."""

import sys

from raytune_fl.cli.dashboard import main

if __name__ == "__main__":
    sys.exit(main())

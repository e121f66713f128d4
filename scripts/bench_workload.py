#!/usr/bin/env python
"""See `python scripts/bench_workload.py --help` and README "Performance"."""

import sys

from raytune_fl.bench.workload import main

if __name__ == "__main__":
    sys.exit(main())

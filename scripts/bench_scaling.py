#!/usr/bin/env python
"""See `python scripts/bench_scaling.py --help` and README "Performance"."""

import sys

from raytune_fl.bench.scaling import main

if __name__ == "__main__":
    sys.exit(main())

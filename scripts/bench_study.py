#!/usr/bin/env python
"""See `python scripts/bench_study.py --help` and README "Performance"."""

import sys

from raytune_fl.bench.study import main

if __name__ == "__main__":
    sys.exit(main())

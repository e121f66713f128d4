#!/usr/bin/env python
"""See `python scripts/bench_search.py --help` and README "Performance"."""

import sys

from raytune_fl.bench.search import main

if __name__ == "__main__":
    sys.exit(main())

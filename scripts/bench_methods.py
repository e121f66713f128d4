#!/usr/bin/env python
"""Time per round of every method relative to FedAvg. See `python scripts/bench_methods.py --help`."""

import sys

from raytune_fl.bench.methods import main

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""See `python scripts/bench_client_batch.py --help` and README "Client batching"."""

import sys

from raytune_fl.bench.batched import main

if __name__ == "__main__":
    sys.exit(main())

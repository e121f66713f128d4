#!/usr/bin/env python
"""One command for a lent GPU: the GPU test tier and the GPU benchmarks in one table.

See `python scripts/gpu_check.py --help` and raytune_fl/bench/gpu.py."""

import sys

from raytune_fl.bench.gpu import main

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Tune every ablation variant of a search-space file. See `python scripts/tune.py --help`."""

import sys

from raytune_fl.cli.tune import main

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Tune every ablation variant of a search-space file. See `python scripts/tune.py --help`."""

from raytune_fl.cli.common import exit_now
from raytune_fl.cli.tune import main

if __name__ == "__main__":
    exit_now(main())

#!/usr/bin/env python
"""Screenshots of a study in the real MLflow UI (headless Chromium). See `python scripts/mlflow_ui_screenshots.py
--help` and the README's "Comparing variants in the MLflow UI"."""

import sys

from raytune_fl.report.mlflow_ui import main

if __name__ == "__main__":
    sys.exit(main())

"""The ablation stage: each variant's tuned configuration re-run over seeds x settings as one grid of Tune trials
(grid.py for the settings, sources.py for each variant's configuration, plan.py for the cells,
trainable.py for a cell's trial, run.py), and the paper-style table of the results (table.py)."""

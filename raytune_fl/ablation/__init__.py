"""The ablation stage: each variant's tuned configuration re-run over seeds x settings as one grid of Tune trials
(plan.py, run.py), and the paper-style table of the results (table.py)."""
